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
	"strconv"
	"sync"
	"testing"
	"time"
)

func userBatch(key string, l Limit) Batch {
	var b Batch
	b.Add(DimensionUser, key, l)
	return b
}

func TestMemoryStoreBoundsKeys(t *testing.T) {
	l := *lim(1, time.Second, 0)
	cases := []struct {
		name string
		// keys new keys arrive spaced by gap; the table must stay within maxLen.
		keys, cap int
		gap       time.Duration
		maxLen    int
		overflows bool
	}{
		{name: "idle buckets are reclaimed as new keys arrive", keys: 10000, cap: 150, gap: 10 * time.Millisecond, maxLen: 150},
		{name: "churn stays within twice the keys live in one refill period", keys: 10000, cap: 1000, gap: 100 * time.Millisecond, maxLen: 2*10 + 2},
		{name: "a burst of live keys hits the cap and overflows", keys: 500, cap: 100, gap: 0, maxLen: 100, overflows: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewMemoryStore(tc.cap)
			now := t0
			for i := 0; i < tc.keys; i++ {
				d, _ := s.Take(now, userBatch(strconv.Itoa(i), l))
				if !d.Allowed {
					t.Fatalf("fresh key %d refused: %+v", i, d)
				}
				if n := s.Len(DimensionUser); n > tc.maxLen {
					t.Fatalf("after %d keys the table holds %d buckets, want <= %d", i+1, n, tc.maxLen)
				}
				now = now.Add(tc.gap)
			}
			if got := s.Overflows() > 0; got != tc.overflows {
				t.Fatalf("overflows = %d, want overflow %v", s.Overflows(), tc.overflows)
			}
		})
	}
}

func TestMemoryStoreNeverEvictsABucketInUse(t *testing.T) {
	s := NewMemoryStore(4)
	l := *lim(1, time.Hour, 0)
	if d, _ := s.Take(t0, userBatch("heavy", l)); !d.Allowed {
		t.Fatal("first request refused")
	}
	// Churn far past the cap: "heavy" is not full, so it must stay tracked and refused.
	for i := 0; i < 1000; i++ {
		if _, err := s.Take(t0.Add(time.Duration(i)*time.Second), userBatch(strconv.Itoa(i), *lim(1, time.Millisecond, 0))); err != nil {
			t.Fatalf("Take: %v", err)
		}
	}
	if d, _ := s.Take(t0.Add(time.Second*1000), userBatch("heavy", l)); d.Allowed {
		t.Fatal("churn evicted an exhausted bucket: its limit was forgotten")
	}
}

func TestMemoryStoreConcurrentTakesNeverOverAdmit(t *testing.T) {
	s := NewMemoryStore(0)
	var b Batch
	b.Add(DimensionUser, "u", *lim(100, time.Hour, 0))
	b.Add(DimensionModel, "m", *lim(1000, time.Hour, 0))
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		allowed int
	)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for i := 0; i < 200; i++ {
				if d, _ := s.Take(t0, b); d.Allowed {
					n++
				}
			}
			mu.Lock()
			allowed += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if allowed != 100 {
		t.Fatalf("admitted %d, want exactly the user limit 100", allowed)
	}
	var m Batch
	m.Add(DimensionModel, "m", *lim(1000, time.Hour, 0))
	if d, _ := s.Peek(t0, m); d.Tightest.Remaining != 900 {
		t.Fatalf("model remaining %d, want 900: refused batches charged it", d.Tightest.Remaining)
	}
}

func BenchmarkTakeIdentity(b *testing.B) {
	cfg := Config{APIKey: lim(1<<40, time.Second, 0), User: lim(1<<40, time.Second, 0), Team: lim(1<<40, time.Second, 0), Model: lim(1<<40, time.Second, 0)}
	l, _ := New(cfg, Options{})
	keys := Keys{APIKey: "4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a", User: "9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e", Team: "team", Model: "llama"}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := l.TakeIdentity(now, keys); !d.Allowed {
			b.Fatal("refused")
		}
	}
}

func TestPeekNeverStoresOrCharges(t *testing.T) {
	s := NewMemoryStore(0)
	l := *lim(2, time.Second, 0)
	for i := 0; i < 5; i++ {
		d, _ := s.Peek(t0, userBatch("u", l))
		if !d.Allowed || d.Tightest.Remaining != 2 {
			t.Fatalf("peek %d: %+v, want allowed with 2 tokens", i, d)
		}
	}
	if n := s.Len(DimensionUser); n != 0 {
		t.Fatalf("peeking stored %d buckets", n)
	}
}

// BenchmarkTakeKeyChurn charges a new key every time against a capped table:
// the cost stays flat because reclaiming idle buckets is amortised O(1).
func BenchmarkTakeKeyChurn(b *testing.B) {
	s := NewMemoryStore(4096)
	l := *lim(1, time.Millisecond, 0)
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = strconv.Itoa(i)
	}
	now := t0
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now = now.Add(time.Microsecond)
		if _, err := s.Take(now, userBatch(keys[i%len(keys)], l)); err != nil {
			b.Fatal(err)
		}
		i++
	}
	if n := s.Len(DimensionUser); n > 4096 {
		b.Fatalf("table grew to %d", n)
	}
}
