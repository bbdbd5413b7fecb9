package fairqueue

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// FuzzScheduler drives the core with random enqueue (of costs from 1 to
// beyond MaxCost) / grant / complete / cancel / tick / reweight / rebound /
// adjust sequences, with priority bands (minShare, lowered requests, reloads
// that add, remove and reorder bands), and checks after every step that no
// bound is exceeded, no waiter is lost or duplicated, no waiter is granted at
// or past its deadline, a grant goes to the highest band with a ready
// tenant unless a minShare credit covers a lower band's head, virtual tags
// stay within wrap-around range of their band's virtual time, and a
// correction moves a tag no further than Adjust promises.
func FuzzScheduler(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 1, 3, 4, 9, 1, 2, 0})
	f.Add([]byte{0, 0, 0, 5, 0, 10, 1, 1, 1, 2, 2, 2, 4, 200, 1, 3, 0})
	f.Add([]byte{6, 1, 0, 0, 0, 0, 0, 0, 5, 3, 1, 2, 4, 50, 1, 1, 3, 1})
	f.Add([]byte{0, 7, 0, 9, 0, 11, 0, 13, 1, 1, 1, 4, 255, 4, 255, 1, 2, 2})
	// Costs: MaxCost and above, a refused large waiter holding its key,
	// corrections both ways.
	f.Add([]byte{0, 48, 0, 49, 0, 65, 1, 0, 2, 0, 1, 0, 2, 1, 7, 0, 7, 255, 1, 0, 4, 30, 1, 0, 2, 0})
	f.Add([]byte{0, 64, 0, 65, 1, 0, 2, 0, 1, 0, 2, 0, 1, 0, 2, 0, 1, 0, 2, 0, 7, 224, 7, 32, 1, 0, 2, 0})
	// Bands: a reload into bands, arrivals lowering their band, grants,
	// a reload that reorders and then drops the bands with waiters queued.
	f.Add([]byte{5, 1, 0, 1, 8, 2, 16, 3, 0, 4, 24, 0, 1, 0, 2, 0, 1, 0, 2, 1, 1, 0, 5, 2, 1, 0, 2, 0, 5, 0, 1, 0, 2, 0})
	f.Add([]byte{5, 3, 0, 0, 0, 1, 8, 2, 8, 3, 1, 0, 1, 0, 2, 0, 2, 0, 1, 0, 2, 0, 1, 0, 4, 30, 1, 0, 5, 5, 3, 2, 1, 0, 2, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		s := newSched(Bounds{MaxQueueDepthPerTenant: 3, MaxTotalQueued: 8, MaxTenants: 4, MaxInFlight: 2, MaxWait: 200 * time.Millisecond}, Weights{Default: 1})
		// live holds the waiters in arrival order, so every choice the
		// target makes depends on the input alone, never on map order.
		var live liveSet
		var granted []*waiter
		s.onDone = func(w *waiter) {
			if !live.has(w) {
				t.Fatalf("scheduler finished a waiter it did not hold")
			}
			if w.reason == "" {
				t.Fatalf("scheduler finished a waiter without a reason")
			}
			live.remove(w)
			s.release(w)
		}
		done := func(w *waiter) {
			live.remove(w)
			s.release(w)
		}
		now := int64(0)
		arg := func(i int) byte {
			if i < len(ops) {
				return ops[i]
			}
			return 0
		}
		for i := 0; i < len(ops); i += 2 {
			a, band := arg(i+1), int(ops[i]/8%4)
			switch ops[i] % 8 {
			case 0: // enqueue
				keys := lk("model", tenantName(int(a%3)))
				deadline := int64(noDeadline)
				if a&8 != 0 {
					deadline = now + int64(a%16)*15*ms
				}
				b, tenantsBefore := s.bounds, s.tracked()
				retryAfter := int64(a/64) * 20 * ms
				cost, size := fuzzCosts[int(a/16)%len(fuzzCosts)], fuzzCosts[int(a/4)%len(fuzzCosts)]
				arr := arrival{tenant: tenantName(int(a % 5)), dim: "user", keys: keys, deadline: deadline, retryAfter: time.Duration(retryAfter), interval: time.Duration(a%4) * time.Millisecond, cost: cost, size: size, band: band}
				w, reason, pos, est := s.enqueue(now, &arr)
				if pos < 1 {
					t.Fatalf("position %d < 1", pos)
				}
				if w != nil && est < retryAfter {
					// The wait includes the limiter's own Retry-After.
					t.Fatalf("estimate %d is shorter than the Retry-After %d it starts from", est, retryAfter)
				}
				if w == nil {
					if reason == "" {
						t.Fatalf("refusal without a reason")
					}
					if reason != ReasonWaitExceedsBudget {
						if room := s.room(now, &arr, reason); room < minRetry {
							t.Fatalf("%s refusal: room in %d, want at least %d", reason, room, minRetry)
						}
					}
					break
				}
				live.add(w)
				if w.cost != costOf(cost) || w.cost < 1 || w.cost > MaxCost || w.size < 1 || w.size > MaxCost {
					t.Fatalf("cost %d and size %d queued as %d and %d", cost, size, w.cost, w.size)
				}
				grew := s.tracked() > tenantsBefore
				if s.depth > b.MaxTotalQueued || w.t.depth > b.MaxQueueDepthPerTenant || (grew && s.tracked() > b.MaxTenants) {
					t.Fatalf("enqueue exceeded a bound: depth %d tenant depth %d tenants %d bounds %+v", s.depth, w.t.depth, s.tracked(), b)
				}
				want := s.weights.BandOf(arr.tenant)
				if band < len(s.weights.Bands) {
					want = max(want, band)
				}
				if w.t.band != want && !w.t.overflow {
					t.Fatalf("request asking for band %d queued in band %d, want %d", band, w.t.band, want)
				}
			case 1: // grant
				w := s.next(now)
				if w == nil {
					break
				}
				checkGrantBand(t, s, w)
				if !live.has(w) || w.state != stateGranted {
					t.Fatalf("granted a waiter that is not live")
				}
				if w.deadline <= now || w.readyAt > now {
					t.Fatalf("granted at %d a waiter with ready time %d and deadline %d", now, w.readyAt, w.deadline)
				}
				if s.inFlight > s.bounds.MaxInFlight {
					t.Fatalf("%d attempts in flight, bound %d", s.inFlight, s.bounds.MaxInFlight)
				}
				granted = append(granted, w)
			case 2: // complete
				if len(granted) == 0 {
					break
				}
				j := int(a) % len(granted)
				w := granted[j]
				granted = append(granted[:j], granted[j+1:]...)
				if s.complete(now, w, a&1 == 0, int64(a%5)*10*ms, nil) != outcomeRequeued {
					done(w)
				}
			case 3: // cancel the a-th live waiter, if there is one
				n := int(a) % (len(live.order) + 1)
				if n == len(live.order) {
					break
				}
				w := live.order[n]
				if w.state == stateGranted {
					for j, g := range granted {
						if g == w {
							granted = append(granted[:j], granted[j+1:]...)
							break
						}
					}
				}
				s.cancel(now, w)
				done(w)
			case 4: // tick
				now += int64(a) * ms
			case 5: // reweight, into one of the band sets
				s.setWeights(fuzzWeights(a, band), now)
			case 6: // rebound
				s.setBounds(Bounds{MaxQueueDepthPerTenant: int(a%4) + 1, MaxTotalQueued: int(a%9) + 1, MaxTenants: int(a%5) + 1, MaxInFlight: int(a%3) + 1, MaxWait: time.Duration(a%5+1) * 50 * time.Millisecond})
			case 7: // adjust
				key, delta := tenantName(int(a%5)), fuzzDeltas[int(a>>5)]
				tn := s.tenants[key]
				if tn == nil {
					s.adjust(key, delta)
					if s.tenants[key] != nil {
						t.Fatalf("Adjust of an untracked tenant added it")
					}
					break
				}
				old, d := tn.finish, min(max(delta, -MaxCost), MaxCost)
				s.adjust(key, delta)
				moved := int64(tn.finish - old)
				switch {
				case delta < 0 && (moved > 0 || moved < d*int64(tn.stride)):
					t.Fatalf("Adjust(%d) moved the finish tag by %d strides", delta, moved/int64(tn.stride))
				case delta < 0 && moved < 0 && vless(tn.finish, s.order(tn).vnow-max(tn.lastCost, 1)*tn.stride):
					t.Fatalf("a refund took the finish tag %d strides behind the virtual time, more than one grant of %d", int64(s.order(tn).vnow-tn.finish)/int64(tn.stride), tn.lastCost)
				case delta > 0 && (moved < 0 || moved > d*int64(tn.stride)):
					t.Fatalf("Adjust(%d) moved the finish tag by %d strides", delta, moved/int64(tn.stride))
				}
			}
			checkInvariants(t, s, live, len(granted))
		}
	})
}

