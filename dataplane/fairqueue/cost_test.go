package fairqueue

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/internal/testutil"
)

// costBucket is a token bucket charged by cost, judged the way the limiter
// judges token limits: a request of cost c passes when the bucket holds c
// tokens, and the Retry-After of a refusal is the time until it does. In GCRA
// form: the bucket holds burst - max(tat-now, 0)/interval tokens.
type costBucket struct {
	interval int64 // refill time of one token
	burst    int64 // capacity in tokens
	tat      int64
}

func (b *costBucket) take(now, cost int64) (bool, int64) {
	next := max(b.tat, now) + cost*b.interval
	if wait := next - now - b.burst*b.interval; wait > 0 {
		return false, wait
	}
	b.tat = next
	return true, 0
}

// limitKind is the limit the simulated tenants contend for.
type limitKind int

const (
	// tokenLimit: a costBucket charged by each request's size.
	tokenLimit limitKind = iota
	// requestLimit: one token per request, whatever its size.
	requestLimit
)

// costRun is the outcome of runCostBacklogged per tenant.
type costRun struct {
	requests []int
	cost     []int64 // sizes granted
}

// shares returns each tenant's share of the requests and of the cost.
func (r costRun) shares() (req, cost []float64) {
	var nr int
	var nc int64
	for i := range r.requests {
		nr += r.requests[i]
		nc += r.cost[i]
	}
	for i := range r.requests {
		req = append(req, float64(r.requests[i])/float64(nr))
		cost = append(cost, float64(r.cost[i])/float64(nc))
	}
	return req, cost
}

// runCostBacklogged keeps every tenant backlogged with depth waiters of its
// size on one shared limit for d of simulated time. With chargeCost the
// queue charges each grant its size (cost Tokens), otherwise 1 (cost
// Requests); with sized, the requests tell the queue their Size.
func runCostBacklogged(t *testing.T, weights []int, sizes []int64, limit limitKind, chargeCost, sized bool, d time.Duration) costRun {
	t.Helper()
	m := newSim(t, Bounds{MaxWait: time.Hour}, weightsFor(weights), time.Millisecond)
	burst := int64(0)
	for _, c := range sizes {
		burst = max(burst, c)
	}
	tokens := &costBucket{interval: int64(100 * time.Microsecond), burst: burst}
	m.attempt = func(w *waiter) (bool, int64) {
		if limit == requestLimit {
			return m.bucket.take(m.now)
		}
		return tokens.take(m.now, sizes[tenantIndex(t, w.tenant)])
	}
	run := costRun{requests: make([]int, len(sizes)), cost: make([]int64, len(sizes))}
	enqueue := func(i int) {
		cost, size := int64(1), int64(0)
		if chargeCost {
			cost = sizes[i]
		}
		if sized {
			size = sizes[i]
		}
		if _, reason, _, _ := m.s.enqueue(m.now, &arrival{tenant: tenantName(i), dim: "user", keys: m.key, deadline: noDeadline, cost: cost, size: size}); reason != "" {
			t.Fatalf("tenant %d refused: %s", i, reason)
		}
	}
	warm, end := int64(time.Second), int64(d)
	m.admitted = func(w *waiter) {
		i := tenantIndex(t, w.tenant)
		if m.now >= warm {
			run.requests[i]++
			run.cost[i] += sizes[i]
		}
		enqueue(i)
	}
	m.refused = func(w *waiter) { t.Fatalf("backlogged waiter refused: %s", w.reason) }
	for range 4 {
		for i := range sizes {
			enqueue(i)
		}
	}
	m.runUntil(func() bool { return m.now >= end })
	return run
}

// within reports whether every got[i] is within tol (relative) of want[i].
func within(got, want []float64, tol float64) error {
	for i := range got {
		if d := math.Abs(got[i]-want[i]) / want[i]; d > tol {
			return fmt.Errorf("tenant %d: share %.4f, want %.4f (relative error %.3f > %.3f)", i, got[i], want[i], d, tol)
		}
	}
	return nil
}

