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
	"sync"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
)

// Claim says whom a slot is for, so that a backend held back by its
// saturation window can still take a request of a tenant under its share or
// of a higher band at once (see the package doc's Overdraft). The zero
// Claim is anonymous: it is not counted per tenant and never overdrafts.
type Claim struct {
	// Tenant is the fair queue's tenant key; "" for none.
	Tenant string
	// Band is the index of the band the request waits in, 0 the highest.
	Band int
	// Weight is the tenant's weight; values below 1 count as 1.
	Weight int
	// Cost is what the request's slot counts for in its tenant's share:
	// its cost in the fair queue (1, or its tokens with cost: Tokens, so
	// that a long prompt holds more of the backend than a short one).
	// Values below 1 count as 1.
	Cost int64
}

// Overdraft bounds: at most max(MinOverdraft, window/OverdraftDivisor)
// slots above a backend's window at once, and never above maxInFlight.
//
// An overdraft slot is repaid by the next release, which then admits no one
// (the count is still at the window), so the overdrafts outstanding drain
// at the backends' release rate; the reserve need only cover the requests
// of under-share tenants arriving between two releases. A sixteenth of the
// window is about 6% more requests in the batch, within the 10% of KV cache
// a vllm:kv_cache_usage_perc max of 0.9 leaves free; two at least, so that
// two light tenants each get one on a small window.
const (
	MinOverdraft     = 2
	OverdraftDivisor = 16
)

// reserve is the overdraft allowed on a window of limit slots.
func reserve(limit int64) int64 { return max(MinOverdraft, limit/OverdraftDivisor) }

// holding is one tenant's slots at a backend, or its requests waiting for
// one, their cost, and the weight it last claimed with.
type holding struct {
	n      int32
	weight int32
	cost   int64
}

// claims is a bounded count of slots (or waiters) per tenant and per band.
// Entries leave when their count returns to 0; at most limit tenants are
// counted, and a tenant beyond that is not (it never overdrafts, and others'
// shares do not see it). The zero value is ready; guard it with a mutex.
type claims struct {
	tenants map[string]holding
	cost    int64 // of the tenants counted
	weight  int64 // of the tenants counted, each as it last claimed
	bands   [fairqueue.MaxBands]int32
}

// add counts one more for c. It returns whether c's tenant was counted (a
// remove must then name it) and the weight its entry had before, 0 for a
// new entry.
func (cs *claims) add(c *Claim, limit int) (counted bool, was int32) {
	cs.bands[bandOf(c)]++
	h, ok := cs.tenants[c.Tenant]
	if !ok && len(cs.tenants) >= limit {
		return false, 0
	}
	if cs.tenants == nil {
		cs.tenants = make(map[string]holding)
	}
	cost, weight := costOf(c), weightOf(c)
	cs.tenants[c.Tenant] = holding{n: h.n + 1, weight: weight, cost: h.cost + cost}
	cs.cost += cost
	cs.weight += int64(weight - h.weight)
	return true, h.weight
}

// remove undoes an add of cost in band, and of tenant unless tenant is "".
// It returns the weight of tenant's entry if that entry left, else 0.
func (cs *claims) remove(tenant string, band int, cost int64) (left int32) {
	cs.bands[band]--
	if tenant == "" {
		return 0
	}
	cs.cost -= cost
	h := cs.tenants[tenant]
	if h.n <= 1 {
		delete(cs.tenants, tenant)
		cs.weight -= int64(h.weight)
		return h.weight
	}
	h.n--
	h.cost -= cost
	cs.tenants[tenant] = h
	return 0
}

// changes reports whether adding c would make an entry of cs enter or
// change weight: only then, or when an entry leaves, do the backends' sums
// of waiting weight move.
func (cs *claims) changes(c *Claim, limit int) bool {
	h, ok := cs.tenants[c.Tenant]
	if !ok {
		return len(cs.tenants) < limit
	}
	return h.weight != weightOf(c)
}

