// Package proxy holds the data plane's upstream side: the configured backends,
// round-robin selection among the ones that still have per-backend capacity,
// and per backend a forwarding path that streams responses (server-sent
// events included) as they arrive. It sends what httputil.ReverseProxy with
// SetURL and SetXForwarded sends, and relays what it relays, at less cost per
// request; protocol upgrades go through such a ReverseProxy.
package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// bufferSize is the copy buffer size used for response bodies; it matches the
// io.Copy default so pooled buffers behave like the stdlib ones.
const bufferSize = 32 << 10

// Target names one upstream the proxy may send requests to.
type Target struct {
	// Name identifies the backend in limits, logs and metrics.
	Name string
	// URL is the backend's base URL; the request path is appended to its path.
	URL string
	// Weight is the backend's relative share of requests; 0 means 1.
	Weight int
}

// Backend is one parsed upstream with its own reverse proxy.
type Backend struct {
	name   string
	target *url.URL
	// transport and buffers serve forward, the path of every request but
	// protocol upgrades, which take proxy.
	transport    http.RoundTripper
	buffers      *bufferPool
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

// ServeHTTP proxies r to the backend and streams the response into w.
// Errors reaching the backend are reported through Options.ErrorHandler.
//
// The response status and headers are held back until the first body byte
// (or a flush), so that a response breaking off before any byte reached
// the client is answered through Options.ErrorHandler (a 502) instead of a
// bare connection reset. A response breaking off later is aborted, the only
// way left to tell the client it is incomplete. Both are reported to
// Options.ResponseBodyError. Aborting relies on net/http's server: the
// handler panics with http.ErrAbortHandler.
//
// Every request but a protocol upgrade takes forward; an upgrade takes
// httputil.ReverseProxy, which signals a broken body by panicking with
// http.ErrAbortHandler itself.
func (b *Backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.Forward(r.Context(), w, r)
}

// Forward is ServeHTTP with ctx in place of r's context, which saves the
// caller a copy of r when all it has to change is the context (a deadline).
func (b *Backend) Forward(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	rw := &relayWriter{ResponseWriter: w}
	rw.snapshotHeader()
	if !isUpgrade(r.Header) {
		b.forward(ctx, rw, r)
		return
	}
	if ctx != r.Context() {
		r = r.WithContext(ctx)
	}
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler { //nolint:errorlint // ReverseProxy panics with this exact value
				panic(v)
			}
			b.brokeOff(ctx, rw, r)
		}
	}()
	b.proxy.ServeHTTP(rw, r)
	rw.commit() // a response without a body
}

// brokeOff handles a response whose relay failed (ReverseProxy's
// ErrAbortHandler panic): an error answer when nothing has reached the
// client yet, else the abort carries on.
func (b *Backend) brokeOff(ctx context.Context, rw *relayWriter, r *http.Request) {
	// A write error or an ended request context means the client left or
	// the total timeout ran out: not the backend's doing.
	upstreamFault := rw.writeErr == nil && ctx.Err() == nil
	if rw.committed {
		if upstreamFault && b.bodyError != nil {
			b.bodyError(r, b.name, ErrResponseBrokeOff, true)
		}
		panic(http.ErrAbortHandler)
	}
	rw.restoreHeader()
	rw.committed = true // the error answer goes straight to the client
	if b.errorHandler != nil {
		b.errorHandler(rw.ResponseWriter, r, ErrResponseBrokeOff)
	} else {
		rw.ResponseWriter.WriteHeader(http.StatusBadGateway)
	}
	if upstreamFault && b.bodyError != nil {
		b.bodyError(r, b.name, ErrResponseBrokeOff, false)
	}
}

// Options tunes the pool's transport and error handling. Zero values pick
// the defaults documented on each field.
type Options struct {
	// Transport sends requests upstream; nil means NewTransport().
	Transport http.RoundTripper
	// ErrorHandler answers the client when the backend cannot be reached or
	// its response breaks off before any byte reached the client; nil means
	// a plain 502.
	ErrorHandler func(http.ResponseWriter, *http.Request, error)
	// ResponseBodyError, if set, is told about every response the backend
	// broke off while its body was relayed: committed is false when nothing
	// had reached the client and ErrorHandler answered instead, true when
	// the client's response was cut short. It is not called when the client
	// left or the request's context ended.
	ResponseBodyError func(r *http.Request, backend string, err error, committed bool)
}

// Pool is an immutable set of backends with a weighted round-robin cursor.
// It is safe for concurrent use.
type Pool struct {
	backends []*Backend
	// order is one period of the smooth weighted round-robin sequence of
	// backend indexes, computed once so Pick needs no lock.
	order []int
	next  atomic.Uint32
}

// maxOrder bounds the precomputed sequence; larger weight sums are scaled
// down proportionally.
const maxOrder = 1 << 16

