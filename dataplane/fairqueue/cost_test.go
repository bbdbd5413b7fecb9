package fairqueue

import (
	"fmt"
	"math"
	"testing"
	"time"
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
// Requests).
func runCostBacklogged(t *testing.T, weights []int, sizes []int64, limit limitKind, chargeCost bool, d time.Duration) costRun {
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
		cost := int64(1)
		if chargeCost {
			cost = sizes[i]
		}
		if _, reason, _, _ := m.s.enqueue(m.now, tenantName(i), "user", m.key, noDeadline, 0, 0, cost); reason != "" {
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

func weightShares(ws []int) []float64 {
	sum := 0
	for _, w := range ws {
		sum += w
	}
	out := make([]float64, len(ws))
	for i, w := range ws {
		out[i] = float64(w) / float64(sum)
	}
	return out
}

// TestTokenWeightedFairness: backlogged tenants sending requests of different
// sizes get their weighted share of the cost (tokens) when the queue charges
// by cost, whether the limit they contend for is charged by size or counts
// requests; charged one per request (cost Requests), they get their weighted
// share of the requests instead, and so unequal tokens: the negative control
// showing that cost matters.
func TestTokenWeightedFairness(t *testing.T) {
	const tol = 0.05
	cases := []struct {
		name       string
		weights    []int
		sizes      []int64
		limit      limitKind
		chargeCost bool
	}{
		{name: "equal weights, sizes 10 and 1, token limit, cost Tokens", weights: []int{1, 1}, sizes: []int64{10, 1}, limit: tokenLimit, chargeCost: true},
		{name: "equal weights, sizes 10 and 1, request limit, cost Tokens", weights: []int{1, 1}, sizes: []int64{10, 1}, limit: requestLimit, chargeCost: true},
		{name: "equal weights, sizes 10 and 1, request limit, cost Requests", weights: []int{1, 1}, sizes: []int64{10, 1}, limit: requestLimit},
		{name: "weights 1:3, sizes 4 and 7, token limit, cost Tokens", weights: []int{1, 3}, sizes: []int64{4, 7}, limit: tokenLimit, chargeCost: true},
		{name: "weights 1:3, sizes 10 and 1, token limit, cost Tokens", weights: []int{1, 3}, sizes: []int64{10, 1}, limit: tokenLimit, chargeCost: true},
		{name: "weights 1:3, sizes 10 and 1, request limit, cost Requests", weights: []int{1, 3}, sizes: []int64{10, 1}, limit: requestLimit},
		{name: "weights 1,2,3, sizes 5, 1 and 12, token limit, cost Tokens", weights: []int{1, 2, 3}, sizes: []int64{5, 1, 12}, limit: tokenLimit, chargeCost: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := runCostBacklogged(t, tc.weights, tc.sizes, tc.limit, tc.chargeCost, 21*time.Second)
			req, cost := run.shares()
			t.Logf("requests %v (shares %.4f), cost %v (shares %.4f)", run.requests, req, run.cost, cost)
			want := weightShares(tc.weights)
			if tc.chargeCost {
				if err := within(cost, want, tol); err != nil {
					t.Errorf("cost Tokens: granted cost not weighted-fair: %v", err)
				}
				return
			}
			if err := within(req, want, tol); err != nil {
				t.Errorf("cost Requests: granted requests not weighted-fair: %v", err)
			}
			if within(cost, want, tol) == nil {
				t.Errorf("cost Requests gave weighted-fair cost too; the workload cannot tell the modes apart")
			}
		})
	}
}
