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
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// claimed is a test's slots on backend "a" of a poll fixture, by claim.
type claimed struct {
	t     *testing.T
	f     *pollFixture
	slots map[string][]*Slot
}

func newClaimed(t *testing.T, f *pollFixture) *claimed {
	c := &claimed{t: t, f: f, slots: map[string][]*Slot{}}
	t.Cleanup(func() {
		for _, ss := range c.slots {
			for _, s := range ss {
				s.Release()
			}
		}
	})
	return c
}

// take acquires one slot for c and checks the result.
func (h *claimed) take(c Claim, want Result) {
	h.t.Helper()
	s := new(Slot)
	if r := h.f.tr.AcquireFor(s, c, "a"); r != want {
		h.t.Fatalf("acquire for %+v with %d in flight: %v, want %v", c, inFlight(h.f.tr, "a"), r, want)
	}
	h.slots[c.Tenant] = append(h.slots[c.Tenant], s)
}

// release gives back k of tenant's held slots.
func (h *claimed) release(tenant string, k int) {
	for _, s := range h.slots[tenant] {
		if k > 0 && s.Backend() != "" {
			s.Release()
			k--
		}
	}
}

// windowed returns a poll fixture whose backend "a" (maxInFlight 64) has a
// window of 10 from its signals, with heavy's 10 slots in flight.
func windowed(t *testing.T, heavy Claim) (*pollFixture, *claimed) {
	t.Helper()
	f := newPollFixture(t, vllmMetrics(0, 0.5), Options{})
	signals := []config.Signal{{Metric: "vllm:num_requests_waiting", Max: 4}}
	if err := f.tr.Apply([]Backend{{Name: "a", MaxInFlight: 64, Saturation: saturation(f.srv.URL+"/metrics", signals...)}}, 0); err != nil {
		t.Fatal(err)
	}
	f.waitPolls(1) // the restarted poller's first reading
	h := newClaimed(t, f)
	for range 10 {
		h.take(heavy, Acquired)
	}
	f.tick() // under every max with 10 in flight
	h.take(heavy, Acquired)
	h.take(heavy, Acquired)
	f.srv.set(vllmMetrics(5, 0.5))
	f.tick() // over: a window of the 10 the last clear reading saw
	h.release(heavy.Tenant, 2)
	h.take(heavy, Saturated)
	return f, h
}

// TestUnderShareTenantOverdraftsTheWindow: a backend held back by its
// saturation window still takes a tenant under its weighted share at once,
// up to the reserve above the window; a tenant over its share waits; a
// release repays the overdraft first; anonymous requests never overdraft.
func TestUnderShareTenantOverdraftsTheWindow(t *testing.T) {
	heavy := Claim{Tenant: "heavy", Weight: 1}
	light1, light2, light3 := Claim{Tenant: "light1", Weight: 1}, Claim{Tenant: "light2", Weight: 1}, Claim{Tenant: "light3", Weight: 1}
	f, h := windowed(t, heavy)

	h.take(Claim{}, Saturated) // anonymous: never
	h.take(light1, Acquired)   // 0 held, share 5 of 10: at once, 11 in flight
	h.take(heavy, Saturated)   // 10 held, share 10/3
	h.take(light2, Acquired)   // 12 in flight: the reserve of max(2, 10/16) is used up
	h.take(light3, Saturated)
	if got := inFlight(f.tr, "a"); got != 12 {
		t.Fatalf("%d in flight, want the window 10 plus the reserve 2", got)
	}
	wantOverdraft(t, f.tr, 2)

	wakes := f.rm.count()
	h.release("heavy", 1) // 11: an overdraft slot comes back, the window is still full
	if f.rm.count() != wakes+1 {
		t.Fatal("a release on a contended backend did not wake the waiters")
	}
	wantOverdraft(t, f.tr, 1)
	h.take(heavy, Saturated) // heavy waits until in flight is under the window
	h.take(light3, Acquired) // light3 is under its share: the freed reserve is its
	wantOverdraft(t, f.tr, 2)
	h.release("light1", 1)
	h.release("light2", 1)
	h.release("light3", 1) // 9 in flight, under the window
	wantOverdraft(t, f.tr, 0)
	h.take(heavy, Acquired)
	h.take(heavy, Saturated)
	wantOverdraft(t, f.tr, 0)
}

