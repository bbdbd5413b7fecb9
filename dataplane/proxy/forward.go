package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
)

// forward proxies r to the backend the way httputil.ReverseProxy with a
// Rewrite of SetURL and SetXForwarded does, without its per-request copies:
// the outgoing header map shares the client's values instead of cloning
// them, hop-by-hop headers are skipped while copying instead of deleted one
// canonicalised name at a time, the response headers are handed over
// instead of appended value by value, and a server-sent event stream is
// recognised without parsing the media type. Protocol upgrades, the only
// requests it does not handle, go through the ReverseProxy.
//
// Errors reaching the backend go to the error handler with the outgoing
// request (whose context is ctx's), as the ReverseProxy did; a response
// breaking off while its body is relayed goes to brokeOff, as the
// ReverseProxy's ErrAbortHandler panic did.
func (b *Backend) forward(ctx context.Context, rw *relayWriter, r *http.Request) {
	t := &informational{rw: rw}
	out := r.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		Got1xxResponse: t.relay, GotConn: t.gotConn, GotFirstResponseByte: t.gotFirstByte,
	}))
	u := *r.URL
	out.URL = &u
	out.URL.RawQuery = cleanQuery(u.RawQuery)
	out.Header = outgoingHeader(r)
	out.Body = outgoingBody(r)
	out.GetBody = nil
	out.RequestURI = "" // set on server requests, refused on client ones
	out.Close = false
	(&httputil.ProxyRequest{In: r, Out: out}).SetURL(b.target) // also clears out.Host

	res, err := b.transport.RoundTrip(out)
	for retries := 0; err != nil && retries < maxStaleRetries && t.staleConn() && ctx.Err() == nil; retries++ {
		// The upstream closed a kept-alive connection as the request went
		// out on it (its idle timeout, or a middlebox's): it answered
		// nothing, so the request goes again on another connection, as
		// net/http does on its own for idempotent requests only.
		body, ok := replayBody(r)
		if !ok {
			break
		}
		again := *out
		again.Body = body
		out = &again
		t.attempt()
		res, err = b.transport.RoundTrip(out)
	}
	t.done()
	if err != nil {
		b.reportError(rw, out, err)
		return
	}
	// However the relay ends, a panic writing to the client included, the
	// upstream's body is closed, so its connection does not stay open.
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode == http.StatusSwitchingProtocols {
		// Only an upgrade request, which takes the ReverseProxy, may switch.
		b.reportError(rw, out, errUnexpectedSwitch)
		return
	}

	h := rw.Header()
	copyResponseHeader(h, res.Header)
	announced := len(res.Trailer)
	if announced > 0 {
		names := make([]string, 0, announced)
		for k := range res.Trailer {
			names = append(names, k)
		}
		h.Add("Trailer", strings.Join(names, ", "))
	}
	rw.WriteHeader(res.StatusCode)

	if err := b.relayBody(rw, res); err != nil {
		b.brokeOff(ctx, rw, r)
		return
	}
	_ = res.Body.Close() // now, to populate res.Trailer
	if len(res.Trailer) > 0 {
		// Chunked encoding, so net/http cannot add a Content-Length to a
		// short body and drop the trailers.
		_ = rw.FlushError()
	}
	for k, vv := range res.Trailer {
		if len(res.Trailer) != announced {
			k = http.TrailerPrefix + k
		}
		h[k] = append(h[k], vv...)
	}
	rw.commit() // a response without a body
}

// errUnexpectedSwitch is reported for a 101 answer to a request that did not
// ask to switch protocols.
var errUnexpectedSwitch = errors.New("the backend switched protocols for a request that did not ask to")

// reportError answers a request whose backend could not be reached.
func (b *Backend) reportError(rw *relayWriter, r *http.Request, err error) {
	if b.errorHandler != nil {
		b.errorHandler(rw, r, err)
	} else {
		rw.WriteHeader(http.StatusBadGateway)
	}
	rw.commit()
}

