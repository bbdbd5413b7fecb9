package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// newBodyServer returns a Server with the given bounds, for readBody tests.
func newBodyServer(t *testing.T, maxBody, maxBuffered int64) *Server {
	t.Helper()
	s, err := New(Options{HashKey: testKey, MaxBodyBytes: maxBody, MaxBufferedBodyBytes: maxBuffered, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestReadBody(t *testing.T) {
	tests := []struct {
		name          string
		body          string
		contentLength int64 // -1 for unknown (chunked)
		limit         int64 // 0 means 16
		wantErr       error
	}{
		{name: "fits", body: "0123456789", contentLength: 10},
		{name: "exactly the limit", body: strings.Repeat("x", 16), contentLength: 16},
		{name: "grows past the first buffer", body: strings.Repeat("y", 50000), contentLength: -1, limit: 50000},
		{name: "declared length past the first buffer", body: strings.Repeat("y", 100000), contentLength: 100000, limit: 100000},
		{name: "chunked one byte too large", body: strings.Repeat("y", 50001), contentLength: -1, limit: 50000, wantErr: errBodyTooLarge},
		{name: "declared too large", body: strings.Repeat("x", 17), contentLength: 17, wantErr: errBodyTooLarge},
		{name: "chunked too large", body: strings.Repeat("x", 17), contentLength: -1, wantErr: errBodyTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			limit := tc.limit
			if limit == 0 {
				limit = 16
			}
			s := newBodyServer(t, limit, 4*limit)
			r := httptest.NewRequest(http.MethodPost, "/", io.NopCloser(strings.NewReader(tc.body)))
			r.ContentLength = tc.contentLength
			got, err := s.readBody(httptest.NewRecorder(), r)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("readBody() error = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				if n := s.bodies.buffered(); n != 0 {
					t.Errorf("after a refusal %d bytes stay reserved, want 0", n)
				}
				return
			}
			if string(got.data) != tc.body {
				t.Errorf("data = %q, want %q", got.data, tc.body)
			}
			forwarded, _ := io.ReadAll(r.Body)
			if !bytes.Equal(forwarded, []byte(tc.body)) || r.ContentLength != int64(len(tc.body)) {
				t.Errorf("forwarded body %q (length %d), want %q unchanged", forwarded, r.ContentLength, tc.body)
			}
			if n := s.bodies.buffered(); n < int64(len(tc.body)) {
				t.Errorf("%d bytes reserved while the body is held, want at least its %d", n, len(tc.body))
			}
			_ = r.Body.Close() // what the transport does once the body is sent
			if n := s.bodies.buffered(); n != 0 {
				t.Errorf("after Close %d bytes stay reserved, want 0", n)
			}
		})
	}
}

func TestBodyReservationLastsUntilTheHandlerReturns(t *testing.T) {
	const body = `{"model":"m","pad":"0123456789"}`
	inUpstream, release := make(chan struct{}), make(chan struct{})
	hs := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select { // bounded, so a test failure cannot hang the upstream
		case inUpstream <- struct{}{}:
		case <-time.After(5 * time.Second):
			return
		}
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
	}), func(c *config.Config) {
		// Per-model limits: a body without a model is refused after it was read.
		c.RateLimits.PerModel = &config.ModelLimits{Default: &config.Limit{Requests: 100, Burst: 100, Period: config.Duration{Duration: time.Second}}}
	})
	done := make(chan *http.Response, 1)
	go func() { done <- hs.do(body, nil) }()
	select {
	case <-inUpstream:
	case <-time.After(5 * time.Second):
		t.Fatal("the request did not reach the upstream within 5s")
	}
	// The upstream has read the whole body, but the request still holds
	// its bytes: they are counted until the handler returns.
	if n := hs.srv.bodies.buffered(); n < int64(len(body)) {
		t.Errorf("%d bytes reserved during the upstream call, want at least the body's %d", n, len(body))
	}
	close(release)
	select {
	case resp := <-done:
		readAll(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d, want 200", resp.StatusCode)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no response within 5s")
	}
	// The response is complete only after the handler returned.
	if n := hs.srv.bodies.buffered(); n != 0 {
		t.Errorf("after the response %d bytes stay reserved, want 0", n)
	}

	// A refused request gives its reservation back too.
	resp := hs.do(`{"model":`, nil)
	readAll(t, resp)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a body without a model got %d, want 400", resp.StatusCode)
	}
	if n := hs.srv.bodies.buffered(); n != 0 {
		t.Errorf("after a refusal %d bytes stay reserved, want 0", n)
	}
}

