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

package limiter

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// tokenStep is one TakeTokens call at an offset from t0 and what it must
// decide: a refusal's limit type and Retry-After, or an allowance's tokens
// left in the tightest bucket.
type tokenStep struct {
	at        time.Duration
	n         int64
	allowed   bool
	limitType Dimension
	refusedBy []Dimension
	retry     time.Duration
	remaining int64
}

func TestTakeTokensIsSizeAware(t *testing.T) {
	user := Keys{User: "alice", Team: "red"}
	cases := []struct {
		name  string
		cfg   Config
		steps []tokenStep
	}{{
		name: "a request waits until the bucket holds its size, not one token",
		cfg:  Config{UserTokens: lim(1000, time.Second, 0)}, // one token per ms
		steps: []tokenStep{
			{n: 600, allowed: true, remaining: 400},
			{n: 500, limitType: DimensionUserTokens, retry: 100 * time.Millisecond},
			{at: 99 * time.Millisecond, n: 500, limitType: DimensionUserTokens, retry: time.Millisecond},
			{at: 100 * time.Millisecond, n: 500, allowed: true, remaining: 0},
			{at: 100 * time.Millisecond, n: 1, limitType: DimensionUserTokens, retry: time.Millisecond},
		},
	}, {
		name: "two refusing buckets: Retry-After until both hold the size, limit type the slower",
		cfg:  Config{UserTokens: lim(1000, time.Second, 0), TeamTokens: lim(100, time.Second, 1000)},
		steps: []tokenStep{
			{n: 950, allowed: true, remaining: 50},
			// The user bucket lacks 50 tokens (50ms), the team bucket 50 (500ms).
			{n: 100, limitType: DimensionTeamTokens, refusedBy: []Dimension{DimensionUserTokens, DimensionTeamTokens}, retry: 500 * time.Millisecond},
			{at: 50 * time.Millisecond, n: 100, limitType: DimensionTeamTokens, refusedBy: []Dimension{DimensionTeamTokens}, retry: 450 * time.Millisecond},
			{at: 500 * time.Millisecond, n: 100, allowed: true, remaining: 0},
		},
	}, {
		name: "a cost above capacity waits for a full bucket, then is charged in full",
		cfg:  Config{UserTokens: lim(100, time.Second, 0)}, // one token per 10ms
		steps: []tokenStep{
			{n: 250, allowed: true, remaining: 0},
			// 150 tokens of debt plus the one asked for.
			{n: 1, limitType: DimensionUserTokens, retry: 1510 * time.Millisecond},
			{at: 1510 * time.Millisecond, n: 1, allowed: true, remaining: 0},
			// Not full: a cost above capacity waits for the whole debt.
			{at: 1510 * time.Millisecond, n: 250, limitType: DimensionUserTokens, retry: time.Second},
			{at: 2510 * time.Millisecond, n: 250, allowed: true, remaining: 0},
		},
	}, {
		name: "a cost of 0 or 1 is one token, as for request limits",
		cfg:  Config{UserTokens: lim(2, time.Second, 0)},
		steps: []tokenStep{
			{n: 0, allowed: true, remaining: 1},
			{n: 1, allowed: true, remaining: 0},
			{n: 0, limitType: DimensionUserTokens, retry: 500 * time.Millisecond},
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := mustNew(t, tc.cfg, Options{})
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				peek, err := l.PeekTokens(now, user, s.n)
				if err != nil {
					t.Fatalf("step %d: PeekTokens: %v", i, err)
				}
				d, err := l.TakeTokens(now, user, s.n)
				if err != nil {
					t.Fatalf("step %d: TakeTokens: %v", i, err)
				}
				if peek.Allowed != d.Allowed || peek.RetryAfter != d.RetryAfter || peek.LimitType != d.LimitType {
					t.Errorf("step %d: PeekTokens %+v disagrees with TakeTokens %+v", i, peek, d)
				}
				if d.Allowed != s.allowed {
					t.Fatalf("step %d (n=%d at %v): allowed=%v, want %v (%+v)", i, s.n, s.at, d.Allowed, s.allowed, d)
				}
				if !d.HasQuota || !d.Tightest.Dimension.Tokens() {
					t.Fatalf("step %d: quota %+v (has %v), want a token bucket's", i, d.Tightest, d.HasQuota)
				}
				if s.allowed {
					if d.Tightest.Remaining != s.remaining {
						t.Errorf("step %d: %d tokens remaining, want %d", i, d.Tightest.Remaining, s.remaining)
					}
					continue
				}
				if d.LimitType != s.limitType || d.RetryAfter != s.retry {
					t.Errorf("step %d (n=%d at %v): refused by %s for %v, want %s for %v", i, s.n, s.at, d.LimitType, d.RetryAfter, s.limitType, s.retry)
				}
				if s.refusedBy != nil {
					var want DimensionSet
					for _, dim := range s.refusedBy {
						want = want.Add(dim)
					}
					if d.RefusedBy != want {
						t.Errorf("step %d: refused by %b, want %b", i, d.RefusedBy, want)
					}
				}
				if d.Tightest.Dimension != d.LimitType || d.Tightest.Remaining != 0 {
					t.Errorf("step %d: refusal quota %+v, want the %s bucket with nothing remaining", i, d.Tightest, d.LimitType)
				}
			}
		})
	}
}

