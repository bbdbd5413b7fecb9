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
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// DefaultMaxKeysPerDimension is the default cap on buckets tracked per dimension.
	DefaultMaxKeysPerDimension = 65536
	// sweepPerInsert is how many buckets the clock hand inspects per new key,
	// so idle buckets are reclaimed at the rate new ones arrive.
	sweepPerInsert = 2
	// sweepAtCap bounds the extra inspection when a table is at its cap.
	sweepAtCap = 64
)

// MemoryStore is the default, per-replica Store. Each bucket is a GCRA cell:
// a single "theoretical arrival time" from which tokens, Retry-After and reset
// follow with integer arithmetic and no allocation.
//
// Memory bound: each dimension holds at most maxKeysPerDimension buckets of
// about 150 bytes each (slice and map overhead included) plus the key: with
// the default cap and 64-byte keys, under 15 MiB per dimension and 75 MiB
// for the five dimensions keyed by client input (client, api key, user, team,
// model) in the worst case. A bucket that has refilled completely is indistinguishable from a
// fresh one, so it may be dropped: every new key advances a clock hand over sweepPerInsert
// buckets and drops the full ones, amortised O(1) with no full-table scan. In
// steady churn a table therefore holds about twice the keys seen within one
// refill window (capacity*period/requests), and never more than the cap.
// When a table is at its cap and no bucket nearby is full, the new key is
// treated as a fresh bucket (allowed if the rest of its batch is) but not
// recorded, and Overflows is incremented. Failing open here is deliberate: a
// flood of random keys could otherwise lock every new legitimate key out,
// while a key-rotating client gains nothing it could not get by rotating keys
// anyway; the global, per-client and per-model limits still bound it.
type MemoryStore struct {
	maxKeys int

	mu        sync.Mutex
	epoch     time.Time
	hasEpoch  bool
	tables    [NumDimensions]table
	overflows atomic.Uint64
}

var _ Store = (*MemoryStore)(nil)

// bucket is one GCRA cell. Times are nanoseconds since the store's epoch.
type bucket struct {
	key string
	// tat is the theoretical arrival time: the bucket is full when tat <= now
	// and holds (window-(tat-now))/interval tokens otherwise.
	tat int64
	// interval is the time to refill one token; window is capacity*interval.
	interval int64
	window   int64
}

// table is the bucket set of one dimension: a dense slice for the clock hand
// and an index from key to slot.
type table struct {
	index   map[string]int32
	buckets []bucket
	hand    int
}

// NewMemoryStore returns an empty in-memory store holding at most
// maxKeysPerDimension buckets per dimension; 0 means DefaultMaxKeysPerDimension.
func NewMemoryStore(maxKeysPerDimension int) *MemoryStore {
	if maxKeysPerDimension <= 0 {
		maxKeysPerDimension = DefaultMaxKeysPerDimension
	}
	s := &MemoryStore{maxKeys: maxKeysPerDimension}
	for i := range s.tables {
		s.tables[i].index = make(map[string]int32)
	}
	return s
}

// Len returns the number of buckets tracked for d.
func (s *MemoryStore) Len(d Dimension) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tables[d].buckets)
}

// Overflows returns how many new keys were admitted untracked because their
// dimension's table was full.
func (s *MemoryStore) Overflows() uint64 { return s.overflows.Load() }

// Take implements Store.
func (s *MemoryStore) Take(now time.Time, b Batch) (Decision, error) {
	return s.decide(now, &b, true), nil
}

// Peek implements Store.
func (s *MemoryStore) Peek(now time.Time, b Batch) (Decision, error) {
	return s.decide(now, &b, false), nil
}

// shaped is a Limit with its GCRA shape computed once.
type shaped struct {
	Limit
	interval, window int64
}

// shapeOf returns l with its GCRA interval and window, saturating the window
// so that additions to a timestamp cannot overflow.
func shapeOf(l Limit) shaped {
	s := shaped{Limit: l, interval: l.interval()}
	if c := l.capacity(); c > math.MaxInt64/4/s.interval {
		s.window = math.MaxInt64 / 4
	} else {
		s.window = c * s.interval
	}
	return s
}

