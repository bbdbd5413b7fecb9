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
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// t0 is just before a second boundary and microsecond-aligned (Redis's TIME
// has microseconds), so the table crosses seconds with nanosecond limits.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 999_990_000, time.UTC)

// backend opens one kind of limiter.Store for the shared test table.
type backend struct {
	name string
	// open returns a fresh store and a function that sets the clock the
	// store decides by (Redis's TIME for miniredis) before each call.
	open func(t *testing.T) (limiter.Store, func(time.Time))
}

// backends returns the memory store, a Store on miniredis deciding by
// Redis's own TIME, and a Store on a real redis-server (when installed)
// deciding by the caller's clock, since a real server's clock cannot be
// stepped.
func backends(t *testing.T) []backend {
	bs := []backend{
		{name: "memory", open: func(*testing.T) (limiter.Store, func(time.Time)) {
			return limiter.NewMemoryStore(0), func(time.Time) {}
		}},
		{name: "miniredis", open: func(t *testing.T) (limiter.Store, func(time.Time)) {
			m := miniredis.RunT(t)
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			s := NewWithClient(c, Options{Namespace: "ns", Policy: "p", Timeout: time.Second})
			t.Cleanup(func() { _ = s.Close(); _ = c.Close() })
			return s, m.SetTime
		}},
	}
	if _, err := lookRedisServer(); err == nil || inCI() {
		srv := startRedis(t)
		bs = append(bs, backend{name: "redis-server", open: func(t *testing.T) (limiter.Store, func(time.Time)) {
			c := redis.NewClient(&redis.Options{Addr: srv.addr})
			s := NewWithClient(c, Options{Namespace: "ns", Policy: policyName(t), CallerClock: true, Timeout: time.Second})
			t.Cleanup(func() { _ = s.Close(); _ = c.Close() })
			return s, func(time.Time) {}
		}})
	} else {
		t.Log("redis-server is not on PATH: the table runs on memory and miniredis only")
	}
	return bs
}

func lim(requests int64, period time.Duration, burst int64) limiter.Limit {
	return limiter.Limit{Requests: requests, Period: period, Burst: burst}
}

// bucket is one request of a batch.
type bucket struct {
	dim limiter.Dimension
	key string
	lim limiter.Limit
}

func batchOf(bs ...bucket) limiter.Batch {
	var b limiter.Batch
	for _, x := range bs {
		b.Add(x.dim, x.key, x.lim)
	}
	return b
}

// costBatch is a batch charging every bucket cost tokens, as
// Limiter.TakeTokens and SettleTokens build it.
func costBatch(cost int64, bs ...bucket) limiter.Batch {
	var b limiter.Batch
	for _, x := range bs {
		b.AddCost(x.dim, x.key, x.lim, cost)
	}
	return b
}

// expect is what a call must decide; remaining -1 means no quota.
type expect struct {
	allowed   bool
	limitType limiter.Dimension
	retry     time.Duration
	remaining int64
	reset     time.Duration
}

type call struct {
	at   time.Duration
	op   string // OpTake, OpPeek, OpRefund or OpAdjust
	b    []bucket
	cost int64  // every bucket's Request.Cost; 0 is one token (signed for OpAdjust)
	want expect // not checked for OpRefund and OpAdjust
}

