package server

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/internal/fakeupstream"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// faultRig is capacity mode (one slot, fair queuing on, maxWait an hour)
// in front of a fake backend that counts what it handles at once: the
// request of user "holder" is held at the backend until proceed is closed,
// then answered as its headers ask (a fault, a status), while the request
// of user "waiter" waits for the slot in the fair queue.
type faultRig struct {
	*harness
	fake    *fakeupstream.Upstream
	arrived chan string   // who reached the backend, in order
	proceed chan struct{} // closed: the holder's request goes on
	written atomic.Int64  // bytes the backend wrote, every request
	ops     *httptest.Server
	granted chan struct{} // closed once the waiter reached the backend
}

func newFaultRig(t *testing.T, mutate func(*config.Config)) *faultRig {
	t.Helper()
	rig := &faultRig{arrived: make(chan string, 8), proceed: make(chan struct{}), granted: make(chan struct{})}
	rig.fake = fakeupstream.New(fakeupstream.Options{Chunks: 4, Hold: func(r *http.Request) {
		user := r.Header.Get("X-User")
		rig.arrived <- user
		if user != "holder" {
			return
		}
		select {
		case <-rig.proceed:
		case <-r.Context().Done():
		}
	}})
	t.Cleanup(rig.fake.Close) // before the upstream's Close, which waits for hung requests
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rig.fake.ServeHTTP(&countingWriter{ResponseWriter: w, n: &rig.written}, r)
	})
	rig.harness = newHarness(t, counted, func(c *config.Config) {
		queuedCapacity(c)
		if mutate != nil {
			mutate(c)
		}
	})
	rig.ops = httptest.NewServer(rig.srv.OpsHandler())
	t.Cleanup(rig.ops.Close)
	return rig
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n.Add(int64(n))
	return n, err
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// scrapedInFlight reads fairqueue_backend_in_flight from the metrics
// endpoint, as an operator's Prometheus does.
func (rig *faultRig) scrapedInFlight() float64 {
	rig.t.Helper()
	resp, err := http.Get(rig.ops.URL + "/metrics")
	if err != nil {
		rig.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		rig.t.Fatalf("scraping /metrics: %v", err)
	}
	fam := fams[metrics.BackendInFlightName]
	if fam == nil || len(fam.GetMetric()) != 1 {
		rig.t.Fatalf("/metrics has no single %s series: %v", metrics.BackendInFlightName, fam)
	}
	return fam.GetMetric()[0].GetGauge().GetValue()
}

// settled checks, once everything ended, that the scraped in-flight gauge
// is exactly 0 and stays so (no slot leaked, none released twice, which
// would show as a negative count or a later request refused), and that the
// backend never had more than maxInFlight (1) at once.
func (rig *faultRig) settled(what string) {
	rig.t.Helper()
	testutil.Eventually(rig.t, what+": the backend's requests end", func() bool { return rig.fake.InFlight() == 0 })
	testutil.Eventually(rig.t, what+": the scraped in-flight gauge returns to 0", func() bool { return rig.scrapedInFlight() <= 0 })
	if got := rig.scrapedInFlight(); got != 0 {
		rig.t.Errorf("%s: %s = %v, want exactly 0", what, metrics.BackendInFlightName, got)
	}
	if p := rig.fake.PeakInFlight(); p > 1 {
		rig.t.Errorf("%s: the backend had %d requests at once, over maxInFlight 1", what, p)
	}
	// The slot is usable: one more request is admitted and answered at once.
	resp := rig.do(capBody, map[string]string{"X-User": "after"})
	if body := readAll(rig.t, resp); resp.StatusCode != http.StatusOK {
		rig.t.Errorf("%s: a request afterwards got %d %s, want 200", what, resp.StatusCode, body)
	}
	if got := rig.scrapedInFlight(); got != 0 {
		rig.t.Errorf("%s: %s = %v after one more request, want 0", what, metrics.BackendInFlightName, got)
	}
}

// holderRequest builds the holder's request with the given body and headers.
func (rig *faultRig) holderRequest(ctx context.Context, body string, header map[string]string) *http.Request {
	rig.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rig.front.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		rig.t.Fatal(err)
	}
	req.Header.Set("X-User", "holder")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return req
}