// decide checks every bucket of b under one lock and, when charge is set and
// all have a token, charges them all; otherwise it changes nothing but the
// lazy rescaling of buckets whose limit was hot-swapped.
func (s *MemoryStore) decide(now time.Time, b *Batch, charge bool) Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.hasEpoch {
		s.epoch, s.hasEpoch = now, true
	}
	t := int64(now.Sub(s.epoch))

	var (
		d    Decision
		slot [MaxBatch]int32
		tat  [MaxBatch]int64 // the new theoretical arrival time of each bucket
	)
	d.Allowed = true
	for i := 0; i < b.n; i++ {
		r := &b.reqs[i]
		interval, window := r.interval, r.window
		cur := t // a fresh or untracked bucket is full
		slot[i] = -1
		tb := &s.tables[r.Dimension]
		if idx, ok := tb.index[r.Key]; ok {
			slot[i] = idx
			bk := &tb.buckets[idx]
			if bk.interval != interval || bk.window != window {
				rescale(bk, t, interval, window)
			}
			cur = max(bk.tat, t)
		}
		next := cur + interval
		tat[i] = next
		capacity := r.Limit.capacity()
		if over := next - t - window; over > 0 {
			// No whole token: the wait is until the deficit has refilled.
			wait := time.Duration(over)
			if d.Allowed || wait > d.RetryAfter {
				d.LimitType = r.Dimension
			}
			d.Allowed = false
			d.RefusedBy = d.RefusedBy.Add(r.Dimension)
			d.RetryAfter = max(d.RetryAfter, wait)
			s.tighten(&d, Quota{Dimension: r.Dimension, Limit: capacity, Remaining: 0, Reset: time.Duration(cur - t)})
			continue
		}
		remaining := (window - (next - t)) / interval
		reset := next - t
		if !charge {
			remaining = (window - (cur - t)) / interval
			reset = cur - t
		}
		s.tighten(&d, Quota{Dimension: r.Dimension, Limit: capacity, Remaining: remaining, Reset: time.Duration(reset)})
	}
	if !d.Allowed || !charge {
		return d
	}
	// Charge known buckets first: inserting a new key may move other slots.
	for i := 0; i < b.n; i++ {
		if slot[i] >= 0 {
			s.tables[b.reqs[i].Dimension].buckets[slot[i]].tat = tat[i]
		}
	}
	for i := 0; i < b.n; i++ {
		if slot[i] < 0 {
			r := &b.reqs[i]
			interval, window := r.interval, r.window
			s.insert(&s.tables[r.Dimension], t, bucket{key: r.Key, tat: tat[i], interval: interval, window: window})
		}
	}
	return d
}

// tighten records q as the decision's quota if it has fewer tokens left.
func (s *MemoryStore) tighten(d *Decision, q Quota) {
	if !d.HasQuota || q.Remaining < d.Tightest.Remaining ||
		(q.Remaining == d.Tightest.Remaining && q.Reset > d.Tightest.Reset) {
		d.Tightest, d.HasQuota = q, true
	}
}

// rescale converts a bucket to a new limit keeping the fraction of its
// capacity in use, so a hot-swapped limit neither forgives nor invents debt.
func rescale(bk *bucket, now, interval, window int64) {
	if debt := bk.tat - now; debt > 0 {
		used := float64(debt) / float64(bk.window)
		bk.tat = now + int64(math.Min(used, 1)*float64(window))
	}
	bk.interval, bk.window = interval, window
}

// insert adds a bucket for a key not in tb, reclaiming idle buckets first.
func (s *MemoryStore) insert(tb *table, now int64, bk bucket) {
	tb.sweep(now, sweepPerInsert)
	if len(tb.buckets) >= s.maxKeys && tb.sweep(now, sweepAtCap) == 0 {
		s.overflows.Add(1)
		return
	}
	bk.key = strings.Clone(bk.key) // do not pin the caller's buffer
	tb.index[bk.key] = int32(len(tb.buckets))
	tb.buckets = append(tb.buckets, bk)
}

// sweep advances the clock hand over up to n buckets, dropping those that have
// refilled completely, and returns how many it dropped. The hand walks down
// from the end so a dropped slot is refilled from above the hand (a bucket it
// has already passed or a newer one) and every step inspects a new bucket.
func (tb *table) sweep(now int64, n int) int {
	dropped := 0
	for ; n > 0 && len(tb.buckets) > 0; n-- {
		if tb.hand < 0 || tb.hand >= len(tb.buckets) {
			tb.hand = len(tb.buckets) - 1
		}
		h := tb.hand
		tb.hand--
		if tb.buckets[h].tat > now {
			continue
		}
		last := len(tb.buckets) - 1
		delete(tb.index, tb.buckets[h].key)
		if h != last {
			tb.buckets[h] = tb.buckets[last]
			tb.index[tb.buckets[h].key] = int32(h)
		}
		tb.buckets[last] = bucket{}
		tb.buckets = tb.buckets[:last]
		dropped++
	}
	return dropped
}