// relayBody copies the response body to rw, flushing after every write for
// a server-sent event stream or a body of unknown length (streamed
// completions), and not at all otherwise. Any other body (one of known
// length: a whole JSON answer) is relayed a full buffer at a time, so one
// that fits a buffer is read whole before its status goes out: should the
// upstream break off inside it, nothing has reached the client and it is
// answered 502, instead of a status whose body never comes.
func (b *Backend) relayBody(rw *relayWriter, res *http.Response) error {
	flush := res.ContentLength == -1 || isEventStream(res.Header["Content-Type"])
	buf := b.buffers.Get()
	defer b.buffers.Put(buf)
	for {
		var (
			n    int
			rerr error
		)
		if flush {
			n, rerr = res.Body.Read(buf)
		} else {
			n, rerr = fill(res.Body, buf)
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			// What came with the failure is not relayed: a response that
			// sent nothing yet can still be answered 502.
			return rerr
		}
		if n > 0 {
			if _, err := rw.Write(buf[:n]); err != nil {
				return err
			}
			if flush {
				if err := rw.FlushError(); err != nil {
					return err
				}
			}
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
	}
}

// fill reads from r until p is full or r fails; io.EOF ends a body that
// did not fill p.
func fill(r io.Reader, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k, err := r.Read(p[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// maxStaleRetries bounds the attempts a request makes again after the
// upstream closed a reused connection without answering: each such failure
// takes one dead connection out of the idle pool, and a few cover a burst
// picking up several the upstream closed at once.
const maxStaleRetries = 3

// replayBody returns a fresh body for sending r again: none for a request
// without one, a second reader over a buffered body (by ReadAt, so a late
// read of the first attempt's reader cannot race with it); ok is false for
// a body streamed from the client, which cannot be read twice.
func replayBody(r *http.Request) (io.ReadCloser, bool) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil, true
	}
	b, ok := r.Body.(BufferedBody)
	if !ok {
		return nil, false
	}
	rd := b.BufferedReader()
	return io.NopCloser(io.NewSectionReader(rd, 0, rd.Size())), true
}

// informational relays 1xx responses (103 Early Hints, a backend's own 100
// Continue) to the client while the round trip is in flight, and never
// after it returned. It also notes, per attempt, whether the connection was
// a reused one and whether any byte of a response came back on it.
type informational struct {
	rw       http.ResponseWriter
	mu       sync.Mutex
	finished bool
	reused   bool
	answered bool
}

func (t *informational) gotConn(info httptrace.GotConnInfo) {
	t.mu.Lock()
	t.reused = info.Reused
	t.mu.Unlock()
}

func (t *informational) gotFirstByte() {
	t.mu.Lock()
	t.answered = true
	t.mu.Unlock()
}

// staleConn reports whether the attempt failed on a reused connection
// before any byte of a response: the upstream closed it idle.
func (t *informational) staleConn() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reused && !t.answered
}

// attempt starts noting a new attempt.
func (t *informational) attempt() {
	t.mu.Lock()
	t.reused, t.answered = false, false
	t.mu.Unlock()
}

func (t *informational) relay(code int, header textproto.MIMEHeader) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished {
		return nil
	}
	h := t.rw.Header()
	for k, vv := range header {
		h[k] = append(h[k], vv...)
	}
	t.rw.WriteHeader(code)
	clear(h) // WriteHeader does not clear them for a 1xx
	return nil
}

func (t *informational) done() {
	t.mu.Lock()
	t.finished = true
	t.mu.Unlock()
}

// isUpgrade reports whether h asks to switch protocols (WebSocket, h2c):
// a Connection header naming "upgrade".
func isUpgrade(h http.Header) bool {
	return hasToken(h["Connection"], "upgrade")
}

// hasToken reports whether the comma-separated values hold token, in any
// case; a header name (as the Connection header lists them) matches its
// canonical form this way too.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for v != "" {
			var t string
			t, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(textproto.TrimString(t), token) {
				return true
			}
		}
	}
	return false
}

