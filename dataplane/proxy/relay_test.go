package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// brokenUpstream answers with a 200 declaring a JSON body of declared
// bytes, sends the first sent bytes of it, and closes the connection.
func brokenUpstream(t *testing.T, sent, declared int) *httptest.Server {
	t.Helper()
	return rawUpstream(t, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Upstream: yes\r\nContent-Length: %d\r\n\r\n%s",
		declared, strings.Repeat("x", sent)))
}

// rawUpstream answers every request with the bytes of response, whatever
// they are, and closes the connection.
func rawUpstream(t *testing.T, response string) *httptest.Server {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer func() { _ = conn.Close() }()
		_, _ = io.WriteString(buf, response)
		_ = buf.Flush()
	}))
	t.Cleanup(up.Close)
	return up
}

// bodyErrors records ResponseBodyError calls.
type bodyErrors struct {
	mu    sync.Mutex
	calls []string // "backend committed"
}

func (b *bodyErrors) record(_ *http.Request, backend string, err error, committed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !errors.Is(err, ErrResponseBrokeOff) {
		panic("unexpected error " + err.Error())
	}
	b.calls = append(b.calls, fmt.Sprintf("%s %v", backend, committed))
}

func (b *bodyErrors) get() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.calls...)
}

// front serves a pool of one backend at upstreamURL through a real net/http
// server, whose ErrAbortHandler handling is part of what is tested, with an
// error handler answering a JSON 502 and, when rec is set, recording
// ResponseBodyError calls.
func front(t *testing.T, upstreamURL string, rec *bodyErrors) *httptest.Server {
	t.Helper()
	tr := NewTransport()
	t.Cleanup(tr.CloseIdleConnections)
	opts := Options{
		Transport: tr,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, `{"error":"`+err.Error()+`"}`)
		},
	}
	if rec != nil {
		opts.ResponseBodyError = rec.record
	}
	p, err := NewPool([]Target{{Name: "up", URL: upstreamURL}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p.Backends()[0])
	srv.Config.ErrorLog = nil
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url string) (*http.Response, string, error) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp, string(body), err
}

func TestResponseBreakingOff(t *testing.T) {
	tests := []struct {
		name       string
		sent       int
		declared   int
		wantStatus int
		wantErr    bool // the client's body read fails
		wantCalls  []string
	}{
		{name: "before any byte: 502", sent: 0, declared: 100, wantStatus: http.StatusBadGateway, wantCalls: []string{"up false"}},
		// Bytes were read, but none can have reached the client: a body of
		// known length goes out a whole buffer at a time.
		{name: "inside a small body: 502", sent: 60, declared: 100, wantStatus: http.StatusBadGateway, wantCalls: []string{"up false"}},
		{name: "inside the first buffer of a large body: 502", sent: 20 << 10, declared: 256 << 10, wantStatus: http.StatusBadGateway, wantCalls: []string{"up false"}},
		// Past net/http's write buffer, so bytes have reached the client.
		{name: "mid-body: aborted", sent: 64 << 10, declared: 256 << 10, wantStatus: http.StatusOK, wantErr: true, wantCalls: []string{"up true"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &bodyErrors{}
			srv := front(t, brokenUpstream(t, tc.sent, tc.declared).URL, rec)
			resp, body, err := get(t, srv.URL)
			if resp.StatusCode != tc.wantStatus || (err != nil) != tc.wantErr {
				t.Fatalf("got %d, body %.100q, read error %v; want %d and read error %v", resp.StatusCode, body, err, tc.wantStatus, tc.wantErr)
			}
			if tc.wantStatus == http.StatusBadGateway {
				if resp.Header.Get("X-Upstream") != "" || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(body, ErrResponseBrokeOff.Error()) {
					t.Errorf("502 carries headers %v body %q: want only the error handler's answer", resp.Header, body)
				}
			}
			if got := rec.get(); fmt.Sprint(got) != fmt.Sprint(tc.wantCalls) {
				t.Errorf("ResponseBodyError calls = %v, want %v", got, tc.wantCalls)
			}
		})
	}
}

func TestRelayKeepsWorkingResponses(t *testing.T) {
	step := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/empty":
			w.Header().Set("X-Empty", "1")
			w.WriteHeader(http.StatusNoContent)
		case "/json":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"ok":true}`)
		case "/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: 1\n\n")
			w.(http.Flusher).Flush()
			select { // the second event only after the client saw the first
			case <-step:
			case <-time.After(10 * time.Second):
			}
			_, _ = io.WriteString(w, "data: 2\n\n")
		}
	}))
	defer up.Close()
	rec := &bodyErrors{}
	srv := front(t, up.URL, rec)

	resp, body, err := get(t, srv.URL+"/empty")
	if err != nil || resp.StatusCode != http.StatusNoContent || resp.Header.Get("X-Empty") != "1" || body != "" {
		t.Errorf("bodiless response: %d %v %q %v, want 204 with its header", resp.StatusCode, resp.Header, body, err)
	}
	resp, body, err = get(t, srv.URL+"/json")
	if err != nil || resp.StatusCode != http.StatusOK || body != `{"ok":true}` || resp.ContentLength != int64(len(body)) {
		t.Errorf("JSON response: %d %q length %d %v, want 200 with its body and length", resp.StatusCode, body, resp.ContentLength, err)
	}

	// A stream's headers and first event reach the client while the
	// upstream is still writing: holding the status back must not hold the
	// stream back.
	c := &http.Client{Timeout: 10 * time.Second}
	sresp, err := c.Get(srv.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sresp.Body.Close() }()
	br := bufio.NewReader(sresp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "data: 1\n" {
		t.Fatalf("first event = %q, %v", line, err)
	}
	close(step)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "\ndata: 2\n\n" {
		t.Errorf("rest of the stream = %q, %v", rest, err)
	}
	if got := rec.get(); len(got) != 0 {
		t.Errorf("ResponseBodyError called %v for responses that completed", got)
	}
}

// TestStreamBreakingOff: an event stream the upstream breaks off after its
// first event reaches the client as that event and then a broken response,
// never as a stream that ended normally.
func TestStreamBreakingOff(t *testing.T) {
	// One chunk, then the connection closes without the last chunk.
	up := rawUpstream(t, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n")
	rec := &bodyErrors{}
	srv := front(t, up.URL, rec)
	resp, body, err := get(t, srv.URL)
	if resp.StatusCode != http.StatusOK || body != "data: 1\n\n" || err == nil {
		t.Errorf("got %d, body %q, read error %v; want 200, the first event and a read error", resp.StatusCode, body, err)
	}
	if got := rec.get(); fmt.Sprint(got) != "[up true]" {
		t.Errorf("ResponseBodyError calls = %v, want [up true]", got)
	}
}

// TestUnaskedSwitchIsBadGateway: an upstream switching protocols for a
// request that did not ask to is answered 502, not relayed.
func TestUnaskedSwitchIsBadGateway(t *testing.T) {
	up := rawUpstream(t, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	resp, body, err := get(t, front(t, up.URL, nil).URL)
	if err != nil || resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "switch") {
		t.Errorf("got %d %q %v, want the error handler's 502 naming the protocol switch", resp.StatusCode, body, err)
	}
}