// wantOverdraft fails t unless backend "a" reports want overdraft slots
// outstanding (the fairqueue_backend_overdraft gauge).
func wantOverdraft(t *testing.T, tr *Tracker, want int) {
	t.Helper()
	for _, st := range tr.Stats() {
		if st.Backend == "a" {
			if st.Overdraft != want {
				t.Fatalf("overdraft outstanding %d, want %d", st.Overdraft, want)
			}
			return
		}
	}
	t.Fatal("no backend a in the tracker's stats")
}

// TestOverdraftNeverPassesMaxInFlight: with no window (maxInFlight alone
// decides) nobody overdrafts, and a window's reserve stops at
// maxInFlight.
func TestOverdraftNeverPassesMaxInFlight(t *testing.T) {
	heavy, light := Claim{Tenant: "heavy", Weight: 1}, Claim{Tenant: "light", Weight: 1}
	f := newPollFixture(t, vllmMetrics(0, 0.5), Options{}) // maxInFlight 8, never saturated
	h := newClaimed(t, f)
	for range 8 {
		h.take(heavy, Acquired)
	}
	h.take(light, Saturated)

	// A window of 7 under maxInFlight 8: one more at most, not the reserve of 2.
	f.tick() // clear with 8 in flight
	f.srv.set(vllmMetrics(5, 0.5))
	f.tick() // over: the window is 7
	h.release("heavy", 2)
	h.take(Claim{Tenant: "l1", Weight: 1}, Acquired)
	h.take(Claim{Tenant: "l2", Weight: 1}, Acquired)
	h.take(Claim{Tenant: "l3", Weight: 1}, Saturated)
	if got := inFlight(f.tr, "a"); got != 8 {
		t.Fatalf("%d in flight, want maxInFlight 8", got)
	}
}

// TestOverdraftShareCountsWaitersAndWeights: the share is of the window
// among the tenants holding or waiting for slots, by weight.
func TestOverdraftShareCountsWaitersAndWeights(t *testing.T) {
	a, b := Claim{Tenant: "a", Weight: 1}, Claim{Tenant: "b", Weight: 1}
	f, h := windowed(t, b) // b holds all 10
	h.release("b", 4)
	for range 4 {
		h.take(a, Acquired) // under the window
	}
	// a holds 4, b 6: a's share of 10 among two is 5.
	done := f.tr.Waiting(Claim{Tenant: "c", Weight: 1})
	h.take(a, Saturated) // c waits: a's share among three is 10/3
	done()
	done() // once only
	f.tr.waiters.mu.Lock()
	n, band := len(f.tr.waiters.tenants), f.tr.waiters.bands[0]
	f.tr.waiters.mu.Unlock()
	if n != 0 || band != 0 {
		t.Fatalf("after the wait: %d tenants and %d requests waiting, want none", n, band)
	}
	h.take(a, Acquired) // c gone: 4 < 5
	h.release("a", 1)

	// Weight: b, weight 3, holds 6 of 10 with a (1) holding 4: b's share is 7.5.
	h.take(Claim{Tenant: "b", Weight: 3}, Acquired)
}

// TestHigherBandOverdraftsLowerBandDoesNot: a request of a band above a
// slot holder's takes a slot at once whatever its share; a lower band
// never overdrafts while a higher band's request waits.
func TestHigherBandOverdraftsLowerBandDoesNot(t *testing.T) {
	batch := Claim{Tenant: "heavy", Band: 1, Weight: 1}
	interactive := Claim{Tenant: "chat", Band: 0, Weight: 1}
	f, h := windowed(t, batch)
	h.release("heavy", 6)
	for range 6 {
		h.take(interactive, Acquired) // under the window: chat 6, heavy 4
	}
	// chat is over its share (5 of 10) but above heavy's band.
	h.take(interactive, Acquired)
	h.release("chat", 1)

	// Another batch tenant, under its share, may overdraft; not while an
	// interactive request waits.
	other := Claim{Tenant: "other", Band: 1, Weight: 1}
	done := f.tr.Waiting(interactive)
	h.take(other, Saturated)
	done()
	h.take(other, Acquired)

	// Without a lower band holding, chat's band gives it nothing: over its
	// share, it waits.
	h.release("heavy", 4)
	h.release("other", 1)
	for range 4 {
		h.take(interactive, Acquired) // chat holds all 10
	}
	h.take(interactive, Saturated)
}