func TestTakeTokensChargesAllOrNone(t *testing.T) {
	rec := recorder{}
	cfg := Config{
		User:       lim(1, time.Minute, 0), // a request limit: TakeTokens must not touch it
		UserTokens: lim(1000, time.Minute, 0),
		TeamTokens: lim(300, time.Minute, 0),
	}
	l := mustNew(t, cfg, Options{Observer: rec})
	keys := Keys{User: "u", Team: "t"}
	if d, _ := l.TakeTokens(t0, keys, 200); !d.Allowed || d.Tightest.Dimension != DimensionTeamTokens || d.Tightest.Remaining != 100 {
		t.Fatalf("first take: %+v, want allowed with 100 team tokens left", d)
	}
	for i := range 5 {
		d, _ := l.TakeTokens(t0, keys, 200)
		if d.Allowed || d.RefusedBy != DimensionSet(0).Add(DimensionTeamTokens) {
			t.Fatalf("take %d: %+v, want refused by team_tokens only", i, d)
		}
	}
	if d, _ := l.PeekTokens(t0, Keys{User: "u"}, 1); d.Tightest.Remaining != 800 {
		t.Fatalf("user tokens remaining %d after refusals, want 800: a refused batch charged it", d.Tightest.Remaining)
	}
	if d, _ := l.PeekIdentity(t0, keys); !d.Allowed || d.Tightest.Remaining != 1 {
		t.Fatalf("request-count user bucket %+v, want untouched by token takes", d.Tightest)
	}
	want := recorder{"user_tokens/allowed": 1, "team_tokens/allowed": 1, "team_tokens/refused": 5}
	if fmt.Sprint(rec) != fmt.Sprint(want) {
		t.Fatalf("observed %v, want %v", rec, want)
	}
}