// slowBody opens a connection to addr and sends a POST declaring
// contentLength, followed by the first part of the body only.
func slowBody(t *testing.T, addr string, contentLength int, part string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", contentLength, part); err != nil {
		t.Fatal(err)
	}
	return c
}

// readResponse reads one response from c, failing the test after 5 s.
func readResponse(t *testing.T, c net.Conn) *http.Response {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	return resp
}

func TestSlowLargeBodiesReserveLittleMemory(t *testing.T) {
	const conns, declared = 20, 8 << 20
	hs := newHarness(t, http.NotFoundHandler(), nil, func(o *Options) {
		o.MaxBodyBytes = declared
		o.MaxBufferedBodyBytes = 1 << 30 // the budget is not what is tested here
	})
	addr := strings.TrimPrefix(hs.front.URL, "http://")
	var before goruntime.MemStats
	goruntime.ReadMemStats(&before)
	for range conns {
		slowBody(t, addr, declared, "{")
	}
	// Every connection is in readBody with its first buffer reserved.
	testutil.Eventually(t, "every slow body to be read", func() bool { return hs.srv.bodies.buffered() >= conns*initialBodyBuffer })
	var after goruntime.MemStats
	goruntime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d connections declaring %d bytes and sending 1: %d bytes allocated, %d reserved", conns, declared, allocated, hs.srv.bodies.buffered())
	if limit := uint64(conns * declared / 8); allocated > limit {
		t.Errorf("%d slow connections allocated %d bytes, want under %d: the declared length is reserved before the bytes arrive", conns, allocated, limit)
	}
}

func TestBodyBufferBoundRefuses(t *testing.T) {
	const maxBody, budget = 16 << 10, 40 << 10
	hs := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }), nil,
		func(o *Options) { o.MaxBodyBytes, o.MaxBufferedBodyBytes = maxBody, budget })
	addr := strings.TrimPrefix(hs.front.URL, "http://")
	// Two slow bodies of the largest size hold 2 x (16 KiB + 1) of the budget.
	slow := []net.Conn{slowBody(t, addr, maxBody, "{"), slowBody(t, addr, maxBody, "{")}
	testutil.Eventually(t, "both slow bodies to be reserved", func() bool { return hs.srv.bodies.buffered() == 2*(maxBody+1) })

	resp := hs.do(`{"model":"m","pad":"`+strings.Repeat("x", 10<<10)+`"}`, nil)
	e := decodeError(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || e.Error.Code != "request_buffer_full" || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("a body past the budget got %d %q Retry-After %q, want 503 request_buffer_full Retry-After 1",
			resp.StatusCode, e.Error.Code, resp.Header.Get("Retry-After"))
	}
	if got := metricValue(t, hs.reg, metrics.BodyRefusedName, map[string]string{"reason": "buffer_full"}); got != 1 {
		t.Errorf("%s{reason=buffer_full} = %v, want 1", metrics.BodyRefusedName, got)
	}
	if n := hs.srv.bodies.buffered(); n != 2*(maxBody+1) {
		t.Errorf("after the refusal %d bytes are reserved, want the slow bodies' %d", n, 2*(maxBody+1))
	}

	// The slow bodies complete; their bytes come back and the next request fits.
	for _, c := range slow {
		if _, err := io.WriteString(c, `"x":"`+strings.Repeat("y", maxBody-8)+`"}`); err != nil {
			t.Fatal(err)
		}
		if resp := readResponse(t, c); resp.StatusCode != http.StatusOK {
			t.Errorf("a slow body that completed got %d, want 200", resp.StatusCode)
		}
	}
	testutil.Eventually(t, "the budget to be empty again", func() bool { return hs.srv.bodies.buffered() == 0 })
	if resp := hs.do(`{"model":"m"}`, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("after the slow bodies finished a request got %d, want 200", resp.StatusCode)
	} else {
		readAll(t, resp)
	}
}

