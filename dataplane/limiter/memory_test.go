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
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
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
		// refusedFrom is the first key refused because the table is full; 0 means none is.
		refusedFrom int
	}{
		{name: "idle buckets are reclaimed as new keys arrive", keys: 10000, cap: 150, gap: 10 * time.Millisecond, maxLen: 150},
		{name: "churn stays within twice the keys live in one refill period", keys: 10000, cap: 1000, gap: 100 * time.Millisecond, maxLen: 2*10 + 2},
		{name: "a burst of live keys fills the table and the next key is refused", keys: 500, cap: 100, gap: 0, maxLen: 100, refusedFrom: 100},
		{name: "sharded table: churn never refuses", keys: 20000, cap: 8192, gap: time.Millisecond, maxLen: 8192},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewMemoryStore(tc.cap)
			now := t0
			for i := 0; i < tc.keys; i++ {
				d, _ := s.Take(now, userBatch(strconv.Itoa(i), l))
				wantFull := tc.refusedFrom > 0 && i >= tc.refusedFrom
				if d.Allowed == wantFull || d.TableFull.Has(DimensionUser) != wantFull {
					t.Fatalf("fresh key %d: %+v, want allowed %v", i, d, !wantFull)
				}
				if n := s.Len(DimensionUser); n > tc.maxLen {
					t.Fatalf("after %d keys the table holds %d buckets, want <= %d", i+1, n, tc.maxLen)
				}
				now = now.Add(tc.gap)
			}
			if got, want := s.TableFullRefusals(), uint64(max(0, tc.keys-tc.refusedFrom)*min(1, tc.refusedFrom)); got != want {
				t.Fatalf("TableFullRefusals() = %d, want %d", got, want)
			}
		})
	}
}

// TestMemoryStoreTableFullEvictsRefilledFirst fills a table with live
// buckets: a new key is refused (never admitted untracked) until the first
// bucket has refilled, then takes that bucket's place.
func TestMemoryStoreTableFullEvictsRefilledFirst(t *testing.T) {
	s := NewMemoryStore(100)
	slow, fast := *lim(1, time.Hour, 0), *lim(1, time.Minute, 0)
	for i := range 100 {
		l := slow
		if i == 42 {
			l = fast // the one bucket that refills soon
		}
		if d, _ := s.Take(t0, userBatch(strconv.Itoa(i), l)); !d.Allowed {
			t.Fatalf("key %d refused while the table had room: %+v", i, d)
		}
	}
	d, _ := s.Take(t0, userBatch("new", slow))
	if d.Allowed || !d.TableFull.Has(DimensionUser) || d.LimitType != DimensionUser || d.RetryAfter != time.Minute {
		t.Fatalf("new key at a full table: %+v, want refused, table full, retry after 1m (when key 42 refills)", d)
	}
	if p, _ := s.Peek(t0, userBatch("new", slow)); p.Allowed || !p.TableFull.Has(DimensionUser) {
		t.Fatalf("Peek of a new key at a full table = %+v, want the same refusal", p)
	}
	d, _ = s.Take(t0.Add(time.Minute), userBatch("new", slow))
	if !d.Allowed {
		t.Fatalf("new key after a bucket refilled: %+v, want allowed", d)
	}
	if n := s.Len(DimensionUser); n != 100 {
		t.Fatalf("table holds %d buckets, want 100", n)
	}
	for _, key := range []string{"0", "99", "new"} {
		if d, _ := s.Take(t0.Add(time.Minute), userBatch(key, slow)); d.Allowed {
			t.Fatalf("key %s admitted again within its hour: a live bucket was evicted", key)
		}
	}
	if got := s.TableFullRefusals(); got != 1 {
		t.Fatalf("TableFullRefusals() = %d, want 1 (Peek does not count)", got)
	}
}