// fuzzBands are the band sets a reweight picks from: none, two, three with
// minimum shares, and a reordered pair.
var fuzzBands = [][]Band{
	nil,
	{{Name: "hi"}, {Name: "lo", MinShare: 0.25}},
	{{Name: "hi"}, {Name: "mid", MinShare: 0.1}, {Name: "lo", MinShare: 0.3}},
	{{Name: "lo"}, {Name: "hi"}},
}

// fuzzWeights returns the weights a reweight op with argument a and band
// bits applies: weights as before, a band set, and tenants spread over it.
func fuzzWeights(a byte, band int) Weights {
	w := Weights{Default: int(a%3) + 1, ByTenant: map[string]int{tenantName(int(a % 5)): int(a%7) + 1}}
	w.Bands = fuzzBands[band]
	if len(w.Bands) > 0 {
		w.DefaultBand = int(a/8) % len(w.Bands)
		w.TenantBand = map[string]int{}
		for i := range 5 {
			w.TenantBand[tenantName(i)] = (int(a>>5) + i) % (len(w.Bands) + 1) // one index out of range
		}
	}
	return w
}

// checkGrantBand verifies that granted waiter w went to the band pick
// allows, judged just after the grant: a band above w's with a ready tenant
// is passed only when w's band's credit (before w's debit) covered its cost,
// and a lower band whose credit covers its head's cost is passed only for a
// band whose credit covered too.
func checkGrantBand(t *testing.T, s *sched, w *waiter) {
	t.Helper()
	b := w.t.band
	o := &s.orders[b]
	covered := o.share > 0 && o.credit+w.debit >= int64(w.cost)*shareOne
	for i := range s.nb {
		p := &s.orders[i]
		switch {
		case i < b && p.ready.len() > 0 && !covered:
			t.Fatalf("granted band %d while band %d had a ready tenant and no credit covered band %d", b, i, b)
		case i > b && !covered && p.share > 0 && p.ready.len() > 0 && p.credit >= int64(p.ready.top().head().cost)*shareOne:
			t.Fatalf("granted band %d by priority while band %d's credit covered its head", b, i)
		}
	}
}

