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

package fleet

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/admission"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The Pacer is the admission controller's fleet gate.
var _ admission.BandGate = (*Pacer)(nil)

func newTestPacer(t *testing.T, clk *testingclock.FakeClock, ex Exchange, replica string, opts Options) *Pacer {
	t.Helper()
	opts.Replica, opts.Exchange = replica, ex
	p, err := New(clk, opts, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	p.SetLimits(limiter.Config{Model: &limiter.Limit{Requests: 10, Period: time.Second}})
	p.SetWeights(fairqueue.Weights{Default: 1, ByTenant: map[string]int{"C": 3}})
	return p
}

// backlog marks tenants backlogged on key "m" for the current period.
func backlog(p *Pacer, tenants ...string) {
	for _, tenant := range tenants {
		p.Arrive(tenant, "m")
		p.Done(tenant, "m", false)
	}
}

// countAllowed polls Allow every millisecond for d and counts the passes.
func countAllowed(p *Pacer, clk *testingclock.FakeClock, tenant string, d time.Duration) int {
	n := 0
	for end := clk.Now().Add(d); clk.Now().Before(end); clk.Step(time.Millisecond) {
		if ok, _ := p.Allow(clk.Now(), tenant, "m"); ok {
			n++
		}
	}
	return n
}

func TestGatePacesToTheWeightedShare(t *testing.T) {
	clk := testingclock.NewFakeClock(simT0)
	p := newTestPacer(t, clk, NewMemoryExchange(clk), "r1", Options{})
	backlog(p, "A", "C")
	if err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Capacity 10/s split 1:3: A may pass 2.5/s, C 7.5/s, each with one
	// request of tolerance.
	// A first, then C: the check below needs A idle for C's 10s (a map
	// here ran them in random order and failed whenever C came first).
	for _, c := range []struct {
		tenant string
		want   int
	}{{"A", 25}, {"C", 75}} {
		backlog(p, c.tenant)
		if got := countAllowed(p, clk, c.tenant, 10*time.Second); got < c.want || got > c.want+2 {
			t.Errorf("tenant %s passed the gate %d times in 10s, want %d (+2 tolerance)", c.tenant, got, c.want)
		}
	}
	// A has been idle for 10s: its gate passes two requests back to back
	// (one of tolerance), then holds the third for at most one period.
	for i := range 3 {
		ok, wait := p.Allow(clk.Now(), "A", "m")
		if i < 2 && !ok {
			t.Fatalf("request %d after an idle spell held back for %v, want the gate's tolerance to pass it", i+1, wait)
		}
		if i == 2 && (ok || wait <= 0 || wait > DefaultPeriod) {
			t.Errorf("third back-to-back request got ok=%v wait=%v, want held for at most one period", ok, wait)
		}
	}
}

func TestExchangeOutageKeepsSharesForTheTTLThenOpensTheGates(t *testing.T) {
	clk := testingclock.NewFakeClock(simT0)
	ex := NewMemoryExchange(clk)
	p := newTestPacer(t, clk, ex, "r1", Options{})
	ctx := context.Background()
	backlog(p, "A", "C")
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	ex.SetDown(true)
	clk.Step(DefaultPeriod)
	backlog(p, "A", "C")
	if err := p.Sync(ctx); err == nil {
		t.Fatal("Sync with the exchange down succeeded, want an error")
	}
	if n := countAllowed(p, clk, "A", time.Second); n > 4 {
		t.Fatalf("within the TTL of the last round A passed %d times in 1s, want it still paced to 2.5/s", n)
	}
	clk.Step(3 * DefaultPeriod)
	if err := p.Sync(ctx); err == nil {
		t.Fatal("Sync with the exchange down succeeded, want an error")
	}
	if n := countAllowed(p, clk, "A", 100*time.Millisecond); n != 100 {
		t.Fatalf("past the TTL A passed %d of 100 polls, want all (gates open, local fairness only)", n)
	}
	ex.SetDown(false)
	backlog(p, "A", "C")
	if err := p.Sync(ctx); err != nil {
		t.Fatalf("Sync after the exchange recovered: %v", err)
	}
	if n := countAllowed(p, clk, "A", time.Second); n > 4 {
		t.Fatalf("after recovery A passed %d times in 1s, want it paced to 2.5/s again", n)
	}
}

func TestBoundsLetUntrackedRequestsThrough(t *testing.T) {
	clk := testingclock.NewFakeClock(simT0)
	p := newTestPacer(t, clk, NewMemoryExchange(clk), "r1", Options{MaxKeys: 1, MaxTenants: 1})
	backlog(p, "A", "B")
	if err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := countAllowed(p, clk, "B", 100*time.Millisecond); n != 100 {
		t.Fatalf("a tenant beyond MaxTenants passed %d of 100 polls, want all", n)
	}
	if n := countAllowed(p, clk, "A", time.Second); n > 11 {
		t.Fatalf("the tracked tenant passed %d times in 1s, want at most the capacity 10/s + 1", n)
	}
	if ok, _ := p.Allow(clk.Now(), "A", "other-model"); !ok {
		t.Fatal("a key beyond MaxKeys was held back, want it let through")
	}
	p.mu.Lock()
	keys, tenants := len(p.keys), len(p.keys["m"].tenants)
	p.mu.Unlock()
	if keys != 1 || tenants != 1 {
		t.Fatalf("tracking %d keys and %d tenants, want 1 and 1", keys, tenants)
	}
}

func TestIdleTenantsAndKeysAreDropped(t *testing.T) {
	clk := testingclock.NewFakeClock(simT0)
	ex := NewMemoryExchange(clk)
	p := newTestPacer(t, clk, ex, "r1", Options{})
	backlog(p, "A")
	for range idlePeriods + 2 {
		if err := p.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		clk.Step(DefaultPeriod)
	}
	p.mu.Lock()
	keys := len(p.keys)
	p.mu.Unlock()
	if keys != 0 {
		t.Fatalf("%d keys tracked after %d idle periods, want 0", keys, idlePeriods+2)
	}
	if got, err := ex.Swap(context.Background(), "m", Report{Replica: "probe"}, time.Hour); err != nil || len(got) != 1 {
		t.Fatalf("the exchange holds %d reports (err %v), want only the probe's: the idle replica must leave", len(got), err)
	}
}

func TestRunExchangesEveryPeriodAndLeavesOnShutdown(t *testing.T) {
	clk := testingclock.NewFakeClock(simT0)
	ex := NewMemoryExchange(clk)
	p := newTestPacer(t, clk, ex, "r1", Options{})
	backlog(p, "A")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()

	reports := func() int {
		got, err := ex.Swap(context.Background(), "m", Report{Replica: "probe"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return len(got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for reports() != 2 {
		if time.Now().After(deadline) {
			t.Fatal("r1 never published its report")
		}
		// Step only once Run waits on its ticker again, so no tick is lost.
		for !clk.HasWaiters() {
			if time.Now().After(deadline) {
				t.Fatal("Run never waited on its ticker")
			}
			runtime.Gosched()
		}
		clk.Step(DefaultPeriod)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if n := reports(); n != 1 {
		t.Fatalf("%d reports after r1 shut down, want only the probe's", n)
	}
}

func TestRaisedRateIsNotHeldBackByTheOldPace(t *testing.T) {
	clk := testingclock.NewFakeClock(simT0)
	p := newTestPacer(t, clk, NewMemoryExchange(clk), "r1", Options{})
	p.Arrive("A", "m")
	ts := p.keys["m"].tenants[claimant{tenant: "A"}]
	now := clk.Now()
	ts.setRate(now, 1)
	for i := range 2 {
		if ok, _ := p.Allow(now, "A", "m"); !ok {
			t.Fatalf("request %d at 1/s held back, want the tolerance to pass it", i+1)
		}
	}
	// The old pace scheduled A's next turn 2s ahead; at 10/s it is owed one
	// within 200ms.
	ts.setRate(now, 10)
	clk.Step(200 * time.Millisecond)
	if ok, wait := p.Allow(clk.Now(), "A", "m"); !ok {
		t.Fatalf("after the rate rose to 10/s A is held for %v more, want it to pass", wait)
	}

	// Re-applying an unchanged rate every round grants nothing extra.
	n := 0
	for range 10 {
		ts.setRate(clk.Now(), 10)
		n += countAllowed(p, clk, "A", DefaultPeriod)
	}
	if n > 22 {
		t.Fatalf("at a steady 10/s A passed %d times in 2s, want at most 20 plus the tolerance", n)
	}
}