func bandOf(c *Claim) int { return min(max(c.Band, 0), fairqueue.MaxBands-1) }

func weightOf(c *Claim) int32 { return int32(min(max(c.Weight, 1), fairqueue.MaxWeight)) }

// costOf bounds a claim's cost as the fair queue bounds a grant's.
func costOf(c *Claim) int64 { return min(max(c.Cost, 1), fairqueue.MaxCost) }

// holders is a backend's claims on its slots.
//
// A share needs the weight of every tenant holding slots or waiting for
// one; summing it on each refused acquire would scan up to twice
// maxTenants entries under both locks, at every arrival and wake attempt
// of a flood. So the sums are kept as entries come and go: claims.weight
// for the holders and the waiters, and here the waiters' weight of the
// tenants both holding here and waiting, so that the waiters holding
// nothing here weigh Tracker.waiters.weight less waitingHeld.
type holders struct {
	mu sync.Mutex
	claims
	// waitingHeld is the sum of the waiters' weight of the tenants counted
	// here that are also waiting. Guarded by mu and Tracker.waiters.mu
	// together.
	waitingHeld int64
}

// waiters is the claims of the requests waiting for a slot on any backend
// of the Tracker (every request of a config has the same candidates).
type waiters struct {
	mu sync.Mutex
	claims
}

// Locking: a backend's holders.mu before the waiters' mu, and holders of
// several backends in name order (snapshot.locking), so that Waiting,
// which moves every backend's waitingHeld, and hold, unhold and
// mayOverdraft, which lock one backend, never wait on each other in a
// circle.

// Waiting records that a request of c waits for a slot until the returned
// func is called (once; later calls do nothing). Its tenant then counts in
// every backend's shares, and its band keeps lower bands from overdrafting
// past it. An anonymous Claim is not recorded.
func (t *Tracker) Waiting(c Claim) (done func()) {
	if c.Tenant == "" {
		return func() {}
	}
	counted := t.wait(&c)
	tenant, band, cost := "", bandOf(&c), costOf(&c)
	if counted {
		tenant = c.Tenant
	}
	var once sync.Once
	return func() { once.Do(func() { t.unwait(tenant, band, cost) }) }
}

// wait counts a waiter of c, returning whether its tenant was counted.
func (t *Tracker) wait(c *Claim) bool {
	w, limit := &t.waiters, t.tenantLimit()
	w.mu.Lock()
	if !w.changes(c, limit) {
		counted, _ := w.add(c, limit)
		w.mu.Unlock()
		return counted
	}
	w.mu.Unlock()
	bs := t.lockClaims()
	defer t.unlockClaims(bs)
	counted, was := w.add(c, limit)
	if d := int64(weightOf(c) - was); counted && d != 0 {
		for _, b := range bs {
			if _, holds := b.holders.tenants[c.Tenant]; holds {
				b.holders.waitingHeld += d
			}
		}
	}
	return counted
}