// TestMemoryStoreChurn100kKeys presents 100,000 fresh keys to a table with
// the default cap: quickly refilling keys churn through in bounded memory,
// and a flood of keys that stay live is refused past the cap while every
// tracked key keeps its limit.
func TestMemoryStoreChurn100kKeys(t *testing.T) {
	const keys = 100_000
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("%064x", i) // the size of a hashed identity
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}

	t.Run("refilling keys churn in bounded memory and are never over-admitted", func(t *testing.T) {
		s := NewMemoryStore(0)
		l := *lim(1, 10*time.Millisecond, 0)
		before := heap()
		now := t0
		for i, k := range names {
			if d, _ := s.Take(now, userBatch(k, l)); !d.Allowed {
				t.Fatalf("fresh key %d refused: %+v", i, d)
			}
			if d, _ := s.Take(now, userBatch(k, l)); d.Allowed {
				t.Fatalf("key %d admitted twice within its 10ms: its limit was bypassed", i)
			}
			now = now.Add(10 * time.Microsecond) // 1,000 keys live in one refill period
		}
		if n := s.Len(DimensionUser); n > 4000 {
			t.Fatalf("after %d churned keys the table holds %d buckets, want about the 1,000 live ones", keys, n)
		}
		if grew := int64(heap()) - int64(before); grew > 4<<20 {
			t.Fatalf("heap grew by %d bytes, want under 4 MiB", grew)
		}
		t.Logf("100k keys churned: %d buckets tracked, table-full refusals %d", s.Len(DimensionUser), s.TableFullRefusals())
		runtime.KeepAlive(s)
	})

	t.Run("a flood of live keys is refused at the cap, never admitted untracked", func(t *testing.T) {
		s := NewMemoryStore(0)
		l := *lim(1, time.Hour, 0)
		if d, _ := s.Take(t0, userBatch("victim", l)); !d.Allowed {
			t.Fatal("first request refused")
		}
		before := heap()
		admitted := 1
		for i, k := range names {
			d, _ := s.Take(t0.Add(time.Second), userBatch(k, l))
			switch {
			case d.Allowed:
				admitted++
			case !d.TableFull.Has(DimensionUser) || d.RetryAfter <= 0:
				t.Fatalf("key %d refused without a table-full reason and retry: %+v", i, d)
			}
		}
		if admitted > DefaultMaxKeysPerDimension || admitted < DefaultMaxKeysPerDimension*9/10 {
			t.Fatalf("admitted %d keys, want at most the cap %d and close to it", admitted, DefaultMaxKeysPerDimension)
		}
		if got := s.TableFullRefusals(); got != uint64(keys+1-admitted) {
			t.Fatalf("TableFullRefusals() = %d, want the %d refused keys", got, keys+1-admitted)
		}
		if n := s.Len(DimensionUser); n != admitted {
			t.Fatalf("table holds %d buckets, want the %d admitted keys", n, admitted)
		}
		grew := int64(heap()) - int64(before)
		if grew > 24<<20 {
			t.Fatalf("heap grew by %d bytes for %d buckets, want under 24 MiB", grew, admitted)
		}
		bypass := 0
		for _, k := range append([]string{"victim"}, names...) {
			if d, _ := s.Take(t0.Add(2*time.Second), userBatch(k, l)); d.Allowed {
				bypass++
			}
		}
		if bypass != 0 {
			t.Fatalf("%d keys were admitted a second time within their hour", bypass)
		}
		t.Logf("100k live keys: %d admitted and tracked, %d refused as table_full, heap +%d KiB", admitted, keys+1-admitted, grew>>10)
		runtime.KeepAlive(s)
	})
}

