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
	"math"
	"math/bits"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// DefaultMaxKeysPerDimension is the default cap on buckets tracked per dimension.
	DefaultMaxKeysPerDimension = 65536
	// maxShards is how many independently locked shards a dimension's table
	// is split into, so requests for different keys scale with cores.
	maxShards = 16
	// minKeysPerShard is the smallest per-shard cap worth sharding for; a
	// smaller cap keeps one shard so the cap is exact.
	minKeysPerShard = 256
	// reclaimPerInsert bounds the heap steps a new key spends dropping
	// refilled buckets, so idle buckets are reclaimed at the rate new ones
	// arrive and no insert pays for a long backlog.
	reclaimPerInsert = 4

	// MaxAdjustDebt bounds the debt a positive Adjust (a settled usage above
	// the reservation) can leave: at most this many capacities below empty,
	// so the bucket holds a token again within MaxAdjustDebt full refills
	// and is full within MaxAdjustDebt+1. Honest overshoots (a tokenizer
	// that under-counted the prompt, an output cap the upstream ignored) are
	// a fraction of one capacity and are charged in full; a runaway usage of
	// many capacities cannot lock a key, a team or a model for hours. A debt
	// already beyond the bound (a Take whose cost exceeded the capacity) is
	// never raised further by Adjust, nor forgiven.
	MaxAdjustDebt = 2

	// maxDebt saturates every GCRA time span (window, charge, debt) so a
	// timestamp plus a few of them cannot overflow.
	maxDebt = math.MaxInt64 / 4
)

// MemoryStore is the default, per-replica Store. Each bucket is a GCRA cell:
// a single "theoretical arrival time" (tat) from which tokens, Retry-After
// and reset follow with integer arithmetic and no allocation.
//
// Concurrency: each dimension's table is split into up to 16 shards by a
// seeded hash of the key, each with its own read-write lock. A batch whose
// buckets all exist (the steady state) read-locks their shards and then
// spin-locks just those buckets, in a fixed order, for the few nanoseconds
// of the check and charge: all-or-nothing charging stays atomic, requests
// for different keys proceed in parallel, and requests sharing a bucket (a
// model, a team) serialise only on that arithmetic. A batch with a new key
// write-locks its shards to insert it.
//
// Memory bound: each dimension holds at most maxKeysPerDimension buckets of
// about 170 bytes each (slice, heap and map overhead included) plus the key:
// with the default cap and 64-byte keys, under 16 MiB per dimension and
// 144 MiB for the nine dimensions keyed by client input (client, api key,
// user, team, model and the four token dimensions) in the worst case. With
// sharding the cap is split evenly, so a shard may reach its part of the cap
// shortly before the whole table does.
//
// A bucket that has refilled completely is indistinguishable from a fresh
// one, so it may be dropped. Every bucket sits in a min-heap ordered by a
// lower bound of its tat (refreshed lazily, so charging a known key touches
// no heap); each new key pops a few refilled buckets off the heap, amortised
// O(log n). When a shard is at its cap, refilled buckets are evicted first,
// and only when the heap proves every bucket still holds debt (the smallest
// lower bound is in the future) is the new key refused: its Decision has
// TableFull set and a RetryAfter until the first bucket can have refilled.
// A key is never admitted untracked, so presenting many fresh identities
// cannot switch a limit off.
type MemoryStore struct {
	perShard int // cap per shard
	nShards  uint64
	seed     maphash.Seed
	epoch    atomic.Pointer[time.Time]
	full     atomic.Uint64
	tables   [NumDimensions][maxShards]shard
}

var _ Store = (*MemoryStore)(nil)

