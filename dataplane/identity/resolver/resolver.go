// Package resolver tells who sent a request and for which model: the client
// address behind trusted proxies, the API key, user and team as keyed hashes
// (identity.Hash) from the configured headers and key registry, and the model
// from a header or the JSON body (SPEC section 3). The raw values never leave
// it.
package resolver

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

// Refusals of a request whose API key the key registry does not vouch for
// (identity.keyRegistry.enforce). Their text is the answer's message.
var (
	// ErrNoAPIKey: the request carries no API key.
	ErrNoAPIKey = errors.New(`no API key; send it as "Authorization: Bearer <key>"`)
	// ErrUnknownAPIKey: the key is not in the registry.
	ErrUnknownAPIKey = errors.New("the API key is not registered; use a key issued for this API")
)

// Identity is what Resolve found about a request's caller. Every identity is
// a keyed hash.
type Identity struct {
	// ClientAddr keys the per-client limit.
	ClientAddr string
	// Set holds the API key, user and team hashes; empty means absent.
	identity.Set
	// KnownKey is true when the API key was found in the key registry.
	KnownKey bool
}

// Resolver is one config's identity and model rules compiled for the
// request path. It is immutable and safe for concurrent use.
type Resolver struct {
	trusted       trustedProxies
	apiKeyHeaders []string // canonical header names
	userHeader    string
	teamHeader    string
	trustHeaders  bool
	noTeam        string
	noTeamHash    string
	registry      map[string]config.KeyRegistryEntry // by APIKeyHash; nil without a registry
	enforce       bool
	hasher        *identity.Hasher
	model         modelPolicy
}

// New compiles cfg's identity rules, hashing with h (the hasher of the key
// cfg.HashKeySecret names). trusted are the peers whose X-Forwarded-For is
// believed (see ParseTrustedProxies).
func New(cfg *config.Config, h *identity.Hasher, trusted []netip.Prefix) *Resolver {
	c := cfg.Identity
	rv := &Resolver{
		trusted:      trustedProxies(trusted),
		userHeader:   http.CanonicalHeaderKey(c.UserHeader),
		teamHeader:   http.CanonicalHeaderKey(c.TeamHeader),
		trustHeaders: c.TrustHeaders,
		noTeam:       c.NoTeamValue,
		hasher:       h,
		model:        newModelPolicy(cfg),
	}
	if c.NoTeamValue != "" {
		rv.noTeamHash = h.Sum(c.NoTeamValue)
	}
	for _, name := range c.APIKeyHeaders {
		rv.apiKeyHeaders = append(rv.apiKeyHeaders, http.CanonicalHeaderKey(name))
	}
	if r := c.KeyRegistry; r != nil {
		rv.enforce = r.Enforce
		rv.registry = make(map[string]config.KeyRegistryEntry, len(r.Entries))
		for _, e := range r.Entries {
			rv.registry[e.APIKeyHash] = e
		}
	}
	return rv
}

// Hasher returns the hasher identities are hashed with.
func (rv *Resolver) Hasher() *identity.Hasher { return rv.hasher }

// Resolve returns the client address and the API key, user and team hashes
// of r. The model is resolved by Model, once the body is read. With the key
// registry enforced, a request without a registered key gets ErrNoAPIKey or
// ErrUnknownAPIKey along with what was resolved, so that the pre-auth limits
// can still be charged to its client.
func (rv *Resolver) Resolve(r *http.Request) (Identity, error) {
	id := Identity{ClientAddr: rv.trusted.clientAddr(r)}
	if key := rv.apiKey(r.Header); key != "" {
		id.APIKey = rv.hasher.Sum(key)
		if e, ok := rv.registry[id.APIKey]; ok {
			id.KnownKey = true
			id.User = e.UserHash
			id.Team = e.TeamHash
		}
	}
	if rv.trustHeaders {
		if id.User == "" && rv.userHeader != "" {
			if v := HeaderValue(r.Header, rv.userHeader); v != "" {
				id.User = rv.hasher.Sum(v)
			}
		}
		if id.Team == "" && rv.teamHeader != "" {
			if v := HeaderValue(r.Header, rv.teamHeader); v != "" && v != rv.noTeam {
				id.Team = rv.hasher.Sum(v)
			}
		}
	}
	if id.Team != "" && id.Team == rv.noTeamHash {
		id.Team = ""
	}
	switch {
	case !rv.enforce || id.KnownKey:
		return id, nil
	case id.APIKey == "":
		return id, ErrNoAPIKey
	}
	return id, ErrUnknownAPIKey
}

// apiKey returns the first API key found in the configured headers, with a
// "Bearer " scheme removed from Authorization.
func (rv *Resolver) apiKey(h http.Header) string {
	for _, name := range rv.apiKeyHeaders {
		v := HeaderValue(h, name)
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

// HeaderValue returns the first value of a canonical header name, trimmed,
// without the allocation of http.Header.Get's canonicalisation.
func HeaderValue(h http.Header, canonical string) string {
	if v := h[canonical]; len(v) > 0 {
		return strings.TrimSpace(v[0])
	}
	return ""
}
