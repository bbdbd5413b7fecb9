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

package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// userTokens is a batch of one user token bucket charged cost tokens.
func userTokens(cost int64, l limiter.Limit) limiter.Batch {
	return costBatch(cost, bucket{limiter.DimensionUserTokens, "u", l})
}

// TestTokenKeysHaveTheirOwnPrefixAndExpire checks that a token bucket lives
// under its own dimension's key, next to (not in place of) the same
// identity's request bucket, and that a bucket an adjust created expires
// when it is full again, like any other.
func TestTokenKeysHaveTheirOwnPrefixAndExpire(t *testing.T) {
	m, s := newMiniStore(t)
	tokens := lim(100, 10*time.Second, 0)

	if _, err := s.Take(t0, userBatch("u", lim(2, time.Second, 0))); err != nil {
		t.Fatal(err)
	}
	if err := s.Adjust(t0, userTokens(50, tokens)); err != nil {
		t.Fatal(err)
	}
	const key = "fq:{ns/p}:user_tokens:u"
	if got := s.Key(limiter.DimensionUserTokens, "u"); got != key {
		t.Fatalf("token bucket key %q, want %q", got, key)
	}
	if ttl := m.TTL(key); ttl != 5*time.Second {
		t.Fatalf("after settling 50 of 100 tokens per 10s the key expires in %s, want 5s (when the bucket is full again); keys %v", ttl, m.Keys())
	}
	if ttl := m.TTL(s.Key(limiter.DimensionUser, "u")); ttl != 500*time.Millisecond {
		t.Fatalf("the request bucket of the same user expires in %s, want its own 500ms", ttl)
	}
	if err := s.Adjust(t0, userTokens(-50, tokens)); err != nil {
		t.Fatal(err)
	}
	if m.Exists(key) {
		t.Fatal("a bucket refunded to full is still stored")
	}
	if err := s.Adjust(t0, userTokens(-50, tokens)); err != nil {
		t.Fatal(err)
	}
	if m.Exists(key) {
		t.Fatal("refunding an absent token bucket created it")
	}
}

// TestFailureModesForwardTokenCalls runs costed takes and adjusts while
// Redis is down: failing closed answers ErrStoreUnavailable, failing open
// charges each replica's share of the bucket the request's whole cost and
// settles adjusts there.
func TestFailureModesForwardTokenCalls(t *testing.T) {
	tokens := lim(100, 10*time.Second, 0) // two replicas: 50 tokens per 10s each
	t.Run("Closed", func(t *testing.T) {
		h := newProbeHarness(t, FailClosed, 2)
		h.m.Close()
		for i := range 2 { // the call that finds Redis gone, then one answered at once
			if err := h.s.Adjust(t0, userTokens(30, tokens)); !errors.Is(err, limiter.ErrStoreUnavailable) {
				t.Fatalf("adjust %d with Redis down: %v, want ErrStoreUnavailable", i, err)
			}
		}
		if _, err := h.s.Take(t0, userTokens(30, tokens)); !errors.Is(err, limiter.ErrStoreUnavailable) {
			t.Fatalf("costed take with Redis down: %v, want ErrStoreUnavailable", err)
		}
	})
	t.Run("Open", func(t *testing.T) {
		h := newProbeHarness(t, FailOpen, 2)
		h.m.Close()
		steps := []struct {
			op   string
			cost int64
			want expect
		}{
			{op: OpTake, cost: 30, want: expect{allowed: true, remaining: 20, reset: 6 * time.Second}},
			// 20 of the share's 50 left; 30 needed: 10 refill in 2s at 50 per 10s.
			{op: OpTake, cost: 30, want: expect{limitType: limiter.DimensionUserTokens, retry: 2 * time.Second, reset: 6 * time.Second}},
			{op: OpAdjust, cost: -30},
			{op: OpTake, cost: 30, want: expect{allowed: true, remaining: 20, reset: 6 * time.Second}},
			{op: OpAdjust, cost: 40},
			// 6s + 8s owed, 4s beyond the share's 10s window, and a token more.
			{op: OpPeek, cost: 1, want: expect{limitType: limiter.DimensionUserTokens, retry: 4200 * time.Millisecond, reset: 14 * time.Second}},
		}
		for i, st := range steps {
			b := userTokens(st.cost, tokens)
			if st.op == OpAdjust {
				if err := h.s.Adjust(t0, b); err != nil {
					t.Fatalf("step %d: fail-open adjust: %v", i, err)
				}
				continue
			}
			take := h.s.Take
			if st.op == OpPeek {
				take = h.s.Peek
			}
			d, err := take(t0, b)
			if err != nil {
				t.Fatalf("step %d: fail-open %s: %v", i, st.op, err)
			}
			checkDecision(t, i, d, st.want)
		}
	})
}

