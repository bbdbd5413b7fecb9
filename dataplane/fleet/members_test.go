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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	testingclock "k8s.io/utils/clock/testing"
)

// membersObserver records the last membership round.
type membersObserver struct {
	mu       sync.Mutex
	live     int
	mismatch bool
}

func (o *membersObserver) Synced(string, int, bool, []Share) {}
func (o *membersObserver) ExchangeFailed(string, error)      {}
func (o *membersObserver) Members(live int, mismatch bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.live, o.mismatch = live, mismatch
}

func (o *membersObserver) last() (int, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.live, o.mismatch
}

// syncAll runs one exchange round on every pacer, then steps the clock by
// one period.
func syncAll(t *testing.T, clk *testingclock.FakeClock, ps ...*Pacer) {
	t.Helper()
	for _, p := range ps {
		if err := p.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	clk.Step(DefaultPeriod)
}

// TestReplicasWithDifferentHashKeysSaySo: replicas publish their hash
// key's fingerprint; once two keys have been in use for longer than a
// rotation's grace, every replica says so in its log, its metric (through
// the observer) and its health (KeyHealth, shown on /readyz), naming the
// fingerprints and the fix, and never the key.
func TestReplicasWithDifferentHashKeysSaySo(t *testing.T) {
	clk := testingclock.NewFakeClock(simT0)
	ex := NewMemoryExchange(clk)
	var logMu sync.Mutex
	var logs strings.Builder
	log := funcr.New(func(prefix, args string) {
		logMu.Lock()
		defer logMu.Unlock()
		logs.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{})
	obs := &membersObserver{}
	ps := make([]*Pacer, 3)
	for i, name := range []string{"r1", "r2", "r3"} {
		o := Options{Replica: name, Exchange: ex}
		if name == "r3" {
			o.Observer = obs
		}
		p, err := New(clk, o, log.WithName(name))
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = p
	}
	ps[0].SetKeyFingerprint("aaaaaaaaaaaaaaaa")
	ps[1].SetKeyFingerprint("aaaaaaaaaaaaaaaa")
	ps[2].SetKeyFingerprint("bbbbbbbbbbbbbbbb")

	// Within the grace (a rotation reaching the replicas one by one):
	// nothing to report.
	for clk.Since(simT0) < DefaultKeyGrace-time.Second {
		syncAll(t, clk, ps...)
	}
	for _, p := range ps {
		if err := p.KeyHealth(); err != nil {
			t.Fatalf("%s reports %v within the grace", p.opts.Replica, err)
		}
	}
	if _, mismatch := obs.last(); mismatch {
		t.Fatal("the mismatch metric is set within the grace")
	}
	for clk.Since(simT0) < DefaultKeyGrace+time.Second {
		syncAll(t, clk, ps...)
	}
	for _, p := range ps {
		err := p.KeyHealth()
		if err == nil || !strings.Contains(err.Error(), "aaaaaaaaaaaaaaaa on 2") || !strings.Contains(err.Error(), "bbbbbbbbbbbbbbbb on 1") ||
			!strings.Contains(err.Error(), "same hash key") {
			t.Fatalf("%s: KeyHealth() = %v, want the fingerprints with their replica counts and the fix", p.opts.Replica, err)
		}
	}
	if err := ps[2].KeyHealth(); !strings.Contains(err.Error(), "most replicas hold another key than this one") {
		t.Fatalf("r3 (the odd one out) does not say it is: %v", err)
	}
	if err := ps[0].KeyHealth(); !strings.Contains(err.Error(), "this replica holds the key most replicas hold") {
		t.Fatalf("r1 (with the majority) does not say it is: %v", err)
	}
	if live, mismatch := obs.last(); live != 3 || !mismatch {
		t.Fatalf("observer saw live=%d mismatch=%v, want 3 and true", live, mismatch)
	}
	logMu.Lock()
	got := logs.String()
	logMu.Unlock()
	if n := strings.Count(got, "hash identities with different keys"); n != 3 {
		t.Fatalf("the disagreement is logged %d times, want once per replica; log:\n%s", n, got)
	}

	// r3 gets the fleet's key: the report clears at the next round.
	ps[2].SetKeyFingerprint("aaaaaaaaaaaaaaaa")
	syncAll(t, clk, ps...)
	syncAll(t, clk, ps...)
	for _, p := range ps {
		if err := p.KeyHealth(); err != nil {
			t.Fatalf("%s still reports %v after the keys agree", p.opts.Replica, err)
		}
	}
	if _, mismatch := obs.last(); mismatch {
		t.Fatal("the mismatch metric stays set after the keys agree")
	}
}

// TestLiveCountsTheFleetsReplicas: Live (the count a store failing open
// divides its limits by) follows the replicas that publish, whether or not
// they carry traffic, drops a replica that leaves at once and one that died
// after the report TTL, and keeps the last count while the exchange is
// unreachable (as it is when the store is).
func TestLiveCountsTheFleetsReplicas(t *testing.T) {
	clk := testingclock.NewFakeClock(simT0)
	ex := NewMemoryExchange(clk)
	r1 := newTestPacer(t, clk, ex, "r1", Options{})
	r2 := newTestPacer(t, clk, ex, "r2", Options{})
	r3 := newTestPacer(t, clk, ex, "r3", Options{})
	if n := r1.Live(); n != 1 {
		t.Fatalf("Live() = %d before any round, want 1", n)
	}
	syncAll(t, clk, r1, r2, r3)
	syncAll(t, clk, r1, r2, r3)
	if n := r1.Live(); n != 3 {
		t.Fatalf("Live() = %d with three idle replicas publishing, want 3", n)
	}

	// r3 stops cleanly: it withdraws at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r3.Run(ctx)
	syncAll(t, clk, r1, r2)
	if n := r1.Live(); n != 2 {
		t.Fatalf("Live() = %d right after r3 left, want 2", n)
	}

	// r2 dies: it counts until its report expires (TTL, three periods).
	syncAll(t, clk, r1)
	syncAll(t, clk, r1)
	syncAll(t, clk, r1)
	syncAll(t, clk, r1)
	if n := r1.Live(); n != 1 {
		t.Fatalf("Live() = %d four periods after r2 died, want 1", n)
	}

	syncAll(t, clk, r1, r2)
	syncAll(t, clk, r1, r2)
	ex.SetDown(true)
	for range 10 {
		_ = r1.Sync(context.Background())
		clk.Step(DefaultPeriod)
	}
	if n := r1.Live(); n != 2 {
		t.Fatalf("Live() = %d while the exchange is down, want the last count 2", n)
	}
}
