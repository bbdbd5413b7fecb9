package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// closingUpstream serves HTTP/1.1 on a loopback listener, echoing request
// bodies with keep-alive, except that the first connection, after its first
// answer, reads the next request and closes without answering: what an
// upstream whose keep-alive timeout fires as the request arrives does.
type closingUpstream struct {
	ln net.Listener
	wg sync.WaitGroup

	mu       sync.Mutex
	conns    int
	received int
}

func newClosingUpstream(t *testing.T) *closingUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &closingUpstream{ln: ln}
	u.wg.Add(1)
	go u.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		u.wg.Wait()
	})
	return u
}

func (u *closingUpstream) accept() {
	defer u.wg.Done()
	for {
		c, err := u.ln.Accept()
		if err != nil {
			return
		}
		u.mu.Lock()
		u.conns++
		first := u.conns == 1
		u.mu.Unlock()
		u.wg.Add(1)
		go u.serve(c, first)
	}
}

func (u *closingUpstream) serve(c net.Conn, first bool) {
	defer u.wg.Done()
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for n := 1; ; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		u.mu.Lock()
		u.received++
		u.mu.Unlock()
		if first && n == 2 {
			return // closed, unanswered
		}
		if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
			return
		}
	}
}

func (u *closingUpstream) stats() (conns, received int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.conns, u.received
}

// TestRequestRetriedWhenUpstreamClosedReusedConnection: a request sent on a
// kept-alive connection the upstream closes without answering is sent again
// on a new connection when its body is buffered, instead of failing with a
// 502 "EOF"; a body streamed from the client cannot be sent twice and fails.
func TestRequestRetriedWhenUpstreamClosedReusedConnection(t *testing.T) {
	tests := []struct {
		name       string
		body       func(payload string) io.ReadCloser
		wantStatus int
	}{
		{name: "buffered body: sent again", body: func(p string) io.ReadCloser { return memoryBody{rd: bytes.NewReader([]byte(p))} }, wantStatus: http.StatusOK},
		{name: "streamed body: not replayable, 502", body: func(p string) io.ReadCloser { return io.NopCloser(strings.NewReader(p)) }, wantStatus: http.StatusBadGateway},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := newClosingUpstream(t)
			tr := NewTransport()
			defer tr.CloseIdleConnections()
			p, err := NewPool([]Target{{Name: "up", URL: "http://" + up.ln.Addr().String()}}, Options{Transport: tr})
			if err != nil {
				t.Fatal(err)
			}
			send := func(payload string, body io.ReadCloser) *httptest.ResponseRecorder {
				req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", body)
				req.ContentLength = int64(len(payload))
				rec := httptest.NewRecorder()
				p.Backends()[0].ServeHTTP(rec, req)
				return rec
			}
			// The first request opens the connection the second reuses.
			if rec := send(`{"n":1}`, memoryBody{rd: bytes.NewReader([]byte(`{"n":1}`))}); rec.Code != http.StatusOK {
				t.Fatalf("first request: %d %q", rec.Code, rec.Body)
			}
			const second = `{"n":2,"messages":[]}`
			rec := send(second, tc.body(second))
			if rec.Code != tc.wantStatus {
				t.Fatalf("second request on the connection the upstream closed: %d %q, want %d", rec.Code, rec.Body, tc.wantStatus)
			}
			if tc.wantStatus == http.StatusOK && rec.Body.String() != second {
				t.Errorf("the request sent again carried %q, want the whole body %q", rec.Body, second)
			}
			conns, received := up.stats()
			if tc.wantStatus == http.StatusOK && (conns != 2 || received != 3) {
				t.Errorf("upstream saw %d connections and %d requests, want 2 and 3 (the second request once more on a new connection)", conns, received)
			}
		})
	}
}