// TestTenantCountsAreBoundedAndEmptied: per-tenant counts stay within
// MaxTenants and an entry leaves when its tenant's count returns to 0; an
// uncounted tenant still gets slots under the window, never an overdraft.
func TestTenantCountsAreBoundedAndEmptied(t *testing.T) {
	f := newPollFixture(t, vllmMetrics(0, 0.5), Options{MaxTenants: 2})
	h := newClaimed(t, f)
	for _, tn := range []string{"a", "b", "c", "a"} {
		h.take(Claim{Tenant: tn}, Acquired)
	}
	b := f.tr.current.Load().byName["a"]
	count := func() (int, int32) {
		b.holders.mu.Lock()
		defer b.holders.mu.Unlock()
		return len(b.holders.tenants), b.holders.bands[0]
	}
	if n, band := count(); n != 2 || band != 4 {
		t.Fatalf("%d tenants counted, %d slots in band 0; want 2 (MaxTenants) and 4", n, band)
	}
	// A window of 3 under 4 in flight: c, holding one but not counted,
	// could not be told under its share, so it waits.
	f.tick()
	f.srv.set(vllmMetrics(5, 0.5))
	f.tick()
	h.take(Claim{Tenant: "c"}, Saturated)
	h.take(Claim{Tenant: "d"}, Saturated)
	h.take(Claim{Tenant: "b"}, Acquired) // b, counted, holds 1 of a share of 1.5
	for _, tn := range []string{"a", "b", "c"} {
		h.release(tn, 2)
	}
	if n, band := count(); n != 0 || band != 0 {
		t.Fatalf("after every release: %d tenants counted, %d slots in band 0; want none", n, band)
	}
}

// TestOverdraftSlotsAndTheWindow: a reading under every max grows the
// window by one from what is in flight less the overdraft slots (they are
// not the server taking more); a reading over a max cuts it to one below
// everything in flight, overdraft slots included (they are in the server's
// batch).
func TestOverdraftSlotsAndTheWindow(t *testing.T) {
	heavy := Claim{Tenant: "heavy", Weight: 1}
	f, h := windowed(t, heavy)
	h.take(Claim{Tenant: "light1", Weight: 1}, Acquired)
	h.take(Claim{Tenant: "light2", Weight: 1}, Acquired) // 12 in flight, 2 of them overdraft
	f.srv.set(vllmMetrics(0, 0.5))
	f.tick() // under: the window grows from 10 to 11, not to 13
	h.release("light1", 1)
	h.release("light2", 1)
	h.take(heavy, Acquired)
	h.take(heavy, Saturated)
	if got := inFlight(f.tr, "a"); got != 11 {
		t.Fatalf("%d in flight, want a window of 11", got)
	}

	// Overdraft slots held while heavy's releases repay them.
	h.take(Claim{Tenant: "light1", Weight: 1}, Acquired)
	h.take(Claim{Tenant: "light2", Weight: 1}, Acquired) // 13
	h.release("heavy", 2)                                // 11: 9 heavy, 2 overdraft
	f.srv.set(vllmMetrics(5, 0.5))
	f.tick() // over: one below the 11 in flight
	h.release("light1", 1)
	h.release("light2", 1) // 9
	h.take(heavy, Acquired)
	h.take(heavy, Saturated)
	if got := inFlight(f.tr, "a"); got != 10 {
		t.Fatalf("%d in flight, want a window of 10", got)
	}
}