func TestRefund(t *testing.T) {
	l := *lim(2, time.Second, 0) // one token per 500ms, burst 2
	cases := []struct {
		name      string
		takes     int           // tokens taken at t0
		refundAt  time.Duration // refund time
		refunds   int
		peekAt    time.Duration
		remaining int64
	}{
		{name: "a refund gives one token back", takes: 2, refunds: 1, remaining: 1},
		{name: "two refunds give both back", takes: 2, refunds: 2, remaining: 2},
		{name: "never above the burst", takes: 1, refunds: 3, remaining: 2},
		{name: "a refund after partial refill tops up to the burst", takes: 2, refundAt: 600 * time.Millisecond, refunds: 1, peekAt: 600 * time.Millisecond, remaining: 2},
		{name: "a key never taken stays untracked", takes: 0, refunds: 1, remaining: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewMemoryStore(0)
			for range tc.takes {
				if d, _ := s.Take(t0, userBatch("u", l)); !d.Allowed {
					t.Fatal("take refused")
				}
			}
			for range tc.refunds {
				if err := s.Refund(t0.Add(tc.refundAt), userBatch("u", l)); err != nil {
					t.Fatal(err)
				}
			}
			if d, _ := s.Peek(t0.Add(tc.peekAt), userBatch("u", l)); d.Tightest.Remaining != tc.remaining {
				t.Fatalf("remaining %d after refund, want %d", d.Tightest.Remaining, tc.remaining)
			}
			if tc.takes == 0 && s.Len(DimensionUser) != 0 {
				t.Fatal("refund stored a bucket for a key never taken")
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

// BenchmarkXTimeRateFourKeyed is BenchmarkTakeIdentity's reference: the same
// four buckets as golang.org/x/time/rate limiters, one sync.Map of them per
// dimension, looked up by the same keys and charged at the same instant.
func BenchmarkXTimeRateFourKeyed(b *testing.B) {
	var tables [4]sync.Map
	keys := [4]string{"4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a", "9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e", "team", "llama"}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		for i := range tables {
			l, ok := tables[i].Load(keys[i])
			if !ok {
				l, _ = tables[i].LoadOrStore(keys[i], rate.NewLimiter(rate.Limit(1<<40), 1<<40))
			}
			if !l.(*rate.Limiter).AllowN(now, 1) {
				b.Fatal("refused")
			}
		}
	}
}

// BenchmarkTakeIdentityParallel charges the identity buckets from parallel
// goroutines, each with its own API key, user and team and all sharing a
// model, as a replica serving many tenants does. Run with -cpu 1,2: with
// sharded locks, admissions per second scale with cores.
func BenchmarkTakeIdentityParallel(b *testing.B) {
	cfg := Config{APIKey: lim(1<<40, time.Second, 0), User: lim(1<<40, time.Second, 0), Team: lim(1<<40, time.Second, 0), Model: lim(1<<40, time.Second, 0)}
	l, _ := New(cfg, Options{})
	var next atomic.Int64
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		g := next.Add(1)
		keys := Keys{APIKey: fmt.Sprintf("%064x", g), User: fmt.Sprintf("%064x", g<<32), Team: fmt.Sprintf("team%d", g), Model: "llama"}
		for pb.Next() {
			if d, _ := l.TakeIdentity(now, keys); !d.Allowed {
				b.Fatal("refused")
			}
		}
	})
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

// TestRefusalQuotaDescribesTheRefusingBucket: when the model refuses while
// the API key still lets the request pass, the x-ratelimit-* quota is the
// model bucket's (no token, full again when its debt has refilled), never the
// API key's, whichever store decides.
func TestRefusalQuotaDescribesTheRefusingBucket(t *testing.T) {
	now := time.Unix(1000, 0)
	var b Batch
	b.Add(DimensionAPIKey, "k", Limit{Requests: 2, Period: 10 * time.Second, Burst: 2})
	b.Add(DimensionModel, "m", Limit{Requests: 1, Period: time.Second, Burst: 1})
	s := NewMemoryStore(0)
	if d, err := s.Take(now, b); err != nil || !d.Allowed {
		t.Fatalf("first take: %+v, %v", d, err)
	}
	want := Quota{Dimension: DimensionModel, Limit: 1, Remaining: 0, Reset: time.Second}
	for _, charge := range []bool{true, false} {
		var d Decision
		var err error
		if charge {
			d, err = s.Take(now, b)
		} else {
			d, err = s.Peek(now, b)
		}
		if err != nil || d.Allowed || d.LimitType != DimensionModel {
			t.Fatalf("second decision (charge %v): %+v, %v; want a model refusal", charge, d, err)
		}
		if !d.HasQuota || d.Tightest != want {
			t.Errorf("memory store (charge %v): quota %+v, want the refusing model bucket's %+v", charge, d.Tightest, want)
		}
	}
	// The same bucket state through the arithmetic shared stores use: the
	// API key owes 5s of its 20s window, the model a full 1s window.
	debts := [MaxBatch]int64{int64(5 * time.Second), int64(time.Second)}
	if d := DecisionFromDebts(&b, &debts, true); d.Allowed || d.Tightest != want {
		t.Errorf("DecisionFromDebts: %+v, want a refusal with quota %+v", d, want)
	}
}