// bucket is one GCRA cell. Times are nanoseconds since the store's epoch.
type bucket struct {
	key string
	// tat is the theoretical arrival time: the bucket is full when tat <= now
	// and holds (window-(tat-now))/interval tokens otherwise (negative: debt).
	tat int64
	// due is the bucket's heap priority, a lower bound of tat: charging only
	// raises tat, and whatever lowers it (refund, rescale) lowers due too.
	due int64
	// interval is the time to refill one token; window is capacity*interval.
	interval int64
	window   int64
	// pos is the bucket's index in its shard's heap.
	pos int32
	// busy is a spin lock guarding tat while the shard is only read-locked
	// (see decideShared); 0 is free.
	busy uint32
	// The padding makes a bucket one 64-byte cache line: buckets are
	// allocated in slices of a size class that is a multiple of 64, so two
	// callers charging neighbouring buckets never write the same line.
	_ [8]byte
}

// shard is one locked part of a dimension's bucket table: a dense slice, an
// index from key to slot, and a min-heap of slots by due.
//
// The read-lock counters every caller writes are kept at least a cache line
// away from the fields every caller reads (index, buckets), whatever the
// shard's alignment: sharing a line would make each reader miss whenever
// another core takes or releases its read lock.
type shard struct {
	index   map[string]int32
	buckets []bucket
	heap    []int32
	_       [64]byte
	mu      shardLock
	_       [64]byte // and off the next shard's fields
}

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
			s.tables[d][i].index = make(map[string]int32)
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
	t := s.since(now)
	var locked lockSet
	s.lock(&b, &locked)
	defer locked.unlock()
	for i := 0; i < b.n; i++ {
		r := &b.reqs[i]
		sh := locked.shards[locked.of[i]]
		idx, ok := sh.index[r.Key]
		if !ok {
			continue // never charged, or already refilled and dropped
		}
		bk := &sh.buckets[idx]
		if bk.interval != r.interval || bk.window != r.window {
			sh.rescale(idx, t, r.interval, r.window)
		}
		if bk.tat <= t {
			continue // full already
		}
		bk.tat = max(bk.tat-bk.interval, t)
		sh.lower(idx)
	}
	return nil
}