// TestOverdraftShareIsByCost: with costs (cost: Tokens), the share is of
// the cost held, so a tenant of short prompts holding more slots than a
// tenant of long ones is still under its share.
func TestOverdraftShareIsByCost(t *testing.T) {
	heavy := Claim{Tenant: "heavy", Weight: 1, Cost: 3000}
	light := Claim{Tenant: "light", Weight: 1, Cost: 100}
	_, h := windowed(t, heavy)
	h.release("heavy", 6)
	for range 6 {
		h.take(light, Acquired) // under the window: heavy 4 (12000), light 6 (600)
	}
	h.take(light, Acquired)  // 6 of 10 slots, but 600 of 12600
	h.take(heavy, Saturated) // 12000 of 12700

	// The same slots at unit cost: 6 of 10, over its share.
	heavy.Cost, light.Cost = 1, 1
	_, h = windowed(t, heavy)
	h.release("heavy", 6)
	for range 6 {
		h.take(light, Acquired)
	}
	h.take(light, Saturated)
}

// scanDecision is the overdraft decision above the prechecks of
// mayOverdraft as it was before the running sums, from the entries of a
// backend's holders and of the waiters: the weights of every tenant holding
// or waiting summed at each call. It is the reference of
// TestOverdraftSumsDecideAsTheScan and the before of
// BenchmarkRefusedOverdraftDecision. Call it with both locked.
func scanDecision(held, waiting *claims, c *Claim, limit int) bool {
	band := bandOf(c)
	positive := func(n int32) bool { return n > 0 }
	switch {
	case slices.ContainsFunc(waiting.bands[:band], positive):
		return false
	case slices.ContainsFunc(held.bands[band+1:], positive):
		return true
	}
	mine, holds := held.tenants[c.Tenant]
	if !holds && len(held.tenants) >= limit {
		return false
	}
	weight := int64(weightOf(c))
	total := weight
	for tenant, h := range held.tenants {
		if tenant != c.Tenant {
			total += int64(h.weight)
		}
	}
	for tenant, h := range waiting.tenants {
		if _, held := held.tenants[tenant]; !held && tenant != c.Tenant {
			total += int64(h.weight)
		}
	}
	return float64(mine.cost)*float64(total) < float64(held.cost)*float64(weight)
}

// scanDecides is scanDecision on b's entries, locking them.
func (b *backend) scanDecides(c *Claim) bool {
	b.holders.mu.Lock()
	defer b.holders.mu.Unlock()
	b.t.waiters.mu.Lock()
	defer b.t.waiters.mu.Unlock()
	return scanDecision(&b.holders.claims, &b.t.waiters.claims, c, b.t.tenantLimit())
}

// signalled returns backends of the given names with saturation signals
// (so that their slots are counted per tenant) read from an address that
// refuses: the window stays as the test sets it.
func signalled(names ...string) []Backend {
	sat := &config.Saturation{MetricsURL: "http://127.0.0.1:1/metrics", Interval: config.Duration{Duration: time.Hour},
		Timeout: config.Duration{Duration: time.Second}, StaleAfter: config.Duration{Duration: time.Hour},
		Signals: []config.Signal{{Metric: "vllm:num_requests_waiting", Max: 0}}}
	bs := make([]Backend, len(names))
	for i, n := range names {
		bs[i] = Backend{Name: n, MaxInFlight: 1 << 30, Saturation: sat}
	}
	return bs
}

// checkSums fails t unless every backend's running sums equal the sums of
// the entries they stand for.
func checkSums(t *testing.T, tr *Tracker) {
	t.Helper()
	bs := tr.lockClaims()
	defer tr.unlockClaims(bs)
	w := &tr.waiters
	all := func(string) bool { return true }
	if got, want := w.weight, sumWeights(w.tenants, all); got != want {
		t.Fatalf("waiters weigh %d, their entries %d", got, want)
	}
	for _, b := range bs {
		h := &b.holders
		if got, want := h.weight, sumWeights(h.tenants, all); got != want {
			t.Fatalf("backend %s: holders weigh %d, their entries %d", b.name, got, want)
		}
		holds := func(tenant string) bool { _, ok := h.tenants[tenant]; return ok }
		if got, want := h.waitingHeld, sumWeights(w.tenants, holds); got != want {
			t.Fatalf("backend %s: waiters holding there weigh %d, their entries %d", b.name, got, want)
		}
	}
}