// TestMemoryStoreAdjust settles a bucket of 100 tokens refilling one per
// 10ms: after an optional Take of take tokens, Adjust by delta, then the
// bucket must hold remaining tokens and be full again after reset.
func TestMemoryStoreAdjust(t *testing.T) {
	l := *lim(100, time.Second, 0)
	cases := []struct {
		name        string
		take, delta int64
		remaining   int64
		reset       time.Duration
		tracked     bool
	}{
		{name: "refund gives tokens back", take: 80, delta: -30, remaining: 50, reset: 500 * time.Millisecond, tracked: true},
		{name: "refund never above capacity", take: 20, delta: -500, remaining: 100, tracked: true},
		{name: "refund of the most negative delta fills the bucket", take: 50, delta: math.MinInt64, remaining: 100, tracked: true},
		{name: "charge may leave debt", take: 80, delta: 70, remaining: 0, reset: 1500 * time.Millisecond, tracked: true},
		{name: "charge is capped at MaxAdjustDebt capacities below empty", take: 80, delta: 10_000, remaining: 0, reset: 3 * time.Second, tracked: true},
		{name: "the cap holds without overflow", take: 80, delta: math.MaxInt64, remaining: 0, reset: 3 * time.Second, tracked: true},
		{name: "debt beyond the cap from a large take is not raised", take: 500, delta: 10, remaining: 0, reset: 5 * time.Second, tracked: true},
		{name: "debt beyond the cap from a large take is refunded", take: 500, delta: -10, remaining: 0, reset: 4900 * time.Millisecond, tracked: true},
		{name: "zero changes nothing", take: 10, delta: 0, remaining: 90, reset: 100 * time.Millisecond, tracked: true},
		{name: "charge creates an unknown bucket", delta: 40, remaining: 60, reset: 400 * time.Millisecond, tracked: true},
		{name: "charge of an unknown bucket is capped too", delta: 1 << 50, remaining: 0, reset: 3 * time.Second, tracked: true},
		{name: "refund of an unknown bucket is a no-op", delta: -40, remaining: 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewMemoryStore(0)
			if tc.take > 0 {
				var b Batch
				b.AddCost(DimensionUserTokens, "u", l, tc.take)
				if d, _ := s.Take(t0, b); !d.Allowed {
					t.Fatalf("setup take of %d refused: %+v", tc.take, d)
				}
			}
			var b Batch
			b.AddCost(DimensionUserTokens, "u", l, tc.delta)
			if err := s.Adjust(t0, b); err != nil {
				t.Fatalf("Adjust: %v", err)
			}
			if got := s.Len(DimensionUserTokens) == 1; got != tc.tracked {
				t.Fatalf("bucket tracked = %v, want %v", got, tc.tracked)
			}
			var p Batch
			p.AddCost(DimensionUserTokens, "u", l, 1)
			d, _ := s.Peek(t0, p)
			if d.Tightest.Remaining != tc.remaining || d.Tightest.Reset != tc.reset {
				t.Fatalf("after Adjust(%d): %d tokens, full in %v; want %d, full in %v", tc.delta, d.Tightest.Remaining, d.Tightest.Reset, tc.remaining, tc.reset)
			}
			// A shared store settling the same state answers the same.
			var debts [MaxBatch]int64
			if tc.take > 0 {
				debts[0] = tc.take * int64(10*time.Millisecond)
			}
			if got := b.At(0).AdjustedDebt(debts[0]); got != int64(tc.reset) {
				t.Errorf("AdjustedDebt = %v, want %v as the memory store", time.Duration(got), tc.reset)
			}
		})
	}
}

func TestSettleTokens(t *testing.T) {
	cfg := Config{APIKeyTokens: lim(1000, time.Second, 0), ModelTokens: lim(10_000, time.Second, 0)}
	l := mustNew(t, cfg, Options{})
	keys := Keys{APIKey: "k", Model: "m"}
	if d, _ := l.TakeTokens(t0, keys, 900); !d.Allowed {
		t.Fatalf("reservation refused: %+v", d)
	}
	// The request used 300 tokens of its 900: 600 come back to every bucket.
	if err := l.SettleTokens(t0, keys, 300-900); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.PeekTokens(t0, Keys{APIKey: "k"}, 1); d.Tightest.Remaining != 700 {
		t.Fatalf("api key bucket holds %d after the refund, want 700", d.Tightest.Remaining)
	}
	if d, _ := l.PeekTokens(t0, Keys{Model: "m"}, 1); d.Tightest.Remaining != 9700 {
		t.Fatalf("model bucket holds %d after the refund, want 9700", d.Tightest.Remaining)
	}
	// A usage above the reservation is charged even though it leaves debt.
	if err := l.SettleTokens(t0, keys, 1000); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.TakeTokens(t0, keys, 1); d.Allowed || d.LimitType != DimensionAPIKeyTokens || d.RetryAfter != 301*time.Millisecond {
		t.Fatalf("after an overshoot: %+v, want refused by api_key_tokens for 301ms", d)
	}

	down := mustNew(t, cfg, Options{Store: downStore{}})
	if err := down.SettleTokens(t0, keys, -5); !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("settle on a down store = %v, want ErrStoreUnavailable", err)
	}
	for _, tc := range []struct {
		keys  Keys
		delta int64
	}{{keys, 0}, {Keys{User: "no user token limit"}, 5}} {
		if err := down.SettleTokens(t0, tc.keys, tc.delta); err != nil {
			t.Errorf("SettleTokens(%+v, %d) called the store: %v", tc.keys, tc.delta, err)
		}
	}
}

