package proxy

import (
	"net/http"
	"sync"
	"time"
)

// relayWriter is the ResponseWriter a backend's reverse proxy writes into. It
// holds the response status back until the first body byte or flush, so that
// until then the answer can still be replaced by an error.
type relayWriter struct {
	http.ResponseWriter
	// before is the header as it was before the upstream's was copied in,
	// so an error answer goes out without the upstream's headers.
	before http.Header
	// status is the held-back status; 0 until WriteHeader.
	status int
	// committed is set once the status went to the client, so the
	// response is being written. Only the relay writes it, under mu, so
	// that cut may read it.
	committed bool
	// writeErr is the first error writing to the client.
	writeErr error

	// mu guards what the request's context ending (cut, on a goroutine of
	// its own) and the relay committing the response need to know of each
	// other: a write to a client that stopped reading blocks until the
	// client reads, and only a write deadline ends it.
	mu sync.Mutex
	// ended: the request's context ended (total timeout, client gone).
	ended bool
	// deadline: cut set a write deadline in the past.
	deadline bool
	// finished: the relay returned, or an error answer took its place; a
	// cut running late changes nothing.
	finished bool
}

func newRelayWriter(w http.ResponseWriter) *relayWriter {
	return &relayWriter{ResponseWriter: w, before: w.Header().Clone()}
}

// restoreHeader puts the header back as it was before the upstream's.
func (w *relayWriter) restoreHeader() {
	h := w.Header()
	clear(h)
	for k, vv := range w.before {
		h[k] = vv
	}
}

// WriteHeader holds a final status back until the first body byte; an
// informational (1xx) status goes out at once.
func (w *relayWriter) WriteHeader(code int) {
	switch {
	case w.committed:
		w.ResponseWriter.WriteHeader(code) // superfluous: net/http reports it
	case code >= 100 && code < 200 && code != http.StatusSwitchingProtocols:
		w.ResponseWriter.WriteHeader(code)
	case w.status == 0:
		w.status = code
	}
}

// Write sends the held-back status, then p.
func (w *relayWriter) Write(p []byte) (int, error) {
	if len(p) == 0 && !w.committed {
		return 0, nil
	}
	w.commit()
	n, err := w.ResponseWriter.Write(p)
	if err != nil && w.writeErr == nil {
		w.writeErr = err
	}
	return n, err
}

// commit sends the held-back status, if any.
func (w *relayWriter) commit() {
	if w.committed {
		return
	}
	w.mu.Lock()
	w.committed = true
	if w.ended {
		w.stopWritesLocked()
	}
	w.mu.Unlock()
	if w.status != 0 {
		w.ResponseWriter.WriteHeader(w.status)
	}
}

// Flush sends the held-back status and flushes, for streamed responses.
func (w *relayWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush reporting the error, as http.ResponseController uses it.
func (w *relayWriter) FlushError() error {
	w.commit()
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if err != nil && w.writeErr == nil {
		w.writeErr = err
	}
	return err
}

// Unwrap gives http.ResponseController the underlying writer (hijacking for
// upgrades, deadlines).
func (w *relayWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// longAgo is a write deadline already past: writes fail at once.
var longAgo = time.Unix(1, 0)

// cut is called when the request's context ends while the response is
// relayed: a write blocked on a client that stopped reading would hold the
// request, and its backend slot, for as long as the client keeps the
// connection open, past the total timeout. A write deadline in the past
// makes it fail, so the relay ends as for a client gone. An error answer
// that has not started (nothing relayed) is left to go out.
func (w *relayWriter) cut() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended = true
	if w.committed && !w.finished {
		w.stopWritesLocked()
	}
}

// stopWritesLocked sets the past write deadline; mu is held.
func (w *relayWriter) stopWritesLocked() {
	w.deadline = http.NewResponseController(w.ResponseWriter).SetWriteDeadline(longAgo) == nil
}

// resumeWrites clears a deadline cut set, for a response that ended by
// itself as the context ended: the connection may serve another request.
// A cut after it does nothing.
func (w *relayWriter) resumeWrites() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.finished = true
	if w.deadline {
		w.deadline = false
		_ = http.NewResponseController(w.ResponseWriter).SetWriteDeadline(time.Time{})
	}
}