func TestSameTableOnEveryBackend(t *testing.T) {
	u2 := bucket{limiter.DimensionUser, "alice", lim(2, time.Second, 0)}
	u1m := bucket{limiter.DimensionUser, "u", lim(1, time.Minute, 0)}
	m5m := bucket{limiter.DimensionModel, "m", lim(5, time.Minute, 0)}
	// Token buckets: 100 tokens per 10s (one per 100ms) and 50 per 10s.
	tu := bucket{limiter.DimensionUserTokens, "alice", lim(100, 10*time.Second, 0)}
	tk := bucket{limiter.DimensionAPIKeyTokens, "k", lim(100, 10*time.Second, 0)}
	tm := bucket{limiter.DimensionModelTokens, "m", lim(50, 10*time.Second, 0)}
	cases := []struct {
		name  string
		calls []call
	}{{
		name: "burst defaults to requests, then refuses until one token refills",
		calls: []call{
			{op: OpTake, b: []bucket{u2}, want: expect{allowed: true, remaining: 1, reset: 500 * time.Millisecond}},
			{op: OpTake, b: []bucket{u2}, want: expect{allowed: true, remaining: 0, reset: time.Second}},
			{op: OpTake, b: []bucket{u2}, want: expect{limitType: limiter.DimensionUser, retry: 500 * time.Millisecond, reset: time.Second}},
			{at: 499 * time.Millisecond, op: OpTake, b: []bucket{u2}, want: expect{limitType: limiter.DimensionUser, retry: time.Millisecond, reset: 501 * time.Millisecond}},
			{at: 500 * time.Millisecond, op: OpTake, b: []bucket{u2}, want: expect{allowed: true, remaining: 0, reset: time.Second}},
		},
	}, {
		name: "a third of a second crosses second boundaries to the nanosecond",
		calls: []call{
			{op: OpTake, b: []bucket{{limiter.DimensionTeam, "t", lim(3, time.Second, 1)}}, want: expect{allowed: true, remaining: 0, reset: 333_333_333}},
			{at: 20 * time.Microsecond, op: OpTake, b: []bucket{{limiter.DimensionTeam, "t", lim(3, time.Second, 1)}}, want: expect{limitType: limiter.DimensionTeam, retry: 333_313_333, reset: 333_313_333}},
			{at: 333_334 * time.Microsecond, op: OpTake, b: []bucket{{limiter.DimensionTeam, "t", lim(3, time.Second, 1)}}, want: expect{allowed: true, remaining: 0, reset: 333_333_333}},
		},
	}, {
		name: "all or none: a refusal by one bucket charges none",
		calls: []call{
			{op: OpTake, b: []bucket{u1m, m5m}, want: expect{allowed: true, remaining: 0, reset: time.Minute}},
			{op: OpTake, b: []bucket{u1m, m5m}, want: expect{limitType: limiter.DimensionUser, retry: time.Minute, reset: time.Minute}},
			{op: OpTake, b: []bucket{u1m, m5m}, want: expect{limitType: limiter.DimensionUser, retry: time.Minute, reset: time.Minute}},
			{op: OpPeek, b: []bucket{m5m}, want: expect{allowed: true, remaining: 4, reset: 12 * time.Second}},
		},
	}, {
		name: "retry-after is the longest wait and limit_type its dimension",
		calls: []call{
			{op: OpTake, b: []bucket{{limiter.DimensionUser, "u", lim(1, time.Second, 0)}, {limiter.DimensionTeam, "t", lim(1, 10*time.Second, 0)}, {limiter.DimensionModel, "m", lim(1, 5*time.Second, 0)}},
				want: expect{allowed: true, remaining: 0, reset: 10 * time.Second}},
			{at: 6 * time.Second, op: OpTake, b: []bucket{{limiter.DimensionUser, "u", lim(1, time.Second, 0)}, {limiter.DimensionTeam, "t", lim(1, 10*time.Second, 0)}, {limiter.DimensionModel, "m", lim(1, 5*time.Second, 0)}},
				// The quota is the refusing team bucket's (full again in 4s),
				// not the model's, which let the request pass.
				want: expect{limitType: limiter.DimensionTeam, retry: 4 * time.Second, reset: 4 * time.Second}},
		},
	}, {
		name: "the quota is the tightest bucket's",
		calls: []call{
			{op: OpTake, b: []bucket{{limiter.DimensionAPIKey, "k", lim(10, time.Minute, 0)}, {limiter.DimensionUser, "u", lim(3, 3*time.Second, 0)}}, want: expect{allowed: true, remaining: 2, reset: time.Second}},
			{op: OpTake, b: []bucket{{limiter.DimensionAPIKey, "k", lim(10, time.Minute, 0)}, {limiter.DimensionUser, "u", lim(3, 3*time.Second, 0)}}, want: expect{allowed: true, remaining: 1, reset: 2 * time.Second}},
		},
	}, {
		name: "peek never charges",
		calls: []call{
			{op: OpPeek, b: []bucket{u2}, want: expect{allowed: true, remaining: 2}},
			{op: OpPeek, b: []bucket{u2}, want: expect{allowed: true, remaining: 2}},
			{op: OpTake, b: []bucket{u2}, want: expect{allowed: true, remaining: 1, reset: 500 * time.Millisecond}},
		},
	}, {
		name: "a changed limit keeps the fraction of the capacity in use",
		calls: []call{
			{op: OpTake, b: []bucket{{limiter.DimensionUser, "u", lim(4, 4*time.Second, 0)}}, want: expect{allowed: true, remaining: 3, reset: time.Second}},
			{op: OpTake, b: []bucket{{limiter.DimensionUser, "u", lim(4, 4*time.Second, 0)}}, want: expect{allowed: true, remaining: 2, reset: 2 * time.Second}},
			{op: OpPeek, b: []bucket{{limiter.DimensionUser, "u", lim(8, 8*time.Second, 0)}}, want: expect{allowed: true, remaining: 4, reset: 4 * time.Second}},
		},
	}, {
		name: "refund gives a token back, never above the burst",
		calls: []call{
			{op: OpTake, b: []bucket{u2}, want: expect{allowed: true, remaining: 1, reset: 500 * time.Millisecond}},
			{op: OpTake, b: []bucket{u2}, want: expect{allowed: true, remaining: 0, reset: time.Second}},
			{at: 100 * time.Millisecond, op: OpRefund, b: []bucket{u2}},
			{at: 100 * time.Millisecond, op: OpPeek, b: []bucket{u2}, want: expect{allowed: true, remaining: 1, reset: 400 * time.Millisecond}},
			{at: 100 * time.Millisecond, op: OpRefund, b: []bucket{u2}},
			{at: 100 * time.Millisecond, op: OpRefund, b: []bucket{u2}},
			{at: 100 * time.Millisecond, op: OpPeek, b: []bucket{u2}, want: expect{allowed: true, remaining: 2}},
		},
	}, {
		name: "token cost: a refusal waits until the bucket holds the whole cost",
		calls: []call{
			{op: OpTake, cost: 60, b: []bucket{tu}, want: expect{allowed: true, remaining: 40, reset: 6 * time.Second}},
			// 40 tokens left, 60 needed: 20 more refill in 2s.
			{op: OpTake, cost: 60, b: []bucket{tu}, want: expect{limitType: limiter.DimensionUserTokens, retry: 2 * time.Second, reset: 6 * time.Second}},
			{op: OpPeek, cost: 40, b: []bucket{tu}, want: expect{allowed: true, remaining: 40, reset: 6 * time.Second}},
			{op: OpTake, cost: 40, b: []bucket{tu}, want: expect{allowed: true, remaining: 0, reset: 10 * time.Second}},
			{at: time.Second, op: OpTake, cost: 30, b: []bucket{tu}, want: expect{limitType: limiter.DimensionUserTokens, retry: 2 * time.Second, reset: 9 * time.Second}},
			{at: 3 * time.Second, op: OpTake, cost: 30, b: []bucket{tu}, want: expect{allowed: true, remaining: 0, reset: 10 * time.Second}},
		},
	}, {
		name: "token cost: all or none across token buckets, and the longest wait names the dimension",
		calls: []call{
			{op: OpTake, cost: 40, b: []bucket{tk, tm}, want: expect{allowed: true, remaining: 10, reset: 8 * time.Second}},
			// The api key bucket holds 60 tokens; the model bucket 10 of 40.
			{op: OpTake, cost: 40, b: []bucket{tk, tm}, want: expect{limitType: limiter.DimensionModelTokens, retry: 6 * time.Second, reset: 8 * time.Second}},
			{op: OpPeek, b: []bucket{tk}, want: expect{allowed: true, remaining: 60, reset: 4 * time.Second}},
			{at: 6 * time.Second, op: OpTake, cost: 40, b: []bucket{tk, tm}, want: expect{allowed: true, remaining: 0, reset: 10 * time.Second}},
		},
	}, {
		name: "token cost above capacity waits for a full bucket, then is charged in full",
		calls: []call{
			{op: OpTake, cost: 10, b: []bucket{tu}, want: expect{allowed: true, remaining: 90, reset: time.Second}},
			{op: OpTake, cost: 250, b: []bucket{tu}, want: expect{limitType: limiter.DimensionUserTokens, retry: time.Second, reset: time.Second}},
			{at: time.Second, op: OpTake, cost: 250, b: []bucket{tu}, want: expect{allowed: true, remaining: 0, reset: 25 * time.Second}},
			// 25s of debt: one token is back once 15.1s have refilled.
			{at: time.Second, op: OpTake, b: []bucket{tu}, want: expect{limitType: limiter.DimensionUserTokens, retry: 15100 * time.Millisecond, reset: 25 * time.Second}},
			{at: 16100 * time.Millisecond, op: OpPeek, b: []bucket{tu}, want: expect{allowed: true, remaining: 1, reset: 9900 * time.Millisecond}},
		},
	}, {
		name: "adjust charges into bounded debt, refunds never above full",
		calls: []call{
			{op: OpAdjust, cost: 50, b: []bucket{tu}}, // creates the bucket
			{op: OpPeek, b: []bucket{tu}, want: expect{allowed: true, remaining: 50, reset: 5 * time.Second}},
			// 1000 tokens would owe 105s; debt stops at MaxAdjustDebt (2)
			// capacities below empty: 30s until full.
			{op: OpAdjust, cost: 1000, b: []bucket{tu}},
			{op: OpPeek, b: []bucket{tu}, want: expect{limitType: limiter.DimensionUserTokens, retry: 20100 * time.Millisecond, reset: 30 * time.Second}},
			{op: OpAdjust, cost: -150, b: []bucket{tu}},
			{op: OpPeek, b: []bucket{tu}, want: expect{limitType: limiter.DimensionUserTokens, retry: 5100 * time.Millisecond, reset: 15 * time.Second}},
			{op: OpAdjust, cost: -1000, b: []bucket{tu}},
			{op: OpPeek, b: []bucket{tu}, want: expect{allowed: true, remaining: 100}},
			{op: OpAdjust, cost: -10, b: []bucket{tu}},
			{op: OpPeek, b: []bucket{tu}, want: expect{allowed: true, remaining: 100}},
			{op: OpTake, cost: 100, b: []bucket{tu}, want: expect{allowed: true, remaining: 0, reset: 10 * time.Second}},
		},
	}, {
		name: "adjust settles every bucket of the batch; refunding an absent bucket and a zero adjust change nothing",
		calls: []call{
			{op: OpAdjust, cost: -50, b: []bucket{tk, tm}},
			{op: OpPeek, b: []bucket{tk}, want: expect{allowed: true, remaining: 100}},
			{op: OpTake, cost: 30, b: []bucket{tk, tm}, want: expect{allowed: true, remaining: 20, reset: 6 * time.Second}},
			{op: OpAdjust, b: []bucket{tk, tm}},
			{op: OpPeek, b: []bucket{tk, tm}, want: expect{allowed: true, remaining: 20, reset: 6 * time.Second}},
			{op: OpAdjust, cost: 20, b: []bucket{tk, tm}},
			{op: OpPeek, b: []bucket{tk}, want: expect{allowed: true, remaining: 50, reset: 5 * time.Second}},
			// The model bucket owes 10s, its whole window: no token left.
			{op: OpPeek, b: []bucket{tk, tm}, want: expect{limitType: limiter.DimensionModelTokens, retry: 200 * time.Millisecond, reset: 10 * time.Second}},
			{op: OpAdjust, cost: -25, b: []bucket{tk, tm}},
			{op: OpPeek, b: []bucket{tk, tm}, want: expect{allowed: true, remaining: 25, reset: 5 * time.Second}},
		},
	}, {
		name: "adjust neither raises nor forgives a debt beyond its bound that a large take left",
		calls: []call{
			{op: OpTake, cost: 500, b: []bucket{tu}, want: expect{allowed: true, remaining: 0, reset: 50 * time.Second}},
			{op: OpAdjust, cost: 10, b: []bucket{tu}},
			{op: OpPeek, b: []bucket{tu}, want: expect{limitType: limiter.DimensionUserTokens, retry: 40100 * time.Millisecond, reset: 50 * time.Second}},
			{op: OpAdjust, cost: -100, b: []bucket{tu}},
			{op: OpPeek, b: []bucket{tu}, want: expect{limitType: limiter.DimensionUserTokens, retry: 30100 * time.Millisecond, reset: 40 * time.Second}},
		},
	}, {
		name: "a changed token limit keeps a debt beyond the capacity in proportion",
		calls: []call{
			{op: OpTake, cost: 250, b: []bucket{tu}, want: expect{allowed: true, remaining: 0, reset: 25 * time.Second}},
			// 2.5 capacities owed: 50s at 100 tokens per 20s.
			{op: OpPeek, b: []bucket{{limiter.DimensionUserTokens, "alice", lim(100, 20*time.Second, 0)}},
				want: expect{limitType: limiter.DimensionUserTokens, retry: 30200 * time.Millisecond, reset: 50 * time.Second}},
		},
	}, {
		name: "refunding an absent bucket is a no-op",
		calls: []call{
			{op: OpRefund, b: []bucket{u2}},
			{op: OpPeek, b: []bucket{u2}, want: expect{allowed: true, remaining: 2}},
			{op: OpTake, b: []bucket{u2}, want: expect{allowed: true, remaining: 1, reset: 500 * time.Millisecond}},
		},
	}}
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					s, setTime := be.open(t)
					for i, c := range tc.calls {
						now := t0.Add(c.at)
						setTime(now)
						b := costBatch(c.cost, c.b...)
						var (
							d   limiter.Decision
							err error
						)
						switch c.op {
						case OpTake:
							d, err = s.Take(now, b)
						case OpPeek:
							d, err = s.Peek(now, b)
						case OpRefund, OpAdjust:
							if c.op == OpRefund {
								err = s.Refund(now, b)
							} else {
								err = s.Adjust(now, b)
							}
							if err != nil {
								t.Fatalf("call %d: %s: %v", i, c.op, err)
							}
							continue
						}
						if err != nil {
							t.Fatalf("call %d: %s: %v", i, c.op, err)
						}
						checkDecision(t, i, d, c.want)
					}
				})
			}
		})
	}
}