func TestModelTokenOverrides(t *testing.T) {
	big := Limit{Requests: 100, Period: time.Minute}
	cfg := Config{
		ModelTokens:         lim(1000, time.Minute, 0),
		ModelTokenOverrides: map[string]Limit{"big": big},
		ModelOverrides:      map[string]Limit{"small": {Requests: 1, Period: time.Minute}}, // requests, not tokens
	}
	l := mustNew(t, cfg, Options{})
	cases := []struct {
		model     string
		n         int64
		limit     int64
		remaining int64
	}{
		{model: "big", n: 80, limit: 100, remaining: 20},
		{model: "small", n: 800, limit: 1000, remaining: 200},
		{model: "other", n: 1, limit: 1000, remaining: 999},
	}
	for _, tc := range cases {
		d, _ := l.TakeTokens(t0, Keys{Model: tc.model}, tc.n)
		if !d.Allowed || d.Tightest.Dimension != DimensionModelTokens || d.Tightest.Limit != tc.limit || d.Tightest.Remaining != tc.remaining {
			t.Errorf("model %s: %+v, want allowed with %d of %d model tokens left", tc.model, d, tc.remaining, tc.limit)
		}
		want := *cfg.ModelTokens
		if tc.model == "big" {
			want = big
		}
		if got, ok := l.LimitOf(DimensionModelTokens, tc.model); !ok || got != want {
			t.Errorf("LimitOf(model_tokens, %s) = %+v, %v; want %+v", tc.model, got, ok, want)
		}
	}
	if _, ok := l.LimitOf(DimensionModel, "big"); ok {
		t.Error("a token override set a request limit for the model")
	}

	// An override applies even when no default token limit is set.
	l = mustNew(t, Config{ModelTokenOverrides: map[string]Limit{"big": big}}, Options{})
	if !l.HasTokenLimits(Keys{Model: "big"}) || l.HasTokenLimits(Keys{Model: "other"}) {
		t.Error("HasTokenLimits: want true only for the overridden model")
	}
	if d, _ := l.TakeTokens(t0, Keys{Model: "big"}, 101); !d.Allowed || d.Tightest.Limit != 100 {
		t.Fatalf("first take above capacity: %+v, want allowed by the override", d)
	}
	if d, _ := l.TakeTokens(t0, Keys{Model: "big"}, 1); d.Allowed || d.LimitType != DimensionModelTokens {
		t.Fatalf("second take: %+v, want refused by model_tokens", d)
	}
}

