package server

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/identity/resolver"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
)

// Defaults for the request-body bounds of Options.
const (
	// DefaultMaxBufferedBytes bounds the request-body bytes buffered across
	// all requests of a replica at once: eight bodies of DefaultMaxBodyBytes.
	DefaultMaxBufferedBytes = 64 << 20
	// DefaultBodyReadTimeout bounds the time a client may take to send a
	// request body, counted from the end of its headers.
	DefaultBodyReadTimeout = 30 * time.Second
)

// initialBodyBuffer is the most a body buffer holds before the bytes
// arrive: a declared Content-Length reserves no more than this up front, and
// the buffer doubles as the body comes in. Most API bodies fit in it, so
// they are read with one allocation.
const initialBodyBuffer = 32 << 10

var (
	// errBodyTooLarge is returned when a request body exceeds the configured bound.
	errBodyTooLarge = errors.New("request body too large")
	// errBodyBufferFull is returned when buffering a body would take the
	// replica past its bound on buffered body bytes.
	errBodyBufferFull = errors.New("request body buffer budget exhausted")
	// errBodyTimeout is returned when the client did not send its whole
	// body within the body read timeout.
	errBodyTimeout = errors.New("request body not received in time")
)

// bodyBudget bounds the bytes of request bodies held in memory across all
// requests. Reservations are made before a buffer is allocated or grown and
// given back when the request is over.
type bodyBudget struct {
	max  int64
	used atomic.Int64
}

