package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/internal/testutil"
)

// TestForwardEndsWhenTheContextEndsUnderAClientThatDoesNotRead: a client
// that stops reading a long stream fills every buffer on the way, and the
// relay's write to it blocks. The request's context ending (its total
// timeout) must end Forward all the same, or the request, and the backend
// slot capacity mode holds for it, stay until the client goes.
func TestForwardEndsWhenTheContextEndsUnderAClientThatDoesNotRead(t *testing.T) {
	var sent atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := "data: " + strings.Repeat("x", 16<<10) + "\n\n"
		for r.Context().Err() == nil {
			n, err := w.Write([]byte(chunk))
			sent.Add(int64(n))
			if err != nil {
				return
			}
			_ = http.NewResponseController(w).Flush()
		}
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	b := newBackend("b", u, tr, newBufferPool(), Options{})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	forwarded := make(chan struct{})
	fr := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(forwarded)
		b.Forward(ctx, w, r)
	}))
	defer fr.Close()

	resp, err := http.Get(fr.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	// The client reads nothing: wait until the upstream's writes stall.
	last, same := int64(-1), 0
	testutil.EventuallyWithin(t, 30*time.Second, "the stream stalls", func() bool {
		n := sent.Load()
		if n == last && n > 1<<20 {
			same++
		} else {
			last, same = n, 0
		}
		return same >= 5
	})
	select {
	case <-forwarded:
		t.Fatal("Forward returned while the client still held the stream")
	default:
	}
	cancel() // the total timeout
	select {
	case <-forwarded:
	case <-time.After(10 * time.Second):
		t.Fatal("Forward still blocked on a client that does not read after its context ended")
	}
}

// TestErrorAnswerGoesOutWhenTheContextEndsDuringIt: a request's context may
// end (its total timeout) while the answer to a failed upstream exchange is
// written; cut, which stops writes to a relayed response, must leave that
// answer to go out, or the client gets a dropped connection instead of its
// error. Here cut runs inside the error handler, the interleaving a
// concurrent cut can take.
func TestErrorAnswerGoesOutWhenTheContextEndsDuringIt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := newRelayWriter(w)
		b := &Backend{name: "b", errorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) {
			rw.cut() // the context ends now
			w.WriteHeader(http.StatusGatewayTimeout)
			_, _ = w.Write([]byte("timed out"))
			// Sent now, as a larger answer would be, not at the
			// handler's end after resumeWrites.
			_ = http.NewResponseController(w).Flush()
		}}
		b.answerError(rw, r, context.DeadlineExceeded)
		rw.resumeWrites()
	}))
	defer srv.Close()
	resp, body, err := get(t, srv.URL)
	if err != nil || resp.StatusCode != http.StatusGatewayTimeout || body != "timed out" {
		t.Fatalf("status %d, body %q, read error %v; want the error answer 504 %q", resp.StatusCode, body, err, "timed out")
	}
}
