package server

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// errBodyTooLarge is returned when a request body exceeds the configured bound.
var errBodyTooLarge = errors.New("request body too large")

// requestIdentity is what the server resolved about a request's caller. Every
// identity is a keyed hash; the raw values never leave resolveIdentity.
type requestIdentity struct {
	apiKeyHash string
	userHash   string
	teamHash   string
	model      string
	// knownKey is true when the API key was found in the key registry.
	knownKey bool
}

// identityRules is config.Identity compiled for the request path.
type identityRules struct {
	apiKeyHeaders []string // canonical header names
	userHeader    string
	teamHeader    string
	trustHeaders  bool
	noTeam        string
	noTeamHash    string
	modelHeader   string
	registry      map[string]config.KeyRegistryEntry // by APIKeyHash; nil without a registry
	enforce       bool
	hasher        *hasher
}

func newIdentityRules(c config.Identity, h *hasher) *identityRules {
	ir := &identityRules{
		userHeader:   http.CanonicalHeaderKey(c.UserHeader),
		teamHeader:   http.CanonicalHeaderKey(c.TeamHeader),
		trustHeaders: c.TrustHeaders,
		noTeam:       c.NoTeamValue,
		modelHeader:  http.CanonicalHeaderKey(c.ModelHeader),
		hasher:       h,
	}
	if c.NoTeamValue != "" {
		ir.noTeamHash = h.sum(c.NoTeamValue)
	}
	for _, name := range c.APIKeyHeaders {
		ir.apiKeyHeaders = append(ir.apiKeyHeaders, http.CanonicalHeaderKey(name))
	}
	if r := c.KeyRegistry; r != nil {
		ir.enforce = r.Enforce
		ir.registry = make(map[string]config.KeyRegistryEntry, len(r.Entries))
		for _, e := range r.Entries {
			ir.registry[e.APIKeyHash] = e
		}
	}
	return ir
}

// resolve fills the API key, user and team hashes of r. The model is resolved
// separately because it may need the body.
func (ir *identityRules) resolve(r *http.Request, id *requestIdentity) {
	if key := ir.apiKey(r.Header); key != "" {
		id.apiKeyHash = ir.hasher.sum(key)
		if e, ok := ir.registry[id.apiKeyHash]; ok {
			id.knownKey = true
			id.userHash = e.UserHash
			id.teamHash = e.TeamHash
		}
	}
	if ir.trustHeaders {
		if id.userHash == "" && ir.userHeader != "" {
			if v := headerValue(r.Header, ir.userHeader); v != "" {
				id.userHash = ir.hasher.sum(v)
			}
		}
		if id.teamHash == "" && ir.teamHeader != "" {
			if v := headerValue(r.Header, ir.teamHeader); v != "" && v != ir.noTeam {
				id.teamHash = ir.hasher.sum(v)
			}
		}
	}
	if id.teamHash != "" && id.teamHash == ir.noTeamHash {
		id.teamHash = ""
	}
}

// apiKey returns the first API key found in the configured headers, with a
// "Bearer " scheme removed from Authorization.
func (ir *identityRules) apiKey(h http.Header) string {
	for _, name := range ir.apiKeyHeaders {
		v := headerValue(h, name)
		if v == "" {
			continue
		}
		if name == "Authorization" {
			if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
				v = strings.TrimSpace(v[7:])
			} else {
				continue // another scheme (Basic, ...) carries no API key
			}
		}
		if v != "" {
			return v
		}
	}
	return ""
}

// headerValue returns the first value of a canonical header name without the
// allocation of http.Header.Get's canonicalisation.
func headerValue(h http.Header, canonical string) string {
	if v := h[canonical]; len(v) > 0 {
		return strings.TrimSpace(v[0])
	}
	return ""
}

// hasher computes identity.Hash with pooled HMAC states, avoiding the
// allocations of a fresh HMAC per request.
type hasher struct {
	pool sync.Pool
}

func newHasher(key []byte) *hasher {
	key = bytes.Clone(key)
	return &hasher{pool: sync.Pool{New: func() any { return hmac.New(sha256.New, key) }}}
}

