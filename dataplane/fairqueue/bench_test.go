package fairqueue

import (
	"context"
	"fmt"
	"math"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"
)

// benchCost is the Request.Cost of tenant i's requests: 1 for every tenant
// (the Requests mode), or with mixed, sizes from 1 to 3751 tokens.
func benchCost(i int, mixed bool) int64 {
	if !mixed {
		return 1
	}
	return 1 + int64(i%16)*250
}

// benchSched returns a core with n tenants of mixed weights, each backlogged
// with two waiters on one shared key.
func benchSched(tb testing.TB, n int) (*sched, []string, []LimitKey) {
	return benchSchedCosts(tb, n, false)
}

// benchSchedCosts is benchSched with mixed costs when mixed is set.
func benchSchedCosts(tb testing.TB, n int, mixed bool) (*sched, []string, []LimitKey) {
	return benchSchedBands(tb, n, mixed, nil)
}

// benchBands are three priority bands, the lower two with a minShare so
// that grants go to every band and both the priority and the credit paths
// run.
var benchBands = []Band{{Name: "interactive"}, {Name: "standard", MinShare: 0.1}, {Name: "batch", MinShare: 0.05}}

// benchSchedBands is benchSchedCosts with tenant i in band i%len(bands).
func benchSchedBands(tb testing.TB, n int, mixed bool, bands []Band) (*sched, []string, []LimitKey) {
	tenants := make([]string, n)
	byTenant := make(map[string]int, n)
	var tenantBand map[string]int
	if len(bands) > 0 {
		tenantBand = make(map[string]int, n)
	}
	for i := range tenants {
		tenants[i] = tenantName(i)
		byTenant[tenants[i]] = 1 + i%5
		if tenantBand != nil {
			tenantBand[tenants[i]] = i % len(bands)
		}
	}
	s := newSched(Bounds{MaxTenants: n, MaxTotalQueued: 4 * n, MaxQueueDepthPerTenant: 4, MaxInFlight: 8, MaxWait: time.Hour}, Weights{Default: 1, ByTenant: byTenant, Bands: bands, TenantBand: tenantBand})
	keys := lk("model:m")
	for range 2 {
		for _, tn := range tenants {
			if w, reason, _, _ := s.enqueue(0, &arrival{tenant: tn, dim: "user", keys: keys, deadline: noDeadline, cost: benchCost(tenantIndex(tb, tn), mixed)}); w == nil {
				tb.Fatalf("benchmark setup refused: %s", reason)
			}
		}
	}
	return s, tenants, keys
}

// grantLoop performs n grant decisions: pick the next tenant, admit its head,
// and enqueue a replacement so every tenant stays backlogged.
func grantLoop(tb testing.TB, s *sched, keys []LimitKey, n int) {
	for range n {
		w := s.next(0)
		if w == nil {
			tb.Fatalf("no grant with every tenant backlogged")
		}
		tenant := w.tenant
		s.complete(0, w, true, 0, nil)
		s.release(w)
		if nw, reason, _, _ := s.enqueue(0, &arrival{tenant: tenant, dim: "user", keys: keys, deadline: noDeadline, cost: 1}); nw == nil {
			tb.Fatalf("replacement refused: %s", reason)
		}
	}
}

// grantLoopCosts is grantLoop with tenant i's requests of cost
// benchCost(i, mixed), where idx maps a tenant to i, and with settle set, a
// settle correction (a third of the reservation refunded) after every
// grant, as token-weighted fairness does.
func grantLoopCosts(tb testing.TB, s *sched, keys []LimitKey, n int, idx map[string]int, mixed, settle bool) {
	for range n {
		w := s.next(0)
		if w == nil {
			tb.Fatalf("no grant with every tenant backlogged")
		}
		tenant := w.tenant
		cost := benchCost(idx[tenant], mixed)
		s.complete(0, w, true, 0, nil)
		s.release(w)
		if settle {
			s.adjust(tenant, -cost/3)
		}
		if nw, reason, _, _ := s.enqueue(0, &arrival{tenant: tenant, dim: "user", keys: keys, deadline: noDeadline, cost: cost}); nw == nil {
			tb.Fatalf("replacement refused: %s", reason)
		}
	}
}

func benchmarkGrant(b *testing.B, n int) {
	benchmarkGrantBands(b, n, nil)
}

// benchmarkGrantBands is benchmarkGrant with tenants spread over bands.
func benchmarkGrantBands(b *testing.B, n int, bands []Band) {
	s, _, keys := benchSchedBands(b, n, false, bands)
	grantLoop(b, s, keys, 4*n) // warm the free lists
	b.ReportAllocs()
	b.ResetTimer()
	grantLoop(b, s, keys, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "grants/s")
}

// BenchmarkGrant measures one scheduling decision with every tenant
// backlogged: pick by virtual finish tag, admit, re-enqueue.
func BenchmarkGrant(b *testing.B) {
	for _, n := range []int{8, 128, 1024} {
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) { benchmarkGrant(b, n) })
	}
}

// BenchmarkGrantOneBand and BenchmarkGrantThreeBands are the pair the
// priority-band target compares: one grant decision with 1,024 backlogged
// tenants in one band (today's scheduler), and spread over three bands
// with minimum shares, every band served.
func BenchmarkGrantOneBand(b *testing.B) { benchmarkGrantBands(b, 1024, nil) }

// BenchmarkGrantThreeBands: see BenchmarkGrantOneBand.
func BenchmarkGrantThreeBands(b *testing.B) { benchmarkGrantBands(b, 1024, benchBands) }

