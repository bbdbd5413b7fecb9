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
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// TestStoredValuesArePrintedExactly reads back what the script stores for
// a bucket, on miniredis (Redis's clock set to t0) and on a real
// redis-server (the caller's clock at t0): the value "<s> <ns> <interval>
// <window>" and the expiry in whole milliseconds must be exact integers,
// with no exponent or rounding, from a half-second debt up to MaxDebt, where
// the offset no longer fits below 1e14 and the base seconds move.
func TestStoredValuesArePrintedExactly(t *testing.T) {
	requests := lim(2, time.Second, 0)    // interval 0.5s, window 1s
	tokens := lim(100, 10*time.Second, 0) // interval 0.1s, window 10s
	for _, tc := range []struct {
		name  string
		batch limiter.Batch
		debt  time.Duration
		shape string
	}{
		{name: "one token", batch: userBatch("u", requests), debt: 500 * time.Millisecond, shape: "500000000 1000000000"},
		{name: "a cost of 3 tokens", batch: userTokens(3, tokens), debt: 300 * time.Millisecond, shape: "100000000 10000000000"},
		{name: "a runaway cost owes MaxDebt", batch: userTokens(1<<40, tokens), debt: time.Duration(MaxDebt), shape: "100000000 10000000000"},
	} {
		for _, be := range []struct {
			name string
			// open returns the store and its client; exact is whether the
			// server's clock stands still, so that a TTL reads exactly.
			open func(t *testing.T) (s *Store, c *redis.Client, exact bool)
		}{
			{"miniredis", func(t *testing.T) (*Store, *redis.Client, bool) {
				m := miniredis.RunT(t)
				m.SetTime(t0)
				c := redis.NewClient(&redis.Options{Addr: m.Addr()})
				s := NewWithClient(c, Options{Namespace: "ns", Policy: "p", Timeout: time.Second})
				t.Cleanup(func() { _ = s.Close(); _ = c.Close() })
				return s, c, true
			}},
			{"redis-server", func(t *testing.T) (*Store, *redis.Client, bool) {
				c := redis.NewClient(&redis.Options{Addr: startRedis(t).addr})
				s := NewWithClient(c, Options{Namespace: "ns", Policy: "p", CallerClock: true, Timeout: time.Second})
				t.Cleanup(func() { _ = s.Close(); _ = c.Close() })
				return s, c, false
			}},
		} {
			t.Run(tc.name+"/"+be.name, func(t *testing.T) {
				s, c, exact := be.open(t)
				if d, err := s.Take(t0, tc.batch); err != nil || !d.Allowed {
					t.Fatalf("take: %+v, %v", d, err)
				}
				r := tc.batch.At(0)
				key := s.Key(r.Dimension, r.Key)
				ctx := context.Background()
				tat := t0.Add(tc.debt)
				want := fmt.Sprintf("%d %d %s", tat.Unix(), tat.Nanosecond(), tc.shape)
				if tc.debt+time.Duration(t0.Nanosecond()) < 1e14 {
					want = fmt.Sprintf("%d %d %s", t0.Unix(), int64(t0.Nanosecond())+int64(tc.debt), tc.shape)
				}
				if got, err := c.Get(ctx, key).Result(); err != nil || got != want {
					t.Fatalf("stored %q, %v; want %q", got, err, want)
				}
				ttl, err := c.PTTL(ctx, key).Result()
				wantTTL := (tc.debt + time.Millisecond - 1).Truncate(time.Millisecond) // whole milliseconds, rounded up
				if err != nil || ttl > wantTTL || (exact && ttl != wantTTL) || ttl < wantTTL-10*time.Second {
					t.Fatalf("the key expires in %s, %v; want %s (when the bucket is full again)", ttl, err, wantTTL)
				}
			})
		}
	}
}
