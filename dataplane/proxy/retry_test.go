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
// bodies with keep-alive, except that each of the first dying connections,
// after its first answer, reads the next request and closes without
// answering: what an upstream whose keep-alive timeout fires as the request
// arrives does. The first requests on the dying connections are answered
// only once all of them have arrived, so that concurrent clients open that
// many connections.
type closingUpstream struct {
	ln     net.Listener
	wg     sync.WaitGroup
	dying  int
	allIn  chan struct{} // closed when every dying connection has its first request
	opened int           // dying connections that have their first request (guarded by mu)

	mu       sync.Mutex
	conns    int
	received int
}

func newClosingUpstream(t *testing.T, dying int) *closingUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &closingUpstream{ln: ln, dying: dying, allIn: make(chan struct{})}
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
		dying := u.conns <= u.dying
		u.mu.Unlock()
		u.wg.Add(1)
		go u.serve(c, dying)
	}
}

func (u *closingUpstream) serve(c net.Conn, dying bool) {
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
		if dying && n == 1 {
			if u.opened++; u.opened == u.dying {
				close(u.allIn)
			}
		}
		u.mu.Unlock()
		if dying && n == 1 {
			select {
			case <-u.allIn:
			case <-time.After(5 * time.Second):
				return
			}
		}
		if dying && n == 2 {
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
			up := newClosingUpstream(t, 1)
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

// TestRequestRetriedWhenUpstreamClosedEveryIdleConnection: when the upstream
// closed all the idle connections at once (its keep-alive timeout fired for
// all of them), the request sent again goes on a new connection, not on the
// next dead one, so it is answered however many there were.
func TestRequestRetriedWhenUpstreamClosedEveryIdleConnection(t *testing.T) {
	const idle = maxStaleRetries + 2 // more dead connections than retries
	up := newClosingUpstream(t, idle)
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	p, err := NewPool([]Target{{Name: "up", URL: "http://" + up.ln.Addr().String()}}, Options{Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	send := func(payload string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", memoryBody{rd: bytes.NewReader([]byte(payload))})
		rec := httptest.NewRecorder()
		p.Backends()[0].ServeHTTP(rec, req)
		return rec
	}
	// Concurrent requests leave that many idle connections.
	codes := make(chan int, idle)
	for range idle {
		go func() { codes <- send(`{"warm":true}`).Code }()
	}
	for range idle {
		select {
		case code := <-codes:
			if code != http.StatusOK {
				t.Fatalf("warming request: %d", code)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("warming requests unanswered after 10s")
		}
	}
	if rec := send(`{"n":2}`); rec.Code != http.StatusOK || rec.Body.String() != `{"n":2}` {
		t.Fatalf("request after the upstream closed every idle connection: %d %q, want 200 echoing the body", rec.Code, rec.Body)
	}
	if conns, received := up.stats(); conns != idle+1 || received != idle+2 {
		t.Errorf("upstream saw %d connections and %d requests, want %d and %d (one dead connection tried, then a new one)", conns, received, idle+1, idle+2)
	}
}
