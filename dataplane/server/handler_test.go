package server

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/limiter/limitertest"
	"github.com/fairqueue/fairqueue/internal/fakeupstream"
)

func TestRefusals(t *testing.T) {
	alice := map[string]string{"Authorization": "Bearer key-alice"}
	tests := []struct {
		name   string
		mutate func(*config.Config)
		// warmup requests are sent first and must be admitted.
		warmup     int
		body       string
		header     map[string]string
		wantStatus int
		wantType   string
		wantCode   string
		// wantLimitType and wantRetryMS are checked on 429s.
		wantLimitType string
		wantRetryMS   int64
		// wantQuota is the x-ratelimit-limit-requests value, "" for none.
		wantQuota string
	}{
		{
			name:   "global limit",
			mutate: func(c *config.Config) { c.RateLimits.Global = limit(1, 1, time.Second) },
			warmup: 1, body: `{"model":"m"}`, header: alice,
			wantStatus: 429, wantType: "rate_limit_exceeded", wantLimitType: "global", wantRetryMS: 1000, wantQuota: "1",
		},
		{
			name:   "per-client limit",
			mutate: func(c *config.Config) { c.RateLimits.PerClient = limit(2, 1, time.Second) },
			warmup: 1, body: `{"model":"m"}`,
			wantStatus: 429, wantType: "rate_limit_exceeded", wantLimitType: "client", wantRetryMS: 500, wantQuota: "1",
		},
		{
			name:   "per-API-key limit without fair queuing",
			mutate: func(c *config.Config) { c.RateLimits.PerAPIKey = limit(1, 2, 1500*time.Millisecond) },
			warmup: 2, body: `{"model":"m"}`, header: alice,
			wantStatus: 429, wantType: "rate_limit_exceeded", wantLimitType: "api_key", wantRetryMS: 1500, wantQuota: "2",
		},
		{
			name: "per-model limit reads the model from the body",
			mutate: func(c *config.Config) {
				c.RateLimits.PerModel = &config.ModelLimits{Overrides: []config.ModelOverride{{Model: "big", Limit: *limit(1, 1, time.Second)}}}
			},
			warmup: 1, body: `{"messages":[],"model":"big"}`, header: alice,
			wantStatus: 429, wantType: "rate_limit_exceeded", wantLimitType: "model", wantRetryMS: 1000, wantQuota: "1",
		},
		{
			name: "per-model limit reads the model from the configured header",
			mutate: func(c *config.Config) {
				c.Identity.ModelHeader = "X-Model"
				c.RateLimits.PerModel = &config.ModelLimits{Overrides: []config.ModelOverride{{Model: "big", Limit: *limit(1, 1, time.Second)}}}
			},
			warmup: 1, body: `{"model":"small"}`, header: map[string]string{"X-Model": "big"},
			wantStatus: 429, wantType: "rate_limit_exceeded", wantLimitType: "model", wantRetryMS: 1000, wantQuota: "1",
		},
		{
			name:   "per-backend limit when every backend is exhausted",
			mutate: func(c *config.Config) { c.RateLimits.PerBackend = limit(1, 1, 2*time.Second) },
			warmup: 1, body: `{"model":"m"}`, header: alice,
			wantStatus: 429, wantType: "rate_limit_exceeded", wantLimitType: "backend", wantRetryMS: 2000, wantQuota: "1",
		},
		{
			name: "unknown key with an enforced registry",
			mutate: func(c *config.Config) {
				c.Identity.KeyRegistry = &config.KeyRegistry{Enforce: true, Entries: []config.KeyRegistryEntry{{APIKeyHash: h("key-bob")}}}
			},
			body: `{"model":"m"}`, header: alice,
			wantStatus: 401, wantType: "authentication_error", wantCode: "invalid_api_key",
		},
		{
			name: "missing key with an enforced registry",
			mutate: func(c *config.Config) {
				c.Identity.KeyRegistry = &config.KeyRegistry{Enforce: true, Entries: []config.KeyRegistryEntry{{APIKeyHash: h("key-bob")}}}
			},
			body:       `{"model":"m"}`,
			wantStatus: 401, wantType: "authentication_error", wantCode: "invalid_api_key",
		},
		{
			name: "oversized body",
			mutate: func(c *config.Config) {
				c.RateLimits.PerModel = &config.ModelLimits{Default: limit(100, 100, time.Second)}
			},
			body: `{"model":"m","pad":"` + strings.Repeat("x", 2<<10) + `"}`, header: alice,
			wantStatus: 413, wantType: "invalid_request_error", wantCode: "request_too_large",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), tc.mutate)
			for i := 0; i < tc.warmup; i++ {
				if resp := hs.do(tc.body, tc.header); resp.StatusCode != 200 {
					t.Fatalf("warm-up request %d: status %d, want 200: %s", i, resp.StatusCode, readAll(t, resp))
				} else {
					readAll(t, resp)
				}
			}
			resp := hs.do(tc.body, tc.header)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tc.wantStatus, readAll(t, resp))
			}
			hdr := resp.Header
			e := decodeError(t, resp)
			if e.Error.Type != tc.wantType {
				t.Errorf("error.type = %q, want %q", e.Error.Type, tc.wantType)
			}
			if tc.wantCode != "" && e.Error.Code != tc.wantCode {
				t.Errorf("error.code = %q, want %q", e.Error.Code, tc.wantCode)
			}
			if got := hdr.Get("X-Ratelimit-Limit-Requests"); got != tc.wantQuota {
				t.Errorf("x-ratelimit-limit-requests = %q, want %q", got, tc.wantQuota)
			}
			if tc.wantQuota != "" && (hdr.Get("X-Ratelimit-Remaining-Requests") != "0" || hdr.Get("X-Ratelimit-Reset-Requests") == "") {
				t.Errorf("x-ratelimit-remaining/reset = %q/%q, want 0 and a reset time",
					hdr.Get("X-Ratelimit-Remaining-Requests"), hdr.Get("X-Ratelimit-Reset-Requests"))
			}
			if hdr.Get("X-Fair-Queue-Position") != "" {
				t.Errorf("x-fair-queue-position = %q on a request that was never queued", hdr.Get("X-Fair-Queue-Position"))
			}
			if tc.wantStatus != 429 {
				if e.Error.Details != nil || hdr.Get("Retry-After") != "" {
					t.Errorf("a %d carries rate-limit details %+v / Retry-After %q", tc.wantStatus, e.Error.Details, hdr.Get("Retry-After"))
				}
				return
			}
			wantSeconds := (tc.wantRetryMS + 999) / 1000
			if got := hdr.Get("Retry-After"); got != itoa(wantSeconds) {
				t.Errorf("Retry-After = %q, want %d (whole seconds, rounded up)", got, wantSeconds)
			}
			if got := hdr.Get("Retry-After-Ms"); got != itoa(tc.wantRetryMS) {
				t.Errorf("retry-after-ms = %q, want %d", got, tc.wantRetryMS)
			}
			d := e.Error.Details
			if d == nil || d.LimitType != tc.wantLimitType || d.RetryAfterMS == nil || *d.RetryAfterMS != tc.wantRetryMS {
				t.Fatalf("details = %+v, want limit_type %q and retry_after_ms %d", d, tc.wantLimitType, tc.wantRetryMS)
			}
			if d.FairQueue != nil {
				t.Errorf("details.fair_queue = %+v on a request that was never queued", d.FairQueue)
			}
		})
	}
}

