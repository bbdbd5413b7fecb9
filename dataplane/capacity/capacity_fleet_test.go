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

package capacity

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// TestAWindowBoundsThisReplicasCountNotTheFleets: a saturation window is
// learned from this replica's in-flight count (what it had in flight when
// the server's signals were under their max), so it bounds that count; the
// fleet-wide count is bounded by maxInFlight. Before, the window was also
// the limit asked of the shared store, so with 20 requests of other
// replicas in flight a window of 10 refused this replica outright, however
// few of its own it had, until its readings grew the window past the
// fleet's count, one per reading. The overdraft, too, is bounded here, by
// this replica's window and reserve; the store only by maxInFlight.
func TestAWindowBoundsThisReplicasCountNotTheFleets(t *testing.T) {
	fleet := &fakeShared{held: map[uint64]bool{}, others: 20}
	f := newPollFixture(t, vllmMetrics(0, 0.5), Options{Shared: fleet})
	signals := []config.Signal{{Metric: "vllm:num_requests_waiting", Max: 4}}
	if err := f.tr.Apply([]Backend{{Name: "a", MaxInFlight: 40, Saturation: saturation(f.srv.URL+"/metrics", signals...)}}, 0); err != nil {
		t.Fatal(err)
	}
	f.waitPolls(1)
	h := &held{t: t, f: f}
	defer h.releaseAll()
	for range 10 {
		h.take(Acquired)
	}
	f.tick() // under every max with 10 of ours in flight
	h.take(Acquired)
	h.take(Acquired)
	f.srv.set(vllmMetrics(5, 0.5))
	f.tick() // over: our window is cut to 10
	h.take(Saturated)
	h.release(3) // 9 of ours, 29 in the fleet
	h.take(Acquired)
	h.take(Saturated) // at our window

	// Under the window the fleet's count still binds at maxInFlight.
	f.srv.set(vllmMetrics(0, 0.5))
	f.tick() // our window grows to 11
	fleet.mu.Lock()
	fleet.others = 40 - 10
	fleet.mu.Unlock()
	h.take(Saturated) // 10 of ours and 30 others: the fleet is at maxInFlight
}

// timedTrackerWith is timedTracker with o.
func timedTrackerWith(t *testing.T, o Options, bs ...Backend) (*Tracker, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	o.Clock = clk
	return newTracker(t, o, bs...), clk
}

// countingShared is a fakeShared that tells the fleet's count after each
// answer, as redisslots.Leases does (FleetCounts), or that no count is
// known (down), or refuses every acquire for a warm-up of warm.
type countingShared struct {
	fakeShared
	tellFn func(string, int64, time.Duration)
	down   bool
	warm   time.Duration
}

func (c *countingShared) NotifyCounts(f func(string, int64, time.Duration)) { c.tellFn = f }

func (c *countingShared) Acquire(backend string, limit int, local int64, seq uint64) Result {
	if c.warm > 0 {
		c.tellFn(backend, -1, c.warm)
		return Saturated
	}
	r := c.fakeShared.Acquire(backend, limit, local, seq)
	c.tell(backend)
	return r
}

func (c *countingShared) Release(backend string, seq uint64) {
	c.fakeShared.Release(backend, seq)
	c.tell(backend)
}

func (c *countingShared) tell(backend string) {
	c.mu.Lock()
	n := int64(len(c.held) + c.others)
	c.mu.Unlock()
	if c.down {
		n = -1
	}
	c.tellFn(backend, n, 0)
}

