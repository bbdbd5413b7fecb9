//go:build soak

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
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/admission"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/dataplane/limiter/redisstore"
	"github.com/fairqueue/fairqueue/internal/redistest"
)

// This file is the fleet scenario on a real redis-server in real time: three
// replicas' admission controllers, fair queues and pacers, closed-loop
// clients, and rates measured over seconds of wall clock. Its shares depend
// on the machine's scheduling as much as on the code, so it runs only with
// the soak build tag (make test-soak), never in CI; TestFleetSharesOnRedis
// asserts the same shares on a fake clock.

// realReplica is one data-plane replica's admission path on real Redis: the
// shared Redis limiter store, its own fair queue, and (when paced) a fleet
// Pacer exchanging reports through the same Redis.
type realReplica struct {
	client *redis.Client
	store  *redisstore.Store
	queue  *fairqueue.Queue
	ctrl   *admission.Controller
	stop   context.CancelFunc
	done   chan struct{}
}

func newRealReplica(t *testing.T, name, addr string, paced bool, limits limiter.Config, weights fairqueue.Weights) *realReplica {
	t.Helper()
	r := &realReplica{client: redis.NewClient(&redis.Options{Addr: addr}), done: make(chan struct{})}
	r.store = redisstore.NewWithClient(r.client, redisstore.Options{Namespace: "ns", Policy: "p"})
	lim, err := limiter.New(limits, limiter.Options{Store: r.store})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.RealClock{}
	r.queue = fairqueue.New(clk, fairqueue.Bounds{MaxWait: 10 * time.Second}, weights, nil)
	if r.ctrl, err = admission.New(clk, lim, r.queue, admission.Settings{Enabled: true}, logr.Discard()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	if !paced {
		close(r.done)
		return r
	}
	p, err := New(clk, Options{Replica: name, Exchange: NewRedisExchange(r.client, redisstore.KeyPrefix("ns", "p")+"fleet:")}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	p.SetLimits(limits)
	p.SetWeights(weights)
	r.ctrl.SetGate(p)
	go func() { defer close(r.done); p.Run(ctx) }()
	return r
}

// close stops the replica: its pacer leaves the exchange, its queue answers
// its waiters.
func (r *realReplica) close(t *testing.T) {
	r.stop()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Error("a replica's pacer did not stop within 10s")
	}
	r.queue.Close()
	_ = r.store.Close()
	_ = r.client.Close()
}

// realLoad runs closed-loop clients and counts admissions per tenant.
type realLoad struct {
	wg       sync.WaitGroup
	admitted map[string]*atomic.Int64
}

func (l *realLoad) start(ctx context.Context, r *realReplica, tenant string, clients int) {
	n := l.admitted[tenant]
	req := admission.Request{Identity: identity.Set{User: tenant}, Model: "m", TotalTimeout: 10 * time.Second}
	for range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil {
				if d := r.ctrl.Admit(ctx, req); d.Allowed {
					n.Add(1)
				} else if d.Status == admission.StatusServiceUnavailable {
					return
				}
			}
		}()
	}
}

// stopFleet ends the clients' context, closes the replicas and waits for
// the clients to return.
func stopFleet(t *testing.T, cancel context.CancelFunc, reps []*realReplica, load *realLoad) {
	cancel()
	for _, r := range reps {
		r.close(t)
	}
	stopped := make(chan struct{})
	go func() { load.wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Error("clients still blocked in Admit 10s after their replicas closed")
	}
}

func (l *realLoad) snapshot() map[string]int64 {
	out := map[string]int64{}
	for t, n := range l.admitted {
		out[t] = n.Load()
	}
	return out
}

func ratesBetween(a, b map[string]int64, d time.Duration) (map[string]float64, float64) {
	out := map[string]float64{}
	total := 0.0
	for t := range b {
		out[t] = float64(b[t]-a[t]) / d.Seconds()
		total += out[t]
	}
	return out, total
}

// TestRealRedisFleet runs the scenario on a real redis-server: three
// replicas sharing one Redis bucket of 90/s, A only on replica 0, B only on
// replica 1, C on all three, weights 1:1:3. With fleet pacing the shares are
// 0.2/0.2/0.6 at 90/s; without it (the control) A and B get far less; then
// one replica goes away and the other two keep 90/s.
func TestRealRedisFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about 30s of real time")
	}
	addr := redistest.Start(t).Addr()
	limits := limiter.Config{Model: &limiter.Limit{Requests: 90, Period: time.Second}}
	weights := fairqueue.Weights{Default: 1, ByTenant: map[string]int{"A": 1, "B": 1, "C": 3}}
	want := map[string]float64{"A": 0.2, "B": 0.2, "C": 0.6}
	const warm, measure = 2 * time.Second, 8 * time.Second

	for _, paced := range []bool{false, true} {
		t.Run(fmt.Sprintf("paced=%v", paced), func(t *testing.T) {
			flush := redis.NewClient(&redis.Options{Addr: addr})
			if err := flush.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			_ = flush.Close()
			reps := make([]*realReplica, 3)
			for i := range reps {
				reps[i] = newRealReplica(t, fmt.Sprintf("replica-%d", i), addr, paced, limits, weights)
			}
			load := &realLoad{admitted: map[string]*atomic.Int64{"A": {}, "B": {}, "C": {}}}
			ctx, cancel := context.WithCancel(context.Background())
			perReplica := make([]context.CancelFunc, 3)
			for i := range reps {
				rctx, rcancel := context.WithCancel(ctx)
				perReplica[i] = rcancel
				load.start(rctx, reps[i], "C", 8)
			}
			load.start(ctx, reps[0], "A", 8)
			load.start(ctx, reps[1], "B", 8)
			defer stopFleet(t, cancel, reps, load)

			time.Sleep(warm)
			s0 := load.snapshot()
			time.Sleep(measure)
			s1 := load.snapshot()
			rates, total := ratesBetween(s0, s1, measure)
			t.Logf("3 replicas: shares A=%.3f B=%.3f C=%.3f, total %.1f/s", rates["A"]/total, rates["B"]/total, rates["C"]/total, total)
			hit := within(total, 90, 0.03)
			for tenant, w := range want {
				hit = hit && within(rates[tenant]/total, w, 0.05)
			}
			if hit != paced {
				t.Errorf("targets (shares within 5%% of 0.2/0.2/0.6, total within 3%% of 90/s) met = %v, want %v", hit, paced)
			}
			if !paced {
				return
			}

			// Scale 3 -> 2: replica 2 shuts down; its C clients reconnect to
			// replicas 0 and 1.
			perReplica[2]()
			reps[2].stop()
			load.start(ctx, reps[0], "C", 4)
			load.start(ctx, reps[1], "C", 4)
			s2 := load.snapshot()
			time.Sleep(measure)
			s3 := load.snapshot()
			rates, total = ratesBetween(s2, s3, measure)
			t.Logf("after 3 -> 2: shares A=%.3f B=%.3f C=%.3f, total %.1f/s", rates["A"]/total, rates["B"]/total, rates["C"]/total, total)
			if !within(total, 90, 0.03) {
				t.Errorf("after scaling 3 -> 2 the total is %.1f/s, want within 3%% of 90/s", total)
			}
			for tenant, w := range want {
				if s := rates[tenant] / total; !within(s, w, 0.05) {
					t.Errorf("after scaling 3 -> 2 tenant %s has share %.3f, want within 5%% of %.1f", tenant, s, w)
				}
			}
		})
	}
}