func TestBodyReadTimeout(t *testing.T) {
	const timeout = 100 * time.Millisecond
	release := make(chan struct{})
	hs := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // outlive the body timeout, so a deadline left on the connection would show
		case <-time.After(3 * timeout):
		case <-release:
		}
		_, _ = io.WriteString(w, "ok")
	}), nil, func(o *Options) { o.BodyReadTimeout = timeout })
	defer close(release)
	addr := strings.TrimPrefix(hs.front.URL, "http://")

	t.Run("trickler is cut", func(t *testing.T) {
		c := slowBody(t, addr, 100, `{"model":`)
		resp := readResponse(t, c)
		e := decodeError(t, resp)
		if resp.StatusCode != http.StatusRequestTimeout || e.Error.Code != "request_body_timeout" || !resp.Close {
			t.Errorf("a body not sent within %s got %d %q (close %v), want 408 request_body_timeout and the connection closed",
				timeout, resp.StatusCode, e.Error.Code, resp.Close)
		}
		if got := metricValue(t, hs.reg, metrics.BodyRefusedName, map[string]string{"reason": "timeout"}); got != 1 {
			t.Errorf("%s{reason=timeout} = %v, want 1", metrics.BodyRefusedName, got)
		}
	})
	t.Run("a slow upstream is not cut by the body deadline", func(t *testing.T) {
		resp := hs.do(`{"model":"m"}`, nil)
		if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "ok" {
			t.Errorf("a request whose upstream outlives the body timeout got %d %q, want 200 ok", resp.StatusCode, body)
		}
	})
}

func TestNewRefusesABufferBoundBelowTheBodyBound(t *testing.T) {
	_, err := New(Options{HashKey: testKey, MaxBodyBytes: 1 << 20, MaxBufferedBodyBytes: 1 << 20, Registerer: prometheus.NewRegistry()})
	if err == nil || !strings.Contains(err.Error(), "--max-buffered-body-bytes") {
		t.Errorf("New() error = %v, want one naming --max-buffered-body-bytes", err)
	}
}

// runServer serves s through Run on loopback listeners until the test ends
// and returns the traffic and ops addresses and a function that starts the
// shutdown and returns Run's result, failing the test after limit.
func runServer(t *testing.T, s *Server) (traffic, ops string, shutdown func(limit time.Duration) error) {
	t.Helper()
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ol, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, tl, ol) }()
	var result error
	stopped := false
	shutdown = func(limit time.Duration) error {
		if stopped {
			return result
		}
		stopped = true
		cancel()
		select {
		case result = <-done:
		case <-time.After(limit):
			t.Fatalf("Run did not return within %s of the shutdown", limit)
		}
		return result
	}
	t.Cleanup(func() { _ = shutdown(30 * time.Second) })
	return tl.Addr().String(), ol.Addr().String(), shutdown
}