// sendHolder sends the holder's request and returns its response.
func (rig *faultRig) sendHolder(t *testing.T, ctx context.Context, body, fault string) *http.Response {
	t.Helper()
	h := map[string]string{}
	if fault != "" {
		h[fakeupstream.FaultHeader] = fault
	}
	resp, err := rig.client.Do(rig.holderRequest(ctx, body, h))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

const (
	// streamBody asks for a short stream.
	streamBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	// floodBody asks for a stream of about 150 MB, more than every socket
	// buffer between the backend and a client that does not read.
	floodBody = `{"model":"m","stream":true,"n":16,"max_tokens":65536,"messages":[{"role":"user","content":"hi"}]}`
)

// wantError checks an error answer's status and that its code and message
// say what happened.
func wantError(t *testing.T, resp *http.Response, status int, code, says string) {
	t.Helper()
	e := decodeError(t, resp)
	if resp.StatusCode != status || e.Error.Code != code || !strings.Contains(e.Error.Message, says) {
		t.Errorf("holder: %d %q %q, want %d %q saying %q", resp.StatusCode, e.Error.Code, e.Error.Message, status, code, says)
	}
}

// TestCapacityFaultsFromOutside breaks the request holding a backend's only
// slot in each way a backend or a client can, through the real server and
// a real (fake) backend over HTTP, while another tenant waits for the slot:
// the holder's client gets the answer SPEC gives that fault, the waiter is
// granted as soon as the faulted request ends (its budget is an hour, so a
// stranded waiter fails the test), the in-flight gauge an operator scrapes
// returns to exactly 0, the backend never had more than maxInFlight at
// once, and no goroutine is left behind.
func TestCapacityFaultsFromOutside(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*config.Config)
		// holder sends the holder's request and checks what its client got;
		// it runs beside the waiter.
		holder func(t *testing.T, rig *faultRig)
		// beforeWaiter, if set, runs once the holder is at the backend.
		beforeWaiter func(rig *faultRig)
		// end makes the holder's request end once the waiter queued;
		// nil closes proceed.
		end func(rig *faultRig)
	}{
		{
			name: "backend resets before any byte",
			holder: func(t *testing.T, rig *faultRig) {
				resp := rig.sendHolder(t, t.Context(), capBody, fakeupstream.FaultReset)
				wantError(t, resp, http.StatusBadGateway, "bad_gateway", "backend")
			},
		},
		{
			name: "backend breaks a whole answer after its headers",
			holder: func(t *testing.T, rig *faultRig) {
				resp := rig.sendHolder(t, t.Context(), capBody, fakeupstream.FaultBreak)
				wantError(t, resp, http.StatusBadGateway, "bad_gateway", "backend")
			},
		},
		{
			name: "backend resets a stream after its first chunk",
			holder: func(t *testing.T, rig *faultRig) {
				resp := rig.sendHolder(t, t.Context(), streamBody, fakeupstream.FaultBreak)
				if resp.StatusCode != http.StatusOK {
					t.Errorf("holder: %d, want the stream's 200", resp.StatusCode)
				}
				if body, err := readAllErr(resp); err == nil || strings.Contains(body, "[DONE]") {
					t.Errorf("holder read %q, %v: want the stream cut short, an error", body, err)
				}
			},
		},
		{
			name: "backend answers 500",
			holder: func(t *testing.T, rig *faultRig) {
				resp, err := rig.client.Do(rig.holderRequest(t.Context(), capBody, map[string]string{"X-Fake-Status": "500"}))
				if err != nil {
					t.Fatal(err)
				}
				if body := readAll(t, resp); resp.StatusCode != http.StatusInternalServerError {
					t.Errorf("holder: %d %s, want the backend's 500", resp.StatusCode, body)
				}
			},
		},
		{
			name:   "hung backend: the total timeout ends it",
			mutate: minuteTimeout,
			holder: func(t *testing.T, rig *faultRig) {
				resp := rig.sendHolder(t, t.Context(), capBody, fakeupstream.FaultHang)
				wantError(t, resp, http.StatusGatewayTimeout, "upstream_timeout", "total timeout")
			},
			beforeWaiter: waiterLater,
			end:          func(rig *faultRig) { close(rig.proceed); holderTimesOut(rig) },
		},
		{
			name:   "hung backend without a total timeout: the client gives up",
			mutate: func(c *config.Config) { c.Timeouts.RequestTotal = dur(0) },
			holder: func(t *testing.T, rig *faultRig) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				go func() {
					<-rig.proceed
					cancel()
				}()
				if resp, err := rig.client.Do(rig.holderRequest(ctx, capBody, map[string]string{fakeupstream.FaultHeader: fakeupstream.FaultHang})); err == nil {
					t.Errorf("the holder whose client left was answered %d", resp.StatusCode)
					_ = resp.Body.Close()
				}
			},
		},
		{
			name: "client disconnects mid-stream",
			holder: func(t *testing.T, rig *faultRig) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				resp := rig.sendHolder(t, ctx, floodBody, "")
				if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
					t.Errorf("the stream's first line: %v", err)
				}
				cancel()
				_ = resp.Body.Close()
			},
		},
		{
			name:   "client stops reading: the total timeout ends it",
			mutate: minuteTimeout,
			holder: func(t *testing.T, rig *faultRig) {
				resp := rig.sendHolder(t, t.Context(), floodBody, "")
				// The client reads nothing until the slot went to the waiter.
				select {
				case <-rig.granted:
				case <-t.Context().Done():
					_ = resp.Body.Close()
					return
				}
				if _, err := readAllErr(resp); err == nil {
					t.Error("the holder read a stream cut by its timeout as complete")
				}
			},
			beforeWaiter: waiterLater,
			end: func(rig *faultRig) {
				close(rig.proceed)
				rig.stalled()
				holderTimesOut(rig)
			},
		},
		{
			// Nothing else bounds it: the write blocks until the client
			// reads or goes.
			name:   "client stops reading without a total timeout: it going away ends it",
			mutate: func(c *config.Config) { c.Timeouts.RequestTotal = dur(0) },
			holder: func(t *testing.T, rig *faultRig) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				resp := rig.sendHolder(t, ctx, floodBody, "")
				<-rig.proceed
				rig.stalled()
				cancel() // the client hangs up without having read
				_ = resp.Body.Close()
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			leaks := goleak.IgnoreCurrent()
			t.Cleanup(func() { goleak.VerifyNone(t, leaks) }) // after the rig's cleanups
			rig := newFaultRig(t, tc.mutate)
			holderDone := make(chan struct{})
			go func() {
				defer close(holderDone)
				tc.holder(t, rig)
			}()
			t.Cleanup(func() { // before the rig's: a failed test's holder ends first
				select {
				case <-holderDone:
				case <-time.After(10 * time.Second):
				}
			})
			if who := recvWithin(t, "the holder at the backend", rig.arrived); who != "holder" {
				t.Fatalf("%s reached the backend first", who)
			}
			if tc.beforeWaiter != nil {
				tc.beforeWaiter(rig)
			}
			waiter := rig.start(t.Context(), capBody, map[string]string{"X-User": "waiter"})
			rig.queued(1)
			if got := rig.scrapedInFlight(); got != 1 {
				t.Errorf("%s = %v while the holder runs, want 1", metrics.BackendInFlightName, got)
			}
			if tc.end != nil {
				tc.end(rig)
			} else {
				close(rig.proceed)
			}
			select {
			case who := <-rig.arrived:
				if who != "waiter" {
					t.Errorf("%s reached the backend, want the waiter", who)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("the waiter was not granted when the faulted request ended")
			}
			close(rig.granted)
			if r := recvResult(t, waiter); r.err != nil || r.resp.StatusCode != http.StatusOK {
				t.Errorf("waiter: %+v, want 200", r)
			}
			recvWithin(t, "the holder's end", holderDone)
			rig.settled(tc.name)
		})
	}
}

