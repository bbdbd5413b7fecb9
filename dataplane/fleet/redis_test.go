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

package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/limiter/redisstore"
)

func TestRedisExchangeExpiresByRedisTime(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	ex := NewRedisExchange(client, redisstore.KeyPrefix("ns", "p")+"fleet:")
	ctx := context.Background()
	m.SetTime(simT0)

	r1 := Report{Replica: "r1", Tenants: []TenantReport{{Tenant: "A", Weight: 1, Demand: 3.5, Backlogged: true, Admitted: 2}}}
	if _, err := ex.Swap(ctx, "m", r1, 600*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	got, err := ex.Swap(ctx, "m", Report{Replica: "r2"}, 600*time.Millisecond)
	if err != nil || len(got) != 2 {
		t.Fatalf("Swap returned %d reports (err %v), want r1's and r2's", len(got), err)
	}
	for _, r := range got {
		if r.Replica == "r1" && (len(r.Tenants) != 1 || r.Tenants[0] != r1.Tenants[0]) {
			t.Fatalf("r1's report came back as %+v, want %+v", r, r1)
		}
	}
	// Every key of the exchange carries the policy's hash tag.
	for _, k := range m.Keys() {
		if !strings.HasPrefix(k, "fq:{ns/p}:fleet:") {
			t.Fatalf("key %q lacks the policy's hash tag prefix fq:{ns/p}:", k)
		}
	}

	m.SetTime(simT0.Add(time.Second)) // r1's report has expired by Redis's clock
	got, err = ex.Swap(ctx, "m", Report{Replica: "r2"}, 600*time.Millisecond)
	if err != nil || len(got) != 1 || got[0].Replica != "r2" {
		t.Fatalf("after r1's TTL Swap returned %+v (err %v), want only r2's report", got, err)
	}
	if err := ex.Leave(ctx, "m", "r2"); err != nil {
		t.Fatal(err)
	}
	got, err = ex.Swap(ctx, "m", Report{Replica: "r3"}, 600*time.Millisecond)
	if err != nil || len(got) != 1 || got[0].Replica != "r3" {
		t.Fatalf("after r2 left Swap returned %+v (err %v), want only r3's report", got, err)
	}

	m.HSet("fq:{ns/p}:fleet:m", "bad", fmt.Sprintf("%d|not json", simT0.Add(time.Hour).UnixMilli()))
	if _, err := ex.Swap(ctx, "m", Report{Replica: "r3"}, 600*time.Millisecond); err == nil || !strings.Contains(err.Error(), "decode a fleet report") {
		t.Fatalf("a corrupt report gave err %v, want one naming the undecodable report", err)
	}
}

// countingObserver counts failed rounds.
type countingObserver struct{ failed atomic.Int64 }

func (*countingObserver) Synced(string, int, bool, []Share) {}
func (o *countingObserver) ExchangeFailed(string, error)    { o.failed.Add(1) }

// TestExchangeFollowsTheStore checks that pacing is off, silently, while the
// buckets are per replica, and starts when a reload puts Redis in force.
func TestExchangeFollowsTheStore(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	var shared atomic.Bool
	ex := NewRedisExchangeFrom(func() (redis.UniversalClient, string) {
		if !shared.Load() {
			return nil, ""
		}
		return client, "fq:{ns/p}:fleet:"
	})
	clk := testingclock.NewFakeClock(simT0)
	obs := &countingObserver{}
	p := newTestPacer(t, clk, ex, "r1", Options{Observer: obs})
	ctx := context.Background()

	backlog(p, "A", "C")
	if err := p.Sync(ctx); err != nil {
		t.Fatalf("Sync on the memory store: %v, want nil (nothing to share)", err)
	}
	if n := countAllowed(p, clk, "A", 100*time.Millisecond); n != 100 || obs.failed.Load() != 0 {
		t.Fatalf("on the memory store A passed %d of 100 polls and %d rounds failed, want all and none", n, obs.failed.Load())
	}

	shared.Store(true)
	backlog(p, "A", "C")
	if err := p.Sync(ctx); err != nil {
		t.Fatalf("Sync on Redis: %v", err)
	}
	if n := countAllowed(p, clk, "A", time.Second); n > 4 {
		t.Fatalf("on Redis A passed %d times in 1s, want it paced to 2.5/s", n)
	}
}

func TestSwitchSourceIsOffOnTheMemoryStore(t *testing.T) {
	ex := NewRedisExchangeFrom(redisstore.NewSwitch(redisstore.SwitchOptions{}).FleetClient)
	if _, err := ex.Swap(context.Background(), "m", Report{Replica: "r1"}, time.Second); !errors.Is(err, ErrNotShared) {
		t.Fatalf("Swap on a Switch holding the memory store: %v, want ErrNotShared", err)
	}
}
