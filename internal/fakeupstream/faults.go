package fakeupstream

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
)

// FaultHeader names a request header that makes the fake fail as a broken
// or hung backend does, so that the data plane's handling of each can be
// tested from outside (capacity mode must free a backend's slot however its
// response ends):
//
//   - FaultReset: the connection is reset before any byte of a response;
//   - FaultBreak: half the answer is sent (half a whole answer's body under
//     a Content-Length promising all of it, or half a stream's chunks),
//     then the connection is reset;
//   - FaultHang: the request is accepted and never answered, until the
//     client goes away or Close.
const FaultHeader = "X-Fake-Fault"

// Fault modes, the values of FaultHeader.
const (
	FaultReset = "reset"
	FaultBreak = "break"
	FaultHang  = "hang"
)

// inFlight counts the requests the fake is handling, and the most at once.
type inFlight struct {
	now, peak atomic.Int64
}

// enter counts a request in and returns the function that counts it out;
// only its first call counts, so a fault may count the request out before
// it breaks the connection (the client sees the break, not the count).
func (c *inFlight) enter() func() {
	n := c.now.Add(1)
	for {
		p := c.peak.Load()
		if n <= p || c.peak.CompareAndSwap(p, n) {
			break
		}
	}
	var once sync.Once
	return func() { once.Do(func() { c.now.Add(-1) }) }
}

// InFlight returns the number of requests the fake is handling now: from
// their arrival to the end of their answer, the moment a fault breaks it, or
// the moment its client goes away (as a model server aborts a request whose
// connection closed).
func (u *Upstream) InFlight() int { return int(u.flight.now.Load()) }

// PeakInFlight returns the most requests the fake has handled at once.
func (u *Upstream) PeakInFlight() int { return int(u.flight.peak.Load()) }

// Close ends every hung request (FaultHang): their connections are closed
// unanswered. Requests arriving later still hang until their client goes.
func (u *Upstream) Close() {
	u.closeOnce.Do(func() { close(u.closed) })
}

// hang holds r unanswered until its client goes away or Close, then drops
// the connection without a response.
func (u *Upstream) hang(w http.ResponseWriter, r *http.Request, done func()) {
	select {
	case <-r.Context().Done():
	case <-u.closed:
	}
	done()
	reset(w)
}

// reset closes w's connection with a TCP reset, without (more of) a response.
// A ResponseWriter that cannot be hijacked (a test recorder) gets nothing
// more.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close sends RST, not FIN
	}
	_ = conn.Close()
}

// errBroken is what a write after the fault's reset returns.
var errBroken = net.ErrClosed

// breaker is the ResponseWriter of a FaultBreak request: a whole answer is
// cut after half its body (its Content-Length promising all of it), a
// stream after its first flushed chunk.
type breaker struct {
	http.ResponseWriter
	done   func()
	broken bool
}

func (b *breaker) Write(p []byte) (int, error) {
	if b.broken {
		return 0, errBroken
	}
	h := b.Header()
	if h.Get("Content-Type") == "text/event-stream" {
		return b.ResponseWriter.Write(p)
	}
	h.Set("Content-Length", strconv.Itoa(len(p)))
	b.WriteHeader(http.StatusOK)
	n, _ := b.ResponseWriter.Write(p[:len(p)/2])
	b.cut()
	return n, errBroken
}

// FlushError flushes what was written and, for a stream, then breaks it.
func (b *breaker) FlushError() error {
	if b.broken {
		return errBroken
	}
	if err := http.NewResponseController(b.ResponseWriter).Flush(); err != nil {
		return err
	}
	b.cut()
	return errBroken
}

// cut flushes what was written, counts the request out and resets the
// connection.
func (b *breaker) cut() {
	b.broken = true
	_ = http.NewResponseController(b.ResponseWriter).Flush()
	b.done()
	reset(b.ResponseWriter)
}

// Unwrap gives http.ResponseController the connection, to hijack it.
func (b *breaker) Unwrap() http.ResponseWriter { return b.ResponseWriter }
