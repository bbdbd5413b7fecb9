package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

func TestHasherMatchesIdentityHash(t *testing.T) {
	hs := newHasher(testKey)
	for _, v := range []string{"", "alice", "sk-" + strings.Repeat("x", 200)} {
		if got, want := hs.sum(v), identity.Hash(testKey, v); got != want {
			t.Errorf("sum(%q) = %s, want identity.Hash = %s", v, got, want)
		}
	}
}

func TestResolveIdentity(t *testing.T) {
	registry := &config.KeyRegistry{Entries: []config.KeyRegistryEntry{
		{APIKeyHash: h("key-alice"), UserHash: h("alice"), TeamHash: h("research")},
		{APIKeyHash: h("key-noteam"), UserHash: h("carol"), TeamHash: h("none")},
	}}
	tests := []struct {
		name     string
		identity config.Identity
		header   map[string]string
		want     requestIdentity
	}{
		{
			name:     "bearer key is stripped and hashed",
			identity: config.Identity{APIKeyHeaders: []string{"Authorization"}},
			header:   map[string]string{"Authorization": "Bearer  key-1 "},
			want:     requestIdentity{apiKeyHash: h("key-1")},
		},
		{
			name:     "bearer scheme is case-insensitive",
			identity: config.Identity{APIKeyHeaders: []string{"Authorization"}},
			header:   map[string]string{"Authorization": "bearer key-1"},
			want:     requestIdentity{apiKeyHash: h("key-1")},
		},
		{
			name:     "basic auth is not an API key; the next header is tried",
			identity: config.Identity{APIKeyHeaders: []string{"Authorization", "x-api-key"}},
			header:   map[string]string{"Authorization": "Basic dXNlcg==", "X-Api-Key": "key-2"},
			want:     requestIdentity{apiKeyHash: h("key-2")},
		},
		{
			name:     "registry gives user and team",
			identity: config.Identity{APIKeyHeaders: []string{"x-api-key"}, KeyRegistry: registry},
			header:   map[string]string{"X-Api-Key": "key-alice"},
			want:     requestIdentity{apiKeyHash: h("key-alice"), userHash: h("alice"), teamHash: h("research"), knownKey: true},
		},
		{
			name:     "registry team equal to the no-team value is no identity",
			identity: config.Identity{APIKeyHeaders: []string{"x-api-key"}, KeyRegistry: registry, NoTeamValue: "none"},
			header:   map[string]string{"X-Api-Key": "key-noteam"},
			want:     requestIdentity{apiKeyHash: h("key-noteam"), userHash: h("carol"), knownKey: true},
		},
		{
			name:     "untrusted headers are ignored",
			identity: config.Identity{APIKeyHeaders: []string{"x-api-key"}, UserHeader: "x-user", TeamHeader: "x-team"},
			header:   map[string]string{"X-User": "mallory", "X-Team": "admins"},
			want:     requestIdentity{},
		},
		{
			name:     "trusted headers give user and team",
			identity: config.Identity{APIKeyHeaders: []string{"x-api-key"}, UserHeader: "x-user", TeamHeader: "x-team", TrustHeaders: true},
			header:   map[string]string{"X-User": "bob", "X-Team": "infra"},
			want:     requestIdentity{userHash: h("bob"), teamHash: h("infra")},
		},
		{
			name: "placeholder team from a trusted header is no identity",
			identity: config.Identity{APIKeyHeaders: []string{"x-api-key"}, UserHeader: "x-user", TeamHeader: "x-team",
				TrustHeaders: true, NoTeamValue: "none"},
			header: map[string]string{"X-User": "bob", "X-Team": "none"},
			want:   requestIdentity{userHash: h("bob")},
		},
		{
			name: "registry wins over trusted headers",
			identity: config.Identity{APIKeyHeaders: []string{"x-api-key"}, UserHeader: "x-user", TrustHeaders: true,
				KeyRegistry: registry},
			header: map[string]string{"X-Api-Key": "key-alice", "X-User": "mallory"},
			want:   requestIdentity{apiKeyHash: h("key-alice"), userHash: h("alice"), teamHash: h("research"), knownKey: true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rules := newIdentityRules(tc.identity, newHasher(testKey))
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			for k, v := range tc.header {
				r.Header.Set(k, v)
			}
			var got requestIdentity
			rules.resolve(r, &got)
			if got != tc.want {
				t.Errorf("resolve() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestModelFromJSON(t *testing.T) {
	known := map[string]string{"llama": "llama"}
	tests := []struct{ body, want string }{
		{`{"model":"gpt-4o","messages":[]}`, "gpt-4o"},
		{`{"model":"llama"}`, "llama"},
		{` { "model" : "spaced" } `, "spaced"},
		{`{"messages":[{"model":"inner"}],"model":"outer"}`, "outer"},
		{`{"meta":{"model":"inner","x":[1,{"model":"deeper"}]},"n":1.5e3,"ok":true,"z":null}`, ""},
		{`{"s":"a \"model\": \"fake\" }","model":"real"}`, "real"},
		{`{"model":"first","model":"last"}`, "last"},
		{`{"MODEL":"upper"}`, ""},
		{`{"model":"gpt\u002d4"}`, "gpt-4"},
		{`{"model":42}`, ""},
		{`{"model":"m",`, ""},
		{`{"model":"m"} trailing`, ""},
		{`[]`, ""},
		{`"model"`, ""},
		{`{}`, ""},
		{``, ""},
	}
	for _, tc := range tests {
		got := modelFromJSON([]byte(tc.body), known)
		if got != tc.want {
			t.Errorf("modelFromJSON(%q) = %q, want %q", tc.body, got, tc.want)
		}
		if ref, ok := referenceModel([]byte(tc.body)); ok && ref != got {
			t.Errorf("modelFromJSON(%q) = %q, encoding/json says %q", tc.body, got, ref)
		}
	}
}

// referenceModel decodes body with encoding/json: the "model" key matched
// exactly (as OpenAI-compatible servers do), the last duplicate winning. ok is
// false when body is not a JSON object.
func referenceModel(body []byte) (model string, ok bool) {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil || m == nil {
		return "", false
	}
	s, _ := m["model"].(string)
	return s, true
}

func FuzzModelFromJSON(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"a":[1,2,{"b":"\\"}],"model":"x\"y"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got := modelFromJSON(body, nil)
		ref, ok := referenceModel(body)
		if !ok && got != "" {
			t.Fatalf("body %q is not a JSON object but gave model %q", body, got)
		}
		if ok && ref != got {
			t.Fatalf("modelFromJSON(%q) = %q, encoding/json says %q", body, got, ref)
		}
	})
}

func BenchmarkModelFromJSON(b *testing.B) {
	body := []byte(benchBody)
	known := map[string]string{"llama": "llama"}
	b.ReportAllocs()
	for b.Loop() {
		if modelFromJSON(body, known) != "llama" {
			b.Fatal("wrong model")
		}
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