// sumWeights sums the weights of the entries of cs whose tenant is kept.
func sumWeights(cs map[string]holding, keep func(tenant string) bool) int64 {
	var s int64
	for tenant, h := range cs {
		if keep(tenant) {
			s += int64(h.weight)
		}
	}
	return s
}

// TestOverdraftSumsDecideAsTheScan: over random sequences of requests
// starting and ending waits and taking and releasing slots on three
// backends, of tenants changing weight, band and cost between claims,
// beyond MaxTenants and across reloads that change it, the overdraft
// decided from the running sums is the one the scan of every tenant
// decided, for every tenant asking, and the sums are those of the entries.
func TestOverdraftSumsDecideAsTheScan(t *testing.T) {
	names := []string{"a", "b", "c"}
	tenants := []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6"}
	for seed := range int64(20) {
		rng := rand.New(rand.NewPCG(uint64(seed), 0))
		tr := New(Options{Clock: clocktesting.NewFakeClock(time.Unix(1_000_000, 0)), MaxTenants: 4})
		if err := tr.Apply(signalled(names...), 0); err != nil {
			t.Fatal(err)
		}
		// Mostly band 0: a lower band holding decides before the shares.
		claim := func() Claim {
			return Claim{Tenant: tenants[rng.IntN(len(tenants))], Weight: rng.IntN(5), Band: rng.IntN(8) / 6, Cost: rng.Int64N(2000)}
		}
		var dones []func()
		var slots []*Slot
		for step := range 300 {
			switch op := rng.IntN(11); {
			case op < 3:
				dones = append(dones, tr.Waiting(claim()))
			case op < 5 && len(dones) > 0:
				i := rng.IntN(len(dones))
				dones[i]()
				if rng.IntN(4) == 0 {
					dones[i]() // a second call does nothing
				}
				dones = slices.Delete(dones, i, i+1)
			case op < 8:
				s := new(Slot)
				if r := tr.AcquireFor(s, claim(), names[rng.IntN(len(names))]); r != Acquired {
					t.Fatalf("seed %d step %d: acquire under maxInFlight: %v", seed, step, r)
				}
				slots = append(slots, s)
			case op < 10 && len(slots) > 0:
				i := rng.IntN(len(slots))
				slots[i].Release()
				slots = slices.Delete(slots, i, i+1)
			default:
				// A reload keeping the backends, with another bound.
				if err := tr.Apply(signalled(names...), 2+rng.IntN(4)); err != nil {
					t.Fatal(err)
				}
			}
			checkSums(t, tr)
			for _, b := range tr.current.Load().order {
				for _, tenant := range tenants {
					c := claim()
					c.Tenant = tenant
					// 100 in flight at a window of 100: every precheck passes.
					if got, want := b.mayOverdraft(&c, 100, 100, 1<<30), b.scanDecides(&c); got != want {
						t.Fatalf("seed %d step %d: backend %s, claim %+v: overdraft %t from the sums, %t from the scan",
							seed, step, b.name, c, got, want)
					}
				}
			}
		}
		for _, s := range slots {
			s.Release()
		}
		for _, d := range dones {
			d()
		}
		checkSums(t, tr)
		tr.Close()
	}
}

