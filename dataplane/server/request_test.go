package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

func TestHasherMatchesIdentityHash(t *testing.T) {
	hs := newHasher(testKey)
	for range 2 { // the second round is served from the cache
		for _, v := range []string{"", "alice", "alicf", "sk-" + strings.Repeat("x", 200)} {
			if got, want := hs.sum(v), identity.Hash(testKey, v); got != want {
				t.Errorf("sum(%q) = %s, want identity.Hash = %s", v, got, want)
			}
		}
	}
}

// TestHasherCacheIsBounded: a flood of fresh identities never grows the
// cache past its bound, and every result stays exact.
func TestHasherCacheIsBounded(t *testing.T) {
	hs := newHasher(testKey)
	for i := range 3 * maxHashCacheEntries {
		v := "key-" + strconv.Itoa(i)
		if got := hs.sum(v); i%4099 == 0 && got != identity.Hash(testKey, v) {
			t.Fatalf("sum(%q) = %s, want identity.Hash", v, got)
		}
		if n := hs.entries.Load(); n > maxHashCacheEntries {
			t.Fatalf("cache holds %d entries, bound %d", n, maxHashCacheEntries)
		}
	}
	n := 0
	hs.cache.Range(func(any, any) bool { n++; return true })
	if n > maxHashCacheEntries {
		t.Fatalf("cache holds %d entries, bound %d", n, maxHashCacheEntries)
	}
}

