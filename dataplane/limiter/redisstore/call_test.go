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

package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// TestScriptReloadedAfterFlush checks that a Redis that has forgotten the
// bucket script (restarted, failed over, SCRIPT FLUSH) still decides: the
// store sends the script's source and carries on with the same buckets.
func TestScriptReloadedAfterFlush(t *testing.T) {
	backends := []struct {
		name string
		addr func(t *testing.T) string
	}{
		{"miniredis", func(t *testing.T) string { return miniredis.RunT(t).Addr() }},
		{"redis-server", func(t *testing.T) string { return startRedis(t).addr }},
	}
	for _, bc := range backends {
		t.Run(bc.name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: bc.addr(t)})
			t.Cleanup(func() { _ = c.Close() })
			s := NewWithClient(c, Options{Namespace: "ns", Policy: policyName(t), Timeout: time.Second})
			t.Cleanup(func() { _ = s.Close() })
			b := userBatch("u", lim(2, time.Hour, 0))
			for i, want := range []bool{true, true, false} {
				if err := c.ScriptFlush(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
				d, err := s.Take(time.Now(), b)
				if err != nil || d.Allowed != want {
					t.Fatalf("take %d after SCRIPT FLUSH: allowed %v, %v; want %v", i+1, d.Allowed, err, want)
				}
			}
		})
	}
}

// TestAdmissionAllocations bounds the client-side allocations of one
// four-bucket admission through the store on a real redis-server (a
// separate process, so only this process's allocations count). It was 30
// before the call's arguments were pooled; go-redis itself takes about 7
// for any command. Failing open adds the charge of the local share, which
// allocates nothing.
func TestAdmissionAllocations(t *testing.T) {
	const maxAllocs = 14
	srv := startRedis(t)
	for _, mode := range []FailureMode{FailClosed, FailOpen} {
		t.Run(string(mode), func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: srv.addr})
			t.Cleanup(func() { _ = c.Close() })
			s := NewWithClient(c, Options{Namespace: "ns", Policy: policyName(t), Timeout: time.Second, FailureMode: mode, Replicas: StaticReplicas(2)})
			t.Cleanup(func() { _ = s.Close() })
			big := limiter.Limit{Requests: 1 << 40, Period: time.Second}
			b := batchOf(bucket{limiter.DimensionAPIKey, "4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a", big},
				bucket{limiter.DimensionUser, "9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e", big},
				bucket{limiter.DimensionTeam, "team", big}, bucket{limiter.DimensionModel, "llama", big})
			var failed error
			allocs := testing.AllocsPerRun(200, func() {
				if d, err := s.Take(time.Now(), b); err != nil || !d.Allowed {
					failed = err
				}
			})
			if failed != nil {
				t.Fatal(failed)
			}
			if allocs > maxAllocs {
				t.Errorf("one four-bucket admission allocates %.0f times, want at most %d", allocs, maxAllocs)
			}
		})
	}
}

// TestConcurrentTakesSharePooledArguments runs many admissions at once
// through one store, each with its own keys besides a shared bucket: every
// call's pooled arguments must stay its own (run under -race too), and the
// shared bucket grants exactly its capacity while each caller's own bucket
// is charged for exactly that caller's grants.
func TestConcurrentTakesSharePooledArguments(t *testing.T) {
	const workers, perWorker, capacity = 8, 40, 100
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), PoolSize: workers})
	t.Cleanup(func() { _ = c.Close() })
	s := NewWithClient(c, Options{Namespace: "ns", Policy: policyName(t), CallerClock: true, Timeout: 5 * time.Second})
	t.Cleanup(func() { _ = s.Close() })
	now := time.Unix(1764547200, 0)
	shared := lim(capacity, time.Hour, 0)
	own := lim(perWorker, time.Hour, 0)
	type result struct{ worker, granted int }
	allowed := make(chan result, workers)
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			n := 0
			for range perWorker {
				b := batchOf(bucket{limiter.DimensionUser, "user-" + strconv.Itoa(w), own},
					bucket{limiter.DimensionModel, "llama", shared})
				d, err := s.Take(now, b)
				if err != nil {
					errs <- err
					return
				}
				if d.Allowed {
					n++
				}
			}
			allowed <- result{w, n}
		}()
	}
	total, granted := 0, make([]int, workers)
	for range workers {
		select {
		case r := <-allowed:
			total += r.granted
			granted[r.worker] = r.granted
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(30 * time.Second):
			t.Fatal("concurrent takes did not finish within 30s")
		}
	}
	if total != capacity {
		t.Errorf("%d concurrent takes granted %d, want exactly the shared capacity %d", workers*perWorker, total, capacity)
	}
	for w := range workers {
		d, err := s.Peek(now, batchOf(bucket{limiter.DimensionUser, "user-" + strconv.Itoa(w), own}))
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(perWorker - granted[w]); !d.HasQuota || d.Tightest.Remaining != want {
			t.Errorf("user-%d's own bucket: remaining %d (quota %v), want %d: charged for other callers' takes", w, d.Tightest.Remaining, d.HasQuota, want)
		}
	}
}
