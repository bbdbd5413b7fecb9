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

import "strings"

// reclaimPerInsert bounds the heap steps a new key spends dropping refilled
// buckets, so idle buckets are reclaimed at the rate new ones arrive and no
// insert pays for a long backlog.
const reclaimPerInsert = 4

// Eviction: a bucket that has refilled completely is indistinguishable from
// a fresh one, so it may be dropped. Every bucket of a shard sits in a
// min-heap ordered by due, a lower bound of its tat refreshed lazily, so
// charging a known key touches no heap.

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
	sh.buckets = append(sh.buckets, bk)
	sh.link(idx)
	sh.heap = append(sh.heap, idx)
	sh.up(int(bk.pos))
}

// remove drops the bucket at idx, moving the last bucket into its slot.
func (sh *shard) remove(idx int32) {
	sh.unlink(idx)
	bk := &sh.buckets[idx]
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
		sh.relink(last, idx)
		sh.buckets[idx] = sh.buckets[last]
		sh.heap[sh.buckets[idx].pos] = idx
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