func TestHasTokenLimits(t *testing.T) {
	all := Keys{APIKey: "k", User: "u", Team: "t", Model: "m"}
	cases := []struct {
		name string
		cfg  Config
		keys Keys
		want bool
	}{
		{name: "no token limits", cfg: Config{APIKey: lim(1, time.Second, 0), Model: lim(1, time.Second, 0)}, keys: all},
		{name: "api key", cfg: Config{APIKeyTokens: lim(1, time.Second, 0)}, keys: all, want: true},
		{name: "user", cfg: Config{UserTokens: lim(1, time.Second, 0)}, keys: all, want: true},
		{name: "team", cfg: Config{TeamTokens: lim(1, time.Second, 0)}, keys: all, want: true},
		{name: "model", cfg: Config{ModelTokens: lim(1, time.Second, 0)}, keys: all, want: true},
		{name: "team limit but no team", cfg: Config{TeamTokens: lim(1, time.Second, 0)}, keys: Keys{APIKey: "k", User: "u", Model: "m"}},
		{name: "model override of another model", cfg: Config{ModelTokenOverrides: map[string]Limit{"x": *lim(1, time.Second, 0)}}, keys: all},
	}
	for _, tc := range cases {
		l := mustNew(t, tc.cfg, Options{})
		if got := l.HasTokenLimits(tc.keys); got != tc.want {
			t.Errorf("%s: HasTokenLimits = %v, want %v", tc.name, got, tc.want)
		}
		d, _ := l.TakeTokens(t0, tc.keys, 1)
		if !d.Allowed || d.HasQuota != tc.want {
			t.Errorf("%s: TakeTokens %+v, want allowed with a quota exactly when a token limit applies", tc.name, d)
		}
	}
}

func TestSetConfigKeepsTokenBuckets(t *testing.T) {
	keys := Keys{User: "u"}
	start := Config{UserTokens: lim(1000, 10*time.Second, 0)} // one token per 10ms
	cases := []struct {
		name string
		// used is taken before the swap and overshoot then settled on top.
		used, overshoot int64
		next            Config
		wantErr         string
		wantRemaining   int64 // -1: no token bucket applies
		wantReset       time.Duration
	}{
		{name: "unchanged limit keeps the bucket", used: 600, next: start, wantRemaining: 400, wantReset: 6 * time.Second},
		{name: "doubled limit keeps the fraction used", used: 600, next: Config{UserTokens: lim(2000, 20*time.Second, 0)}, wantRemaining: 800, wantReset: 12 * time.Second},
		{name: "other dimensions added keep the bucket", used: 600, next: Config{UserTokens: start.UserTokens, ModelTokens: lim(5, time.Second, 0), User: lim(1, time.Second, 0)}, wantRemaining: 400, wantReset: 6 * time.Second},
		{name: "a debt is kept in proportion, not forgiven", used: 1000, overshoot: 500, next: Config{UserTokens: lim(2000, 20*time.Second, 0)}, wantRemaining: 0, wantReset: 30 * time.Second},
		{name: "removed token limit stops limiting", used: 600, next: Config{}, wantRemaining: -1},
		{name: "invalid token limit keeps the previous config", used: 600, next: Config{UserTokens: lim(0, time.Second, 0)}, wantErr: "limit user_tokens: requests must be positive", wantRemaining: 400, wantReset: 6 * time.Second},
		{name: "invalid model token override keeps the previous config", used: 600, next: Config{ModelTokenOverrides: map[string]Limit{"m": {Requests: 1}}}, wantErr: `limit model_tokens override "m": period`, wantRemaining: 400, wantReset: 6 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := mustNew(t, start, Options{})
			if d, _ := l.TakeTokens(t0, keys, tc.used); !d.Allowed {
				t.Fatalf("take refused: %+v", d)
			}
			if err := l.SettleTokens(t0, keys, tc.overshoot); err != nil {
				t.Fatal(err)
			}
			err := l.SetConfig(tc.next)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("SetConfig error = %v, want %q", err, tc.wantErr)
			}
			d, _ := l.PeekTokens(t0, keys, 1)
			if tc.wantRemaining < 0 {
				if !d.Allowed || d.HasQuota || l.HasTokenLimits(keys) {
					t.Fatalf("%+v, want no token bucket to apply", d)
				}
				return
			}
			if d.Tightest.Remaining != tc.wantRemaining || d.Tightest.Reset != tc.wantReset {
				t.Fatalf("%d tokens, full in %v; want %d, full in %v", d.Tightest.Remaining, d.Tightest.Reset, tc.wantRemaining, tc.wantReset)
			}
		})
	}
}

