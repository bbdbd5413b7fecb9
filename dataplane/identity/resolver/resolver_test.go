package resolver

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func h(raw string) string { return identity.Hash(testKey, raw) }

func TestResolveIdentity(t *testing.T) {
	registry := &config.KeyRegistry{Entries: []config.KeyRegistryEntry{
		{APIKeyHash: h("key-alice"), UserHash: h("alice"), TeamHash: h("research")},
		{APIKeyHash: h("key-noteam"), UserHash: h("carol"), TeamHash: h("none")},
	}}
	tests := []struct {
		name     string
		identity config.Identity
		header   map[string]string
		want     Identity
	}{
		{
			name:     "bearer key is stripped and hashed",
			identity: config.Identity{APIKeyHeaders: []string{"Authorization"}},
			header:   map[string]string{"Authorization": "Bearer  key-1 "},
			want:     Identity{Set: identity.Set{APIKey: h("key-1")}},
		},
		{
			name:     "bearer scheme is case-insensitive",
			identity: config.Identity{APIKeyHeaders: []string{"Authorization"}},
			header:   map[string]string{"Authorization": "bearer key-1"},
			want:     Identity{Set: identity.Set{APIKey: h("key-1")}},
		},
		{
			name:     "basic auth is not an API key; the next header is tried",
			identity: config.Identity{APIKeyHeaders: []string{"Authorization", "x-api-key"}},
			header:   map[string]string{"Authorization": "Basic dXNlcg==", "X-Api-Key": "key-2"},
			want:     Identity{Set: identity.Set{APIKey: h("key-2")}},
		},
		{
			name:     "registry gives user and team",
			identity: config.Identity{APIKeyHeaders: []string{"x-api-key"}, KeyRegistry: registry},
			header:   map[string]string{"X-Api-Key": "key-alice"},
			want:     Identity{Set: identity.Set{APIKey: h("key-alice"), User: h("alice"), Team: h("research")}, KnownKey: true},
		},
		{
			name:     "registry team equal to the no-team value is no identity",
			identity: config.Identity{APIKeyHeaders: []string{"x-api-key"}, KeyRegistry: registry, NoTeamValue: "none"},
			header:   map[string]string{"X-Api-Key": "key-noteam"},
			want:     Identity{Set: identity.Set{APIKey: h("key-noteam"), User: h("carol")}, KnownKey: true},
		},
		{
			name:     "untrusted headers are ignored",
			identity: config.Identity{APIKeyHeaders: []string{"x-api-key"}, UserHeader: "x-user", TeamHeader: "x-team"},
			header:   map[string]string{"X-User": "mallory", "X-Team": "admins"},
			want:     Identity{},
		},
		{
			name:     "trusted headers give user and team",
			identity: config.Identity{APIKeyHeaders: []string{"x-api-key"}, UserHeader: "x-user", TeamHeader: "x-team", TrustHeaders: true},
			header:   map[string]string{"X-User": "bob", "X-Team": "infra"},
			want:     Identity{Set: identity.Set{User: h("bob"), Team: h("infra")}},
		},
		{
			name: "placeholder team from a trusted header is no identity",
			identity: config.Identity{APIKeyHeaders: []string{"x-api-key"}, UserHeader: "x-user", TeamHeader: "x-team",
				TrustHeaders: true, NoTeamValue: "none"},
			header: map[string]string{"X-User": "bob", "X-Team": "none"},
			want:   Identity{Set: identity.Set{User: h("bob")}},
		},
		{
			name: "registry wins over trusted headers",
			identity: config.Identity{APIKeyHeaders: []string{"x-api-key"}, UserHeader: "x-user", TrustHeaders: true,
				KeyRegistry: registry},
			header: map[string]string{"X-Api-Key": "key-alice", "X-User": "mallory"},
			want:   Identity{Set: identity.Set{APIKey: h("key-alice"), User: h("alice"), Team: h("research")}, KnownKey: true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rv := New(&config.Config{Identity: tc.identity}, identity.NewHasher(testKey), nil)
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			for k, v := range tc.header {
				r.Header.Set(k, v)
			}
			got, err := rv.Resolve(r)
			if err != nil {
				t.Fatal(err)
			}
			tc.want.ClientAddr = "192.0.2.1" // httptest's peer
			if got != tc.want {
				t.Errorf("resolve() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestClientAddr(t *testing.T) {
	trusted, err := ParseTrustedProxies("10.0.0.0/8, 192.168.1.1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		remote  string
		xff     []string
		trusted []string
		want    string
	}{
		{name: "direct client", remote: "203.0.113.9:4000", xff: []string{"1.2.3.4"}, want: "203.0.113.9"},
		{name: "IPv6 peer", remote: "[2001:db8::1]:4000", want: "2001:db8::1"},
		{name: "trusted proxy forwards the client", remote: "10.1.2.3:4000", xff: []string{"198.51.100.7"}, want: "198.51.100.7"},
		{name: "right-most untrusted hop wins", remote: "10.1.2.3:4000", xff: []string{"6.6.6.6, 198.51.100.7, 192.168.1.1"}, want: "198.51.100.7"},
		{name: "several header lines", remote: "10.1.2.3:4000", xff: []string{"6.6.6.6", "198.51.100.7"}, want: "198.51.100.7"},
		{name: "garbage stops at the last trusted hop", remote: "10.1.2.3:4000", xff: []string{"nonsense, 10.9.9.9"}, want: "10.9.9.9"},
		{name: "trusted proxy without header", remote: "10.1.2.3:4000", want: "10.1.2.3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.remote
			r.Header["X-Forwarded-For"] = tc.xff
			if got := trustedProxies(trusted).clientAddr(r); got != tc.want {
				t.Errorf("clientAddr() = %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := ParseTrustedProxies("10.0.0.0/8,not-an-ip"); err == nil || !strings.Contains(err.Error(), `"not-an-ip"`) {
		t.Errorf("ParseTrustedProxies(bad) error = %v, want one naming the bad entry", err)
	}
}

// TestResolveEnforcedRegistry: with the key registry enforced, a request
// without a registered key is refused with an error saying which case it
// is, and still carries its client address for the pre-auth limits.
func TestResolveEnforcedRegistry(t *testing.T) {
	cfg := &config.Config{Identity: config.Identity{APIKeyHeaders: []string{"x-api-key"},
		KeyRegistry: &config.KeyRegistry{Enforce: true, Entries: []config.KeyRegistryEntry{{APIKeyHash: h("key-alice"), UserHash: h("alice")}}}}}
	rv := New(cfg, identity.NewHasher(testKey), nil)
	for _, tc := range []struct {
		key  string
		want error
	}{{"key-alice", nil}, {"", ErrNoAPIKey}, {"key-mallory", ErrUnknownAPIKey}} {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		if tc.key != "" {
			r.Header.Set("X-Api-Key", tc.key)
		}
		id, err := rv.Resolve(r)
		if !errors.Is(err, tc.want) || id.ClientAddr != "192.0.2.1" {
			t.Errorf("key %q: Resolve() = %+v, %v; want client 192.0.2.1, error %v", tc.key, id, err, tc.want)
		}
	}
}
