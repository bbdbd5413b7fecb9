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
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestShardIndexKeepsCollidingKeysApart drives a shard's index with keys
// whose hashes collide far more often than seeded 64-bit hashes ever do:
// inserts and evictions in random order must leave every tracked key
// found at its own bucket and every dropped key not found.
func TestShardIndexKeepsCollidingKeysApart(t *testing.T) {
	for _, hashes := range []uint64{1, 2, 3, 64} {
		t.Run(fmt.Sprintf("%d hashes", hashes), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(hashes, 1))
			sh := &shard{index: make(map[uint64]int32)}
			hashOf := func(key string) uint64 { return uint64(len(key)*7+int(key[len(key)-1])) % hashes }
			tracked := map[string]bool{}
			for step := range 5000 {
				key := fmt.Sprintf("k%d", rng.IntN(40))
				if slot, ok := sh.find(hashOf(key), key); ok != tracked[key] {
					t.Fatalf("step %d: find(%q) = %v, want %v", step, key, ok, tracked[key])
				} else if ok {
					if rng.IntN(2) == 0 {
						sh.remove(slot)
						delete(tracked, key)
					}
					continue
				}
				sh.insert(bucket{key: key, hash: hashOf(key), tat: int64(step)})
				tracked[key] = true
				for k := range tracked {
					slot, ok := sh.find(hashOf(k), k)
					if !ok || sh.buckets[slot].key != k {
						t.Fatalf("step %d: tracked key %q not found at its bucket (slot %d, found %v)", step, k, slot, ok)
					}
				}
				if n := len(sh.index) + len(sh.spill); n != len(tracked) || len(sh.buckets) != len(tracked) {
					t.Fatalf("step %d: %d index entries and %d buckets for %d keys", step, n, len(sh.buckets), len(tracked))
				}
			}
		})
	}
}
