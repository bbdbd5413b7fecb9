package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// parityUpstream answers with a description of the request it received (so
// two proxies can be compared on what they send) and with the response the
// X-Answer header asks for (so they can be compared on what they relay).
func parityUpstream(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var names []string
	for k := range r.Header {
		names = append(names, k)
	}
	slices.Sort(names)
	var got strings.Builder
	fmt.Fprintf(&got, "%s %s host=%q len=%d te=%q body=%q\n", r.Method, r.URL.RequestURI(), r.Host, r.ContentLength, r.TransferEncoding, body)
	for _, k := range names {
		fmt.Fprintf(&got, "%s: %q\n", k, r.Header[k])
	}
	h := w.Header()
	switch r.Header.Get("X-Answer") {
	case "hop-by-hop":
		h.Set("Connection", "X-Resp-Hop")
		h.Set("X-Resp-Hop", "dropped")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Proxy-Authenticate", "Basic")
		h["X-Multi"] = []string{"a", "b"}
	case "trailers":
		h.Set("Trailer", "X-Checksum")
		_, _ = io.WriteString(w, got.String())
		h.Set("X-Checksum", "abc")
		h.Set(http.TrailerPrefix+"X-Late", "unannounced")
		return
	case "early-hints":
		h.Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		h.Del("Link")
	case "no-content":
		w.WriteHeader(http.StatusNoContent)
		return
	case "not-modified":
		h.Set("ETag", `"v1"`)
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, got.String())
}

// exchange is what a client saw of one request through a proxy.
type exchange struct {
	status   int
	header   http.Header
	body     string
	trailer  http.Header
	informal []int // 1xx statuses
}