func checkDecision(t *testing.T, i int, d limiter.Decision, w expect) {
	t.Helper()
	if d.Allowed != w.allowed {
		t.Fatalf("call %d: allowed = %v, want %v (%+v)", i, d.Allowed, w.allowed, d)
	}
	if !w.allowed && (d.LimitType != w.limitType || d.RetryAfter != w.retry) {
		t.Fatalf("call %d: refused by %s after %s, want %s after %s", i, d.LimitType, d.RetryAfter, w.limitType, w.retry)
	}
	if w.allowed && d.RetryAfter != 0 {
		t.Fatalf("call %d: allowed with RetryAfter %s", i, d.RetryAfter)
	}
	if !d.HasQuota || d.Tightest.Remaining != w.remaining || d.Tightest.Reset != w.reset {
		t.Fatalf("call %d: quota %+v (has %v), want remaining %d reset %s", i, d.Tightest, d.HasQuota, w.remaining, w.reset)
	}
}

// TestRandomCallsDecideAsTheMemoryStore replays random takes, peeks and
// limit changes on several buckets against the memory store and a Redis
// store, and requires identical decisions, quotas included.
func TestRandomCallsDecideAsTheMemoryStore(t *testing.T) {
	limits := []limiter.Limit{lim(3, time.Second, 0), lim(7, 2*time.Second, 2), lim(1, 750*time.Millisecond, 4), lim(6, 6*time.Second, 0)}
	for _, be := range backends(t)[1:] {
		t.Run(be.name, func(t *testing.T) {
			ref := limiter.NewMemoryStore(0)
			s, setTime := be.open(t)
			rng := rand.New(rand.NewPCG(1, 2))
			now := t0
			for i := range 600 {
				now = now.Add(time.Duration(rng.IntN(200_000)) * time.Microsecond)
				var b limiter.Batch
				for d := limiter.DimensionAPIKey; d <= limiter.DimensionModel; d++ {
					if rng.IntN(3) > 0 {
						b.Add(d, strconv.Itoa(rng.IntN(2)), limits[(int(d)+i/150)%len(limits)])
					}
				}
				setTime(now)
				peek := rng.IntN(5) == 0
				var want, got limiter.Decision
				var err error
				if peek {
					want, _ = ref.Peek(now, b)
					got, err = s.Peek(now, b)
				} else {
					want, _ = ref.Take(now, b)
					got, err = s.Take(now, b)
				}
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if got != want {
					t.Fatalf("call %d (peek %v) at %s: got %+v, memory store says %+v", i, peek, now.Sub(t0), got, want)
				}
			}
		})
	}
}

