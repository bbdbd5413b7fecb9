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
	"sync"
)

const (
	// maxShards is how many independently locked shards a dimension's table
	// is split into, so requests for different keys scale with cores. A
	// power of two: a mask of a key's hash picks its shard.
	maxShards = 16
	// minKeysPerShard is the smallest per-shard cap worth sharding for; a
	// smaller cap keeps one shard so the cap is exact.
	minKeysPerShard = 256
)

// bucket is one GCRA cell. Times are nanoseconds since the store's epoch.
type bucket struct {
	key string
	// hash is key's seeded hash, its entry in the shard's index.
	hash uint64
	// tat is the theoretical arrival time: the bucket is full when tat <= now
	// and owes tat-now otherwise (see gcra.go).
	tat int64
	// due is the bucket's heap priority, a lower bound of tat: charging only
	// raises tat, and whatever lowers it (refund, rescale) lowers due too.
	due int64
	// interval is the time to refill one token; window is capacity*interval.
	interval int64
	window   int64
	// pos is the bucket's index in its shard's heap.
	pos int32
}

// shard is one locked part of a dimension's bucket table: a dense slice, an
// index from key hash to slot, and a min-heap of slots by due (evict.go).
// Every access holds mu.
//
// The index is keyed by the 64-bit seeded hash that also picks the shard, so
// a request hashes each key once: a map keyed by the string would hash it
// again. The slot's key is compared, so a collision never merges two keys:
// a key whose hash another tracked key already has goes to spill, a map by
// the key itself that stays empty (nil) unless that happens.
type shard struct {
	mu      sync.Mutex
	index   map[uint64]int32
	spill   map[string]int32
	buckets []bucket
	heap    []int32
	// decided counts the outcomes of the shard's buckets in every Take.
	decided [NumOutcomes]uint64
}

// debt returns how long the bucket at idx owes at t, first converting it to
// r's limit when that changed (a hot-swapped config).
func (sh *shard) debt(idx int32, t int64, r *Request) int64 {
	bk := &sh.buckets[idx]
	debt := max(bk.tat-t, 0)
	if bk.interval != r.interval || bk.window != r.window {
		debt = rescaledDebt(debt, bk.window, r.window)
		bk.interval, bk.window = r.interval, r.window
		sh.setDebt(idx, t, debt)
	}
	return debt
}

// setDebt records that the bucket at idx owes debt at t.
func (sh *shard) setDebt(idx int32, t, debt int64) {
	sh.buckets[idx].tat = t + debt
	sh.lower(idx)
}

// find returns the slot of key, whose hash is h, and whether sh holds it.
func (sh *shard) find(h uint64, key string) (int32, bool) {
	if idx, ok := sh.index[h]; ok && sh.buckets[idx].key == key {
		return idx, true
	}
	if idx, ok := sh.spill[key]; ok {
		return idx, true
	}
	return -1, false
}

// link records a new bucket at idx: in the index when its hash is free, in
// spill when another key has it.
func (sh *shard) link(idx int32) {
	bk := &sh.buckets[idx]
	if _, taken := sh.index[bk.hash]; !taken {
		sh.index[bk.hash] = idx
		return
	}
	if sh.spill == nil {
		sh.spill = make(map[string]int32)
	}
	sh.spill[bk.key] = idx
}

// relink records that the bucket at from moved to to, wherever it is indexed.
func (sh *shard) relink(from, to int32) {
	bk := &sh.buckets[from]
	if cur, ok := sh.index[bk.hash]; ok && cur == from {
		sh.index[bk.hash] = to
		return
	}
	sh.spill[bk.key] = to
}

// unlink forgets the bucket at idx.
func (sh *shard) unlink(idx int32) {
	bk := &sh.buckets[idx]
	if cur, ok := sh.index[bk.hash]; ok && cur == idx {
		delete(sh.index, bk.hash)
		return
	}
	delete(sh.spill, bk.key)
}

// hashOf returns the seeded hash of key, which picks its shard and indexes
// it there. The empty key (the global bucket's) needs no hashing.
func (s *MemoryStore) hashOf(key string) uint64 {
	if key == "" {
		return 0
	}
	return maphash.String(s.seed, key)
}

// lockSet is the shards a batch holds, locked in table order.
type lockSet struct {
	hash   [MaxBatch]uint64 // request i's key hash (hashOf)
	of     [MaxBatch]*shard // request i's shard
	locked [MaxBatch]*shard // each shard once, in the order locked
	n      int
}

// lock hashes the key of each of b's requests and locks their shards once
// each, in ascending table order, so two batches can never wait on each
// other: the tables are laid out in dimension order, each split by the hash
// (a power of two of shards, so a mask picks one). Limiter builds batches in
// dimension order, one request per dimension, so the shards are usually
// ascending already and are locked in the order listed.
func (s *MemoryStore) lock(b *Batch, l *lockSet) {
	var pos [MaxBatch]uint64 // table position of each request's shard
	ascending := true
	for i := 0; i < b.n; i++ {
		r := &b.reqs[i]
		h := s.hashOf(r.Key)
		in := h & (s.nShards - 1)
		l.hash[i], l.of[i] = h, &s.tables[r.Dimension][in]
		pos[i] = uint64(r.Dimension)*maxShards + in
		ascending = ascending && (i == 0 || pos[i-1] < pos[i])
	}
	if ascending {
		for i := 0; i < b.n; i++ {
			l.of[i].mu.Lock()
			l.locked[i] = l.of[i]
		}
		l.n = b.n
		return
	}
	var byPos [MaxBatch]int8
	for i := 0; i < b.n; i++ {
		j := i
		for ; j > 0 && pos[byPos[j-1]] > pos[i]; j-- { // insertion sort: at most four
			byPos[j] = byPos[j-1]
		}
		byPos[j] = int8(i)
	}
	for k := 0; k < b.n; k++ {
		i := byPos[k]
		if k == 0 || pos[i] != pos[byPos[k-1]] {
			l.of[i].mu.Lock()
			l.locked[l.n] = l.of[i]
			l.n++
		}
	}
}

func (l *lockSet) unlock() {
	for i := l.n - 1; i >= 0; i-- {
		l.locked[i].mu.Unlock()
	}
}

// shard returns the locked shard of b's request i.
func (l *lockSet) shard(i int) *shard { return l.of[i] }