func BenchmarkHasher(b *testing.B) {
	hs := newHasher(testKey)
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = hs.sum("sk-bench-key")
		}
	})
	b.Run("hmac", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = hs.hmac("sk-bench-key")
		}
	})
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
	tests := []struct {
		body, want string
		ok         bool
	}{
		{`{"model":"gpt-4o","messages":[]}`, "gpt-4o", true},
		{`{"model":"llama"}`, "llama", true},
		{` { "model" : "spaced" } `, "spaced", true},
		{`{"messages":[{"model":"inner"}],"model":"outer"}`, "outer", true},
		{`{"meta":{"model":"inner","x":[1,{"model":"deeper"}]},"n":1.5e3,"ok":true,"z":null}`, "", false},
		{`{"s":"a \"model\": \"fake\" }","model":"real"}`, "real", true},
		{`{"model":"first","model":"last"}`, "last", true},
		{`{"model":"first","model":7}`, "", false},
		{`{"MODEL":"upper"}`, "", false},
		{`{"model":"gpt\u002d4"}`, "gpt-4", true},
		{`{"\u006dodel":"expensive"}`, "expensive", true},
		{`{"mod\u0065l":"expensive","model":"cheap"}`, "cheap", true},
		{`{"model":"cheap","\u006d\u006f\u0064\u0065\u006c":"expensive"}`, "expensive", true},
		{"{\"model\":\"\xe6\"}", "\uFFFD", true},
		{"{\"model\":\"big\xff\"}", "big\uFFFD", true},
		{`{"model":"\ud83d\ude00"}`, "\U0001F600", true},
		{`{"model":"\ud83d"}`, "\uFFFD", true},
		{`{"model":""}`, "", false},
		{`{"model":"expensive","t":NaN}`, "", false},
		{`{"model":"expensive","n":01}`, "", false},
		{`{"model":"expensive","s":"\x"}`, "", false},
		{"{\"model\":\"ctl\x01\"}", "", false},
		{`{"model":42}`, "", false},
		{`{"model":"m",`, "", false},
		{`{"model":"m"} trailing`, "", false},
		{`[]`, "", false},
		{`"model"`, "", false},
		{`{}`, "", false},
		{``, "", false},
		{strings.Repeat("[", 9999) + strings.Repeat("]", 9999), "", false},
		{`{"model":"deep","x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`, "deep", true},
		{`{"model":"too deep","x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, "", false},
	}
	for _, tc := range tests {
		got, ok := modelFromJSON([]byte(tc.body), known)
		if got != tc.want || ok != tc.ok {
			t.Errorf("modelFromJSON(%.80q) = %q, %v, want %q, %v", tc.body, got, ok, tc.want, tc.ok)
		}
		if ref, refOK := referenceModel([]byte(tc.body)); ref != got || refOK != ok {
			t.Errorf("modelFromJSON(%.80q) = %q, %v, encoding/json says %q, %v", tc.body, got, ok, ref, refOK)
		}
	}
}

// referenceModel decodes body with encoding/json into a map, as an upstream
// does: the "model" key matched exactly after unescaping, the last duplicate
// winning. ok is false when body is not a JSON object or has no non-empty
// string model.
func referenceModel(body []byte) (model string, ok bool) {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil || m == nil {
		return "", false
	}
	s, _ := m["model"].(string)
	return s, s != ""
}

// FuzzModelFromJSON is a differential test: the in-place scanner must read
// every body exactly as encoding/json does. testdata holds the two inputs
// that broke the previous scanner (an escaped key, invalid UTF-8).
func FuzzModelFromJSON(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"a":[1,2,{"b":"\\"}],"model":"x\"y"}`))
	f.Add([]byte(`{"\u006dodel":"x","n":-1.5e+3,"t":[true,false,null]}`))
	f.Add([]byte(`{"model":"\ud83d\ude00\ud800"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := modelFromJSON(body, nil)
		ref, refOK := referenceModel(body)
		if ref != got || refOK != ok {
			t.Fatalf("modelFromJSON(%q) = %q, %v, encoding/json says %q, %v", body, got, ok, ref, refOK)
		}
	})
}

func BenchmarkModelFromJSON(b *testing.B) {
	body := []byte(benchBody)
	known := map[string]string{"llama": "llama"}
	b.ReportAllocs()
	for b.Loop() {
		if m, _ := modelFromJSON(body, known); m != "llama" {
			b.Fatal("wrong model")
		}
	}
}

// BenchmarkModelFromJSONReference is the same body through encoding/json,
// the baseline the scanner must beat.
func BenchmarkModelFromJSONReference(b *testing.B) {
	body := []byte(benchBody)
	b.ReportAllocs()
	for b.Loop() {
		if m, _ := referenceModel(body); m != "llama" {
			b.Fatal("wrong model")
		}
	}
}

// TestPerModelLimitsCannotBeBypassed sends bodies an upstream reads as the
// limited model "big" (burst 1) but that a naive reader would not charge to
// it: the second request of each pair must be refused by the model limit or
// answered 400, never forwarded uncharged.
func TestPerModelLimitsCannotBeBypassed(t *testing.T) {
	alice := map[string]string{"Authorization": "Bearer key-alice"}
	big := func(c *config.Config) {
		c.RateLimits.PerModel = &config.ModelLimits{Default: limit(100, 100, time.Second),
			Overrides: []config.ModelOverride{{Model: "big", Limit: *limit(1, 1, time.Minute)}}}
	}
	tests := []struct {
		name   string
		mutate func(*config.Config)
		first  string
		second string
		header map[string]string
		// wantStatus is the second request's status; wantCode its error code.
		wantStatus int
		wantCode   string
	}{
		{name: "escaped key", mutate: big, first: `{"model":"big"}`, second: `{"\u006dodel":"big"}`,
			wantStatus: 429, wantCode: "model_rate_limit_exceeded"},
		{name: "duplicate keys: the last wins", mutate: big, first: `{"model":"big"}`, second: `{"model":"small","model":"big"}`,
			wantStatus: 429, wantCode: "model_rate_limit_exceeded"},
		{name: "escaped value", mutate: big, first: `{"model":"big"}`, second: `{"model":"\u0062ig"}`,
			wantStatus: 429, wantCode: "model_rate_limit_exceeded"},
		{name: "invalid UTF-8 is read as U+FFFD, as the upstream reads it",
			mutate: func(c *config.Config) {
				c.RateLimits.PerModel = &config.ModelLimits{Overrides: []config.ModelOverride{{Model: "big\uFFFD", Limit: *limit(1, 1, time.Minute)}}}
			},
			first: "{\"model\":\"big\uFFFD\"}", second: "{\"model\":\"big\xff\"}", wantStatus: 429, wantCode: "model_rate_limit_exceeded"},
		{name: "a body Go cannot parse is refused by default", mutate: big, first: `{"model":"small"}`, second: `{"model":"big","temperature":NaN}`,
			wantStatus: 400, wantCode: "model_not_determined"},
		{name: "a body without a model is refused by default", mutate: big, first: `{"model":"small"}`, second: `{"messages":[]}`,
			wantStatus: 400, wantCode: "model_not_determined"},
		{name: "a body Go cannot parse is charged to the configured model",
			mutate: func(c *config.Config) {
				big(c)
				c.RateLimits.PerModel.UnknownModel = config.UnknownModel{Action: config.UnknownModelCharge, ChargeAs: "big"}
			},
			first: `{"model":"big"}`, second: `{"model":"big","temperature":NaN}`, wantStatus: 429, wantCode: "model_rate_limit_exceeded"},
		{name: "model header absent: the body's model is charged",
			mutate: func(c *config.Config) { big(c); c.Identity.ModelHeader = "X-Model" },
			first:  `{"model":"big"}`, second: `{"model":"big"}`, wantStatus: 429, wantCode: "model_rate_limit_exceeded"},
		{name: "model header present wins over the body",
			mutate: func(c *config.Config) { big(c); c.Identity.ModelHeader = "X-Model" },
			header: map[string]string{"X-Model": "small"},
			first:  `{"model":"big"}`, second: `{"model":"big"}`, wantStatus: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hs := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }), tc.mutate)
			header := map[string]string{}
			for k, v := range alice {
				header[k] = v
			}
			for k, v := range tc.header {
				header[k] = v
			}
			if resp := hs.do(tc.first, header); resp.StatusCode != http.StatusOK {
				t.Fatalf("first request: status %d: %s", resp.StatusCode, readAll(t, resp))
			} else {
				readAll(t, resp)
			}
			resp := hs.do(tc.second, header)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("second request %q: status %d, want %d: %s", tc.second, resp.StatusCode, tc.wantStatus, readAll(t, resp))
			}
			if tc.wantCode == "" {
				readAll(t, resp)
				return
			}
			if e := decodeError(t, resp); e.Error.Code != tc.wantCode {
				t.Fatalf("second request: code %q, want %q", e.Error.Code, tc.wantCode)
			}
		})
	}
}

// TestIdentityTokensRefundedWhenEveryBackendIsExhausted: a request admitted
// by its identity limits but refused because every backend is exhausted
// gets its identity tokens back (SPEC section 2: no token is lost).
func TestIdentityTokensRefundedWhenEveryBackendIsExhausted(t *testing.T) {
	hs := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }),
		func(c *config.Config) {
			c.RateLimits.PerUser = limit(1, 2, time.Hour)
			c.RateLimits.PerBackend = limit(1, 1, time.Minute)
			c.Identity.TrustHeaders = true
		})
	bob := map[string]string{"Authorization": "Bearer key-bob", "X-User": "bob"}
	want := []struct {
		status    int
		limitType string
	}{{200, ""}, {429, "backend"}, {429, "backend"}, {429, "backend"}}
	for i, w := range want {
		resp := hs.do(`{"model":"m"}`, bob)
		if resp.StatusCode != w.status {
			t.Fatalf("request %d: status %d, want %d: %s", i, resp.StatusCode, w.status, readAll(t, resp))
		}
		if w.status == 200 {
			readAll(t, resp)
			continue
		}
		if e := decodeError(t, resp); e.Error.Details == nil || e.Error.Details.LimitType != w.limitType {
			t.Fatalf("request %d: refused with %+v, want limit_type %s: the user's tokens were lost to backend refusals", i, e.Error, w.limitType)
		}
	}
	hs.clk.Step(time.Minute)
	if resp := hs.do(`{"model":"m"}`, bob); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the backend refilled: status %d, want 200 (the user still has its second token): %s", resp.StatusCode, readAll(t, resp))
	} else {
		readAll(t, resp)
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

// TestFullKeyTableRefusesNewKeys: with the per-key table full of buckets
// still holding debt, a new API key is refused with its own code, at once
// and without queuing, instead of being admitted untracked; established keys
// keep their limits.
func TestFullKeyTableRefusesNewKeys(t *testing.T) {
	store := limiter.NewMemoryStore(2)
	hs := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }),
		func(c *config.Config) {
			c.RateLimits.PerAPIKey = limit(1, 2, time.Minute)
			c.FairQueuing.Enabled = true
			c.FairQueuing.TenantDimension = identity.DimensionAPIKey
		}, func(o *Options) { o.Store = store })
	for _, key := range []string{"key-a", "key-b"} {
		resp := hs.do(`{"model":"m"}`, map[string]string{"Authorization": "Bearer " + key})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d: %s", key, resp.StatusCode, readAll(t, resp))
		}
		readAll(t, resp)
	}
	resp := hs.do(`{"model":"m"}`, map[string]string{"Authorization": "Bearer key-new"})
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("new key at a full table: status %d, want 429: %s", resp.StatusCode, readAll(t, resp))
	}
	if got := resp.Header.Get("Retry-After-Ms"); got != "60000" {
		t.Errorf("Retry-After-Ms = %q, want 60000 (when the first tracked bucket has refilled)", got)
	}
	e := decodeError(t, resp)
	if e.Error.Code != "api_key_table_full" || e.Error.Details == nil || e.Error.Details.LimitType != "api_key" || e.Error.Details.FairQueue != nil {
		t.Fatalf("refusal %+v, want code api_key_table_full, limit_type api_key, not queued", e.Error)
	}
	if store.TableFullRefusals() != 1 {
		t.Fatalf("TableFullRefusals() = %d, want 1", store.TableFullRefusals())
	}
	hs.clk.Step(time.Minute)
	resp = hs.do(`{"model":"m"}`, map[string]string{"Authorization": "Bearer key-new"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("new key once a bucket refilled: status %d: %s", resp.StatusCode, readAll(t, resp))
	}
	readAll(t, resp)
}