func TestHeaderBound(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer up.Close()
	tests := []struct {
		name       string
		maxHeader  int
		authHeader int // bytes of the Authorization value
		want       int
	}{
		{name: "default bound admits a normal key", authHeader: 200, want: http.StatusOK},
		{name: "default bound refuses 1 MiB", authHeader: 1 << 20, want: http.StatusRequestHeaderFieldsTooLarge},
		{name: "default bound refuses 100 KiB", authHeader: 100 << 10, want: http.StatusRequestHeaderFieldsTooLarge},
		{name: "configured bound", maxHeader: 4 << 10, authHeader: 16 << 10, want: http.StatusRequestHeaderFieldsTooLarge},
		{name: "configured bound admits below it", maxHeader: 32 << 10, authHeader: 16 << 10, want: http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Options{HashKey: testKey, MaxHeaderBytes: tc.maxHeader, Registerer: prometheus.NewRegistry(), Logger: testr.New(t)})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Load(baseConfig(up.URL), "h"); err != nil {
				t.Fatal(err)
			}
			addr, _, _ := runServer(t, s)
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(`{}`))
			req.Header.Set("Authorization", "Bearer "+strings.Repeat("k", tc.authHeader))
			resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("a %d-byte Authorization header got %d, want %d", tc.authHeader, resp.StatusCode, tc.want)
			}
		})
	}
}

// metricValue returns the value of the counter or gauge name with the given
// label values in reg, or -1 when it is absent.
func metricValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// TestEveryBufferFullRefusalIsRead: clients refused for a full body buffer
// read their 503, also clients that send the whole body before reading the
// response (as Node's HTTP clients do): the refused body is drained, not
// left unread for the connection to be reset over.
func TestEveryBufferFullRefusalIsRead(t *testing.T) {
	const maxBody, clients = 8 << 20, 4
	hs := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }), nil,
		func(o *Options) { o.MaxBodyBytes, o.MaxBufferedBodyBytes = maxBody, maxBody+2 })
	addr := strings.TrimPrefix(hs.front.URL, "http://")
	// A slow body of the largest size, all but its last byte sent, takes
	// the whole budget: every other body is refused before a byte of it is
	// read.
	slowBody(t, addr, maxBody, "{"+strings.Repeat("x", maxBody-2))
	testutil.Eventually(t, "the slow body to be reserved", func() bool { return hs.srv.bodies.buffered() >= maxBody })

	body := `{"model":"m","pad":"` + strings.Repeat("x", maxBody-40) + `"}`
	results := make(chan string, clients)
	for range clients {
		go func() {
			results <- func() string {
				c, err := net.DialTimeout("tcp", addr, 30*time.Second)
				if err != nil {
					return "dial: " + err.Error()
				}
				defer func() { _ = c.Close() }()
				_ = c.SetDeadline(time.Now().Add(60 * time.Second))
				// The whole request first, then the response.
				if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
					return "sending the body: " + err.Error()
				}
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					return "reading the response: " + err.Error()
				}
				b, err := io.ReadAll(resp.Body)
				if err != nil {
					return "reading the response body: " + err.Error()
				}
				if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), `"request_buffer_full"`) {
					return fmt.Sprintf("got %d %s", resp.StatusCode, b)
				}
				return ""
			}()
		}()
	}
	for range clients {
		select {
		case r := <-results:
			if r != "" {
				t.Errorf("a refused client did not read its 503 request_buffer_full: %s", r)
			}
		case <-time.After(90 * time.Second):
			t.Fatal("a refused client got no answer")
		}
	}
	if got := metricValue(t, hs.reg, metrics.BodyRefusedName, map[string]string{"reason": "buffer_full"}); got != clients {
		t.Errorf("%s{reason=buffer_full} = %v, want %d", metrics.BodyRefusedName, got, clients)
	}

	// A client waiting for 100 Continue is answered at once, without being
	// asked for the body it would only have sent to be discarded.
	cc := slowExpect(t, addr, len(body))
	resp := readResponse(t, cc)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a client expecting 100-continue got %d, want 503 without sending its body", resp.StatusCode)
	}
}

// slowExpect opens a connection to addr and sends the headers of a POST
// declaring contentLength and expecting 100-continue.
func slowExpect(t *testing.T, addr string, contentLength int) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", contentLength); err != nil {
		t.Fatal(err)
	}
	return c
}