func doExchange(t *testing.T, front string, method, target string, header http.Header, body io.Reader, length int64) exchange {
	t.Helper()
	var ex exchange
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
		ex.informal = append(ex.informal, code)
		return nil
	}})
	req, err := http.NewRequestWithContext(ctx, method, front+target, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	for k, vv := range header {
		req.Header[k] = vv
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	ex.status, ex.header, ex.body, ex.trailer = resp.StatusCode, resp.Header, string(b), resp.Trailer
	ex.header.Del("Date")
	return ex
}

// TestForwardMatchesReverseProxy sends the same requests through a
// Backend and through a bare httputil.ReverseProxy (SetURL, SetXForwarded),
// and requires the backend to receive the same request and the client the
// same response from both: what the Backend adds (holding the status back,
// sending buffered bodies from memory, whole-buffer reads) changes neither.
func TestForwardMatchesReverseProxy(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(parityUpstream))
	defer up.Close()
	target, _ := url.Parse(up.URL + "/base?tenant=t1")
	tr := NewTransport()
	defer tr.CloseIdleConnections()

	pool, err := NewPool([]Target{{Name: "up", URL: target.String()}}, Options{Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	ours := httptest.NewServer(pool.Backends()[0])
	defer ours.Close()
	std := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() },
		Transport: tr,
	})
	defer std.Close()

	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	tests := []struct {
		name   string
		method string
		target string
		header http.Header
		body   string
		length int64 // -1: streamed with no declared length
		// wantTrailer and want1xx are required of both proxies, so that the
		// comparison cannot hold by both dropping them.
		wantTrailer http.Header
		want1xx     []int
	}{
		{name: "plain POST", method: http.MethodPost, target: "/v1/chat/completions", body: `{"model":"m"}`, length: 13,
			header: hdr("Authorization", "Bearer k", "Content-Type", "application/json", "User-Agent", "openai-node/6")},
		{name: "hop-by-hop request headers", method: http.MethodPost, target: "/v1/x", body: "{}", length: 2,
			header: hdr("Connection", "X-Hop, keep-alive", "X-Hop", "dropped", "Keep-Alive", "timeout=5",
				"Proxy-Authorization", "Basic x", "Proxy-Connection", "keep-alive", "Te", "trailers, deflate", "X-Kept", "1")},
		{name: "forwarding headers from the client are replaced", method: http.MethodGet, target: "/v1/models",
			header: hdr("X-Forwarded-For", "203.0.113.9", "X-Forwarded-Host", "evil", "X-Forwarded-Proto", "https", "Forwarded", "for=203.0.113.9")},
		{name: "no user agent", method: http.MethodGet, target: "/v1/models"},
		{name: "query joined and cleaned", method: http.MethodGet, target: "/v1/models?a=1;b=2&c=%zz&d=4"},
		{name: "escaped path", method: http.MethodGet, target: "/v1/files/a%2Fb"},
		{name: "streamed request body", method: http.MethodPost, target: "/v1/x", body: "chunked body", length: -1},
		{name: "response hop-by-hop headers", method: http.MethodGet, target: "/", header: hdr("X-Answer", "hop-by-hop")},
		{name: "trailers", method: http.MethodGet, target: "/", header: hdr("X-Answer", "trailers", "Te", "trailers"),
			wantTrailer: hdr("X-Checksum", "abc", "X-Late", "unannounced")},
		{name: "early hints", method: http.MethodGet, target: "/", header: hdr("X-Answer", "early-hints"), want1xx: []int{http.StatusEarlyHints}},
		{name: "no content", method: http.MethodDelete, target: "/v1/files/f", header: hdr("X-Answer", "no-content")},
		{name: "not modified", method: http.MethodGet, target: "/", header: hdr("X-Answer", "not-modified")},
		{name: "HEAD", method: http.MethodHead, target: "/v1/models"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := func() io.Reader {
				if tc.body == "" {
					return nil
				}
				if tc.length < 0 {
					return struct{ io.Reader }{strings.NewReader(tc.body)} // no length known
				}
				return strings.NewReader(tc.body)
			}
			want := doExchange(t, std.URL, tc.method, tc.target, tc.header, body(), tc.length)
			got := doExchange(t, ours.URL, tc.method, tc.target, tc.header, body(), tc.length)
			// Each proxy is its own front: only the port in Host differs.
			want.body = strings.ReplaceAll(want.body, strings.TrimPrefix(std.URL, "http://"), "FRONT")
			got.body = strings.ReplaceAll(got.body, strings.TrimPrefix(ours.URL, "http://"), "FRONT")
			if got.status != want.status || got.body != want.body {
				t.Errorf("through the Backend: %d\n%s\nthrough ReverseProxy: %d\n%s", got.status, got.body, want.status, want.body)
			}
			if !headersEqual(got.header, want.header) || !headersEqual(got.trailer, want.trailer) {
				t.Errorf("response header %v trailer %v, ReverseProxy gives %v and %v", got.header, got.trailer, want.header, want.trailer)
			}
			if !slices.Equal(got.informal, want.informal) {
				t.Errorf("1xx responses %v, ReverseProxy relays %v", got.informal, want.informal)
			}
			if tc.wantTrailer != nil && !headersEqual(got.trailer, tc.wantTrailer) {
				t.Errorf("trailer %v, want %v", got.trailer, tc.wantTrailer)
			}
			if !slices.Equal(got.informal, tc.want1xx) {
				t.Errorf("1xx responses %v, want %v", got.informal, tc.want1xx)
			}
		})
	}
}

func headersEqual(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb, ok := b[k]
		if !ok {
			return false
		}
		// Announced trailer names come from a map: any order.
		if k == "Trailer" {
			va, vb = slices.Sorted(slices.Values(va)), slices.Sorted(slices.Values(vb))
		}
		if !slices.Equal(va, vb) {
			return false
		}
	}
	return true
}

func TestForwardStreamsEventsAsTheyArrive(t *testing.T) {
	next := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		for i := range 3 {
			_, _ = fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			select { // the next event only once the client has this one
			case <-next:
			case <-time.After(5 * time.Second):
				return
			}
		}
	}))
	defer up.Close()
	srv := front(t, up.URL, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/chat/completions", nil)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	rd := bufio.NewReader(resp.Body)
	for i := range 3 {
		// Each event must arrive while the upstream waits for the client:
		// through a proxy that buffered, it arrives only once the upstream
		// gave up waiting.
		line, err := rd.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: %d\n", i) {
			t.Fatalf("event %d: %q, %v", i, line, err)
		}
		_, _ = rd.ReadString('\n')
		select {
		case next <- struct{}{}:
		case <-time.After(5 * time.Second):
			t.Fatalf("the upstream stopped waiting for the client after event %d: it was not relayed as it arrived", i)
		}
	}
}