// TestTheReleaseSpacingCountsTheFleetsSlots: with the slot count shared by
// a fleet, a slot freed on any replica wakes waiters here, so the time
// between releases is the mean time held over the fleet's slots in flight,
// not this replica's. Here this replica holds 2 of the fleet's 10 slots,
// each held 1 s: one frees every 100 ms. Before, it was told 1 s / 2 =
// 500 ms, five times the truth (R-fold with R replicas sharing evenly); and
// since its own 2 slots of a maxInFlight of 20 never made it half full,
// its slots were not even timed: it was told the 50 ms prior. When the
// store stops answering, the local count decides again, and is the count.
func TestTheReleaseSpacingCountsTheFleetsSlots(t *testing.T) {
	sh := &countingShared{fakeShared: fakeShared{held: map[uint64]bool{}, others: 8}}
	tr, clk := timedTrackerWith(t, Options{Shared: sh}, Backend{Name: "a", MaxInFlight: 20})
	var s1, s2 Slot
	acquire(t, tr, &s1, "a") // the fleet's 9th slot
	acquire(t, tr, &s2, "a") // its 10th: half full, so timed
	defer s1.Release()
	defer s2.Release()
	clk.Step(time.Second)
	s2.Release() // held 1 s
	acquire(t, tr, &s2, "a")
	names := []string{"a"}
	if got, want := spacingOf(tr, names), 100*time.Millisecond; got != want {
		t.Errorf("2 of the fleet's 10 slots, held 1 s each: spacing %v, want %v (1 s over 10)", got, want)
	}

	sh.mu.Lock()
	sh.others = 38 // the fleet grows; this replica learns it from its next answer
	sh.mu.Unlock()
	var s3 Slot
	if r := tr.Acquire(&s3, "a"); r != Saturated {
		t.Fatalf("fleet at maxInFlight: %v", r)
	}
	if got, want := spacingOf(tr, names), 25*time.Millisecond; got != want {
		t.Errorf("2 of the fleet's 40 slots: spacing %v, want %v", got, want)
	}

	sh.mu.Lock()
	sh.others = 8
	sh.mu.Unlock()
	sh.down = true
	s1.Release()
	acquire(t, tr, &s1, "a") // the store did not count it: the local count decides
	if got, want := spacingOf(tr, names), 500*time.Millisecond; got != want {
		t.Errorf("the store not answering: spacing %v, want %v (1 s over this replica's 2 slots)", got, want)
	}
}

// TestARefusalInTheWarmUpIsToldItsEnd: while the shared store warms up
// (redisslots: after Redis lost its leases it refuses every acquire for one
// lease TTL), no slot frees before its end, so a refusal told the release
// spacing (50 ms here) has its client retry into the warm-up and spend its
// retries (openai-node sleeps exactly retry-after-ms, twice). The next
// release is told at the warm-up's end, the releases after it one spacing
// apart (not the warm-up again); and at its end the backend's waiters are
// woken, since no release announces it.
func TestARefusalInTheWarmUpIsToldItsEnd(t *testing.T) {
	sh := &countingShared{fakeShared: fakeShared{held: map[uint64]bool{}}, warm: 3 * time.Second}
	var rm rooms
	tr, clk := timedTrackerWith(t, Options{Shared: sh, OnRoom: rm.on}, Backend{Name: "a", MaxInFlight: 4})
	var s Slot
	if r := tr.Acquire(&s, "a"); r != Saturated {
		t.Fatalf("in the warm-up: %v, want saturated", r)
	}
	names := []string{"a"}
	if next, spacing := tr.NextRelease(names); next < 3*time.Second || spacing != DefaultReleaseSpacing {
		t.Errorf("refused at the start of a 3 s warm-up: next release %v, spacing %v; want at least 3s, then the prior %v", next, spacing, DefaultReleaseSpacing)
	}
	clk.Step(time.Second)
	if next, _ := tr.NextRelease(names); next < 2*time.Second {
		t.Errorf("1 s into a 3 s warm-up: next release %v, want at least 2s", next)
	}
	sh.warm = 0
	before := rm.count()
	clk.Step(2 * time.Second)
	testutil.Eventually(t, "the waiters woken at the warm-up's end", func() bool { return rm.count() > before })
	if next, _ := tr.NextRelease(names); next != DefaultReleaseSpacing {
		t.Errorf("after the warm-up: next release %v, want the prior %v", next, DefaultReleaseSpacing)
	}
	acquire(t, tr, &s, "a")
	s.Release()
}

// spacingOf is tr's spacing of releases on names (Tracker.NextRelease).
func spacingOf(tr *Tracker, names []string) time.Duration {
	_, spacing := tr.NextRelease(names)
	return spacing
}
