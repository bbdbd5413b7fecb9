// Package proxy holds the data plane's upstream side: the configured backends,
// weighted round-robin selection among the ones that still have per-backend
// capacity, and per backend an httputil.ReverseProxy that streams responses
// (server-sent events included) as they arrive, answers 502 when the upstream
// fails before any byte of its response reached the client, and sends a
// request again when the upstream closed a reused connection unanswered.
package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"
)

// Target names one upstream the proxy may send requests to.
type Target struct {
	// Name identifies the backend in limits, logs and metrics.
	Name string
	// URL is the backend's base URL; the request path is appended to its path.
	URL string
	// Weight is the backend's relative share of requests; 0 means 1.
	Weight int
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
	var transport http.RoundTripper = NewTransport()
	if opts.Transport != nil {
		transport = opts.Transport
	}
	transport = staleRetry{next: transport}
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
		p.backends = append(p.backends, newBackend(t.Name, u, transport, buffers, opts))
	}
	p.order = smoothOrder(targets)
	return p, nil
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
	first := p.NextIndex()
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