// TestRandomTokenCallsDecideAsTheMemoryStore replays random costed takes and
// peeks, signed adjusts (into debt and back) and limit changes on the four
// token dimensions against the memory store and a Redis store, and requires
// identical decisions; after each adjust, a peek of the batch must agree too.
func TestRandomTokenCallsDecideAsTheMemoryStore(t *testing.T) {
	limits := []limiter.Limit{lim(100, 10*time.Second, 0), lim(7, 2*time.Second, 30), lim(1000, time.Minute, 0), lim(60, 3*time.Second, 0)}
	for _, be := range backends(t)[1:] {
		t.Run(be.name, func(t *testing.T) {
			ref := limiter.NewMemoryStore(0)
			s, setTime := be.open(t)
			rng := rand.New(rand.NewPCG(3, 4))
			now := t0
			ops := map[string]int{}
			for i := range 800 {
				now = now.Add(time.Duration(rng.IntN(800_000)) * time.Microsecond)
				var b limiter.Batch
				op := []string{OpTake, OpTake, OpPeek, OpAdjust}[rng.IntN(4)]
				// Mostly a fraction of a capacity, sometimes several.
				scale := int64(40)
				if rng.IntN(8) == 0 {
					scale = 400
				}
				cost := rng.Int64N(scale) // 0 and 1 are one token
				if op == OpAdjust {
					cost = rng.Int64N(2*scale+1) - scale
				}
				for d := limiter.DimensionAPIKeyTokens; d <= limiter.DimensionModelTokens; d++ {
					if rng.IntN(3) > 0 {
						b.AddCost(d, strconv.Itoa(rng.IntN(2)), limits[(int(d)+i/200)%len(limits)], cost)
					}
				}
				setTime(now)
				ops[op]++
				var want, got limiter.Decision
				var err error
				switch op {
				case OpTake:
					want, _ = ref.Take(now, b)
					got, err = s.Take(now, b)
				case OpPeek:
					want, _ = ref.Peek(now, b)
					got, err = s.Peek(now, b)
				case OpAdjust:
					if err = ref.Adjust(now, b); err != nil {
						t.Fatalf("call %d: memory store adjust: %v", i, err)
					}
					if err = s.Adjust(now, b); err != nil {
						break
					}
					for j := range b.Len() {
						r := b.At(j)
						one := batchOf(bucket{r.Dimension, r.Key, r.Limit})
						want, _ = ref.Peek(now, one)
						if got, err = s.Peek(now, one); err != nil || got != want {
							break
						}
					}
				}
				if err != nil {
					t.Fatalf("call %d: %s: %v", i, op, err)
				}
				if got != want {
					t.Fatalf("call %d (%s of %d) at %s: got %+v, memory store says %+v", i, op, cost, now.Sub(t0), got, want)
				}
				switch {
				case op != OpTake:
				case got.Allowed:
					ops["take allowed"]++
				case got.Tightest.Reset > fullRefill(&b, got.LimitType):
					ops["take refused in debt"]++ // owing more than its capacity
				default:
					ops["take refused"]++
				}
			}
			t.Logf("calls: %v", ops)
			// The replay must reach every regime it claims to compare.
			for _, k := range []string{"take allowed", "take refused", "take refused in debt"} {
				if ops[k] == 0 {
					t.Fatalf("no call of kind %q in the replay: %v", k, ops)
				}
			}
		})
	}
}

// fullRefill returns the time the bucket of dimension d in b takes to refill
// from empty to full.
func fullRefill(b *limiter.Batch, d limiter.Dimension) time.Duration {
	for i := range b.Len() {
		if r := b.At(i); r.Dimension == d {
			_, w := r.Shape()
			return time.Duration(w)
		}
	}
	return 0
}