// BenchmarkGrantTokens is BenchmarkGrant with token costs: mixed request
// sizes, and a settle correction (Adjust) after every grant.
func BenchmarkGrantTokens(b *testing.B) {
	for _, n := range []int{8, 128, 1024} {
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) {
			s, tenants, keys := benchSchedCosts(b, n, true)
			idx := benchIndex(tenants)
			grantLoopCosts(b, s, keys, 4*n, idx, true, true)
			b.ReportAllocs()
			b.ResetTimer()
			grantLoopCosts(b, s, keys, b.N, idx, true, true)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "grants/s")
		})
	}
}

func benchIndex(tenants []string) map[string]int {
	idx := make(map[string]int, len(tenants))
	for i, tn := range tenants {
		idx[tn] = i
	}
	return idx
}

// TestGrantCostRatio1024vs8 checks that the cost per grant grows sub-linearly
// with the number of backlogged tenants: 1024 tenants may cost at most 3x
// what 8 tenants cost. Only the ratio is measured, never absolute time, and
// it is asserted only when FAIRQUEUE_TIMING_CHECKS=1 asks for it (on a quiet
// machine): on a shared CI machine the ratio is noise, so CI never fails on it.
func TestGrantCostRatio1024vs8(t *testing.T) {
	if testing.Short() || os.Getenv("FAIRQUEUE_TIMING_CHECKS") != "1" {
		t.Skip("a timing ratio: set FAIRQUEUE_TIMING_CHECKS=1 on a quiet machine to check it")
	}
	cost := func(n int) float64 {
		r := testing.Benchmark(func(b *testing.B) { benchmarkGrant(b, n) })
		return float64(r.T.Nanoseconds()) / float64(r.N)
	}
	// Interleave the runs and keep each size's best, so load from other
	// processes on a shared machine hits every size alike.
	sizes := []int{8, 128, 1024}
	best := map[int]float64{}
	for round := range 3 {
		for _, n := range sizes {
			if c := cost(n); round == 0 || c < best[n] {
				best[n] = c
			}
		}
	}
	small, large := best[8], best[1024]
	t.Logf("ns/grant: 8 tenants %.1f, 128 tenants %.1f, 1024 tenants %.1f; 1024/8 ratio %.2f", small, best[128], large, large/small)
	if large > 3*small {
		t.Errorf("1024-tenant grant costs %.1fns, more than 3x the 8-tenant cost %.1fns", large, small)
	}
}

// TestGrantCostRatioBands checks the priority-band target: a grant with
// 1,024 tenants over three bands costs at most 10% more than with one band.
// Gated like TestGrantCostRatio1024vs8.
func TestGrantCostRatioBands(t *testing.T) {
	if testing.Short() || os.Getenv("FAIRQUEUE_TIMING_CHECKS") != "1" {
		t.Skip("a timing ratio: set FAIRQUEUE_TIMING_CHECKS=1 on a quiet machine to check it")
	}
	cost := func(bands []Band) float64 {
		r := testing.Benchmark(func(b *testing.B) { benchmarkGrantBands(b, 1024, bands) })
		return float64(r.T.Nanoseconds()) / float64(r.N)
	}
	one, three := math.Inf(1), math.Inf(1)
	for range 5 {
		one, three = min(one, cost(nil)), min(three, cost(benchBands))
	}
	t.Logf("ns/grant with 1024 tenants: one band %.1f, three bands %.1f; ratio %.3f", one, three, three/one)
	if three > 1.1*one {
		t.Errorf("three-band grant costs %.1fns, more than 1.1x the one-band cost %.1fns", three, one)
	}
}

// TestGrantAllocationFree checks that the steady-state grant path does not
// allocate, with unit costs, with token costs settled by Adjust, and with
// priority bands.
func TestGrantAllocationFree(t *testing.T) {
	s, _, keys := benchSched(t, 64)
	grantLoop(t, s, keys, 256)
	if a := testing.AllocsPerRun(100, func() { grantLoop(t, s, keys, 10) }); a != 0 {
		t.Errorf("grant path allocates %.1f times per 10 grants; want 0", a)
	}
	s, _, keys = benchSchedBands(t, 64, false, benchBands)
	grantLoop(t, s, keys, 256)
	if a := testing.AllocsPerRun(100, func() { grantLoop(t, s, keys, 10) }); a != 0 {
		t.Errorf("grant path with bands allocates %.1f times per 10 grants; want 0", a)
	}
	s, tenants, keys := benchSchedCosts(t, 64, true)
	idx := benchIndex(tenants)
	grantLoopCosts(t, s, keys, 256, idx, true, true)
	if a := testing.AllocsPerRun(100, func() { grantLoopCosts(t, s, keys, 10, idx, true, true) }); a != 0 {
		t.Errorf("grant path with costs and Adjust allocates %.1f times per 10 grants; want 0", a)
	}
}

// BenchmarkQueueWait measures a full round trip through the Queue shell on
// the real clock: enqueue, grant by the scheduling goroutine, attempt,
// admission, from parallel callers spread over 64 tenants.
func BenchmarkQueueWait(b *testing.B) {
	q := New(clock.RealClock{}, Bounds{MaxTotalQueued: 1 << 16, MaxQueueDepthPerTenant: 1 << 10}, Weights{Default: 1}, nil)
	defer q.Close()
	ok := func() (bool, time.Duration, error) { return true, 0, nil }
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := next.Add(1)
		r := Request{Tenant: tenantName(int(i % 64)), LimitKeys: lk(tenantName(int(i % 64))), Attempt: ok}
		for pb.Next() {
			if res, err := q.Wait(context.Background(), r); err != nil || !res.Admitted {
				b.Fatalf("not admitted: %+v, %v", res, err)
			}
		}
	})
}