// hopByHop reports whether the canonical header name k applies to one
// connection only and must not be forwarded (RFC 9110 section 7.6.1).
func hopByHop(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// emptyUserAgent keeps the transport from sending Go's default User-Agent
// for a client that sent none. It is shared and never modified.
var emptyUserAgent = []string{""}

// outgoingHeader returns the header sent upstream: the client's, sharing
// its value slices (nothing modifies them), without hop-by-hop headers and
// without forwarding headers the client set, plus X-Forwarded-For (the
// client's address only), X-Forwarded-Host and X-Forwarded-Proto.
func outgoingHeader(r *http.Request) http.Header {
	in := r.Header
	connection := in["Connection"]
	out := make(http.Header, len(in)+3)
	for k, vv := range in {
		switch {
		case hopByHop(k), len(connection) > 0 && hasToken(connection, k):
		case k == "Forwarded", k == "X-Forwarded-For", k == "X-Forwarded-Host", k == "X-Forwarded-Proto":
		default:
			out[k] = vv
		}
	}
	// The client may say it accepts trailers; the proxy relays them.
	if hasToken(in["Te"], "trailers") {
		out["Te"] = teTrailers
	}
	if _, ok := out["User-Agent"]; !ok {
		out["User-Agent"] = emptyUserAgent
	}
	proto := "http"
	if r.TLS != nil {
		proto = "https"
	}
	fwd := [...]string{"", r.Host, proto}
	vals := fwd[:]
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		vals[0] = ip
		out["X-Forwarded-For"] = vals[0:1:1]
	}
	out["X-Forwarded-Host"] = vals[1:2:2]
	out["X-Forwarded-Proto"] = vals[2:3:3]
	return out
}

var teTrailers = []string{"trailers"}

// outgoingBody returns the body sent upstream: a buffered one as an
// in-memory reader, so the transport writes it with the headers; any other
// behind a wrapper whose Close does nothing (the transport would otherwise
// close the client's body) and which cannot be read once closed; nil for
// none.
func outgoingBody(r *http.Request) io.ReadCloser {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	if b, ok := r.Body.(BufferedBody); ok {
		return io.NopCloser(b.BufferedReader())
	}
	return &noCloseBody{body: r.Body}
}

// noCloseBody forwards a client's streamed body; Close only stops further
// reads, because reading a request body after the handler returned is not
// allowed and the transport may try.
type noCloseBody struct {
	body   io.Reader
	closed atomic.Bool
}

func (b *noCloseBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errors.New("proxy: the request body was read after it was closed")
	}
	return b.body.Read(p)
}

func (b *noCloseBody) Close() error {
	b.closed.Store(true)
	return nil
}

// copyResponseHeader adds the backend's response header to the client's,
// without hop-by-hop headers. Value slices of names the client's header does
// not hold yet are handed over, not copied: the response is not used after.
func copyResponseHeader(dst, src http.Header) {
	connection := src["Connection"]
	for k, vv := range src {
		if hopByHop(k) || len(connection) > 0 && hasToken(connection, k) {
			continue
		}
		if prior, ok := dst[k]; ok {
			dst[k] = append(prior, vv...)
		} else {
			dst[k] = vv
		}
	}
}

// isEventStream reports whether a Content-Type is text/event-stream, with
// or without parameters.
func isEventStream(contentType []string) bool {
	if len(contentType) == 0 {
		return false
	}
	mt, _, _ := strings.Cut(contentType[0], ";")
	return strings.EqualFold(textproto.TrimString(mt), "text/event-stream")
}

// cleanQuery returns a raw query the backend parses as the proxy does: one
// with a ';' or a malformed escape is re-encoded from what url.ParseQuery
// accepts, as httputil.ReverseProxy does, so the two cannot disagree about
// which parameters a request carries.
func cleanQuery(q string) string {
	for i := 0; i < len(q); {
		switch q[i] {
		case ';':
			return reencodeQuery(q)
		case '%':
			if i+2 >= len(q) || !isHex(q[i+1]) || !isHex(q[i+2]) {
				return reencodeQuery(q)
			}
			i += 3
		default:
			i++
		}
	}
	return q
}

func reencodeQuery(q string) string {
	v, _ := url.ParseQuery(q)
	return v.Encode()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
