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
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// closed reports whether ch is closed, waiting up to 10s for it when
// wait is set.
func closed(ch <-chan struct{}, wait bool) bool {
	if !wait {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	select {
	case <-ch:
		return true
	case <-time.After(10 * time.Second):
		return false
	}
}

// TestCallContextIsATimeoutContextUsedAgain checks, on a fake clock, that
// a reused call context behaves as context.WithTimeout would for every call
// it serves: the armed deadline, Done open and Err nil until the deadline,
// then Done closed with Err DeadlineExceeded, also for a context derived
// from it, and that once expired it refuses to be armed again.
func TestCallContextIsATimeoutContextUsedAgain(t *testing.T) {
	const timeout = 50 * time.Millisecond
	for _, tc := range []struct {
		name string
		// calls that end in time before the one that runs out.
		inTime int
		// late is how far past the deadline the clock steps in the last call.
		late time.Duration
	}{
		{name: "first call runs out", inTime: 0, late: 0},
		{name: "after three calls in time", inTime: 3, late: 0},
		{name: "long after its deadline", inTime: 1, late: time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := clocktesting.NewFakeClock(t0)
			c := newCallContext(fc.AfterFunc)
			for i := range tc.inTime {
				now := fc.Now()
				c.arm(now, timeout)
				if d, ok := c.Deadline(); !ok || !d.Equal(now.Add(timeout)) {
					t.Fatalf("call %d: Deadline() = %s, %v; want %s, true", i, d, ok, now.Add(timeout))
				}
				fc.Step(timeout - time.Nanosecond)
				if closed(c.Done(), false) || c.Err() != nil {
					t.Fatalf("call %d: Done closed or Err %v a nanosecond before the deadline", i, c.Err())
				}
				if !c.disarm() {
					t.Fatalf("call %d ended in time but the context cannot be armed again", i)
				}
				fc.Step(time.Hour) // a stopped timer must not fire later
				if closed(c.Done(), false) || c.Err() != nil {
					t.Fatalf("call %d: the context expired after it was disarmed (Err %v)", i, c.Err())
				}
			}
			c.arm(fc.Now(), timeout)
			derived, cancel := context.WithCancel(c)
			defer cancel()
			fc.Step(timeout + tc.late)
			if !closed(c.Done(), true) {
				t.Fatal("Done was not closed within 10s of the deadline passing")
			}
			if !errors.Is(c.Err(), context.DeadlineExceeded) {
				t.Fatalf("Err() = %v after the deadline, want context.DeadlineExceeded", c.Err())
			}
			if !closed(derived.Done(), true) || !errors.Is(derived.Err(), context.DeadlineExceeded) {
				t.Fatalf("a context derived from it was not ended with it: %v", derived.Err())
			}
			if c.disarm() {
				t.Fatal("disarm reported an expired context as reusable")
			}
		})
	}
}

// TestCallAfterATimeoutSucceeds makes one call run out of its timeout on a
// real redis-server (writes paused with CLIENT PAUSE), then checks that it
// failed as a timeout within the timeout and that, once Redis answers
// again, the next calls succeed: the expired context is not used again.
func TestCallAfterATimeoutSucceeds(t *testing.T) {
	const timeout = 100 * time.Millisecond
	srv := startRedis(t)
	fc := clocktesting.NewFakeClock(t0)
	obs := newTestObserver()
	probes := make(chan error, 1)
	s, err := New(Options{Addresses: []string{srv.addr}, Namespace: "ns", Policy: policyName(t), Timeout: timeout, Clock: fc, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	s.onProbe = func(err error) { probes <- err }
	t.Cleanup(func() { _ = s.Close() })
	admin := redis.NewClient(&redis.Options{Addr: srv.addr})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()
	l := lim(1_000_000, time.Second, 0)
	for i := range 3 {
		if d, err := s.Take(time.Now(), userBatch("u", l)); err != nil || !d.Allowed {
			t.Fatalf("take %d before the pause: %+v, %v", i, d, err)
		}
	}

	// A script is a write as far as CLIENT PAUSE WRITE is concerned, so the
	// next take waits for an answer until its timeout.
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "30000", "WRITE").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	start := time.Now()
	_, err = s.Take(time.Now(), userBatch("u", l))
	if el := time.Since(start); el > timeout+2*time.Second {
		t.Fatalf("the paused take took %s; the timeout is %s", el, timeout)
	}
	if !errors.Is(err, limiter.ErrStoreUnavailable) || obs.errorCount(ErrorTimeout) != 1 {
		t.Fatalf("paused take: %v with %d timeouts; want ErrStoreUnavailable and one timeout", err, obs.errorCount(ErrorTimeout))
	}
	if err := admin.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatalf("CLIENT UNPAUSE: %v", err)
	}

	// The probe (PING) returns the store to Redis.
	deadline := time.After(10 * time.Second)
	var probeErr error
	for !s.Up() {
		for !fc.HasWaiters() {
			select {
			case <-deadline:
				t.Fatalf("no health probe is waiting for its timer within 10s (last probe: %v)", probeErr)
			case <-time.After(time.Millisecond):
			}
		}
		fc.Step(DefaultProbeInterval)
		select {
		case probeErr = <-probes:
		case <-deadline:
			t.Fatal("the probe did not finish within 10s")
		}
	}
	for i := range 5 {
		if d, err := s.Take(time.Now(), userBatch("u", l)); err != nil || !d.Allowed {
			t.Fatalf("take %d after the timeout: %+v, %v", i, d, err)
		}
	}
	if n := obs.errorCount(ErrorTimeout); n != 1 {
		t.Fatalf("%d timeouts, want only the paused call's", n)
	}
}

// TestAdmissionAllocatesLessThanABareEvalsha compares, in the same run, the
// client-side allocations of a four-bucket admission through a store New
// built with those of go-redis's own Script.Run of "return 1" on the same
// client: the store's pooled arguments and reused call context must leave
// it below the bare command (it allocated 11 times against 7 before the
// context was pooled).
func TestAdmissionAllocatesLessThanABareEvalsha(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop pooled arguments on purpose")
	}
	srv := startRedis(t)
	s, err := New(Options{Addresses: []string{srv.addr}, Namespace: "ns", Policy: policyName(t), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	big := limiter.Limit{Requests: 1 << 40, Period: time.Second}
	b := batchOf(bucket{limiter.DimensionAPIKey, "4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a", big},
		bucket{limiter.DimensionUser, "9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e", big},
		bucket{limiter.DimensionTeam, "team", big}, bucket{limiter.DimensionModel, "llama", big})
	ctx := context.Background()
	var failed error
	bare := testing.AllocsPerRun(200, func() {
		if err := bareScript.Run(ctx, s.Client(), nil).Err(); err != nil {
			failed = err
		}
	})
	admission := testing.AllocsPerRun(200, func() {
		if d, err := s.Take(time.Now(), b); err != nil || !d.Allowed {
			failed = errors.Join(err, errors.New("refused"))
		}
	})
	if failed != nil {
		t.Fatal(failed)
	}
	t.Logf("allocations: four-bucket admission %.0f, bare EVALSHA %.0f", admission, bare)
	if admission >= bare {
		t.Errorf("one four-bucket admission allocates %.0f times, a bare EVALSHA %.0f; want fewer", admission, bare)
	}
}
