package proxy

import (
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
)

// maxStaleRetries bounds the attempts a request makes again after the
// upstream closed a reused connection without answering: each such failure
// takes one dead connection out of the idle pool, and a few cover a burst
// picking up several the upstream closed at once.
const maxStaleRetries = 3

// staleRetry sends a request again when the upstream closed the kept-alive
// connection it went out on without answering (its idle timeout, or a
// middlebox's, firing as the request arrived). net/http does so on its own
// only for idempotent methods, and the data plane mostly sends POSTs, which
// it sends again when their body is buffered (BufferedBody). It
// needs the request's GetBody for a body, so a body streamed from the
// client, which cannot be read twice, is not sent again.
type staleRetry struct{ next http.RoundTripper }

func (t staleRetry) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	out := req
	for attempt := 0; ; attempt++ {
		var conn connTrace
		res, err := t.next.RoundTrip(out.WithContext(httptrace.WithClientTrace(ctx, conn.hooks())))
		if err == nil || attempt == maxStaleRetries || !conn.stale() || ctx.Err() != nil {
			return res, err
		}
		// The connections left idle as long as this one are likely closed
		// too (an idle timeout closes them together): drop them, so the next
		// attempt goes on a live or a new connection instead of the next
		// dead one.
		if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return res, err
			}
			body, berr := req.GetBody()
			if berr != nil {
				return res, err
			}
			out = req.WithContext(ctx) // a copy whose Body can change
			out.Body = body
		}
	}
}

// connTrace notes, for one attempt, whether the connection was a reused one
// and whether any byte of a response came back on it.
type connTrace struct{ reused, answered atomic.Bool }

func (c *connTrace) hooks() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GotConn:              func(info httptrace.GotConnInfo) { c.reused.Store(info.Reused) },
		GotFirstResponseByte: func() { c.answered.Store(true) },
	}
}

// stale reports whether the attempt failed on a reused connection before any
// byte of a response: the upstream closed it idle.
func (c *connTrace) stale() bool { return c.reused.Load() && !c.answered.Load() }