func TestAdmittedResponseCarriesQuotaHeaders(t *testing.T) {
	hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), func(c *config.Config) {
		c.RateLimits.PerAPIKey = limit(10, 5, time.Second)
		c.RateLimits.PerModel = &config.ModelLimits{Default: limit(10, 3, time.Second)}
	})
	for i, wantRemaining := range []string{"2", "1"} {
		resp := hs.do(`{"model":"m"}`, map[string]string{"Authorization": "Bearer k"})
		readAll(t, resp)
		// The model bucket (burst 3) is tighter than the API-key one (burst 5).
		if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Limit-Requests") != "3" ||
			resp.Header.Get("X-Ratelimit-Remaining-Requests") != wantRemaining || resp.Header.Get("X-Ratelimit-Reset-Requests") == "" {
			t.Errorf("request %d: status %d, x-ratelimit limit/remaining/reset = %q/%q/%q; want 200, 3/%s/a reset time", i,
				resp.StatusCode, resp.Header.Get("X-Ratelimit-Limit-Requests"), resp.Header.Get("X-Ratelimit-Remaining-Requests"),
				resp.Header.Get("X-Ratelimit-Reset-Requests"), wantRemaining)
		}
		if resp.Header.Get("X-Fair-Queue-Position") != "" {
			t.Errorf("request %d was never queued but carries x-fair-queue-position", i)
		}
	}
}