// TestOverdraftSumsUnderConcurrentReloads: waits, slots and overdraft
// decisions on several goroutines while reloads add, remove and reorder
// backends neither deadlock (Waiting locks every backend's holders) nor
// leave a sum unlike its entries (as a Waiting that missed a backend added
// meanwhile would: most runs catch one without lockClaims' second look at
// the snapshot); a removed backend lends nothing.
func TestOverdraftSumsUnderConcurrentReloads(t *testing.T) {
	tr := New(Options{Clock: clocktesting.NewFakeClock(time.Unix(1_000_000, 0)), MaxTenants: 8})
	defer tr.Close()
	// "d" leaves and comes back as a new backend again and again.
	sets := [][]string{{"a", "b", "c"}, {"c", "b", "d"}, {"d", "a"}, {"b", "c"}, {"d", "b"}}
	if err := tr.Apply(signalled(sets[0]...), 0); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			// Each goroutine keeps a few waits and slots at once, so that
			// tenants hold and wait across reloads.
			var dones [3]func()
			var slots [3]Slot
			defer func() {
				for i := range dones {
					if dones[i] != nil {
						dones[i]()
					}
					slots[i].Release()
				}
			}()
			for i := 0; ; i = (i + 1) % len(dones) {
				select {
				case <-stop:
					return
				default:
				}
				if dones[i] != nil {
					dones[i]()
				}
				c := Claim{Tenant: fmt.Sprintf("t%d", rng.IntN(6)), Weight: 1 + rng.IntN(3), Band: rng.IntN(2)}
				dones[i] = tr.Waiting(c)
				name := string(rune('a' + rng.IntN(4)))
				tr.AcquireFor(&slots[i], c, name) // releases what slots[i] held
				if b := tr.current.Load().byName[name]; b != nil {
					b.mayOverdraft(&c, 10, 10, 100)
				}
			}
		}()
	}
	for i := range 1000 {
		if err := tr.Apply(signalled(sets[i%len(sets)]...), 4+i%8); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			checkSums(t, tr)
		}
	}
	close(stop)
	testutil.WaitGroupWithin(t, 10*time.Second, "the waiting and acquiring goroutines", &wg)
	checkSums(t, tr)

	// A backend removed while a tenant holds: its sums no longer kept,
	// they never decide an overdraft.
	if err := tr.Apply(signalled(sets[0]...), 0); err != nil {
		t.Fatal(err)
	}
	var s Slot
	if r := tr.AcquireFor(&s, Claim{Tenant: "heavy"}, "a"); r != Acquired {
		t.Fatalf("acquire: %v", r)
	}
	defer s.Release()
	b := tr.current.Load().byName["a"]
	light := Claim{Tenant: "light"}
	if !b.mayOverdraft(&light, 10, 10, 100) {
		t.Fatal("a tenant holding nothing may not overdraft a backend in force")
	}
	if err := tr.Apply(signalled("b"), 0); err != nil {
		t.Fatal(err)
	}
	if b.mayOverdraft(&light, 10, 10, 100) {
		t.Fatal("a removed backend lent an overdraft")
	}
}

// TestReloadChangesTheTenantBound: Apply's maxTenants (the policy's
// fairQueuing.bounds.maxTenants) bounds the tenants counted from then on,
// on a Tracker that outlives the reload; tenants counted before stay
// counted until they leave, and zero keeps the bound.
func TestReloadChangesTheTenantBound(t *testing.T) {
	tr := New(Options{Clock: clocktesting.NewFakeClock(time.Unix(1_000_000, 0)), MaxTenants: 2})
	defer tr.Close()
	counted := func() (holding, waiting int) {
		b := tr.current.Load().byName["a"]
		bs := tr.lockClaims()
		defer tr.unlockClaims(bs)
		return len(b.holders.tenants), len(tr.waiters.tenants)
	}
	take := func(tenants ...string) {
		for _, tn := range tenants {
			s := new(Slot)
			if r := tr.AcquireFor(s, Claim{Tenant: tn}, "a"); r != Acquired {
				t.Fatalf("acquire for %s: %v", tn, r)
			}
			t.Cleanup(s.Release)
			t.Cleanup(tr.Waiting(Claim{Tenant: tn}))
		}
	}
	for _, step := range []struct {
		maxTenants int
		tenants    []string
		want       int
	}{
		{0, []string{"a1", "a2", "a3"}, 2}, // Options.MaxTenants
		{4, []string{"b1", "b2", "b3"}, 4}, // raised: two more
		{0, []string{"c1"}, 4},             // zero keeps 4
		{1, []string{"d1"}, 4},             // lowered: the 4 stay, d1 is not counted
	} {
		if err := tr.Apply(signalled("a"), step.maxTenants); err != nil {
			t.Fatal(err)
		}
		take(step.tenants...)
		if h, w := counted(); h != step.want || w != step.want {
			t.Fatalf("after Apply with maxTenants %d: %d tenants holding and %d waiting counted, want %d",
				step.maxTenants, h, w, step.want)
		}
	}
}
