package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/http/httputil"
	"net/url"
)

// Backend is one parsed upstream with its own httputil.ReverseProxy.
type Backend struct {
	name         string
	proxy        *httputil.ReverseProxy
	errorHandler func(http.ResponseWriter, *http.Request, error)
	bodyError    func(r *http.Request, backend string, err error, committed bool)
}

// Name returns the backend's configured name.
func (b *Backend) Name() string { return b.name }

// ErrResponseBrokeOff is what Options.ErrorHandler and
// Options.ResponseBodyError receive when a backend's response ended before
// its body was complete (the backend closed or reset the connection).
var ErrResponseBrokeOff = errors.New("the backend's response ended before its body was complete")

// BufferedBody is a request body held in memory in full. The proxy sends
// such a body from memory, in the same write as the request headers, and
// can send it again when the upstream closed a reused connection unanswered.
type BufferedBody interface {
	io.ReadCloser
	// BufferedReader returns the reader the body is read through; the
	// proxy is its only reader.
	BufferedReader() *bytes.Reader
}

func newBackend(name string, target *url.URL, transport http.RoundTripper, buffers httputil.BufferPool, opts Options) *Backend {
	b := &Backend{name: name, errorHandler: opts.ErrorHandler, bodyError: opts.ResponseBodyError}
	b.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			sendFromMemory(pr)
		},
		Transport:      transport,
		BufferPool:     buffers,
		ModifyResponse: wholeBuffers,
		// FlushInterval stays 0: ReverseProxy already flushes at once, and
		// after every write, a text/event-stream or a body of unknown length
		// (streamed completions). A body of known length (a whole JSON
		// answer) must not be flushed: a flush would send its status before
		// its first buffer is in (see wholeBuffers).
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			b.answerError(w.(*relayWriter), r, err)
		},
		// Every failure reaches ErrorHandler or ResponseBodyError, which log
		// it in the data plane's structured form.
		ErrorLog: discardLog,
	}
	return b
}

// ServeHTTP proxies r to the backend and streams the response into w.
//
// The response status and headers are held back until the first body byte
// (or a flush), so that a response breaking off before any byte reached
// the client is answered through Options.ErrorHandler (a 502) instead of a
// bare connection reset. A response breaking off later is aborted, the only
// way left to tell the client it is incomplete. Both are reported to
// Options.ResponseBodyError. Both rely on net/http's server, under which
// httputil.ReverseProxy signals a broken body by panicking with
// http.ErrAbortHandler.
func (b *Backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.Forward(r.Context(), w, r)
}

// Forward is ServeHTTP with ctx (the request's deadline) in place of r's
// context.
func (b *Backend) Forward(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	if ctx != r.Context() {
		r = r.WithContext(ctx)
	}
	rw := newRelayWriter(w)
	// The context ending stops writes to a client that does not read
	// (relayWriter.cut); a response that ended all the same gets its
	// connection back. A relay aborted by the cut closes it.
	stop := context.AfterFunc(ctx, rw.cut)
	defer func() {
		if !stop() {
			rw.resumeWrites()
		}
	}()
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler { //nolint:errorlint // ReverseProxy panics with this exact value
				panic(v)
			}
			b.brokeOff(rw, r)
		}
	}()
	b.proxy.ServeHTTP(rw, r)
	rw.commit() // a response without a body
}

// brokeOff handles a response whose relay failed (ReverseProxy's
// ErrAbortHandler panic): an error answer when nothing has reached the
// client yet, else the abort carries on.
func (b *Backend) brokeOff(rw *relayWriter, r *http.Request) {
	// A write error or an ended request context means the client left or
	// the total timeout ran out: not the backend's doing.
	upstreamFault := rw.writeErr == nil && r.Context().Err() == nil
	if upstreamFault && b.bodyError != nil {
		b.bodyError(r, b.name, ErrResponseBrokeOff, rw.committed)
	}
	b.answerError(rw, r, ErrResponseBrokeOff)
}

// answerError answers a request whose upstream exchange failed through the
// error handler, without the upstream's headers, when nothing of the
// response has reached the client; otherwise it aborts the response, the
// only way left to tell the client it is incomplete.
func (b *Backend) answerError(rw *relayWriter, r *http.Request, err error) {
	if rw.committed {
		panic(http.ErrAbortHandler)
	}
	rw.restoreHeader()
	// The error answer goes straight to the client. committed is written
	// under mu, where cut reads it; finished makes a cut from here on
	// leave the answer to go out rather than stop its writes.
	rw.mu.Lock()
	rw.committed, rw.finished = true, true
	rw.mu.Unlock()
	if b.errorHandler != nil {
		b.errorHandler(rw.ResponseWriter, r, err)
	} else {
		rw.ResponseWriter.WriteHeader(http.StatusBadGateway)
	}
}

// sendFromMemory sends a buffered request body as an in-memory reader, which
// net/http writes together with the request headers, and lets it be sent
// again (GetBody) on a new connection.
func sendFromMemory(pr *httputil.ProxyRequest) {
	b, ok := pr.In.Body.(BufferedBody)
	if !ok || pr.Out.Body == nil {
		return
	}
	rd := b.BufferedReader()
	pr.Out.Body = io.NopCloser(rd)
	// Another attempt reads by ReadAt, so a late read of the first one's
	// reader cannot race with it.
	pr.Out.GetBody = func() (io.ReadCloser, error) {
		return io.NopCloser(io.NewSectionReader(rd, 0, rd.Size())), nil
	}
}

// wholeBuffers makes a body of known length, other than an event stream,
// arrive a full copy buffer at a time, so one that fits a buffer is read
// whole before its status goes out: should the upstream break off inside it,
// nothing has reached the client and it is answered 502, instead of a status
// whose body never comes.
func wholeBuffers(res *http.Response) error {
	if res.ContentLength > 0 && !isEventStream(res.Header.Get("Content-Type")) {
		res.Body = &fillingReader{ReadCloser: res.Body}
	}
	return nil
}

// isEventStream reports whether a Content-Type is text/event-stream, as
// ReverseProxy decides to flush it.
func isEventStream(contentType string) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == "text/event-stream"
}

// fillingReader reads until p is full, the body ends (io.EOF) or the read
// fails; a failure returns no bytes, so what came with it is not relayed.
type fillingReader struct{ io.ReadCloser }

func (r *fillingReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k, err := r.ReadCloser.Read(p[n:])
		n += k
		if errors.Is(err, io.EOF) {
			if n > 0 {
				return n, nil // io.EOF again on the next read
			}
			return 0, io.EOF
		}
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}
