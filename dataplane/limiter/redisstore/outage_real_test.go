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
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// TestRealRedisOutagesRecoverWithinASecond kills a real redis-server ten
// times under each failure mode, on the real clock: every call during an
// outage is answered within the timeout (503 or the fallback's answer), the
// store is back on Redis within 1s of Redis answering again, and neither
// goroutines nor connections accumulate.
func TestRealRedisOutagesRecoverWithinASecond(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts redis-server twenty times")
	}
	for _, mode := range []FailureMode{FailClosed, FailOpen} {
		t.Run(string(mode), func(t *testing.T) {
			srv := startRedis(t)
			s, err := New(Options{Addresses: []string{srv.addr}, Namespace: "ns", Policy: policyName(t), FailureMode: mode,
				Replicas: StaticReplicas(3), PoolSize: 4}) // small: go-redis stops dialing after PoolSize failed dials
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			l := lim(1_000_000, time.Second, 0)
			var recoveries, failures []time.Duration
			goroutines := 0
			for i := range 10 {
				srv.stop()
				// Calls fail one by one until a run of them over the probe
				// interval marks the store down.
				marked := time.Now()
				for s.Up() {
					if time.Since(marked) > 3*time.Second {
						t.Fatalf("outage %d: not marked down within 3s of failing calls", i)
					}
					_, _ = s.Peek(time.Now(), userBatch("u", l))
					time.Sleep(10 * time.Millisecond) // calls spread over real time
				}
				for range 3 {
					start := time.Now()
					d, err := s.Take(time.Now(), userBatch("u", l))
					failures = append(failures, time.Since(start))
					switch {
					case mode == FailClosed && !errors.Is(err, limiter.ErrStoreUnavailable):
						t.Fatalf("outage %d: %+v, %v; want ErrStoreUnavailable", i, d, err)
					case mode == FailOpen && (err != nil || !d.Allowed):
						t.Fatalf("outage %d: %+v, %v; want the fallback to admit", i, d, err)
					}
				}
				srv.start() // returns once it answers PING
				answered := time.Now()
				for !s.Up() {
					if time.Since(answered) > 3*time.Second {
						t.Fatalf("outage %d: still off Redis 3s after it answered", i)
					}
					time.Sleep(time.Millisecond) // measuring a real-time recovery
				}
				recoveries = append(recoveries, time.Since(answered))
				if d, err := s.Take(time.Now(), userBatch("u", l)); err != nil || !d.Allowed {
					t.Fatalf("after outage %d: %+v, %v", i, d, err)
				}
				if i == 0 {
					goroutines = runtime.NumGoroutine()
				}
			}
			slices.Sort(recoveries)
			slices.Sort(failures)
			t.Logf("%s: recovery after Redis answers: median %s, max %s; calls during outages: median %s, max %s",
				mode, recoveries[len(recoveries)/2], recoveries[len(recoveries)-1], failures[len(failures)/2], failures[len(failures)-1])
			if worst := recoveries[len(recoveries)-1]; worst > time.Second {
				t.Fatalf("slowest recovery %s, want within 1s", worst)
			}
			if worst := failures[len(failures)-1]; worst > DefaultTimeout+250*time.Millisecond {
				t.Fatalf("slowest call during an outage took %s; the timeout is %s", worst, DefaultTimeout)
			}
			if g := runtime.NumGoroutine(); g > goroutines+2 {
				t.Fatalf("%d goroutines after 10 outages, %d after the first", g, goroutines)
			}
			if st := s.Client().(*redis.Client).PoolStats(); st.TotalConns > 4 {
				t.Fatalf("the pool holds %d connections after 10 outages, more than its size 4", st.TotalConns)
			}
		})
	}
}