// NewPool parses targets and builds one reverse proxy per backend. It fails
// on an empty list, a duplicate name, or a URL that is not absolute http(s).
func NewPool(targets []Target, opts Options) (*Pool, error) {
	if len(targets) == 0 {
		return nil, errors.New("proxy: no backends configured; add at least one entry to backends")
	}
	transport := opts.Transport
	if transport == nil {
		transport = NewTransport()
	}
	buffers := newBufferPool()
	seen := make(map[string]bool, len(targets))
	p := &Pool{backends: make([]*Backend, 0, len(targets))}
	for i, t := range targets {
		if t.Name == "" {
			return nil, fmt.Errorf("proxy: backends[%d].name is empty; give every backend a unique name", i)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("proxy: backends[%d].name %q is a duplicate; backend names must be unique", i, t.Name)
		}
		seen[t.Name] = true
		u, err := url.Parse(t.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("proxy: backends[%d].url %q is not an absolute http(s) URL", i, t.URL)
		}
		p.backends = append(p.backends, &Backend{
			name:         t.Name,
			target:       u,
			transport:    transport,
			buffers:      buffers,
			errorHandler: opts.ErrorHandler,
			bodyError:    opts.ResponseBodyError,
			proxy: &httputil.ReverseProxy{
				Rewrite: func(pr *httputil.ProxyRequest) {
					pr.SetURL(u)
					pr.SetXForwarded()
				},
				Transport:  transport,
				BufferPool: buffers,
				// FlushInterval stays 0: ReverseProxy already flushes every
				// write for text/event-stream and for bodies of unknown length,
				// which is what streaming completions use, while whole JSON
				// bodies are not flushed write by write.
				ErrorHandler: opts.ErrorHandler,
				// Every failure reaches ErrorHandler or ResponseBodyError,
				// which log it in the data plane's structured form.
				ErrorLog: discardLog,
			},
		})
	}
	p.order = smoothOrder(targets)
	return p, nil
}

// BufferedBody is a request body held in memory in full. The forwarding
// path sends such a body from memory, in the same write as the request
// headers, instead of flushing the headers first and copying the body after
// them.
type BufferedBody interface {
	io.ReadCloser
	// BufferedReader returns the reader the body is read through; the
	// proxy is its only reader.
	BufferedReader() *bytes.Reader
}

// smoothOrder returns one period of the smooth weighted round-robin order
// (each step picks the highest running score, then lowers it by the total),
// which spreads a heavy backend's turns evenly instead of in bursts.
func smoothOrder(targets []Target) []int {
	weights := make([]int, len(targets))
	total := 0
	for i, t := range targets {
		weights[i] = max(t.Weight, 1)
		total += weights[i]
	}
	if total > maxOrder {
		scaled := 0
		for i := range weights {
			weights[i] = max(weights[i]*maxOrder/total, 1)
			scaled += weights[i]
		}
		total = scaled
	}
	score := make([]int, len(weights))
	order := make([]int, 0, total)
	for range total {
		best := 0
		for i, w := range weights {
			score[i] += w
			if score[i] > score[best] {
				best = i
			}
		}
		score[best] -= total
		order = append(order, best)
	}
	return order
}

// Len returns the number of backends.
func (p *Pool) Len() int { return len(p.backends) }

// Backends returns the backends in configured order. The slice must not be
// modified.
func (p *Pool) Backends() []*Backend { return p.backends }

// TakeFunc tries to charge one per-backend token for the named backend. It
// returns ok=false with the time until a token frees up when the backend is
// exhausted.
type TakeFunc func(backend string) (ok bool, retryAfter time.Duration)

// Pick returns the next backend in weighted round-robin order whose token
// take succeeds; when that backend is exhausted, the others are tried once
// each in configured order. When every backend refuses it returns nil and the
// shortest Retry-After among them. A nil take means no per-backend limit.
func (p *Pool) Pick(take TakeFunc) (*Backend, time.Duration) {
	n := len(p.backends)
	first := p.order[int((p.next.Add(1)-1)%uint32(len(p.order)))]
	if take == nil {
		return p.backends[first], 0
	}
	var shortest time.Duration
	for i := 0; i < n; i++ {
		b := p.backends[(first+i)%n]
		ok, retry := take(b.name)
		if ok {
			return b, 0
		}
		if i == 0 || retry < shortest {
			shortest = retry
		}
	}
	return nil, shortest
}

// NewTransport returns the upstream transport: bounded dial and TLS
// handshake times and a generous idle pool, but no response-header timeout,
// because LLM backends may think for a long time; the caller bounds the whole
// exchange with the request's total-timeout deadline instead.
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   128,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// discardLog silences httputil.ReverseProxy's own log lines.
var discardLog = log.New(io.Discard, "", 0)

// bufferPool recycles response copy buffers between requests.
type bufferPool struct{ pool sync.Pool }

func newBufferPool() *bufferPool {
	return &bufferPool{pool: sync.Pool{New: func() any {
		b := make([]byte, bufferSize)
		return &b
	}}}
}

// Get returns a buffer of bufferSize bytes.
func (p *bufferPool) Get() []byte { return *p.pool.Get().(*[]byte) }

// Put returns a buffer to the pool; foreign-sized buffers are dropped.
func (p *bufferPool) Put(b []byte) {
	if cap(b) != bufferSize {
		return
	}
	b = b[:bufferSize]
	p.pool.Put(&b)
}
