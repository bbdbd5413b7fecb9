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
	bands   [fairqueue.MaxBands]int32
}

// add counts one more for c, returning whether c's tenant was counted (a
// remove must then name it).
func (cs *claims) add(c *Claim, limit int) bool {
	cs.bands[bandOf(c)]++
	h, ok := cs.tenants[c.Tenant]
	if !ok && len(cs.tenants) >= limit {
		return false
	}
	if cs.tenants == nil {
		cs.tenants = make(map[string]holding)
	}
	cost := costOf(c)
	cs.tenants[c.Tenant] = holding{n: h.n + 1, weight: weightOf(c), cost: h.cost + cost}
	cs.cost += cost
	return true
}

// remove undoes an add of cost in band, and of tenant unless tenant is "".
func (cs *claims) remove(tenant string, band int, cost int64) {
	cs.bands[band]--
	if tenant == "" {
		return
	}
	cs.cost -= cost
	h := cs.tenants[tenant]
	if h.n <= 1 {
		delete(cs.tenants, tenant)
		return
	}
	h.n--
	h.cost -= cost
	cs.tenants[tenant] = h
}

func bandOf(c *Claim) int { return min(max(c.Band, 0), fairqueue.MaxBands-1) }

func weightOf(c *Claim) int32 { return int32(min(max(c.Weight, 1), fairqueue.MaxWeight)) }

// costOf bounds a claim's cost as the fair queue bounds a grant's.
func costOf(c *Claim) int64 { return min(max(c.Cost, 1), fairqueue.MaxCost) }

// holders is a backend's claims on its slots.
type holders struct {
	mu sync.Mutex
	claims
}

// waiters is the claims of the requests waiting for a slot on any backend
// of the Tracker (every request of a config has the same candidates).
type waiters struct {
	mu sync.Mutex
	claims
}

// Waiting records that a request of c waits for a slot until the returned
// func is called (once; later calls do nothing). Its tenant then counts in
// every backend's shares, and its band keeps lower bands from overdrafting
// past it. An anonymous Claim is not recorded.
func (t *Tracker) Waiting(c Claim) (done func()) {
	if c.Tenant == "" {
		return func() {}
	}
	w := &t.waiters
	w.mu.Lock()
	counted := w.add(&c, t.maxTenants)
	w.mu.Unlock()
	tenant, band, cost := "", bandOf(&c), costOf(&c)
	if counted {
		tenant = c.Tenant
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			w.remove(tenant, band, cost)
			w.mu.Unlock()
		})
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
	if !counted && len(b.holders.tenants) >= t.maxTenants {
		return false // its slots could not be counted
	}
	// Under its weighted share, among the tenants holding or waiting for
	// slots (itself included), of the cost of the slots held: with unit
	// costs, of the slots.
	weight := int64(weightOf(c))
	total := weight
	for tenant, h := range b.holders.tenants {
		if tenant != c.Tenant {
			total += int64(h.weight)
		}
	}
	for tenant, h := range t.waiters.tenants {
		if _, holds := b.holders.tenants[tenant]; !holds && tenant != c.Tenant {
			total += int64(h.weight)
		}
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
	b.holders.mu.Lock()
	counted := b.holders.add(c, b.t.maxTenants)
	b.holders.mu.Unlock()
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
	b.holders.mu.Lock()
	b.holders.remove(s.tenant, int(s.band), s.cost)
	b.holders.mu.Unlock()
}