// TestSwitchForwardsAdjust settles tokens through a Switch on the memory
// store and then on Redis: each store in force receives the adjust.
func TestSwitchForwardsAdjust(t *testing.T) {
	m := miniredis.RunT(t)
	sw := NewSwitch(SwitchOptions{})
	defer func() { _ = sw.Close() }()
	tokens := lim(100, time.Hour, 0)
	remaining := func() int64 {
		t.Helper()
		d, err := sw.Peek(time.Now(), userTokens(1, tokens))
		if err != nil || !d.HasQuota {
			t.Fatalf("Peek: %+v, %v", d, err)
		}
		return d.Tightest.Remaining
	}
	if err := sw.Adjust(time.Now(), userTokens(30, tokens)); err != nil {
		t.Fatalf("Adjust on the memory store: %v", err)
	}
	if got := remaining(); got != 70 {
		t.Fatalf("memory store: %d tokens left after settling 30 of 100, want 70", got)
	}
	p, err := sw.Prepare(context.Background(), storeConfig(m.Addr(), nil))
	if err != nil {
		t.Fatal(err)
	}
	p.Commit()
	if sw.Redis() == nil {
		t.Fatal("the Switch is not on Redis after Commit")
	}
	if err := sw.Adjust(time.Now(), userTokens(45, tokens)); err != nil {
		t.Fatalf("Adjust on Redis: %v", err)
	}
	if got := remaining(); got != 55 {
		t.Fatalf("Redis store: %d tokens left after settling 45 of 100 in its fresh bucket, want 55", got)
	}
	if !m.Exists("fq:{team-a/llm}:user_tokens:u") {
		t.Fatalf("no token bucket in Redis; keys %v", m.Keys())
	}
}

// TestRunawayCostOwesAtMostMaxDebt charges a token bucket a cost whose debt
// no arithmetic exact in Lua can hold: the bucket owes MaxDebt (not a
// rounded or wrapped number), and settling the cost back leaves it full.
func TestRunawayCostOwesAtMostMaxDebt(t *testing.T) {
	const runaway = 1 << 40 // tokens: 3.5 million years at 100 per 10s
	tokens := lim(100, 10*time.Second, 0)
	for _, be := range backends(t)[1:] {
		t.Run(be.name, func(t *testing.T) {
			s, setTime := be.open(t)
			setTime(t0)
			if d, err := s.Take(t0, userTokens(runaway, tokens)); err != nil || !d.Allowed {
				t.Fatalf("a full bucket refused a cost above its capacity: %+v, %v", d, err)
			}
			d, err := s.Peek(t0, userTokens(1, tokens))
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed || d.Tightest.Reset != time.Duration(MaxDebt) {
				t.Fatalf("after a runaway cost: %+v, want refused with the bucket full in MaxDebt (%s)", d, time.Duration(MaxDebt))
			}
			if want := time.Duration(MaxDebt) + 100*time.Millisecond - 10*time.Second; d.RetryAfter != want {
				t.Fatalf("RetryAfter %s, want %s: MaxDebt less the capacity, plus one token", d.RetryAfter, want)
			}
			if err := s.Adjust(t0, userTokens(-runaway, tokens)); err != nil {
				t.Fatal(err)
			}
			if d, err := s.Peek(t0, userTokens(100, tokens)); err != nil || !d.Allowed || d.Tightest.Remaining != 100 {
				t.Fatalf("after settling the runaway cost back: %+v, %v; want a full bucket", d, err)
			}
		})
	}
}