func TestTokenTableFull(t *testing.T) {
	rec := recorder{}
	l := mustNew(t, Config{APIKeyTokens: lim(100, time.Hour, 0), APIKey: lim(10, time.Hour, 0)}, Options{Observer: rec, MaxKeysPerDimension: 2})
	for _, k := range []string{"a", "b"} {
		if d, _ := l.TakeTokens(t0, Keys{APIKey: k}, 50); !d.Allowed {
			t.Fatalf("key %s refused: %+v", k, d)
		}
	}
	d, _ := l.TakeTokens(t0, Keys{APIKey: "c"}, 50)
	if d.Allowed || d.TableFull != DimensionSet(0).Add(DimensionAPIKeyTokens) || d.LimitType != DimensionAPIKeyTokens || d.RetryAfter <= 0 {
		t.Fatalf("third key: %+v, want refused because the api_key_tokens table is full", d)
	}
	// The request-count table of the same dimension is separate.
	if d, _ := l.TakeIdentity(t0, Keys{APIKey: "c"}); !d.Allowed {
		t.Fatalf("request-count bucket of a new key refused: %+v", d)
	}
	// A settle charge for a key the full table cannot hold is dropped, never
	// evicting a bucket in debt.
	if err := l.SettleTokens(t0, Keys{APIKey: "c"}, 30); err != nil {
		t.Fatal(err)
	}
	st := l.Store().(*MemoryStore)
	if n := st.Len(DimensionAPIKeyTokens); n != 2 {
		t.Fatalf("api_key_tokens table holds %d buckets, want its cap 2", n)
	}
	if d, _ := l.PeekTokens(t0, Keys{APIKey: "a"}, 1); d.Tightest.Remaining != 50 {
		t.Fatalf("key a holds %d tokens, want 50", d.Tightest.Remaining)
	}
	want := recorder{"api_key_tokens/allowed": 2, "api_key_tokens/table_full": 1, "api_key/allowed": 1}
	if fmt.Sprint(rec) != fmt.Sprint(want) {
		t.Fatalf("observed %v, want %v", rec, want)
	}
}

func TestTokenDimensions(t *testing.T) {
	want := map[Dimension]string{
		DimensionAPIKeyTokens: "api_key_tokens", DimensionUserTokens: "user_tokens",
		DimensionTeamTokens: "team_tokens", DimensionModelTokens: "model_tokens",
	}
	var seen DimensionSet
	for d := range Dimension(NumDimensions) {
		name, tokens := want[d]
		if tokens && d.String() != name {
			t.Errorf("%d.String() = %q, want %q", d, d, name)
		}
		if d.Tokens() != tokens {
			t.Errorf("%s.Tokens() = %v, want %v", d, d.Tokens(), tokens)
		}
		if tokens && d.Queueable() {
			t.Errorf("%s.Queueable() = true, want false: token refusals are held by the deferral queue", d)
		}
		if seen.Has(d) {
			t.Errorf("%s shares its DimensionSet bit with another dimension", d)
		}
		seen = seen.Add(d)
	}
	if NumDimensions != 11 || seen != 1<<NumDimensions-1 {
		t.Errorf("NumDimensions %d with set %b, want 11 distinct dimensions", NumDimensions, seen)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{APIKeyTokens: lim(0, time.Second, 0)}, "limit api_key_tokens: requests must be positive"},
		{Config{TeamTokens: lim(1, time.Second, -1)}, "limit team_tokens: burst must be zero"},
		{Config{ModelTokens: lim(1, 0, 0)}, "limit model_tokens: period must be positive"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate = %v, want containing %q", err, tc.want)
		}
	}
}