// TestTokenWeightedFairness: backlogged tenants sending requests of different
// sizes get their weighted share of the cost (tokens) when the queue charges
// by cost, whether the limit they contend for is charged by size or counts
// requests. Charged one per request (cost Requests), they get unequal tokens,
// the negative control showing that cost matters: they get their weighted
// share of the requests on a limit counting requests, and on a limit charged
// by size when the requests tell their Size (so a large one holds the limit
// while it waits for its tokens); without Size, the small requests also pass
// while a large one waits (requests of size 1 never hold keys, so the
// Requests mode without Size is unchanged).
func TestTokenWeightedFairness(t *testing.T) {
	const tol = 0.05
	cases := []struct {
		name       string
		weights    []int
		sizes      []int64
		limit      limitKind
		chargeCost bool
		sized      bool // requests tell the queue their Size
		// With cost Requests: whether the requests are shared by weight.
		fairRequests bool
	}{
		{name: "equal weights, sizes 10 and 1, token limit, cost Tokens", weights: []int{1, 1}, sizes: []int64{10, 1}, limit: tokenLimit, chargeCost: true},
		{name: "equal weights, sizes 10 and 1, request limit, cost Tokens", weights: []int{1, 1}, sizes: []int64{10, 1}, limit: requestLimit, chargeCost: true},
		{name: "equal weights, sizes 10 and 1, request limit, cost Requests", weights: []int{1, 1}, sizes: []int64{10, 1}, limit: requestLimit, fairRequests: true},
		{name: "equal weights, sizes 10 and 1, token limit, cost Requests", weights: []int{1, 1}, sizes: []int64{10, 1}, limit: tokenLimit},
		{name: "equal weights, sizes 10 and 1, token limit, cost Requests with Size", weights: []int{1, 1}, sizes: []int64{10, 1}, limit: tokenLimit, sized: true, fairRequests: true},
		{name: "weights 1,2,3, sizes 5, 1 and 12, token limit, cost Requests with Size", weights: []int{1, 2, 3}, sizes: []int64{5, 1, 12}, limit: tokenLimit, sized: true, fairRequests: true},
		{name: "weights 1:3, sizes 4 and 7, token limit, cost Tokens", weights: []int{1, 3}, sizes: []int64{4, 7}, limit: tokenLimit, chargeCost: true},
		{name: "weights 1:3, sizes 10 and 1, token limit, cost Tokens", weights: []int{1, 3}, sizes: []int64{10, 1}, limit: tokenLimit, chargeCost: true},
		{name: "weights 1:3, sizes 10 and 1, request limit, cost Requests", weights: []int{1, 3}, sizes: []int64{10, 1}, limit: requestLimit, fairRequests: true},
		{name: "weights 1,2,3, sizes 5, 1 and 12, token limit, cost Tokens", weights: []int{1, 2, 3}, sizes: []int64{5, 1, 12}, limit: tokenLimit, chargeCost: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := runCostBacklogged(t, tc.weights, tc.sizes, tc.limit, tc.chargeCost, tc.sized, 21*time.Second)
			req, cost := run.shares()
			t.Logf("requests %v (shares %.4f), cost %v (shares %.4f)", run.requests, req, run.cost, cost)
			want := testutil.WeightedShares(tc.weights)
			if tc.chargeCost {
				if err := within(cost, want, tol); err != nil {
					t.Errorf("cost Tokens: granted cost not weighted-fair: %v", err)
				}
				return
			}
			if err := within(req, want, tol); tc.fairRequests && err != nil {
				t.Errorf("cost Requests: granted requests not weighted-fair: %v", err)
			}
			if within(cost, want, tol) == nil {
				t.Errorf("cost Requests gave weighted-fair cost too; the workload cannot tell the modes apart")
			}
		})
	}
}

// TestEstimateAccuracyWithCosts: in steady saturation with requests of
// different sizes charged by cost, the estimate made at enqueue is within
// 20% (median relative error, for every tenant) of the actual wait, on a
// limit charged by size and on one counting requests.
func TestEstimateAccuracyWithCosts(t *testing.T) {
	cases := []struct {
		name    string
		weights []int
		sizes   []int64
		limit   limitKind
	}{
		{name: "sizes 10 and 1, token limit", weights: []int{1, 1}, sizes: []int64{10, 1}, limit: tokenLimit},
		{name: "weights 1,2,5, sizes 3, 8, 1, token limit", weights: []int{1, 2, 5}, sizes: []int64{3, 8, 1}, limit: tokenLimit},
		{name: "sizes 10 and 1, request limit", weights: []int{1, 1}, sizes: []int64{10, 1}, limit: requestLimit},
		{name: "weights 1,2,5, sizes 3, 8, 1, request limit", weights: []int{1, 2, 5}, sizes: []int64{3, 8, 1}, limit: requestLimit},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newSim(t, Bounds{MaxWait: time.Hour}, weightsFor(tc.weights), time.Millisecond)
			tokens := &costBucket{interval: int64(100 * time.Microsecond), burst: 12}
			m.attempt = func(w *waiter) (bool, int64) {
				if tc.limit == requestLimit {
					return m.bucket.take(m.now)
				}
				return tokens.take(m.now, int64(w.cost))
			}
			errs := make([][]float64, len(tc.sizes))
			grants := 0
			enqueue := func(i int) {
				if _, reason, _, _ := m.s.enqueue(m.now, &arrival{tenant: tenantName(i), dim: "user", keys: m.key, deadline: noDeadline, cost: tc.sizes[i]}); reason != "" {
					t.Fatalf("tenant %d refused: %s", i, reason)
				}
			}
			m.admitted = func(w *waiter) {
				grants++
				i := tenantIndex(t, w.tenant)
				if actual := float64(m.now - w.enqueuedAt); grants > 2000 && actual > 0 {
					errs[i] = append(errs[i], abs(float64(w.estimate)-actual)/actual)
				}
				enqueue(i)
			}
			for range 4 {
				for i := range tc.sizes {
					enqueue(i)
				}
			}
			m.runUntil(func() bool { return grants >= 12000 })
			for i := range errs {
				med := median(errs[i])
				t.Logf("tenant %d (weight %d, size %d): median relative error %.3f over %d samples", i, tc.weights[i], tc.sizes[i], med, len(errs[i]))
				if med > 0.20 {
					t.Errorf("tenant %d: median |estimate-actual|/actual = %.3f, want <= 0.20", i, med)
				}
			}
		})
	}
}

