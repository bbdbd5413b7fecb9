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

package admission

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// TestFloodStaysBounded sends 1,000,000 requests: three quarters from one
// tenant far over its limit, one quarter from random users, every request
// with a random API key (key churn in two dimensions). It checks that the
// flood tenant never gets more than its limit, that every refusal is a
// bounded-queue refusal, and that afterwards the queue is empty (depth gauge
// 0), the bucket tables are within their cap and the heap has not grown with
// the number of keys seen.
func TestFloodStaysBounded(t *testing.T) {
	const (
		total    = 1_000_000
		workers  = 64
		maxKeys  = 4096
		userRate = 100 // per second, for the flood tenant
	)
	e := newEnv(t, envOpts{
		cfg:      limiter.Config{User: lim(userRate, time.Second), APIKey: lim(1, time.Second)},
		settings: on,
		maxKeys:  maxKeys,
	})
	store := e.lim.Store().(*limiter.MemoryStore)

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	// Advance the fake clock by 1ms per 100 requests (a simulated 100,000
	// requests per second), or when every worker is blocked in the queue, so
	// queued requests are granted or expire and idle buckets become
	// reclaimable.
	var (
		done atomic.Bool
		next atomic.Int64
	)
	// The limit is measured from before the clock driver starts: taking the
	// start time later would miss the first steps and undercount the bound.
	start := e.clk.Now()
	driver := make(chan struct{})
	go func() {
		defer close(driver)
		last, spins := int64(0), 0
		for !done.Load() {
			if n := next.Load(); n >= last+100 || spins > 1000 {
				last, spins = n, 0
				e.clk.Step(time.Millisecond)
			}
			spins++
			runtime.Gosched()
		}
	}()

	var (
		floodAllowed atomic.Int64
		tableFull    atomic.Int64
		mu           sync.Mutex
		unexpected   []Decision
		wg           sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for next.Add(1) <= total {
				id := identity.Set{User: "flood", APIKey: strconv.FormatUint(rng.Uint64(), 16)}
				churn := rng.IntN(4) == 0
				if churn {
					id.User = strconv.FormatUint(rng.Uint64(), 16)
				}
				d := e.c.Admit(context.Background(), Request{Identity: id, TotalTimeout: time.Second})
				switch {
				case d.Allowed:
					if !churn {
						floodAllowed.Add(1)
					}
				case d.Status == StatusTooManyRequests && d.TableFull && !d.Queue.Queued:
					// 100,000 fresh API keys per simulated second, each live
					// for 1s, overflow the 4,096-key table: a new key is
					// refused, never admitted untracked.
					tableFull.Add(1)
				case !churn && d.Status == StatusTooManyRequests && d.Queue.Queued &&
					(d.Queue.Reason == fairqueue.ReasonTenantQueueFull || d.Queue.Reason == fairqueue.ReasonWaitExceedsBudget || d.Queue.Reason == fairqueue.ReasonDeadlineExceeded):
				default:
					mu.Lock()
					if len(unexpected) < 10 {
						unexpected = append(unexpected, d)
					}
					mu.Unlock()
				}
			}
		}()
	}
	testutil.WaitGroupWithin(t, 2*time.Minute, "the flood", &wg)
	elapsed := e.clk.Since(start)
	done.Store(true)
	recv(t, "the clock driver's exit", driver)

	if len(unexpected) > 0 {
		t.Fatalf("unexpected decisions (first %d): %+v", len(unexpected), unexpected)
	}
	if got, most := floodAllowed.Load(), int64(userRate)+int64(elapsed.Seconds()*userRate)+1; got > most {
		t.Errorf("flood tenant admitted %d times in %s, more than its limit allows (%d)", got, elapsed, most)
	}
	// The store also counts the attempts of queued requests that met a full table.
	if got, counted := uint64(tableFull.Load()), store.TableFullRefusals(); got == 0 || got > counted {
		t.Errorf("%d table_full refusals answered, the store counted %d", got, counted)
	}
	if got := floodAllowed.Load(); got == 0 {
		t.Error("flood tenant was never admitted")
	}
	if depth := promtestutil.ToFloat64(gauge(e, metrics.QueueDepthName)); depth != 0 {
		t.Errorf("depth gauge %v after the flood, want 0", depth)
	}
	if depth, tenants := e.queue.Stats(); depth != 0 || tenants != 0 {
		t.Errorf("queue holds %d requests in %d tenant queues after the flood, want none", depth, tenants)
	}
	for _, d := range []limiter.Dimension{limiter.DimensionAPIKey, limiter.DimensionUser} {
		if n := store.Len(d); n > maxKeys {
			t.Errorf("%s table holds %d buckets, cap %d", d, n, maxKeys)
		}
	}

	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	// Two full tables of 4096 buckets are well under 4 MiB; a table that grew
	// with every key seen would hold hundreds of thousands.
	if growth := int64(after.HeapAlloc) - int64(before.HeapAlloc); growth > 16<<20 {
		t.Errorf("heap grew by %d MiB over the flood, want a bound independent of the keys seen", growth>>20)
	}
	t.Logf("flood: %s fake time, flood tenant admitted %d, tables api_key=%d user=%d, table-full refusals %d, heap %+d KiB",
		elapsed, floodAllowed.Load(), store.Len(limiter.DimensionAPIKey), store.Len(limiter.DimensionUser), store.TableFullRefusals(),
		(int64(after.HeapAlloc)-int64(before.HeapAlloc))>>10)
}
