package server

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"net/http"
	"net/netip"
	"strings"
	"sync"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

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

// hasher computes identity.Hash with pooled HMAC states, so hashing an
// identity costs one allocation (the returned string) instead of a fresh
// HMAC per request.
type hasher struct {
	pool sync.Pool
}

// hmacState is one pooled HMAC with scratch space that stays on the heap
// with it, so nothing escapes per call.
type hmacState struct {
	mac hash.Hash
	in  []byte
	sum [sha256.Size]byte
}

func newHasher(key []byte) *hasher {
	key = bytes.Clone(key)
	return &hasher{pool: sync.Pool{New: func() any { return &hmacState{mac: hmac.New(sha256.New, key)} }}}
}

// sum returns identity.Hash(key, value); TestHasherMatchesIdentityHash keeps
// the two equal.
func (h *hasher) sum(value string) string {
	st := h.pool.Get().(*hmacState)
	st.mac.Reset()
	st.in = append(st.in[:0], value...)
	st.mac.Write(st.in)
	var hexSum [2 * sha256.Size]byte
	hex.Encode(hexSum[:], st.mac.Sum(st.sum[:0]))
	if cap(st.in) <= 4<<10 { // do not pin a rare huge identity
		h.pool.Put(st)
	}
	return string(hexSum[:])
}

// modelFromJSON returns the top-level "model" string of a JSON body, or ""
// when the body is not valid JSON, not an object, or has no string model
// (the last one wins, as with encoding/json). known interns the model names
// the config mentions, so that for them no string is allocated; it may be nil.
// The body is scanned in place, with no decoding into values.
func modelFromJSON(body []byte, known map[string]string) string {
	if len(body) == 0 || !json.Valid(body) {
		return ""
	}
	i := skipSpace(body, 0)
	if body[i] != '{' {
		return ""
	}
	model := ""
	for i = skipSpace(body, i+1); body[i] != '}'; i = skipSpace(body, i+1) {
		keyEnd := scanString(body, i)
		isModel := string(body[i:keyEnd]) == `"model"`
		i = skipSpace(body, skipSpace(body, keyEnd)+1) // past ':'
		end := skipValue(body, i)
		if isModel {
			model = ""
			if body[i] == '"' {
				model = stringValue(body[i:end], known)
			}
		}
		i = skipSpace(body, end)
		if body[i] != ',' {
			break // '}': valid JSON leaves no other choice
		}
	}
	return model
}

// stringValue returns the value of the JSON string literal lit.
func stringValue(lit []byte, known map[string]string) string {
	raw := lit[1 : len(lit)-1]
	if bytes.IndexByte(raw, '\\') >= 0 {
		var v string
		if json.Unmarshal(lit, &v) != nil {
			return ""
		}
		return v
	}
	if v, ok := known[string(raw)]; ok {
		return v
	}
	return string(raw)
}

// skipSpace returns the index of the first non-whitespace byte at or after i.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the index just past the string literal starting at i.
func scanString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// skipValue returns the index just past the JSON value starting at i, which
// must be part of a valid document.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return scanString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = scanString(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	return j
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