// fakeCostBucket is a costBucket on a fake clock, safe for the waiters'
// goroutines.
type fakeCostBucket struct {
	mu  sync.Mutex
	clk *clocktesting.FakeClock
	b   costBucket
}

func (f *fakeCostBucket) attempt(cost int64) Attempt {
	return func() (bool, time.Duration, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		ok, ra := f.b.take(int64(f.clk.Since(epoch)), cost)
		return ok, time.Duration(ra), nil
	}
}

// TestQueueTokenFairness runs token-weighted fair queuing through the Queue
// shell on a fake clock: two equal-weight tenants keep four requests each
// waiting, one of 10 tokens and one of 1, on a bucket of 1 token per
// millisecond charged by size. Charged by size (cost Tokens), the tokens
// they are granted stay within 10% of each other (the lag bound is one grant
// of 10 over about 250 each); charged 1 per request (cost Requests, with
// Size set) their request counts do, and the large tenant takes most of the
// tokens: the negative control.
func TestQueueTokenFairness(t *testing.T) {
	for _, chargeCost := range []bool{true, false} {
		t.Run(fmt.Sprintf("cost by size %v", chargeCost), func(t *testing.T) {
			clk := clocktesting.NewFakeClock(epoch)
			q := New(clk, Bounds{MaxWait: time.Hour}, Weights{Default: 1}, nil)
			bucket := &fakeCostBucket{clk: clk, b: costBucket{interval: int64(time.Millisecond), burst: 10, tat: int64(10 * time.Millisecond)}}
			sizes := map[string]int64{"large": 10, "small": 1}
			var mu sync.Mutex
			tokens, requests := map[string]float64{}, map[string]float64{}
			var wg sync.WaitGroup
			for tn, size := range sizes {
				cost := int64(1)
				if chargeCost {
					cost = size
				}
				r := Request{Tenant: tn, LimitKeys: lk("model"), RetryAfter: time.Millisecond, Interval: time.Duration(size) * time.Millisecond, Attempt: bucket.attempt(size), Cost: cost, Size: size}
				for range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							res, err := q.Wait(context.Background(), r)
							if err != nil || !res.Admitted {
								return // the queue closed
							}
							mu.Lock()
							tokens[tn] += float64(size)
							requests[tn]++
							mu.Unlock()
						}
					}()
				}
			}
			// Step only once every waiter is back in the queue and the
			// scheduler is idle, so the outcome does not depend on how fast
			// the waiters' goroutines run.
			backlogged := func() bool { return q.s.depth == 8 && q.settled() }
			q.waitUntil(t, backlogged)
			for range 500 {
				clk.Step(time.Millisecond)
				q.waitUntil(t, backlogged)
			}
			q.Close()
			testutil.WaitGroupWithin(t, testTimeout, "waiters", &wg)
			mu.Lock()
			defer mu.Unlock()
			t.Logf("in 500ms: tokens %v, requests %v", tokens, requests)
			near := func(m map[string]float64) bool {
				return math.Abs(m["large"]-m["small"])/max(m["large"], m["small"]) <= 0.10
			}
			switch {
			case chargeCost && !near(tokens):
				t.Errorf("cost by size: tokens granted %v; want within 10%% of each other", tokens)
			case !chargeCost && !near(requests):
				t.Errorf("cost 1 per request: requests granted %v; want within 10%% of each other", requests)
			case !chargeCost && tokens["large"] < 5*tokens["small"]:
				t.Errorf("cost 1 per request: tokens granted %v; the negative control shows no difference", tokens)
			}
		})
	}
}