// sum returns identity.Hash(key, value); TestHasherMatchesIdentityHash keeps
// the two equal.
func (h *hasher) sum(value string) string {
	m := h.pool.Get().(hash.Hash)
	m.Reset()
	io.WriteString(m, value)
	var sum [sha256.Size]byte
	var hexSum [2 * sha256.Size]byte
	hex.Encode(hexSum[:], m.Sum(sum[:0]))
	h.pool.Put(m)
	return string(hexSum[:])
}

// bodyBuffers recycles the buffers that hold request bodies read for the model.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// bufferedBody is a request body read into a pooled buffer; Close returns the
// buffer to the pool once the proxy is done with it.
type bufferedBody struct {
	bytes.Reader
	buf *bytes.Buffer
}

// Close is a no-op: the handler releases the buffer after the proxy returns,
// because the transport may close the body before it is done reading.
func (b *bufferedBody) Close() error { return nil }

// readBody reads r's body (at most limit bytes) into a pooled buffer and
// replaces r.Body with a reader over it, so the body is forwarded unchanged.
// The caller must call release when the request is finished.
func readBody(r *http.Request, limit int64) (data []byte, release func(), err error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, func() {}, nil
	}
	if r.ContentLength > limit {
		return nil, func() {}, errBodyTooLarge
	}
	buf := bodyBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	release = func() {
		if buf.Cap() <= 1<<20 { // do not pin rare huge bodies in the pool
			bodyBuffers.Put(buf)
		}
	}
	n, err := buf.ReadFrom(io.LimitReader(r.Body, limit+1))
	if err != nil {
		release()
		return nil, func() {}, err
	}
	if n > limit {
		release()
		return nil, func() {}, errBodyTooLarge
	}
	body := &bufferedBody{buf: buf}
	body.Reset(buf.Bytes())
	r.Body = body
	r.ContentLength = n
	return buf.Bytes(), release, nil
}

// modelField is the only part of a request body the server reads.
type modelField struct {
	Model string `json:"model"`
}

// modelFromJSON returns the top-level "model" string of a JSON body, or ""
// when the body is not a JSON object with a string model.
func modelFromJSON(body []byte) string {
	if len(body) == 0 {
		return ""
	}
	var m modelField
	if err := json.Unmarshal(body, &m); err != nil {
		return ""
	}
	return m.Model
}

// trustedProxies decides the client address of a request.
type trustedProxies []netip.Prefix

// clientAddr returns the address the per-client limit is keyed by: the
// connection's peer, or, when the peer is a trusted proxy, the right-most
// X-Forwarded-For entry that is not itself a trusted proxy.
func (tp trustedProxies) clientAddr(r *http.Request) string {
	peer := hostOnly(r.RemoteAddr)
	if len(tp) == 0 || !tp.contains(peer) {
		return peer
	}
	values := r.Header["X-Forwarded-For"]
	client := peer
	for i := len(values) - 1; i >= 0; i-- {
		v := values[i]
		for v != "" {
			var hop string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				hop, v = strings.TrimSpace(v[j+1:]), v[:j]
			} else {
				hop, v = strings.TrimSpace(v), ""
			}
			if hop == "" {
				continue
			}
			if _, err := netip.ParseAddr(hop); err != nil {
				return client // garbage in the chain: stop at the last trusted hop
			}
			client = hop
			if !tp.contains(hop) {
				return client
			}
		}
	}
	return client
}

func (tp trustedProxies) contains(addr string) bool {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range tp {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// hostOnly strips the port (and IPv6 brackets) from a host:port string
// without allocating.
func hostOnly(hostport string) string {
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 && strings.IndexByte(hostport[i:], ']') < 0 {
		hostport = hostport[:i]
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

// ParseTrustedProxies parses a comma-separated list of CIDRs or addresses,
// as given to --trusted-proxies.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, errors.New("trusted proxy " + `"` + f + `"` + " is neither a CIDR (10.0.0.0/8) nor an IP address")
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}