// TestConcurrentCostedTakesNeverOverAdmit charges an existing bucket (the
// read-locked fast path) from parallel goroutines: exactly as many requests
// as fit pass.
func TestConcurrentCostedTakesNeverOverAdmit(t *testing.T) {
	s := NewMemoryStore(0)
	var b Batch
	b.AddCost(DimensionUserTokens, "u", *lim(1000, time.Hour, 0), 7)
	b.AddCost(DimensionModelTokens, "m", *lim(100_000, time.Hour, 0), 7)
	var warm Batch
	warm.AddCost(DimensionUserTokens, "u", *lim(1000, time.Hour, 0), 1)
	warm.AddCost(DimensionModelTokens, "m", *lim(100_000, time.Hour, 0), 1)
	if d, _ := s.Take(t0, warm); !d.Allowed {
		t.Fatal("warm-up refused")
	}
	if allowed := concurrentTakes(s, b, 4, 100); allowed != 999/7 {
		t.Fatalf("admitted %d requests of 7 tokens, want exactly %d from the 999 left", allowed, 999/7)
	}
}

// TestTokenBudgetSaturatedRun drives a model token budget far beyond its
// limit for 60 simulated seconds: clients reserve random sizes, retry every
// millisecond while refused, and settle a random actual usage (30% to 105% of
// the reservation) when their response ends. The tokens charged in each
// period, reservations plus settle corrections, must stay within 2% of the
// limit: refunds are reused, overshoots are charged, and nothing leaks.
func TestTokenBudgetSaturatedRun(t *testing.T) {
	const (
		rate    = 200_000 // tokens per period
		period  = 10 * time.Second
		burst   = 20_000
		run     = 60 * time.Second
		tick    = time.Millisecond
		clients = 20
	)
	clk := clocktesting.NewFakeClock(t0)
	cfg := Config{ModelTokens: &Limit{Requests: rate, Period: period, Burst: burst}, UserTokens: lim(1<<40, time.Second, 0)}
	l := mustNew(t, cfg, Options{})
	rng := rand.New(rand.NewPCG(13, 1))
	type client struct {
		keys     Keys
		want     int64 // reservation being tried; 0 when none
		reserved int64 // reservation of the request in flight
		done     time.Time
	}
	cs := make([]client, clients)
	for i := range cs {
		cs[i].keys = Keys{User: fmt.Sprintf("user%d", i), Model: "llama"}
	}
	charged := make([]int64, run/period)
	account := func(at time.Time, n int64) { charged[at.Sub(t0)/period] += n }
	admitted, settled := 0, 0
	for end := t0.Add(run); clk.Now().Before(end); clk.Step(tick) {
		now := clk.Now()
		for i := range cs {
			c := &cs[i]
			if c.reserved > 0 {
				if now.Before(c.done) {
					continue
				}
				delta := c.reserved*(30+rng.Int64N(76))/100 - c.reserved
				if err := l.SettleTokens(now, c.keys, delta); err != nil {
					t.Fatal(err)
				}
				account(now, delta)
				c.reserved = 0
				settled++
				continue
			}
			if c.want == 0 {
				c.want = 100 + rng.Int64N(1900)
			}
			d, err := l.TakeTokens(now, c.keys, c.want)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				account(now, c.want)
				c.reserved, c.want = c.want, 0
				c.done = now.Add(time.Duration(10+rng.Int64N(490)) * time.Millisecond)
				admitted++
			}
		}
	}
	t.Logf("admitted %d, settled %d; tokens charged per %v: %v", admitted, settled, period, charged)
	// The first period also spends the initial burst.
	if got := charged[0]; got < rate*98/100 || got > (rate+burst)*102/100 {
		t.Errorf("first period charged %d tokens, want %d plus at most the burst %d, within 2%%", got, rate, burst)
	}
	for i, got := range charged[1:] {
		if got < rate*98/100 || got > rate*102/100 {
			t.Errorf("period %d charged %d tokens, want %d within 2%%", i+2, got, rate)
		}
	}
}

