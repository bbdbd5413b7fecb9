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

	"github.com/fairqueue/fairqueue/dataplane/config"
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
	if err := f.tr.Apply([]Backend{{Name: "a", MaxInFlight: 64, Saturation: saturation(f.srv.URL+"/metrics", signals...)}}); err != nil {
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