// minuteTimeout sets a total timeout of a minute.
func minuteTimeout(c *config.Config) { c.Timeouts.RequestTotal = dur(time.Minute) }

// waiterLater makes the waiter arrive 40s into the holder's minute, so its
// own budget outlasts the holder's total timeout.
func waiterLater(rig *faultRig) { rig.clk.Step(40 * time.Second) }

// holderTimesOut ends the holder's minute, 20s after the waiter arrived.
func holderTimesOut(rig *faultRig) { rig.clk.Step(20 * time.Second) }

// stalled waits until the backend's writes stop (a client not reading has
// filled every buffer on the way) after at least a megabyte.
func (rig *faultRig) stalled() {
	rig.t.Helper()
	last, same := int64(-1), 0
	testutil.EventuallyWithin(rig.t, 30*time.Second, "the backend's stream stalls on the client that does not read", func() bool {
		n := rig.written.Load()
		if n == last && n > 1<<20 {
			same++
		} else {
			last, same = n, 0
		}
		return same >= 5
	})
}

// TestCapacityHostileRequestsTakeNoSlot: a body over the limit is refused
// before admission and reaches no backend; a body that is not JSON and a
// small gzip bomb (the data plane never decompresses a body) are passed to
// the backend as they are, which refuses them; an HTTP/2 preface on the
// plain listener is read as an HTTP/1.1 request (HTTP/2 is not served
// there). Pipelined HTTP/1.1 requests are served one after the other. After
// each the backend holds nothing, never held more than maxInFlight, and the
// scraped in-flight gauge is exactly 0.
func TestCapacityHostileRequestsTakeNoSlot(t *testing.T) {
	rig := newFaultRig(t, nil)
	// Nobody is held at the backend, and nobody waits for arrivals.
	close(rig.proceed)
	go func() {
		for {
			select {
			case <-rig.arrived:
			case <-t.Context().Done():
				return
			}
		}
	}()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 900<<10) + `"}]}`))
	_ = zw.Close()
	tests := []struct {
		name      string
		body      string
		header    map[string]string
		status    int
		forwarded int
	}{
		{"body over the limit", `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 4<<10) + `"}]}`, nil, http.StatusRequestEntityTooLarge, 0},
		{"not JSON", `{"model":`, nil, http.StatusBadRequest, 1},
		{"gzip bomb", gz.String(), map[string]string{"Content-Encoding": "gzip"}, http.StatusBadRequest, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if gz.Len() > 1<<10 && tc.name == "gzip bomb" {
				t.Skipf("the gzip bomb is %d bytes, over the harness's body limit", gz.Len())
			}
			before := rig.fake.Count()
			h := map[string]string{"X-User": "mallory"}
			for k, v := range tc.header {
				h[k] = v
			}
			resp := rig.do(tc.body, h)
			if body := readAll(t, resp); resp.StatusCode != tc.status {
				t.Errorf("%d %s, want %d", resp.StatusCode, body, tc.status)
			}
			if n := rig.fake.Count() - before; n != tc.forwarded {
				t.Errorf("the backend got %d requests, want %d", n, tc.forwarded)
			}
			rig.settled(tc.name)
		})
	}
	t.Run("HTTP/2 preface", func(t *testing.T) {
		conn, err := net.Dial("tcp", rig.front.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("no HTTP/1.1 answer to an HTTP/2 preface: %v", err)
		}
		_ = resp.Body.Close()
		if resp.ProtoMajor != 1 || resp.StatusCode < 400 {
			t.Errorf("HTTP/2 preface answered %s %d, want an HTTP/1.1 error", resp.Proto, resp.StatusCode)
		}
		rig.settled("HTTP/2 preface")
	})
	t.Run("pipelined HTTP/1.1", func(t *testing.T) {
		before := rig.fake.Count()
		conn, err := net.Dial("tcp", rig.front.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		req := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-User: pipe\r\nContent-Type: application/json\r\nContent-Length: " +
			strconv.Itoa(len(capBody)) + "\r\n\r\n" + capBody
		if _, err := io.WriteString(conn, req+req+req); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		for i := range 3 {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("pipelined response %d: %v", i, err)
			}
			if body, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK {
				t.Errorf("pipelined response %d: %d %s", i, resp.StatusCode, body)
			}
			_ = resp.Body.Close()
		}
		if n := rig.fake.Count() - before; n != 3 {
			t.Errorf("the backend got %d requests, want the 3 pipelined", n)
		}
		rig.settled("pipelined")
	})
}
