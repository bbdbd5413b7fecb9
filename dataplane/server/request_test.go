package server

import (
	"net/http"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

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