// unwait undoes a wait of tenant ("" if it was not counted), band and cost.
func (t *Tracker) unwait(tenant string, band int, cost int64) {
	w := &t.waiters
	w.mu.Lock()
	if tenant == "" || w.tenants[tenant].n > 1 {
		w.remove(tenant, band, cost)
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	bs := t.lockClaims()
	defer t.unlockClaims(bs)
	if left := int64(w.remove(tenant, band, cost)); left != 0 {
		for _, b := range bs {
			if _, holds := b.holders.tenants[tenant]; holds {
				b.holders.waitingHeld -= left
			}
		}
	}
}

// lockClaims locks the holders of every backend in force, then the
// waiters, and returns the backends locked. The snapshot is checked again
// under the locks: a backend added since holds nothing yet, and a hold
// there after this sees the waiters as this leaves them.
func (t *Tracker) lockClaims() []*backend {
	for {
		snap := t.current.Load()
		for _, b := range snap.locking {
			b.holders.mu.Lock()
		}
		t.waiters.mu.Lock()
		if t.current.Load() == snap {
			return snap.locking
		}
		t.unlockClaims(snap.locking)
	}
}

// unlockClaims undoes lockClaims.
func (t *Tracker) unlockClaims(bs []*backend) {
	t.waiters.mu.Unlock()
	for _, b := range bs {
		b.holders.mu.Unlock()
	}
}

// mayOverdraft reports whether c may take a slot on b with n in flight at
// or above limit, b's window (see the package doc's Overdraft).
func (b *backend) mayOverdraft(c *Claim, n, limit, maxInFlight int64) bool {
	if c.Tenant == "" || n >= min(maxInFlight, limit+reserve(limit)) {
		return false
	}
	band := bandOf(c)
	t := b.t
	b.holders.mu.Lock()
	defer b.holders.mu.Unlock()
	t.waiters.mu.Lock()
	defer t.waiters.mu.Unlock()
	if b.retired.Load() {
		// Waiting no longer keeps b's sums; nothing bounds b now anyway.
		return false
	}
	for i := range band {
		if t.waiters.bands[i] > 0 {
			return false // no barging past a higher band's waiter
		}
	}
	for i := band + 1; i < len(b.holders.bands); i++ {
		if b.holders.bands[i] > 0 {
			return true // a lower band holds a slot
		}
	}
	own, counted := b.holders.tenants[c.Tenant]
	if !counted && len(b.holders.tenants) >= t.tenantLimit() {
		return false // its slots could not be counted
	}
	// Under its weighted share, among the tenants holding or waiting for
	// slots (itself included, at the weight it claims with now; the
	// others at the weight they last claimed with, as holders if they
	// hold), of the cost of the slots held: with unit costs, of the slots.
	weight := int64(weightOf(c))
	total := weight + b.holders.weight - int64(own.weight) + t.waiters.weight - b.holders.waitingHeld
	if !counted {
		total -= int64(t.waiters.tenants[c.Tenant].weight)
	}
	// In floating point: costs up to fairqueue.MaxCost times weights up to
	// MaxWeight per tenant may overflow an int64.
	return float64(own.cost)*float64(total) < float64(b.holders.cost)*float64(weight)
}

// repay takes one slot off the overdraft outstanding, if any: a release
// while b is over its window admits no one, so it repays an overdraft
// slot, whichever slot it was.
func (b *backend) repay() {
	for {
		o := b.over.Load()
		if o <= 0 || b.over.CompareAndSwap(o, o-1) {
			return
		}
	}
}

// hold counts s, just taken on b for c. A backend without signals never
// has a window to overdraft, so its slots are not counted: the fast path
// stays a compare-and-swap. (A slot taken before a reload gave its backend
// signals is not counted until it is released.)
func (b *backend) hold(s *Slot, c *Claim) {
	s.claimed, s.tenant, s.band = false, "", 0
	if c.Tenant == "" || b.poller.Load() == nil {
		return
	}
	h := &b.holders
	h.mu.Lock()
	counted, was := h.add(c, b.t.tenantLimit())
	if counted && was == 0 {
		w := &b.t.waiters
		w.mu.Lock()
		h.waitingHeld += int64(w.tenants[c.Tenant].weight)
		w.mu.Unlock()
	}
	h.mu.Unlock()
	s.claimed, s.band, s.cost = true, uint8(bandOf(c)), costOf(c)
	if counted {
		s.tenant = c.Tenant
	}
}

// unhold undoes hold for s, being released.
func (b *backend) unhold(s *Slot) {
	if !s.claimed {
		return
	}
	h := &b.holders
	h.mu.Lock()
	if h.remove(s.tenant, int(s.band), s.cost) != 0 {
		w := &b.t.waiters
		w.mu.Lock()
		h.waitingHeld -= int64(w.tenants[s.tenant].weight)
		w.mu.Unlock()
	}
	h.mu.Unlock()
}