// TestTokenTakeAllocations bounds the client-side allocations of a costed
// four-bucket token take on a real redis-server: the amounts are written
// into pooled buffers, so it allocates no more than a one-token admission
// (see TestAdmissionAllocations).
func TestTokenTakeAllocations(t *testing.T) {
	const maxAllocs = 14
	srv := startRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.addr})
	t.Cleanup(func() { _ = c.Close() })
	s := NewWithClient(c, Options{Namespace: "ns", Policy: policyName(t), Timeout: time.Second})
	t.Cleanup(func() { _ = s.Close() })
	big := limiter.Limit{Requests: 1 << 40, Period: time.Second}
	b := costBatch(4096, bucket{limiter.DimensionAPIKeyTokens, "4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a", big},
		bucket{limiter.DimensionUserTokens, "9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e", big},
		bucket{limiter.DimensionTeamTokens, "team", big}, bucket{limiter.DimensionModelTokens, "llama", big})
	settle := costBatch(-1000, bucket{limiter.DimensionAPIKeyTokens, "4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a", big},
		bucket{limiter.DimensionUserTokens, "9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e", big},
		bucket{limiter.DimensionTeamTokens, "team", big}, bucket{limiter.DimensionModelTokens, "llama", big})
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"take", func() error {
			d, err := s.Take(time.Now(), b)
			if err == nil && !d.Allowed {
				err = errors.New("refused")
			}
			return err
		}},
		{"adjust", func() error { return s.Adjust(time.Now(), settle) }},
	} {
		var failed error
		allocs := testing.AllocsPerRun(200, func() {
			if err := tc.call(); err != nil {
				failed = err
			}
		})
		if failed != nil {
			t.Fatalf("%s: %v", tc.name, failed)
		}
		if allocs > maxAllocs {
			t.Errorf("one four-bucket token %s allocates %.0f times, want at most %d", tc.name, allocs, maxAllocs)
		}
	}
}

// argsHook records the argument count of every EVALSHA a client sends.
type argsHook struct{ counts []int }

func (h *argsHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *argsHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			h.counts = append(h.counts, len(cmd.Args()))
		}
		return next(ctx, cmd)
	}
}