// Adjust implements Store. A positive Cost charges the bucket, creating it
// when unknown, and may leave debt up to MaxAdjustDebt capacities below
// empty; a negative Cost refunds a tracked bucket up to full. A charge for a
// new key whose table is full of indebted buckets is dropped: the key bound
// wins over the accounting of one settled request.
func (s *MemoryStore) Adjust(now time.Time, b Batch) error {
	t := s.since(now)
	var locked lockSet
	s.lock(&b, &locked)
	defer locked.unlock()
	for i := 0; i < b.n; i++ {
		r := &b.reqs[i]
		if r.Cost == 0 {
			continue
		}
		sh := locked.shards[locked.of[i]]
		idx, ok := sh.index[r.Key]
		if !ok {
			if r.Cost < 0 {
				continue // full already: never charged, or refilled and dropped
			}
			if _, ok := sh.room(t, s.perShard); ok {
				sh.insert(bucket{key: r.Key, tat: t + r.AdjustedDebt(0), interval: r.interval, window: r.window})
			}
			continue
		}
		bk := &sh.buckets[idx]
		if bk.interval != r.interval || bk.window != r.window {
			sh.rescale(idx, t, r.interval, r.window)
		}
		debt := max(bk.tat-t, 0)
		next := r.AdjustedDebt(debt)
		if next == debt {
			continue
		}
		bk.tat = t + next
		if next < debt {
			sh.lower(idx)
		}
	}
	return nil
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

// lockSet is the shards a batch holds, locked in table order.
type lockSet struct {
	shards [MaxBatch]*shard
	n      int
	of     [MaxBatch]int8 // request i's shard in shards
	shared bool           // read-locked rather than write-locked
	slot   int            // the read-lock slot, when shared
	token  *slotToken     // the slot's token, returned to slotTokens at unlock
}

func (l *lockSet) unlock() {
	for i := l.n - 1; i >= 0; i-- {
		if l.shared {
			l.shards[i].mu.RUnlock(l.slot)
		} else {
			l.shards[i].mu.Unlock()
		}
	}
	if l.token != nil {
		slotTokens.Put(l.token)
	}
}

// slotTokens hands out read-lock slot numbers. A sync.Pool keeps one item
// per processor (P) and gives a caller its own processor's first, so the
// callers on one core keep using one slot while other cores use others:
// their read locks of a shared shard never write the same cache line, and
// each core's line stays in its cache.
var slotTokens = sync.Pool{New: newSlotToken}

// slotToken is one read-lock slot number on loan from slotTokens. It is 16
// bytes so that it is not a tiny allocation: one sharing a block with a live
// object would never be collected, and its slot never freed.
type slotToken struct {
	n int
	_ int
}

// usedSlots has bit i set while a live token holds slot i. The pool may
// drop a token at any collection; its cleanup frees the slot, so the tokens
// alive at one time (one per processor) never share a slot while there are
// no more of them than slots.
var usedSlots atomic.Uint32

// newSlotToken makes a token for the lowest free slot; when every slot is
// held (more processors than slots) tokens share slots in turn, which is
// slower but as correct.
func newSlotToken() any {
	for {
		used := usedSlots.Load()
		if used == 1<<readerSlots-1 {
			return &slotToken{n: int(sharedSlot.Add(1)) % readerSlots}
		}
		n := bits.TrailingZeros32(^used)
		if usedSlots.CompareAndSwap(used, used|1<<n) {
			t := &slotToken{n: n}
			runtime.AddCleanup(t, freeSlot, n)
			return t
		}
	}
}

// sharedSlot numbers the tokens made while every slot is held.
var sharedSlot atomic.Uint32

// freeSlot marks slot n free once its token has been collected.
func freeSlot(n int) { usedSlots.And(^uint32(1 << n)) }

// keyHash is the seeded hash of a bucket key that picks its shard.
func (s *MemoryStore) keyHash(key string) uint64 { return maphash.String(s.seed, key) }

// shardOf returns the table-wide order of the shard of dimension d holding
// a key of hash h.
func (s *MemoryStore) shardOf(d Dimension, h uint64) int {
	i := 0
	if s.nShards > 1 {
		i = int(h % s.nShards)
	}
	return int(d)*maxShards + i
}

// readerSlots is the number of read locks of a shard; see shardLock.
const readerSlots = 8

// shardLock is a read-write lock whose readers are spread over readerSlots
// padded locks: a reader takes one slot, a writer all of them in order.
// Requests of different callers that share a bucket (a model, a team)
// read-lock its shard without contending on one lock word; only the few
// nanoseconds on the shared bucket itself are serial. Writers (a new key)
// are rare in the steady state.
type shardLock struct {
	slots [readerSlots]struct {
		sync.RWMutex
		_ [128 - 24]byte // two cache lines each
	}
}

// RLock read-locks slot i.
func (l *shardLock) RLock(i int) { l.slots[i].RLock() }

// RUnlock releases the read lock of slot i.
func (l *shardLock) RUnlock(i int) { l.slots[i].RUnlock() }

// Lock write-locks every slot, in order.
func (l *shardLock) Lock() {
	for i := range l.slots {
		l.slots[i].Lock()
	}
}

// Unlock releases every slot.
func (l *shardLock) Unlock() {
	for i := len(l.slots) - 1; i >= 0; i-- {
		l.slots[i].Unlock()
	}
}

// lock write-locks the shards of b's requests once each, in ascending table
// order, so two batches can never wait on each other.
func (s *MemoryStore) lock(b *Batch, l *lockSet) { s.lockShards(b, l, false) }

// lockShards locks the shards of b's requests, read-locked when shared.
func (s *MemoryStore) lockShards(b *Batch, l *lockSet, shared bool) {
	l.shared = shared
	var order [MaxBatch]int
	for i := 0; i < b.n; i++ {
		r := &b.reqs[i]
		order[i] = s.shardOf(r.Dimension, s.keyHash(r.Key))
	}
	// Read locks take the slot of the processor the caller runs on (see
	// slotTokens), so requests on different cores read-lock a shared shard
	// (a model's) through different cache lines that stay in their cores'
	// caches.
	if shared {
		l.token = slotTokens.Get().(*slotToken)
		l.slot = l.token.n
	}
	var uniq [MaxBatch]int
	for i := 0; i < b.n; i++ {
		o, j := order[i], l.n
		dup := false
		for k := 0; k < l.n; k++ {
			if uniq[k] == o {
				dup = true
				break
			}
		}
		if dup {
			continue
		}
		for j > 0 && uniq[j-1] > o { // insertion sort: at most four shards
			uniq[j] = uniq[j-1]
			j--
		}
		uniq[j] = o
		l.n++
	}
	for k := 0; k < l.n; k++ {
		l.shards[k] = &s.tables[uniq[k]/maxShards][uniq[k]%maxShards]
		if shared {
			l.shards[k].mu.RLock(l.slot)
		} else {
			l.shards[k].mu.Lock()
		}
	}
	for i := 0; i < b.n; i++ {
		for k := 0; k < l.n; k++ {
			if uniq[k] == order[i] {
				l.of[i] = int8(k)
			}
		}
	}
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
	if c := l.capacity(); c > maxDebt/s.interval {
		s.window = maxDebt
	} else {
		s.window = c * s.interval
	}
	return s
}

// decide checks every bucket of b with their shards locked and, when charge
// is set and all hold their cost, charges them all; otherwise it changes
// nothing but the lazy rescaling of buckets whose limit was hot-swapped and
// the dropping of refilled buckets.
func (s *MemoryStore) decide(now time.Time, b *Batch, charge bool) Decision {
	t := s.since(now)
	if d, ok := s.decideShared(t, b, charge); ok {
		return d
	}
	var locked lockSet
	s.lock(b, &locked)
	defer locked.unlock()

	var (
		d    Decision
		slot [MaxBatch]int32
		tat  [MaxBatch]int64 // the new theoretical arrival time of each bucket
	)
	// A new key needs room in its shard; make it first, since dropping
	// refilled buckets moves slots.
	for i := 0; i < b.n; i++ {
		r := &b.reqs[i]
		sh := locked.shards[locked.of[i]]
		if _, ok := sh.index[r.Key]; ok {
			continue
		}
		if wait, ok := sh.room(t, s.perShard); !ok {
			d.TableFull = d.TableFull.Add(r.Dimension)
			refuse(&d, r.Dimension, time.Duration(wait))
		}
	}
	if d.TableFull != 0 {
		if charge {
			s.full.Add(1)
		}
		return d
	}
	d.Allowed = true
	for i := 0; i < b.n; i++ {
		r := &b.reqs[i]
		sh := locked.shards[locked.of[i]]
		interval, window := r.interval, r.window
		cur := t // a fresh bucket is full
		slot[i] = -1
		if idx, ok := sh.index[r.Key]; ok {
			slot[i] = idx
			bk := &sh.buckets[idx]
			if bk.interval != interval || bk.window != window {
				sh.rescale(idx, t, interval, window)
			}
			cur = max(bk.tat, t)
		}
		tat[i] = cur + r.Charge()
		judge(&d, r, cur-t, charge)
	}
	if !d.Allowed || !charge {
		return d
	}
	for i := 0; i < b.n; i++ {
		sh := locked.shards[locked.of[i]]
		if slot[i] >= 0 {
			sh.buckets[slot[i]].tat = tat[i]
			continue
		}
		r := &b.reqs[i]
		sh.insert(bucket{key: r.Key, tat: tat[i], interval: r.interval, window: r.window})
	}
	return d
}

// decideShared decides b with its shards read-locked when every bucket
// exists and has its current shape; ok is false otherwise, and the caller
// takes the write-locked path. The buckets are spin-locked in shard order
// around the check and charge, which is what makes the batch atomic.
func (s *MemoryStore) decideShared(t int64, b *Batch, charge bool) (d Decision, ok bool) {
	var locked lockSet
	s.lockShards(b, &locked, true)
	defer locked.unlock()
	var bks [MaxBatch]*bucket
	for i := 0; i < b.n; i++ {
		r := &b.reqs[i]
		sh := locked.shards[locked.of[i]]
		idx, found := sh.index[r.Key]
		if !found {
			return Decision{}, false
		}
		bks[i] = &sh.buckets[idx]
	}
	// Lock the buckets in shard order: one bucket per shard at most is ours
	// unless two requests name the same shard, which locks it once.
	var held [MaxBatch]*bucket
	nh := 0
	for k := 0; k < locked.n; k++ {
		for i := 0; i < b.n; i++ {
			if int(locked.of[i]) == k && !slices.Contains(held[:nh], bks[i]) {
				spinLock(&bks[i].busy)
				held[nh] = bks[i]
				nh++
			}
		}
	}
	defer func() {
		for i := nh - 1; i >= 0; i-- {
			atomic.StoreUint32(&held[i].busy, 0)
		}
	}()
	// The limits are compared only now, under the buckets' locks: reading a
	// shared bucket's line before taking its lock would fetch it twice, once
	// to read and once to write.
	for i := 0; i < b.n; i++ {
		if bks[i].interval != b.reqs[i].interval || bks[i].window != b.reqs[i].window {
			return Decision{}, false
		}
	}
	var tat [MaxBatch]int64
	d.Allowed = true
	for i := 0; i < b.n; i++ {
		r, bk := &b.reqs[i], bks[i]
		cur := max(bk.tat, t)
		tat[i] = cur + r.Charge()
		judge(&d, r, cur-t, charge)
	}
	if d.Allowed && charge {
		for i := 0; i < b.n; i++ {
			bks[i].tat = tat[i]
		}
	}
	return d, true
}

// spinLock takes a bucket's spin lock. It is held for a few arithmetic
// operations, so spinning briefly and then yielding beats parking.
func spinLock(w *uint32) {
	for spins := 0; !atomic.CompareAndSwapUint32(w, 0, 1); spins++ {
		if spins >= 16 {
			runtime.Gosched()
		}
	}
}

// refuse records a refusal by dim that lasts wait, and reports whether dim
// became the decision's LimitType (the refusal with the longest wait).
func refuse(d *Decision, dim Dimension, wait time.Duration) bool {
	first := d.RefusedBy == 0 || wait > d.RetryAfter
	if first {
		d.LimitType = dim
	}
	d.Allowed = false
	d.RefusedBy = d.RefusedBy.Add(dim)
	d.RetryAfter = max(d.RetryAfter, wait)
	return first
}

// judge records in d the verdict of bucket r, which is debt nanoseconds
// from full: every store decides each bucket with it, so they all answer the
// same. The bucket must hold the request's cost, or be full when the cost
// exceeds its capacity. An allowed decision's quota is the bucket with the
// fewest tokens left; a refusal's quota is the bucket named by LimitType, so
// the x-ratelimit-* headers never describe a bucket that let the request pass.
func judge(d *Decision, r *Request, debt int64, charge bool) {
	cost := r.Charge()
	capacity := r.Limit.capacity()
	if over := debt + min(cost, r.window) - r.window; over > 0 {
		// Too few tokens: the wait is until the deficit has refilled.
		if refuse(d, r.Dimension, time.Duration(over)) {
			d.Tightest, d.HasQuota = Quota{Dimension: r.Dimension, Limit: capacity, Remaining: 0, Reset: time.Duration(debt)}, true
		}
		return
	}
	if !d.Allowed {
		return // a refusal's quota is the refusing bucket's
	}
	next := debt + cost
	remaining, reset := max(r.window-next, 0)/r.interval, next
	if !charge {
		remaining, reset = (r.window-debt)/r.interval, debt
	}
	q := Quota{Dimension: r.Dimension, Limit: capacity, Remaining: remaining, Reset: time.Duration(reset)}
	if !d.HasQuota || q.Remaining < d.Tightest.Remaining ||
		(q.Remaining == d.Tightest.Remaining && q.Reset > d.Tightest.Reset) {
		d.Tightest, d.HasQuota = q, true
	}
}

// rescale converts the bucket at idx to a new limit keeping the fraction of
// its capacity in use (above 1 for a token bucket in debt), so a hot-swapped
// limit neither forgives nor invents debt.
func (sh *shard) rescale(idx int32, now, interval, window int64) {
	bk := &sh.buckets[idx]
	if debt := bk.tat - now; debt > 0 {
		used := float64(debt) / float64(bk.window)
		bk.tat = now + int64(math.Min(used*float64(window), maxDebt))
	}
	bk.interval, bk.window = interval, window
	sh.lower(idx)
}

// lower restores due <= tat after the bucket's tat went down.
func (sh *shard) lower(idx int32) {
	if bk := &sh.buckets[idx]; bk.tat < bk.due {
		bk.due = bk.tat
		sh.up(int(bk.pos))
	}
}

// room reports whether a new key fits in sh, after dropping a few refilled
// buckets (more, at the cap, until one is found or none can exist). When it
// does not fit, wait is the time until the first bucket can have refilled.
func (sh *shard) room(now int64, limit int) (wait int64, ok bool) {
	sh.reclaim(now, reclaimPerInsert)
	for len(sh.buckets) >= limit {
		if !sh.reclaim(now, 1) {
			return max(sh.buckets[sh.heap[0]].due-now, 1), false
		}
	}
	return 0, true
}

// reclaim drops up to n refilled buckets from the top of the heap, moving
// buckets charged since they were pushed down to their current tat (which
// does not count against n: each such step pays for one earlier charge). It
// reports false when the heap proves no bucket has refilled.
func (sh *shard) reclaim(now int64, n int) bool {
	for n > 0 && len(sh.heap) > 0 {
		top := sh.heap[0]
		bk := &sh.buckets[top]
		switch {
		case bk.due > now:
			return false
		case bk.tat > now:
			bk.due = bk.tat
			sh.down(0)
		default:
			sh.remove(top)
			n--
		}
	}
	return true
}

// insert adds a bucket for a key not in sh; room must have been made.
func (sh *shard) insert(bk bucket) {
	bk.key = strings.Clone(bk.key) // do not pin the caller's buffer
	bk.due = bk.tat
	idx := int32(len(sh.buckets))
	bk.pos = int32(len(sh.heap))
	sh.index[bk.key] = idx
	sh.buckets = append(sh.buckets, bk)
	sh.heap = append(sh.heap, idx)
	sh.up(int(bk.pos))
}

// remove drops the bucket at idx, moving the last bucket into its slot.
func (sh *shard) remove(idx int32) {
	bk := &sh.buckets[idx]
	delete(sh.index, bk.key)
	// Take it out of the heap: move the last heap entry into its place.
	p, lastPos := int(bk.pos), len(sh.heap)-1
	if p != lastPos {
		sh.heap[p] = sh.heap[lastPos]
		sh.buckets[sh.heap[p]].pos = int32(p)
	}
	sh.heap = sh.heap[:lastPos]
	if p != lastPos {
		sh.down(p)
		sh.up(p)
	}
	// Take it out of the slice: move the last bucket into its slot.
	last := int32(len(sh.buckets) - 1)
	if idx != last {
		sh.buckets[idx] = sh.buckets[last]
		moved := &sh.buckets[idx]
		sh.index[moved.key] = idx
		sh.heap[moved.pos] = idx
	}
	sh.buckets[last] = bucket{}
	sh.buckets = sh.buckets[:last]
}

func (sh *shard) less(i, j int) bool {
	return sh.buckets[sh.heap[i]].due < sh.buckets[sh.heap[j]].due
}

func (sh *shard) swap(i, j int) {
	h := sh.heap
	h[i], h[j] = h[j], h[i]
	sh.buckets[h[i]].pos = int32(i)
	sh.buckets[h[j]].pos = int32(j)
}

func (sh *shard) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !sh.less(i, p) {
			return
		}
		sh.swap(i, p)
		i = p
	}
}

func (sh *shard) down(i int) {
	n := len(sh.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && sh.less(c+1, c) {
			c++
		}
		if !sh.less(c, i) {
			return
		}
		sh.swap(i, c)
		i = c
	}
}