// BenchmarkTakeAndSettleTokens reserves tokens on the four token buckets and
// settles a refund, the token path of one admitted LLM request.
func BenchmarkTakeAndSettleTokens(b *testing.B) {
	big := lim(1<<40, time.Second, 0)
	l := mustNew(b, Config{APIKeyTokens: big, UserTokens: big, TeamTokens: big, ModelTokens: big}, Options{})
	keys := Keys{APIKey: "4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a", User: "9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e", Team: "team", Model: "llama"}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := l.TakeTokens(now, keys, 1500); !d.Allowed {
			b.Fatal("refused")
		}
		if err := l.SettleTokens(now, keys, -700); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDecisionFromDebtsIsSizeAware: a shared store deciding a costed batch
// from its buckets' debts answers as MemoryStore does for the same state.
func TestDecisionFromDebtsIsSizeAware(t *testing.T) {
	user, team := *lim(1000, time.Second, 0), *lim(100, time.Second, 1000) // 1ms and 10ms per token
	cases := []struct {
		name      string
		n         int64
		debts     [MaxBatch]int64 // user, team
		allowed   bool
		limitType Dimension
		retry     time.Duration
	}{
		{name: "both hold the cost", n: 100, debts: [MaxBatch]int64{int64(900 * time.Millisecond), int64(9 * time.Second)}, allowed: true},
		{name: "the slower refusing bucket sets Retry-After", n: 100, debts: [MaxBatch]int64{int64(950 * time.Millisecond), int64(9500 * time.Millisecond)}, limitType: DimensionTeamTokens, retry: 500 * time.Millisecond},
		{name: "a cost above capacity waits for a full bucket", n: 5000, debts: [MaxBatch]int64{int64(time.Millisecond), 0}, limitType: DimensionUserTokens, retry: time.Millisecond},
	}
	for _, tc := range cases {
		var b Batch
		b.AddCost(DimensionUserTokens, "u", user, tc.n)
		b.AddCost(DimensionTeamTokens, "t", team, tc.n)
		shared := DecisionFromDebts(&b, &tc.debts, true)
		// Recreate the same debts in a memory store: charge each bucket its
		// debt in tokens, then decide the batch.
		s := NewMemoryStore(0)
		for i, l := range []Limit{user, team} {
			var setup Batch
			setup.AddCost(b.At(i).Dimension, b.At(i).Key, l, tc.debts[i]/int64(l.RefillInterval()))
			if err := s.Adjust(t0, setup); err != nil {
				t.Fatal(err)
			}
		}
		mem, _ := s.Take(t0, b)
		if shared != mem {
			t.Errorf("%s: DecisionFromDebts %+v, MemoryStore %+v", tc.name, shared, mem)
		}
		if shared.Allowed != tc.allowed || !tc.allowed && (shared.LimitType != tc.limitType || shared.RetryAfter != tc.retry) {
			t.Errorf("%s: %+v, want allowed=%v or refused by %s for %v", tc.name, shared, tc.allowed, tc.limitType, tc.retry)
		}
	}
}

// TestRefusedCostQuota: the quota a caller derives from a token refusal's
// Retry-After says the bucket is full exactly when the store says so.
func TestRefusedCostQuota(t *testing.T) {
	l := *lim(100, time.Second, 0) // 10ms per token
	for _, n := range []int64{0, 1, 30, 100, 250} {
		s := NewMemoryStore(0)
		var b Batch
		b.AddCost(DimensionTeamTokens, "t", l, 90) // 10 tokens left
		if d, _ := s.Take(t0, b); !d.Allowed {
			t.Fatal("setup take refused")
		}
		var r Batch
		r.AddCost(DimensionTeamTokens, "t", l, n)
		d, _ := s.Peek(t0, r)
		if n <= 10 {
			if !d.Allowed {
				t.Fatalf("n=%d refused with 10 tokens left", n)
			}
			continue
		}
		got := l.RefusedCostQuota(DimensionTeamTokens, d.RetryAfter, n)
		if d.Allowed || got != d.Tightest {
			t.Errorf("n=%d: RefusedCostQuota %+v, the store's refusal quota %+v", n, got, d.Tightest)
		}
	}
	if got, want := l.RefusedCostQuota(DimensionUser, time.Second, 0), l.RefusedQuota(DimensionUser, time.Second); got != want {
		t.Errorf("cost 0: %+v, want RefusedQuota's %+v", got, want)
	}
}
