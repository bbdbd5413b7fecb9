package fairqueue

import (
	"testing"
	"time"
)

// FuzzScheduler drives the core with random enqueue / grant / complete /
// cancel / tick / reweight / rebound sequences and checks after every step
// that no bound is exceeded, no waiter is lost or duplicated, and no waiter is
// granted at or past its deadline.
func FuzzScheduler(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 1, 3, 4, 9, 1, 2, 0})
	f.Add([]byte{0, 0, 0, 5, 0, 10, 1, 1, 1, 2, 2, 2, 4, 200, 1, 3, 0})
	f.Add([]byte{6, 1, 0, 0, 0, 0, 0, 0, 5, 3, 1, 2, 4, 50, 1, 1, 3, 1})
	f.Add([]byte{0, 7, 0, 9, 0, 11, 0, 13, 1, 1, 1, 4, 255, 4, 255, 1, 2, 2})
	f.Fuzz(func(t *testing.T, ops []byte) {
		s := newSched(Bounds{MaxQueueDepthPerTenant: 3, MaxTotalQueued: 8, MaxTenants: 4, MaxInFlight: 2, MaxWait: 200 * time.Millisecond}, Weights{Default: 1})
		live := map[*waiter]bool{}
		var granted []*waiter
		s.onDone = func(w *waiter) {
			if !live[w] {
				t.Fatalf("scheduler finished a waiter it did not hold")
			}
			if w.reason == "" {
				t.Fatalf("scheduler finished a waiter without a reason")
			}
			delete(live, w)
			s.release(w)
		}
		done := func(w *waiter) {
			delete(live, w)
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
			a := arg(i + 1)
			switch ops[i] % 7 {
			case 0: // enqueue
				keys := []string{"model", tenantName(int(a % 3))}
				deadline := int64(noDeadline)
				if a&8 != 0 {
					deadline = now + int64(a%16)*15*ms
				}
				b, tenantsBefore := s.bounds, len(s.tenants)
				w, reason, pos, _ := s.enqueue(now, tenantName(int(a%5)), "user", keys, deadline, int64(a/64)*20*ms)
				if pos < 1 {
					t.Fatalf("position %d < 1", pos)
				}
				if w == nil {
					if reason == "" {
						t.Fatalf("refusal without a reason")
					}
					break
				}
				live[w] = true
				newTenant := len(s.tenants) > tenantsBefore
				if s.depth > b.MaxTotalQueued || w.t.depth > b.MaxQueueDepthPerTenant || (newTenant && len(s.tenants) > b.MaxTenants) {
					t.Fatalf("enqueue exceeded a bound: depth %d tenant depth %d tenants %d bounds %+v", s.depth, w.t.depth, len(s.tenants), b)
				}
			case 1: // grant
				w := s.next(now)
				if w == nil {
					break
				}
				if !live[w] || w.state != stateGranted {
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
			case 3: // cancel
				n := int(a) % (len(live) + 1)
				for w := range live {
					if n == 0 {
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
						break
					}
					n--
				}
			case 4: // tick
				now += int64(a) * ms
			case 5: // reweight
				s.setWeights(Weights{Default: int(a%3) + 1, ByTenant: map[string]int{tenantName(int(a % 5)): int(a%7) + 1}})
			case 6: // rebound
				s.setBounds(Bounds{MaxQueueDepthPerTenant: int(a%4) + 1, MaxTotalQueued: int(a%9) + 1, MaxTenants: int(a%5) + 1, MaxInFlight: int(a%3) + 1, MaxWait: time.Duration(a%5+1) * 50 * time.Millisecond})
			}
			checkInvariants(t, s, live, len(granted))
		}
	})
}

// checkInvariants verifies that the scheduler's structures agree with the set
// of live waiters: each appears exactly once in exactly one tenant queue, the
// counts and heaps are consistent, and the weight sum is exact.
func checkInvariants(t *testing.T, s *sched, live map[*waiter]bool, granted int) {
	t.Helper()
	seen := map[*waiter]bool{}
	sumW, inFlight, queued := 0, 0, 0
	keys := map[string]int{}
	for key, tn := range s.tenants {
		if tn.key != key || tn.depth == 0 {
			t.Fatalf("tenant %q: key %q depth %d", key, tn.key, tn.depth)
		}
		sumW += tn.weight
		n := 0
		var prev *waiter
		for w := tn.head; w != nil; w = w.next {
			if seen[w] || !live[w] || w.t != tn || w.prev != prev {
				t.Fatalf("tenant %q: waiter duplicated, foreign or mislinked", key)
			}
			seen[w] = true
			switch w.state {
			case stateGranted:
				if w != tn.head || tn.place != placeInFlight {
					t.Fatalf("granted waiter is not its tenant's head")
				}
				inFlight++
			case stateQueued:
				queued++
				if w.dlIdx == inDeadlineList {
					if (w.dlPrev == nil) != (s.deadlines.head == w) || (w.dlPrev != nil && w.dlPrev.deadline > w.deadline) {
						t.Fatalf("deadline list out of order")
					}
				} else if s.deadlines.heap.items[w.dlIdx].w != w {
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
		if n != tn.depth || tn.tail != prev {
			t.Fatalf("tenant %q: depth %d, counted %d", key, tn.depth, n)
		}
		switch tn.place {
		case placeReady:
			if e := s.ready.items[tn.heapIdx]; e.t != tn || e.key != tn.tag() {
				t.Fatalf("tenant %q not at its ready-heap index or stale finish tag", key)
			}
		case placePending:
			if e := s.pending.items[tn.heapIdx]; e.t != tn || int64(e.key) != tn.head.readyAt {
				t.Fatalf("tenant %q not at its pending-heap index or stale ready time", key)
			}
		case placeNone:
			t.Fatalf("tenant %q with waiters is in no heap", key)
		}
	}
	if len(seen) != len(live) || s.depth != len(live) {
		t.Fatalf("%d live waiters, %d in queues, depth %d: a waiter was lost or duplicated", len(live), len(seen), s.depth)
	}
	if inFlight != s.inFlight || inFlight != granted {
		t.Fatalf("in flight: counted %d, scheduler %d, test %d", inFlight, s.inFlight, granted)
	}
	if queued != s.deadlines.len() || sumW != s.sumWeights {
		t.Fatalf("deadline heap %d vs %d queued; weight sum %d vs %d", s.deadlines.len(), queued, s.sumWeights, sumW)
	}
	if s.ready.len()+s.pending.len()+inFlight != len(s.tenants) {
		t.Fatalf("heaps hold %d+%d tenants plus %d in flight, %d tracked", s.ready.len(), s.pending.len(), inFlight, len(s.tenants))
	}
	for _, h := range []*tenantHeap{&s.ready, &s.pending} {
		for i := 1; i < h.len(); i++ {
			if h.items[i].less(&h.items[(i-1)/4]) {
				t.Fatalf("tenant heap out of order at %d", i)
			}
		}
	}
	for i := 1; i < s.deadlines.heap.len(); i++ {
		if s.deadlines.heap.items[i].deadline < s.deadlines.heap.items[(i-1)/2].deadline {
			t.Fatalf("deadline heap out of order at %d", i)
		}
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
