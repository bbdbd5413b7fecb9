package server

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"hash/maphash"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

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

// hasher computes identity.Hash with pooled HMAC states, and remembers
// recent results so a returning identity costs two seeded non-cryptographic
// hashes and a map lookup instead of an HMAC and an allocation.
//
// The cache is keyed by a 128-bit digest of the raw value (two 64-bit
// maphash sums under random per-process seeds), so raw identities are never
// kept; it holds at most maxHashCacheEntries results and is cleared when
// full, so a flood of fresh identities costs an HMAC each, as without it.
type hasher struct {
	pool         sync.Pool
	seed1, seed2 maphash.Seed
	cache        sync.Map // [2]uint64 -> string
	entries      atomic.Int64
}

// maxHashCacheEntries bounds the identity hash cache: about 2.5 MiB.
const maxHashCacheEntries = 16384

// hmacState is one pooled HMAC with scratch space that stays on the heap
// with it, so nothing escapes per call.
type hmacState struct {
	mac hash.Hash
	in  []byte
	sum [sha256.Size]byte
}

func newHasher(key []byte) *hasher {
	key = bytes.Clone(key)
	return &hasher{
		pool:  sync.Pool{New: func() any { return &hmacState{mac: hmac.New(sha256.New, key)} }},
		seed1: maphash.MakeSeed(),
		seed2: maphash.MakeSeed(),
	}
}

// sum returns identity.Hash(key, value); TestHasherMatchesIdentityHash keeps
// the two equal.
func (h *hasher) sum(value string) string {
	digest := [2]uint64{maphash.String(h.seed1, value), maphash.String(h.seed2, value)}
	if v, ok := h.cache.Load(digest); ok {
		return v.(string)
	}
	sum := h.hmac(value)
	if h.entries.Add(1) > maxHashCacheEntries {
		h.cache.Clear()
		h.entries.Store(1)
	}
	h.cache.Store(digest, sum)
	return sum
}

// hmac computes identity.Hash(key, value) with a pooled HMAC state.
func (h *hasher) hmac(value string) string {
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