func TestPreAuthLimitsApplyBeforeAuthentication(t *testing.T) {
	hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), func(c *config.Config) {
		c.RateLimits.Global = limit(1, 1, time.Second)
		c.Identity.KeyRegistry = &config.KeyRegistry{Enforce: true, Entries: []config.KeyRegistryEntry{{APIKeyHash: h("good")}}}
	})
	unknown := map[string]string{"Authorization": "Bearer unknown"}
	if resp := hs.do(`{}`, unknown); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("first unknown key: status %d, want 401", resp.StatusCode)
	} else {
		readAll(t, resp)
	}
	// The 401 spent the global token: the next request, even with a good
	// key, is refused by the global limit.
	resp := hs.do(`{}`, map[string]string{"Authorization": "Bearer good"})
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status = %d, want 429 from the global limit", resp.StatusCode)
	}
	if e := decodeError(t, resp); e.Error.Details == nil || e.Error.Details.LimitType != "global" {
		t.Errorf("details = %+v, want limit_type global", e.Error.Details)
	}
	hs.clk.Step(time.Second)
	if resp := hs.do(`{}`, unknown); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("after the refill: status %d, want 401", resp.StatusCode)
	} else {
		readAll(t, resp)
	}
}

func TestBodyAndIdentityForwardedUnchanged(t *testing.T) {
	tests := []struct {
		name string
		body string
	}{
		{name: "valid JSON", body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{name: "malformed JSON is forwarded untouched", body: `{"model": "m",,,`},
		{name: "not an object", body: `["model","m"]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := fakeupstream.New(fakeupstream.Options{Record: 1})
			hs := newHarness(t, up, func(c *config.Config) {
				// A body whose model cannot be read is charged to "m" (the default policy would answer 400).
				c.RateLimits.PerModel = &config.ModelLimits{Default: limit(100, 100, time.Second),
					UnknownModel: config.UnknownModel{Action: config.UnknownModelCharge, ChargeAs: "m"}}
			})
			resp := hs.do(tc.body, map[string]string{"Authorization": "Bearer sk-secret"})
			readAll(t, resp)
			got := up.Requests()
			if len(got) != 1 {
				t.Fatalf("upstream saw %d requests, want 1", len(got))
			}
			if string(got[0].Body) != tc.body {
				t.Errorf("upstream body = %q, want %q unchanged", got[0].Body, tc.body)
			}
			if got[0].Header.Get("Authorization") != "Bearer sk-secret" {
				t.Errorf("upstream Authorization = %q, want the client's header forwarded", got[0].Header.Get("Authorization"))
			}
		})
	}
}

func TestUpstreamFailures(t *testing.T) {
	t.Run("unreachable backend answers 502", func(t *testing.T) {
		hs := newHarness(t, http.NotFoundHandler(), func(c *config.Config) {
			c.Backends = []config.Backend{{Name: "dead", URL: "http://127.0.0.1:1", Weight: 1}}
		})
		resp := hs.do(`{"model":"m"}`, nil)
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("status = %d, want 502", resp.StatusCode)
		}
		if e := decodeError(t, resp); e.Error.Type != "upstream_error" || e.Error.Code != "bad_gateway" {
			t.Errorf("error = %+v, want upstream_error/bad_gateway", e.Error)
		}
	})

	t.Run("slow backend hits the total timeout", func(t *testing.T) {
		arrived := make(chan struct{})
		upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body) // lets the server notice the proxy hanging up
			close(arrived)
			<-r.Context().Done() // never answers in time
		})
		hs := newHarness(t, upstream, func(c *config.Config) { c.Timeouts.RequestTotal = dur(30 * time.Second) })
		go func() {
			// No t.Fatal here (a spawned goroutine): without the upstream
			// call, hs.do fails the test on its own.
			select {
			case <-arrived:
				hs.clk.Step(30 * time.Second)
			case <-time.After(10 * time.Second):
			}
		}()
		resp := hs.do(`{"model":"m"}`, nil)
		if resp.StatusCode != http.StatusGatewayTimeout {
			t.Fatalf("status = %d, want 504: %s", resp.StatusCode, readAll(t, resp))
		}
		if e := decodeError(t, resp); e.Error.Code != "upstream_timeout" {
			t.Errorf("error.code = %q, want upstream_timeout", e.Error.Code)
		}
	})
}

func TestStreamingIsFlushedAsItArrives(t *testing.T) {
	next := make(chan struct{})
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := 0; i < 3; i++ {
			if _, err := io.WriteString(w, "data: {\"chunk\":"+itoa(int64(i))+"}\n\n"); err != nil {
				return // the proxy hung up; the client side reports it
			}
			_ = rc.Flush()
			select {
			case <-next: // the client saw this chunk through the proxy
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n") // a failure shows as a missing [DONE] below
	})
	hs := newHarness(t, upstream, nil)
	resp := hs.do(`{"model":"m","stream":true}`, nil)
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q; want a 200 event stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	var got []string
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		got = append(got, line)
		if line != "data: [DONE]" {
			// The upstream holds the next chunk until this one reached us, so
			// the stream deadlocks unless every chunk is flushed at once.
			next <- struct{}{}
		}
	}
	want := []string{`data: {"chunk":0}`, `data: {"chunk":1}`, `data: {"chunk":2}`, "data: [DONE]"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("stream = %q, want %q", got, want)
	}
}

func TestOpsEndpoints(t *testing.T) {
	srv, err := New(Options{HashKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	ops := srv.OpsHandler()
	get := func(path string) int {
		rec := newRecorder()
		ops.ServeHTTP(rec, mustRequest(t, http.MethodGet, path))
		return rec.Code
	}
	if got := get("/healthz"); got != 200 {
		t.Errorf("/healthz before load = %d, want 200", got)
	}
	if got := get("/readyz"); got != 503 {
		t.Errorf("/readyz before load = %d, want 503", got)
	}
	cfg := baseConfig("http://127.0.0.1:1")
	if err := srv.Load(cfg, "h1"); err != nil {
		t.Fatal(err)
	}
	defer srv.rt.Load().close()
	if got := get("/readyz"); got != 200 {
		t.Errorf("/readyz after load = %d, want 200", got)
	}
	rec := newRecorder()
	ops.ServeHTTP(rec, mustRequest(t, http.MethodGet, "/metrics"))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "rate_limit_fair_queue_depth") {
		t.Errorf("/metrics = %d without the queue metrics:\n%s", rec.Code, rec.Body)
	}
	srv.draining.Store(true)
	if got := get("/readyz"); got != 503 {
		t.Errorf("/readyz while draining = %d, want 503", got)
	}
}

func TestLoadRejectsWrongHashKey(t *testing.T) {
	srv, err := New(Options{HashKey: []byte("another key of thirty-two bytes!")})
	if err != nil {
		t.Fatal(err)
	}
	err = srv.Load(baseConfig("http://127.0.0.1:1"), "h1")
	if err == nil || !strings.Contains(err.Error(), "hashKeySecret.fingerprint") {
		t.Errorf("Load() error = %v, want one naming hashKeySecret.fingerprint", err)
	}
	if srv.Ready() {
		t.Error("server is ready after a refused config")
	}
}

func TestStoreOutageAnswers503AtOnce(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*config.Config)
	}{
		{name: "pre-auth limit", mutate: func(c *config.Config) { c.RateLimits.Global = limit(10, 10, time.Second) }},
		{name: "identity limit with fair queuing on", mutate: perUserQueueing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := fakeupstream.New(fakeupstream.Options{})
			hs := newHarness(t, up, tc.mutate, func(o *Options) { o.Store = limitertest.DownStore{} })
			resp := hs.do(`{"model":"m"}`, map[string]string{"X-User": "alice"})
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("status = %d, want 503: %s", resp.StatusCode, readAll(t, resp))
			}
			if resp.Header.Get("Retry-After") != "1" || resp.Header.Get("X-Fair-Queue-Position") != "" {
				t.Errorf("Retry-After %q, x-fair-queue-position %q; want 1 and no queue header",
					resp.Header.Get("Retry-After"), resp.Header.Get("X-Fair-Queue-Position"))
			}
			e := decodeError(t, resp)
			if e.Error.Type != "service_unavailable" || e.Error.Code != "store_unavailable" {
				t.Errorf("error = %+v, want service_unavailable/store_unavailable", e.Error)
			}
			if up.Count() != 0 {
				t.Errorf("upstream saw %d requests during a store outage, want 0", up.Count())
			}
		})
	}
}