func (h *argsHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestOneTokenCallsSendNoAmounts checks the wire layout of bucketScript: a
// one-token take or peek (request-count admission, the hot path) carries
// exactly the arguments it did before token costs existed, and only a
// costed call or an adjust adds one amount per bucket.
func TestOneTokenCallsSendNoAmounts(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer func() { _ = c.Close() }()
	h := &argsHook{}
	c.AddHook(h)
	s := NewWithClient(c, Options{Namespace: "ns", Policy: "p", Timeout: time.Second})
	defer func() { _ = s.Close() }()
	l := lim(1000, time.Second, 0)
	two := func(cost int64) limiter.Batch {
		return costBatch(cost, bucket{limiter.DimensionUserTokens, "u", l}, bucket{limiter.DimensionModelTokens, "m", l})
	}
	// EVALSHA, hash, key count, 2 keys, op, time (2), 2 shapes of 3.
	const plain = 3 + 2 + 3 + 3*2
	for _, tc := range []struct {
		name string
		call func() error
		want int
	}{
		{"take of cost 0", func() error { _, err := s.Take(t0, two(0)); return err }, plain},
		{"take of cost 1", func() error { _, err := s.Take(t0, two(1)); return err }, plain},
		{"peek of cost 1", func() error { _, err := s.Peek(t0, two(1)); return err }, plain},
		{"refund", func() error { return s.Refund(t0, two(1)) }, plain},
		{"refund of a costed batch", func() error { return s.Refund(t0, two(9)) }, plain}, // Refund gives one token back
		{"take of cost 2", func() error { _, err := s.Take(t0, two(2)); return err }, plain + 2},
		{"peek of cost 500", func() error { _, err := s.Peek(t0, two(500)); return err }, plain + 2},
		{"adjust of 1", func() error { return s.Adjust(t0, two(1)) }, plain + 2},
		{"adjust of -7", func() error { return s.Adjust(t0, two(-7)) }, plain + 2},
	} {
		h.counts = h.counts[:0]
		if err := tc.call(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(h.counts) != 1 || h.counts[0] != tc.want {
			t.Errorf("%s sent EVALSHA commands of %v arguments, want one of %d", tc.name, h.counts, tc.want)
		}
	}
}

// TestLimiterTokenBudgetOnEveryBackend runs the data plane's token path
// (Limiter.TakeTokens, SettleTokens, PeekTokens beside request-count
// admission, with a per-model token override) on every backend: each must
// decide every step exactly as the memory store does.
func TestLimiterTokenBudgetOnEveryBackend(t *testing.T) {
	cfg := limiter.Config{
		User:                &limiter.Limit{Requests: 100, Period: time.Minute},
		UserTokens:          &limiter.Limit{Requests: 1000, Period: time.Minute},
		ModelTokens:         &limiter.Limit{Requests: 10000, Period: time.Minute},
		ModelTokenOverrides: map[string]limiter.Limit{"small": {Requests: 600, Period: time.Minute}},
	}
	keys := limiter.Keys{APIKey: "k", User: "alice", Team: "t", Model: "small"}
	type step struct {
		at     time.Duration
		op     string // "take", "tokens", "settle", "peek"
		n      int64
		expect func(d limiter.Decision) bool // nil: only compared with memory
	}
	refusedBy := func(dim limiter.Dimension, retry time.Duration) func(limiter.Decision) bool {
		return func(d limiter.Decision) bool { return !d.Allowed && d.LimitType == dim && d.RetryAfter == retry }
	}
	steps := []step{
		{op: "take", expect: func(d limiter.Decision) bool { return d.Allowed && d.Tightest.Dimension == limiter.DimensionUser }},
		{op: "tokens", n: 500, expect: func(d limiter.Decision) bool { return d.Allowed && d.Tightest.Remaining == 100 }},
		// 100 left in the model's 600; 300 more refill in 30s.
		{op: "tokens", n: 400, expect: refusedBy(limiter.DimensionModelTokens, 30*time.Second)},
		{op: "settle", n: -300}, // the 500 reserved used 200
		{op: "tokens", n: 400, expect: func(d limiter.Decision) bool { return d.Allowed && d.Tightest.Remaining == 0 }},
		{op: "settle", n: 250}, // and that one used 650: the model bucket owes 250
		{at: 10 * time.Second, op: "peek", n: 1, expect: refusedBy(limiter.DimensionModelTokens, 15*time.Second+100*time.Millisecond)},
		{at: 10 * time.Second, op: "take", expect: func(d limiter.Decision) bool { return d.Allowed }},
	}
	var want []limiter.Decision
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) {
			s, setTime := be.open(t)
			l, err := limiter.New(cfg, limiter.Options{Store: s})
			if err != nil {
				t.Fatal(err)
			}
			var got []limiter.Decision
			for i, st := range steps {
				now := t0.Add(st.at)
				setTime(now)
				var d limiter.Decision
				switch st.op {
				case "take":
					d, err = l.TakeIdentity(now, keys)
				case "tokens":
					d, err = l.TakeTokens(now, keys, st.n)
				case "peek":
					d, err = l.PeekTokens(now, keys, st.n)
				case "settle":
					err = l.SettleTokens(now, keys, st.n)
				}
				if err != nil {
					t.Fatalf("step %d (%s %d): %v", i, st.op, st.n, err)
				}
				if st.expect != nil && !st.expect(d) {
					t.Fatalf("step %d (%s %d): unexpected decision %+v", i, st.op, st.n, d)
				}
				got = append(got, d)
			}
			if want == nil {
				want = got // the memory store runs first
				return
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("step %d (%s %d): %+v, memory store says %+v", i, steps[i].op, steps[i].n, got[i], want[i])
				}
			}
		})
	}
}