func TestForwardSwitchesProtocols(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Connection") != "Upgrade" || r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "not an upgrade", http.StatusBadRequest)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer func() { _ = conn.Close() }()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		_ = brw.Flush()
		line, _ := brw.ReadString('\n')
		_, _ = brw.WriteString("echo " + line)
		_ = brw.Flush()
	}))
	defer up.Close()
	srv := front(t, up.URL, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/realtime", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		t.Fatalf("the switched connection is not writable: %T", resp.Body)
	}
	defer func() { _ = rwc.Close() }()
	if _, err := io.WriteString(rwc, "hello\n"); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(rwc).ReadString('\n')
	if err != nil || got != "echo hello\n" {
		t.Errorf("through the switched connection: %q, %v; want %q", got, err, "echo hello\n")
	}
}

func BenchmarkForwardVsReverseProxy(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","choices":[]}`)
	}))
	defer up.Close()
	target, _ := url.Parse(up.URL)
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	pool, err := NewPool([]Target{{Name: "up", URL: up.URL}}, Options{Transport: tr})
	if err != nil {
		b.Fatal(err)
	}
	std := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() }, Transport: tr}
	body := []byte(`{"model":"llama","messages":[{"role":"user","content":"Say hello."}]}`)
	serve := func(h http.Handler) time.Duration {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", memoryBody{rd: bytes.NewReader(body)})
		req.Header.Set("Authorization", "Bearer sk")
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, req)
		d := time.Since(start)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d", rec.Code)
		}
		return d
	}
	var ours, theirs time.Duration
	b.ReportAllocs()
	for b.Loop() {
		theirs += serve(std)
		ours += serve(pool.Backends()[0])
	}
	b.ReportMetric(float64(ours)/float64(theirs), "forward/reverseproxy")
}

// TestForwardRelaysContinue: a client that asks to be told to go on before
// sending its body (Expect: 100-continue) gets the upstream's 100 Continue,
// sends its body, and gets the answer.
func TestForwardRelaysContinue(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body) // reading sends the 100 Continue
		_, _ = w.Write(b)
	}))
	defer up.Close()
	srv := front(t, up.URL, nil)

	var informal []int
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
		informal = append(informal, code)
		return nil
	}})
	const payload = `{"model":"m"}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(payload))
	req.Header.Set("Expect", "100-continue")
	// Long enough that the body goes only after the 100 Continue.
	tr := &http.Transport{ExpectContinueTimeout: 5 * time.Second}
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != payload {
		t.Fatalf("got %d %q %v, want 200 echoing %q", resp.StatusCode, body, err, payload)
	}
	if !slices.Equal(informal, []int{http.StatusContinue}) {
		t.Errorf("1xx responses %v, want one 100 Continue", informal)
	}
}

// TestNoBadGatewayFromAHealthyUpstream sends waves of concurrent requests
// through a real front server to a healthy upstream, more at once than the
// transport keeps idle connections for, so connections are opened, reused
// and dropped; none may fail (a soak of the hand-written forwarder this
// package once had saw 12 answered 502).
func TestNoBadGatewayFromAHealthyUpstream(t *testing.T) {
	const concurrent, waves = 250, 2
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}))
	defer up.Close()
	srv := front(t, up.URL, nil)
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: concurrent}}
	defer client.CloseIdleConnections()

	failures := make(chan string, concurrent*waves)
	for wave := range waves {
		start := make(chan struct{})
		done := make(chan struct{}, concurrent)
		for i := range concurrent {
			go func() {
				defer func() { done <- struct{}{} }()
				<-start
				payload := fmt.Sprintf(`{"model":"m","n":%d}`, wave*concurrent+i)
				resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(payload))
				if err != nil {
					failures <- err.Error()
					return
				}
				defer func() { _ = resp.Body.Close() }()
				body, err := io.ReadAll(resp.Body)
				if err != nil || resp.StatusCode != http.StatusOK || string(body) != payload {
					failures <- fmt.Sprintf("%d %.100q %v", resp.StatusCode, body, err)
				}
			}()
		}
		close(start)
		for range concurrent {
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("requests still running after 30s")
			}
		}
	}
	close(failures)
	var got []string
	for f := range failures {
		got = append(got, f)
	}
	if len(got) > 0 {
		t.Errorf("%d of %d requests to a healthy upstream failed, first: %s", len(got), concurrent*waves, got[0])
	}
}