// reserve takes n bytes from the budget, or reports false and takes nothing
// when that would exceed it.
func (b *bodyBudget) reserve(n int64) bool {
	for {
		used := b.used.Load()
		if used+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// release gives n bytes back.
func (b *bodyBudget) release(n int64) { b.used.Add(-n) }

// buffered returns the bytes reserved now.
func (b *bodyBudget) buffered() int64 { return b.used.Load() }

// bufferedBody is a request body read into memory. It replaces r.Body so
// the body is forwarded unchanged.
//
// It is deliberately not pooled: the transport may still be writing a body
// upstream after the handler returns (RoundTrip may close it "in a separate
// goroutine even after RoundTrip returns"), so reusing the buffer for
// another request could send one request's bytes with another's.
type bufferedBody struct {
	data []byte
	rd   bytes.Reader

	// budget holds reserved bytes until the handler returns (ServeHTTP
	// calls release), or until Close if that comes first. The proxy never
	// closes it (it hands the transport a reader over the bytes), and the
	// bytes stay referenced by the request until the handler returns, so
	// that is when they are given back.
	budget   *bodyBudget
	reserved int64
	released atomic.Bool
}

// BufferedReader returns the reader over the body, so the proxy can send
// it from memory together with the request headers (proxy.BufferedBody).
func (b *bufferedBody) BufferedReader() *bytes.Reader { return &b.rd }

// Read reads the buffered body.
func (b *bufferedBody) Read(p []byte) (int, error) { return b.rd.Read(p) }

// Close gives the body's bytes back to the budget; the memory itself is left
// to the garbage collector.
func (b *bufferedBody) Close() error {
	b.release()
	return nil
}

// bytes returns the buffered body; nil for a request without one.
func (b *bufferedBody) bytes() []byte {
	if b == nil {
		return nil
	}
	return b.data
}

// replace makes data (a rewritten body, a few bytes longer at most) what is
// sent upstream. The budget keeps the original reservation: the difference
// is bounded by the rewrite.
func (b *bufferedBody) replace(data []byte) {
	b.data = data
	b.rd.Reset(data)
}

// release returns the reservation once, whoever calls it first; a nil body
// has none.
func (b *bufferedBody) release() {
	if b != nil && b.budget != nil && !b.released.Swap(true) {
		b.budget.release(b.reserved)
	}
}

// readBody reads r's body (at most s.maxBody bytes) into memory and replaces
// r.Body with a reader over it. It returns nil for a request without a body.
// The caller gives the reservation back with release when it is done with
// the request.
// The buffer grows as bytes arrive, each step reserved from the replica's
// body budget first, so a large declared Content-Length costs nothing until
// the bytes are there. The client must send the whole body within
// s.bodyTimeout. Errors: errBodyTooLarge past the limit, errBodyBufferFull
// when the budget is spent, errBodyTimeout, or the client's read error.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (*bufferedBody, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	limit := s.maxBody
	if r.ContentLength > limit {
		return nil, errBodyTooLarge
	}
	// The deadline is left in place after a failure, so that net/http's
	// drain of the unread rest of the body cannot hang on a trickler.
	deadlineSet := s.bodyTimeout > 0 && setReadDeadline(w, time.Now().Add(s.bodyTimeout)) == nil

	// +1 so a body of the declared length (or of the limit) ends in a read
	// that also reports io.EOF instead of a growth step.
	maxCap := limit + 1
	if r.ContentLength > 0 {
		maxCap = r.ContentLength + 1
	}
	b := &bufferedBody{budget: s.bodies}
	size := min(maxCap, initialBodyBuffer)
	if r.ContentLength < 0 { // unknown length: start small
		size = min(maxCap, 512)
	}
	if !b.budget.reserve(size) {
		// Nothing is read yet: a client waiting for 100 Continue never
		// sends the body, and net/http answers it without one.
		if !strings.EqualFold(resolver.HeaderValue(r.Header, "Expect"), "100-continue") {
			s.drainBody(w, r)
		}
		return nil, errBodyBufferFull
	}
	b.reserved = size
	data := make([]byte, 0, size)
	for {
		if len(data) == cap(data) {
			next := min(max(2*int64(cap(data)), 512), maxCap)
			if next <= int64(cap(data)) {
				b.release()
				return nil, errBodyTooLarge
			}
			if !b.budget.reserve(next - int64(cap(data))) {
				b.release()
				s.drainBody(w, r)
				return nil, errBodyBufferFull
			}
			b.reserved += next - int64(cap(data))
			grown := make([]byte, len(data), next)
			copy(grown, data)
			data = grown
		}
		n, err := r.Body.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if int64(len(data)) > limit {
			b.release()
			return nil, errBodyTooLarge
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			b.release()
			if isTimeout(err) {
				return nil, errBodyTimeout
			}
			return nil, err
		}
	}
	if deadlineSet {
		_ = setReadDeadline(w, time.Time{}) // the upstream call may take long; the client may not be cut for it
	}
	b.data = data
	b.rd.Reset(data)
	r.Body = b
	r.ContentLength = int64(len(data))
	return b, nil
}

// drainBody reads and discards what is left of a body readBody refuses
// because the replica's body buffer is full, so that a client which sends its whole
// body before reading the response (as Node's HTTP clients do) reads the
// 503: net/http itself reads at most 256 KiB of a body the handler left
// unread, then closes the connection on the rest, which resets it before
// the client reads the answer. The drain holds no memory and is bounded:
// at most the body bound in bytes, and within the body read deadline
// readBody set (DefaultBodyReadTimeout when that is off). A body that does
// not end within the bounds is answered with the connection closed after.
func (s *Server) drainBody(w http.ResponseWriter, r *http.Request) {
	if s.bodyTimeout <= 0 {
		_ = setReadDeadline(w, time.Now().Add(DefaultBodyReadTimeout))
	}
	if _, err := io.CopyN(io.Discard, r.Body, s.maxBody+1); !errors.Is(err, io.EOF) {
		w.Header().Set("Connection", "close")
	}
}

// setReadDeadline sets the read deadline of w's connection, as
// http.ResponseController does (through Unwrap), without allocating one.
func setReadDeadline(w http.ResponseWriter, t time.Time) error {
	for {
		switch v := w.(type) {
		case interface{ SetReadDeadline(time.Time) error }:
			return v.SetReadDeadline(t)
		case interface{ Unwrap() http.ResponseWriter }:
			w = v.Unwrap()
		default:
			return http.ErrNotSupported
		}
	}
}

// isTimeout reports whether err is a read deadline passing.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// bodyError answers a body that could not be read, and counts the refusals
// that protect the replica.
func (s *Server) bodyError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errBodyTooLarge):
		s.guards.BodyRefused(metrics.BodyTooLarge)
		(&apiError{status: http.StatusRequestEntityTooLarge, errType: errorTypeInvalidRequest, code: "request_too_large",
			message: "the request body is larger than the " + strconv.FormatInt(s.maxBody, 10) + " bytes this gateway accepts"}).write(w)
	case errors.Is(err, errBodyBufferFull):
		s.guards.BodyRefused(metrics.BodyBufferFull)
		s.log.V(1).Info("Refusing a request body: the replica's body buffer is full", "buffered", s.bodies.buffered(), "max", s.bodies.max)
		(&apiError{status: http.StatusServiceUnavailable, errType: errorTypeUnavailable, code: "request_buffer_full",
			message:    "this gateway replica is buffering as many request bodies as it may hold; retry shortly",
			retryAfter: time.Second}).write(w)
	case errors.Is(err, errBodyTimeout):
		s.guards.BodyRefused(metrics.BodyTimeout)
		w.Header().Set("Connection", "close") // the rest of the body is never read
		(&apiError{status: http.StatusRequestTimeout, errType: errorTypeInvalidRequest, code: "request_body_timeout",
			message: "the request body was not received within " + s.bodyTimeout.String() + "; send the whole body at once"}).write(w)
	default:
		s.log.V(1).Info("Reading request body failed", "error", err.Error())
		(&apiError{status: http.StatusBadRequest, errType: errorTypeInvalidRequest, code: "body_read_failed",
			message: "the request body could not be read"}).write(w)
	}
}
