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

package limiter

import (
	"hash/maphash"
	"sync/atomic"
	"time"
)

// DefaultMaxKeysPerDimension is the default cap on buckets tracked per dimension.
const DefaultMaxKeysPerDimension = 65536

// MemoryStore is the default, per-replica Store. Each bucket is a GCRA cell:
// a single "theoretical arrival time" (tat) from which tokens, Retry-After
// and reset follow with integer arithmetic (gcra.go) and no allocation.
//
// Concurrency: each dimension's table is split into up to 16 shards by a
// seeded hash of the key, which also indexes the key in its shard, each
// shard behind its own mutex (table.go). A batch locks the shards of its
// buckets in a fixed order for the check and charge, so all-or-nothing
// charging is atomic, requests for different keys proceed
// in parallel, and requests sharing a bucket (a model, a team) serialise
// only on the few nanoseconds of its arithmetic.
//
// Memory bound: each dimension holds at most maxKeysPerDimension buckets of
// about 160 bytes each (slice, heap and map overhead included) plus the key:
// with the default cap and 64-byte keys, under 16 MiB per dimension and
// 144 MiB for the nine dimensions keyed by client input (client, api key,
// user, team, model and the four token dimensions) in the worst case. With
// sharding the cap is split evenly, so a shard may reach its part of the cap
// shortly before the whole table does.
//
// A bucket that has refilled completely is indistinguishable from a fresh
// one, so it may be dropped (evict.go): each new key drops a few refilled
// buckets, amortised O(log n). When a shard is at its cap, refilled buckets
// are evicted first, and only when every bucket provably still holds debt
// is the new key refused: its Decision has TableFull set and a RetryAfter
// until the first bucket can have refilled. A key is never admitted
// untracked, so presenting many fresh identities cannot switch a limit off.
type MemoryStore struct {
	perShard int    // cap per shard
	nShards  uint64 // 1 or maxShards
	seed     maphash.Seed
	epoch    atomic.Pointer[time.Time]
	full     atomic.Uint64
	tables   [NumDimensions][maxShards]shard
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty in-memory store holding at most
// maxKeysPerDimension buckets per dimension; 0 means DefaultMaxKeysPerDimension.
func NewMemoryStore(maxKeysPerDimension int) *MemoryStore {
	if maxKeysPerDimension <= 0 {
		maxKeysPerDimension = DefaultMaxKeysPerDimension
	}
	n := 1
	if maxKeysPerDimension >= maxShards*minKeysPerShard {
		n = maxShards
	}
	s := &MemoryStore{perShard: maxKeysPerDimension / n, nShards: uint64(n), seed: maphash.MakeSeed()}
	for d := range s.tables {
		for i := range n {
			s.tables[d][i].index = make(map[uint64]int32)
		}
	}
	return s
}

// Len returns the number of buckets tracked for d.
func (s *MemoryStore) Len(d Dimension) int {
	n := 0
	for i := range s.nShards {
		sh := &s.tables[d][i]
		sh.mu.Lock()
		n += len(sh.buckets)
		sh.mu.Unlock()
	}
	return n
}

// TableFullRefusals returns how many requests were refused because the table
// of one of their dimensions was full of buckets that had not refilled.
func (s *MemoryStore) TableFullRefusals() uint64 { return s.full.Load() }

// Take implements Store.
func (s *MemoryStore) Take(now time.Time, b Batch) (Decision, error) {
	return s.decide(now, &b, true), nil
}

// Peek implements Store. It may drop refilled buckets, which changes nothing
// observable.
func (s *MemoryStore) Peek(now time.Time, b Batch) (Decision, error) {
	return s.decide(now, &b, false), nil
}

// Refund implements Store: each bucket of b that is tracked gets one token
// back, never more than its capacity. Request.Cost is ignored.
func (s *MemoryStore) Refund(now time.Time, b Batch) error {
	s.settle(now, &b, false)
	return nil
}

// Adjust implements Store. A positive Cost charges the bucket, creating it
// when unknown, and may leave debt up to MaxAdjustDebt capacities below
// empty; a negative Cost refunds a tracked bucket up to full. A charge for a
// new key whose table is full of indebted buckets is dropped: the key bound
// wins over the accounting of one settled request.
func (s *MemoryStore) Adjust(now time.Time, b Batch) error {
	s.settle(now, &b, true)
	return nil
}

// settle applies a Refund, or an Adjust when adjust is set, to every bucket
// of b.
func (s *MemoryStore) settle(now time.Time, b *Batch, adjust bool) {
	t := s.since(now)
	var locked lockSet
	s.lock(b, &locked)
	defer locked.unlock()
	for i := 0; i < b.n; i++ {
		r := &b.reqs[i]
		if adjust && r.Cost == 0 {
			continue
		}
		sh := locked.shard(i)
		idx, ok := sh.find(locked.hash[i], r.Key)
		switch {
		case ok:
			debt := sh.debt(idx, t, r)
			next := r.refundedDebt(debt)
			if adjust {
				next = r.AdjustedDebt(debt)
			}
			if next != debt {
				sh.setDebt(idx, t, next)
			}
		case !adjust || r.Cost < 0:
			// Full already: never charged, or refilled and dropped.
		default:
			if _, ok := sh.room(t, s.perShard); ok {
				sh.insert(bucket{key: r.Key, hash: locked.hash[i], tat: t + r.AdjustedDebt(0), interval: r.interval, window: r.window})
			}
		}
	}
}

// since returns now as nanoseconds since the store's epoch, the first time
// it saw; the monotonic reading is used when now has one.
func (s *MemoryStore) since(now time.Time) int64 {
	e := s.epoch.Load()
	if e == nil {
		e = s.setEpoch(now)
	}
	return int64(now.Sub(*e))
}

// setEpoch records the epoch once; it is a separate function so that only
// the first call moves a time.Time to the heap.
//
//go:noinline
func (s *MemoryStore) setEpoch(now time.Time) *time.Time {
	s.epoch.CompareAndSwap(nil, &now)
	return s.epoch.Load()
}

// decide checks every bucket of b with their shards locked and, when charge
// is set and all hold their cost, charges them all; otherwise it changes
// nothing but the lazy rescaling of buckets whose limit was hot-swapped and
// the dropping of refilled buckets.
func (s *MemoryStore) decide(now time.Time, b *Batch, charge bool) (d Decision) {
	t := s.since(now)
	var locked lockSet
	s.lock(b, &locked)
	defer locked.unlock()
	s.decideLocked(&d, t, b, &locked, charge)
	return d
}

// takeInOrder is a Take of first and, only when first is allowed, a Take
// of then, in one trip at one instant, deciding into d and thenD, which
// must be zero (thenD stays zero when first is refused). first's shards
// are unlocked before then's are locked: the global bucket's shard, which
// every request takes, is not held across the identity lookups.
func (s *MemoryStore) takeInOrder(now time.Time, first, then *Batch, d, thenD *Decision) {
	t := s.since(now)
	var locked, thenLocked lockSet
	s.lock(first, &locked)
	s.decideLocked(d, t, first, &locked, true)
	locked.unlock()
	if !d.Allowed {
		return
	}
	s.lock(then, &thenLocked)
	defer thenLocked.unlock()
	s.decideLocked(thenD, t, then, &thenLocked, true)
}

// decideLocked is decide at t, nanoseconds since the epoch, with b's shards
// locked in locked, into d, which must be zero.
func (s *MemoryStore) decideLocked(d *Decision, t int64, b *Batch, locked *lockSet, charge bool) {
	var (
		slot  [MaxBatch]int32
		debts [MaxBatch]int64 // a new bucket is full
	)
	if s.find(t, b, locked, &slot, &debts) {
		// A new key needs room in its shard; making it drops refilled
		// buckets, which moves slots.
		for i := 0; i < b.n; i++ {
			if slot[i] < 0 {
				if wait, ok := locked.shard(i).room(t, s.perShard); !ok {
					d.TableFull = d.TableFull.Add(b.reqs[i].Dimension)
					refuse(d, b.reqs[i].Dimension, time.Duration(wait))
				}
			}
		}
		if d.TableFull != 0 {
			if charge {
				s.full.Add(1)
				count(b, locked, d)
			}
			return
		}
		s.find(t, b, locked, &slot, &debts)
	}
	decideDebts(d, b, &debts, charge)
	if !charge {
		return
	}
	if !d.Allowed {
		count(b, locked, d)
		return
	}
	for i := 0; i < b.n; i++ {
		r, sh := &b.reqs[i], locked.shard(i)
		sh.decided[OutcomeAllowed]++ // as count would
		tat := t + debts[i] + r.charge()
		if slot[i] >= 0 {
			sh.buckets[slot[i]].tat = tat // charging raises tat: due stays a lower bound
			continue
		}
		sh.insert(bucket{key: r.Key, hash: locked.hash[i], tat: tat, interval: r.interval, window: r.window})
	}
}

// find sets the slot of each bucket of b in its locked shard, -1 for an
// unknown key, and its debt at t, 0 for an unknown key (a new bucket is
// full); it reports whether any key is unknown.
func (s *MemoryStore) find(t int64, b *Batch, locked *lockSet, slot *[MaxBatch]int32, debts *[MaxBatch]int64) (fresh bool) {
	for i := 0; i < b.n; i++ {
		r, sh := &b.reqs[i], locked.shard(i)
		idx, ok := sh.find(locked.hash[i], r.Key)
		slot[i], debts[i] = idx, 0
		if !ok {
			fresh = true
			continue
		}
		debts[i] = sh.debt(idx, t, r)
	}
	return fresh
}

// count records the outcome of each bucket of a Take, decided as d, in its
// shard while the shards are locked: a plain add, where an Observer told of
// each would pay an atomic one (see MemoryObserver).
func count(b *Batch, locked *lockSet, d *Decision) {
	for i := 0; i < b.n; i++ {
		if o, ok := outcomeOf(d, b.reqs[i].Dimension); ok {
			locked.shard(i).decided[o]++
		}
	}
}

// AddDecisions adds to sum the outcome of every bucket the store decided in
// a Take since it was made, by dimension and outcome, as an Observer would
// have been told them.
func (s *MemoryStore) AddDecisions(sum *[NumDimensions][NumOutcomes]uint64) {
	for d := range s.tables {
		for i := range s.nShards {
			sh := &s.tables[d][i]
			sh.mu.Lock()
			for o, n := range sh.decided {
				sum[d][o] += n
			}
			sh.mu.Unlock()
		}
	}
}