// fuzzCosts are the Request.Cost values enqueue picks from: unset, unit,
// small, the largest, beyond the largest.
var fuzzCosts = []int64{0, 1, 7, MaxCost, 1 << 40}

// fuzzDeltas are the corrections Adjust picks from.
var fuzzDeltas = []int64{-1 << 40, -MaxCost, -9, -1, 1, 9, MaxCost, 1 << 40}

// liveSet is the set of waiters the scheduler holds, in arrival order.
type liveSet struct {
	order []*waiter
}

func (l *liveSet) add(w *waiter) { l.order = append(l.order, w) }

func (l *liveSet) has(w *waiter) bool { return slices.Contains(l.order, w) }

func (l *liveSet) remove(w *waiter) {
	if i := slices.Index(l.order, w); i >= 0 {
		l.order = slices.Delete(l.order, i, i+1)
	}
}

// checkInvariants verifies that the scheduler's structures agree with the set
// of live waiters: each appears exactly once in exactly one tenant queue, the
// counts and heaps are consistent, and the weight sum is exact.
func checkInvariants(t *testing.T, s *sched, live liveSet, granted int) {
	t.Helper()
	seen := map[*waiter]bool{}
	var sumW, depth, inFlightBy [MaxBands]int
	var costBy [MaxBands]uint64
	inFlight, queued, active, idle := 0, 0, 0, 0
	keys := map[LimitKey]int{}
	queues := make(map[string]*tenant, len(s.tenants)+overflowQueues)
	for key, tn := range s.tenants {
		if tn.key != key || tn.overflow || tn.lowered || tn.band != s.bandNow(tn) {
			t.Fatalf("tenant %q: key %q overflow %v lowered %v band %d", key, tn.key, tn.overflow, tn.lowered, tn.band)
		}
		queues[key] = tn
	}
	for key, tn := range s.lowered {
		if tn.key != key.tenant || tn.lowerTo != key.band || !tn.lowered || tn.overflow || tn.band != s.bandNow(tn) {
			t.Fatalf("lowered queue %v: key %q to %q band %d", key, tn.key, tn.lowerTo, tn.band)
		}
		queues[fmt.Sprintf("%s lowered to %s", key.tenant, key.band)] = tn
	}
	for b := range s.overflow {
		for i, tn := range s.overflow[b] {
			if tn != nil {
				if !tn.overflow || tn.slot != b || (tn.depth == 0 && tn.band != b) {
					t.Fatalf("overflow queue %d of band %d: marked %v, slot %d, band %d", i, b, tn.overflow, tn.slot, tn.band)
				}
				queues[fmt.Sprintf("overflow %d/%d", b, i)] = tn
			}
		}
	}
	for n, tn := s.idle.front(), 0; n != nil; n, tn = n.inIdle.nextElem(), tn+1 {
		inTable := s.tenants[n.key] == n || (n.lowered && s.lowered[loweredKey{n.key, n.lowerTo}] == n)
		if next := n.inIdle.nextElem(); !n.idle || n.depth != 0 || !inTable || (next != nil && next.inIdle.prevElem() != n) {
			t.Fatalf("idle list entry %d (%q) is not an idle tenant of the table", tn, n.key)
		}
		idle++
	}
	for key, tn := range queues {
		if tn.depth == 0 {
			if tn.place != placeNone || tn.head() != nil || (!tn.overflow && !tn.idle) {
				t.Fatalf("empty tenant %q: place %d, idle %v", key, tn.place, tn.idle)
			}
			continue
		}
		if tn.idle {
			t.Fatalf("tenant %q with waiters is on the idle list", key)
		}
		active++
		if tn.band < 0 || tn.band >= s.nb {
			t.Fatalf("queue %q in band %d of %d", key, tn.band, s.nb)
		}
		sumW[tn.band] += tn.weight
		depth[tn.band] += tn.depth
		costBy[tn.band] += tn.queuedCost
		n := 0
		var prev *waiter
		var cost uint64
		for w := tn.head(); w != nil; w = w.inQueue.nextElem() {
			cost += w.cost
			if seen[w] || !live.has(w) || w.t != tn || w.inQueue.prevElem() != prev {
				t.Fatalf("tenant %q: waiter duplicated, foreign or mislinked", key)
			}
			seen[w] = true
			switch w.state {
			case stateGranted:
				if w != tn.head() || tn.place != placeInFlight {
					t.Fatalf("granted waiter is not its tenant's head")
				}
				inFlight++
				inFlightBy[tn.band]++
			case stateQueued:
				queued++
				if w.inDeadlineHeap.idx == inDeadlineList {
					if prev := w.inDeadlines.prevElem(); (prev == nil) != (s.deadlines.list.front() == w) || (prev != nil && prev.deadline > w.deadline) {
						t.Fatalf("deadline list out of order")
					}
				} else if s.deadlines.heap.items[w.inDeadlineHeap.idx].slot.elem != w {
					t.Fatalf("queued waiter missing from the deadline index")
				}
			default:
				t.Fatalf("waiter in a tenant queue with state %d", w.state)
			}
			for _, k := range w.keys {
				keys[k]++
			}
			prev, n = w, n+1
		}
		if n != tn.depth || tn.queue.back() != prev {
			t.Fatalf("tenant %q: depth %d, counted %d", key, tn.depth, n)
		}
		if cost != tn.queuedCost {
			t.Fatalf("tenant %q: queued cost %d, counted %d", key, tn.queuedCost, cost)
		}
		o := s.order(tn)
		switch tn.place {
		case placeReady:
			if tn.inHeap.idx >= o.ready.len() {
				t.Fatalf("tenant %q not in its band's ready heap", key)
			}
			if e := o.ready.items[tn.inHeap.idx]; e.slot.elem != tn || e.key != tn.tag() {
				t.Fatalf("tenant %q not at its ready-heap index or stale finish tag", key)
			}
		case placePending:
			// Parked behind a hold, a tenant waits past its head's ready
			// time.
			if tn.inHeap.idx >= o.pending.len() {
				t.Fatalf("tenant %q not in its band's pending heap", key)
			}
			if e := o.pending.items[tn.inHeap.idx]; e.slot.elem != tn || int64(e.key) < tn.head().readyAt {
				t.Fatalf("tenant %q not at its pending-heap index or before its ready time", key)
			}
		case placeNone:
			t.Fatalf("tenant %q with waiters is in no heap", key)
		}
	}
	if len(seen) != len(live.order) || s.depth != len(live.order) {
		t.Fatalf("%d live waiters, %d in queues, depth %d: a waiter was lost or duplicated", len(live.order), len(seen), s.depth)
	}
	if active != s.active || idle+active > s.tracked()+MaxBands*overflowQueues {
		t.Fatalf("%d active queues counted, scheduler says %d; %d idle", active, s.active, idle)
	}
	if s.tracked() > s.bounds.MaxTenants && idle > 0 {
		t.Fatalf("tenant table holds %d over its bound %d with %d idle tenants left to evict", s.tracked(), s.bounds.MaxTenants, idle)
	}
	if inFlight != s.inFlight || inFlight != granted {
		t.Fatalf("in flight: counted %d, scheduler %d, test %d", inFlight, s.inFlight, granted)
	}
	if queued != s.deadlines.len() {
		t.Fatalf("deadline heap %d vs %d queued", s.deadlines.len(), queued)
	}
	placed := 0
	limit := s.creditLimit()
	for i := range s.orders {
		o := &s.orders[i]
		if sumW[i] != o.sumWeights || depth[i] != o.depth || costBy[i] != o.queuedCost || inFlightBy[i] != o.inFlight {
			t.Fatalf("band %d: weight sum %d vs %d, depth %d vs %d, cost %d vs %d, in flight %d vs %d", i, o.sumWeights, sumW[i], o.depth, depth[i], o.queuedCost, costBy[i], o.inFlight, inFlightBy[i])
		}
		if o.credit < 0 || o.credit > limit || (o.share == 0 && o.credit != 0) || (i >= s.nb && o.ready.len()+o.pending.len() != 0) {
			t.Fatalf("band %d of %d: credit %d (share %d, cap %d), %d+%d tenants", i, s.nb, o.credit, o.share, limit, o.ready.len(), o.pending.len())
		}
		placed += o.ready.len() + o.pending.len()
		checkHeap(t, "tenant", &o.ready)
		checkHeap(t, "tenant", &o.pending)
	}
	if placed+inFlight != active {
		t.Fatalf("heaps hold %d tenants plus %d in flight, %d active", placed, inFlight, active)
	}
	checkHeap(t, "deadline", &s.deadlines.heap)
	for i, e := range s.deadlines.heap.items {
		if w := e.slot.elem; int64(e.key) != w.deadline || w.inDeadlineHeap.idx != i {
			t.Fatalf("deadline heap entry %d: key %d for deadline %d, index %d", i, e.key, w.deadline, w.inDeadlineHeap.idx)
		}
	}
	checkTags(t, s, queues)
	holds := 0
	for k, ks := range s.keys {
		if h := ks.holder; h != nil {
			holds++
			if !live.has(h) || h.size <= 1 || !slices.Contains(h.keys, k) {
				t.Fatalf("key %q held by a waiter that is not live, of cost %d, or does not need it", k.Key, h.cost)
			}
		}
	}
	if holds != s.holds {
		t.Fatalf("%d keys held, scheduler counts %d", holds, s.holds)
	}
	if len(keys) != len(s.keys) {
		t.Fatalf("key table has %d keys, waiters need %d", len(s.keys), len(keys))
	}
	for k, n := range keys {
		if ks := s.keys[k]; ks == nil || ks.waiters != n {
			t.Fatalf("key %q: %d waiters counted, table says %v", k, n, ks)
		}
	}
}

// checkHeap checks the heap order of h.
func checkHeap[P any](t *testing.T, what string, h *minHeap[P]) {
	for i := 1; i < h.len(); i++ {
		if h.items[i].less(&h.items[(i-1)/4]) {
			t.Fatalf("%s heap out of order at %d", what, i)
		}
	}
}

// checkTags verifies that virtual tags stay where the wrap-around arithmetic
// is exact (see strideScale): ready finish tags within [vnow-2B, vnow+3B],
// every tenant's finish tag within 4B behind and maxLead ahead, where B is
// the largest charge of one grant.
func checkTags(t *testing.T, s *sched, queues map[string]*tenant) {
	t.Helper()
	const b = MaxCost * strideScale
	for key, tn := range queues {
		vnow := s.order(tn).vnow
		if d := int64(tn.finish - vnow); d < -4*b || d > maxLead {
			t.Fatalf("tenant %q: finish tag %d grants of MaxCost from the virtual time", key, d/b)
		}
		if tn.place == placeReady {
			if d := int64(tn.tag() - vnow); d < -2*b || d > 3*b {
				t.Fatalf("ready tenant %q: tag %d grants of MaxCost from the virtual time", key, d/b)
			}
		}
	}
}
