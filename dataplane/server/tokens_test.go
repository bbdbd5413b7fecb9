/*
Copyright 2026 The fairqueue Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/internal/fakeupstream"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// tokenBudget turns deferred admission on with a per-model token limit of
// tokens per minute (burst the same) and the given hold maxWait.
func tokenBudget(tokens int64, maxWait time.Duration) func(*config.Config) {
	return func(c *config.Config) {
		c.DeferredAdmission = &config.DeferredAdmission{
			TokenLimits: config.TokenLimits{PerModel: &config.ModelLimits{
				Default: &config.Limit{Tokens: tokens, Period: dur(time.Minute), Burst: tokens},
			}},
			Estimation: config.DefaultTokenEstimation(),
			Bounds:     config.DeferredBounds{MaxHeld: 16, MaxHeldPerTenant: 8, MaxWait: dur(maxWait)},
		}
	}
}

// usageOf decodes a chat completion's usage.
func usageOf(t *testing.T, body string) (prompt, completion, total int64) {
	t.Helper()
	var doc struct {
		Usage *struct {
			Prompt     int64 `json:"prompt_tokens"`
			Completion int64 `json:"completion_tokens"`
			Total      int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil || doc.Usage == nil {
		t.Fatalf("response %q has no usage: %v", body, err)
	}
	return doc.Usage.Prompt, doc.Usage.Completion, doc.Usage.Total
}

func TestTokenBudgetHeadersAndSettle(t *testing.T) {
	up := fakeupstream.New(fakeupstream.Options{CompletionFraction: 0.5, Record: 4})
	store := limiter.NewMemoryStore(0)
	hs := newHarness(t, up, tokenBudget(1000, time.Second), func(o *Options) { o.Store = store })
	resp := hs.do(`{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"How fair is a fair queue?"}]}`,
		map[string]string{"Authorization": "Bearer k1"})
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	_, completion, total := usageOf(t, body)
	if completion != 50 {
		t.Fatalf("the fake answered %d completion tokens, want half of max_tokens", completion)
	}
	// The headers describe the bucket after the reservation: the prompt
	// estimate plus the whole output cap of 100.
	limitH, remainingH := resp.Header.Get("X-Ratelimit-Limit-Tokens"), resp.Header.Get("X-Ratelimit-Remaining-Tokens")
	remaining, err := strconv.ParseInt(remainingH, 10, 64)
	if limitH != "1000" || err != nil || remaining > 1000-100 || remaining < 1000-200 {
		t.Errorf("x-ratelimit-limit-tokens %q, remaining %q: want 1000 and the bucket less prompt plus 100", limitH, remainingH)
	}
	if resp.Header.Get("X-Ratelimit-Reset-Tokens") == "" {
		t.Error("no x-ratelimit-reset-tokens")
	}
	// Settled with the reported usage: the counters say so, and the bucket
	// holds exactly 1000 - total.
	if got := metricValue(t, hs.reg, "rate_limit_tokens_settled_total", map[string]string{"limit_type": "model_tokens"}); got != float64(total) {
		t.Errorf("settled %v tokens, want the reported total %d", got, total)
	}
	// A limiter with the same model token limit over the server's store
	// reads the bucket.
	lim, err := limiter.New(limiter.Config{ModelTokens: &limiter.Limit{Requests: 1000, Period: time.Minute, Burst: 1000}}, limiter.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	left := func(n int64) bool {
		d, err := lim.PeekTokens(hs.clk.Now(), limiter.Keys{Model: "m"}, n)
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	if !left(1000-total) || left(1000-total+1) {
		t.Errorf("the bucket does not hold exactly %d tokens after settling %d", 1000-total, total)
	}
}

func TestTokenBudgetRefusal(t *testing.T) {
	hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), tokenBudget(1000, 100*time.Millisecond))
	// 900 of output cap, all used: the second request, larger than the
	// burst, waits for a full bucket (~54s of refill), longer than maxWait.
	req := `{"model":"m","max_tokens":900,"messages":[{"role":"user","content":"hi"}]}`
	first := hs.do(req, nil)
	readAll(t, first)
	second := hs.do(`{"model":"m","max_tokens":999,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if second.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", second.StatusCode)
	}
	e := decodeError(t, second)
	if e.Error.Code != "model_tokens_rate_limit_exceeded" || e.Error.Details == nil || e.Error.Details.LimitType != "model_tokens" {
		t.Fatalf("error %+v, want code model_tokens_rate_limit_exceeded with limit_type model_tokens", e.Error)
	}
	if d := e.Error.Details.Deferred; d == nil || d.Tokens < 999 {
		t.Errorf("details.deferred %+v, want the reservation of at least 999 tokens", d)
	}
	retryMS, _ := strconv.ParseInt(second.Header.Get("Retry-After-Ms"), 10, 64)
	if retryMS < 100 || retryMS > 60_000 {
		t.Errorf("retry-after-ms %d, want the size-aware refill time (over the 100ms maxWait, under a minute)", retryMS)
	}
	if second.Header.Get("X-Ratelimit-Remaining-Tokens") != "0" || second.Header.Get("X-Ratelimit-Limit-Tokens") != "1000" {
		t.Errorf("token headers %v, want the refusing bucket with 0 remaining", second.Header)
	}
	if got := metricValue(t, hs.reg, "rate_limit_deferred_refused_total", map[string]string{"reason": "wait_exceeds_budget"}); got != 1 {
		t.Errorf("deferred refusals counted %v, want 1", got)
	}
}

func TestTokenBudgetHoldsThenAdmits(t *testing.T) {
	hs := newHarness(t, fakeupstream.New(fakeupstream.Options{CompletionFraction: 0.01}), tokenBudget(600, 10*time.Second))
	first := hs.do(`{"model":"m","max_tokens":500,"messages":[{"role":"user","content":"hi"}]}`, nil)
	readAll(t, first)
	// The fake used 5 of the 500 (and a prompt token or two): about 590 are
	// back. A request reserving 595 + prompt, more than the burst of 600,
	// waits for a full bucket: about a second of refill (10 tokens a second).
	done := make(chan *http.Response, 1)
	go func() {
		done <- hs.do(`{"model":"m","max_tokens":595,"messages":[{"role":"user","content":"hi"}]}`, nil)
	}()
	rt := hs.srv.rt.Load()
	// Held: in the deferral queue, or admitted ahead of its tokens and
	// waiting for them.
	testutil.Eventually(t, "the request to be held", func() bool { d, _ := rt.deferralQueue().Stats(); w, _ := rt.admit.HeldAhead(); return d+w == 1 })
	if got := metricValue(t, hs.reg, "rate_limit_deferred_held", nil); got != 1 {
		t.Errorf("rate_limit_deferred_held = %v, want 1", got)
	}
	hs.clk.Step(2 * time.Second)
	testutil.Eventually(t, "the hold to end", func() bool { d, _ := rt.deferralQueue().Stats(); w, _ := rt.admit.HeldAhead(); return d == 0 && w == 0 })
	var resp *http.Response
	select {
	case resp = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the held request was never answered")
	}
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	ms, err := strconv.Atoi(resp.Header.Get("X-Fair-Queue-Deferred-Ms"))
	if err != nil || ms <= 0 || ms > 2000 {
		t.Errorf("x-fair-queue-deferred-ms %q, want the hold in (0, 2000]", resp.Header.Get("X-Fair-Queue-Deferred-Ms"))
	}
}

func TestStreamUsageIsRequestedAndStripped(t *testing.T) {
	for _, tc := range []struct {
		name         string
		clientAsks   bool
		wantUsageOut bool
	}{
		{name: "client did not ask: usage requested upstream, stripped", clientAsks: false},
		{name: "client asked: usage passed through", clientAsks: true, wantUsageOut: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := fakeupstream.New(fakeupstream.Options{Record: 1})
			hs := newHarness(t, up, tokenBudget(10000, time.Second))
			req := `{"model":"m","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"stream please"}]}`
			if tc.clientAsks {
				req = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":50,"messages":[{"role":"user","content":"stream please"}]}`
			}
			resp := hs.do(req, nil)
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			sent := up.Requests()
			if len(sent) != 1 || !strings.Contains(string(sent[0].Body), `"include_usage":true`) {
				t.Fatalf("upstream received %q, want stream_options.include_usage true", sent)
			}
			gotUsage := strings.Contains(body, `"prompt_tokens"`)
			if gotUsage != tc.wantUsageOut {
				t.Errorf("usage chunk in the client's stream = %v, want %v:\n%s", gotUsage, tc.wantUsageOut, body)
			}
			if !strings.Contains(body, "data: [DONE]") {
				t.Errorf("stream lost its [DONE]:\n%s", body)
			}
			settled := metricValue(t, hs.reg, "rate_limit_tokens_settled_total", map[string]string{"limit_type": "model_tokens"})
			if settled <= 0 {
				t.Errorf("settled %v tokens for a streamed answer, want its usage", settled)
			}
		})
	}
}

// TestStrippedStreamKeepsAnUnterminatedLastEvent checks that a stream the
// data plane strips the usage chunk from reaches the client whole when the
// upstream ends it without the final blank line: the last event was held
// back in case it was the usage chunk, and must not be lost.
func TestStrippedStreamKeepsAnUnterminatedLastEvent(t *testing.T) {
	const chunk = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}` + "\n\n"
	const usageChunk = `data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}` + "\n\n"
	const last = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, chunk+usageChunk+last) // no line end after the last event
	})
	hs := newHarness(t, up, tokenBudget(10000, time.Second))
	resp := hs.do(`{"model":"m","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`, nil)
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if want := chunk + last; body != want {
		t.Errorf("client received %q, want %q (the usage chunk stripped, the rest as sent)", body, want)
	}
}

func TestTokenBudgetOffChangesNothing(t *testing.T) {
	up := fakeupstream.New(fakeupstream.Options{Record: 1})
	hs := newHarness(t, up, nil)
	req := `{"model":"m","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"x"}]}`
	resp := hs.do(req, nil)
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Ratelimit-Limit-Tokens") != "" {
		t.Fatalf("status %d, token headers %q without deferred admission", resp.StatusCode, resp.Header.Get("X-Ratelimit-Limit-Tokens"))
	}
	if sent := up.Requests(); len(sent) != 1 || string(sent[0].Body) != req {
		t.Errorf("without deferred admission the body must reach the upstream unchanged, got %q", sent)
	}
	if strings.Contains(body, `"prompt_tokens"`) {
		t.Error("usage appeared in a stream nobody asked it for")
	}
}

func TestTokenBudgetHotReload(t *testing.T) {
	up := fakeupstream.New(fakeupstream.Options{})
	hs := newHarness(t, up, nil)
	upURL := hs.srv.rt.Load().cfg.Backends[0].URL
	req := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	tokenHeader := func() string {
		resp := hs.do(req, nil)
		readAll(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return resp.Header.Get("X-Ratelimit-Limit-Tokens")
	}
	if got := tokenHeader(); got != "" {
		t.Fatalf("token header %q before deferred admission is on", got)
	}
	for i, tc := range []struct {
		tokens int64 // 0: deferred admission off
		want   string
	}{{tokens: 5000, want: "5000"}, {tokens: 8000, want: "8000"}, {want: ""}, {tokens: 3000, want: "3000"}} {
		next := baseConfig(upURL)
		if tc.tokens > 0 {
			tokenBudget(tc.tokens, time.Second)(next)
		}
		if err := hs.srv.Load(next, "reload-"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
		if got := tokenHeader(); got != tc.want {
			t.Errorf("reload %d: x-ratelimit-limit-tokens %q, want %q", i, got, tc.want)
		}
	}
}
