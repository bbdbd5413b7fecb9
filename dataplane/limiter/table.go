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
// index from key to slot, and a min-heap of slots by due (evict.go). Every
// access holds mu.
type shard struct {
	mu      sync.Mutex
	index   map[string]int32
	buckets []bucket
	heap    []int32
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

// shardOf returns the table-wide position of the shard of dimension d
// holding key: the tables are laid out in dimension order, each split by a
// seeded hash of the key (a power of two of shards, so a mask picks one).
func (s *MemoryStore) shardOf(d Dimension, key string) int {
	i := 0
	if s.nShards > 1 {
		i = int(maphash.String(s.seed, key) & (s.nShards - 1))
	}
	return int(d)*maxShards + i
}

// lockSet is the shards a batch holds, locked in table order.
type lockSet struct {
	shards [MaxBatch]*shard
	n      int
	of     [MaxBatch]int8 // request i's shard in shards
}

// lock locks the shards of b's requests once each, in ascending table order,
// so two batches can never wait on each other. A batch's requests are of
// different dimensions, usually in dimension order as Limiter builds them,
// so it usually locks one shard each in the order listed.
func (s *MemoryStore) lock(b *Batch, l *lockSet) {
	var pos [MaxBatch]int // table position of each request's shard
	var byPos [MaxBatch]int8
	for i := 0; i < b.n; i++ {
		r := &b.reqs[i]
		pos[i] = s.shardOf(r.Dimension, r.Key)
		j := i
		for ; j > 0 && pos[byPos[j-1]] > pos[i]; j-- { // insertion sort: at most four
			byPos[j] = byPos[j-1]
		}
		byPos[j] = int8(i)
	}
	for k := 0; k < b.n; k++ {
		i := byPos[k]
		if k == 0 || pos[i] != pos[byPos[k-1]] {
			sh := &s.tables[pos[i]/maxShards][pos[i]%maxShards]
			sh.mu.Lock()
			l.shards[l.n] = sh
			l.n++
		}
		l.of[i] = int8(l.n - 1)
	}
}

func (l *lockSet) unlock() {
	for i := l.n - 1; i >= 0; i-- {
		l.shards[i].mu.Unlock()
	}
}

// shard returns the locked shard of b's request i.
func (l *lockSet) shard(i int) *shard { return l.shards[l.of[i]] }
