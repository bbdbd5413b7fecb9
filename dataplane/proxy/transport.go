package proxy

import (
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"
)

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

// bufferSize is the copy buffer size used for response bodies; it matches the
// io.Copy default so pooled buffers behave like the stdlib ones.
const bufferSize = 32 << 10

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
