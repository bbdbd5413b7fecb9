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
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairqueue/fairqueue/dataplane/admission"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/internal/redistest"
)

// steady sends rate requests per second of tenant to r, each in its own
// goroutine, at most 64 at once (a request beyond that is not sent), counts
// the ones sent in sent and the admitted ones.
func (l *realLoad) steady(ctx context.Context, r *realReplica, tenant string, rate float64, sent *atomic.Int64) {
	n := l.admitted[tenant]
	req := admission.Request{Identity: identity.Set{User: tenant}, Model: "m", TotalTimeout: 10 * time.Second}
	slots := make(chan struct{}, 64)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			select {
			case slots <- struct{}{}:
			default:
				continue
			}
			sent.Add(1)
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				defer func() { <-slots }()
				if r.ctrl.Admit(ctx, req).Allowed {
					n.Add(1)
				}
			}()
		}
	}()
}

// TestRealRedisFleetBands runs the band scenarios of TestFleetBands in real
// time on a real redis-server, through three replicas' admission
// controllers and fair queues: one shared Redis bucket of 90/s, the
// interactive tenant H only on replica 0, the batch tenants L1 and L2
// (weights 1:2) on all three. Every load must be within 5% of its
// strict-priority allocation (a load allocated nothing at most 1% of the
// capacity), the total within 3% of 90/s.
func TestRealRedisFleetBands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about 30s of real time")
	}
	addr := redistest.Start(t).Addr()
	limits := limiter.Config{Model: &limiter.Limit{Requests: 90, Period: time.Second}}
	const warm, measure = 2 * time.Second, 8 * time.Second
	for _, tc := range bandCases()[:3] {
		t.Run(tc.name, func(t *testing.T) {
			flush := redis.NewClient(&redis.Options{Addr: addr})
			if err := flush.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			_ = flush.Close()
			weights := fairqueue.Weights{Default: 1, ByTenant: map[string]int{}, Bands: tc.bands, TenantBand: map[string]int{}}
			load := &realLoad{admitted: map[string]*atomic.Int64{}}
			for _, l := range tc.loads {
				weights.ByTenant[l.tenant], weights.TenantBand[l.tenant] = l.weight, l.band
				load.admitted[l.tenant] = &atomic.Int64{}
			}
			reps := make([]*realReplica, 3)
			for i := range reps {
				reps[i] = newRealReplica(t, fmt.Sprintf("replica-%d", i), addr, true, limits, weights)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var sent atomic.Int64 // the steady interactive load's requests
			for _, l := range tc.loads {
				for i, n := range l.clients {
					load.start(ctx, reps[i], l.tenant, n)
				}
				for _, i := range l.on {
					load.steady(ctx, reps[i], l.tenant, l.rate/float64(len(l.on)), &sent)
				}
			}
			defer stopFleet(t, cancel, reps, load)

			time.Sleep(warm)
			s0, sent0 := load.snapshot(), sent.Load()
			time.Sleep(measure)
			rates, total := ratesBetween(s0, load.snapshot(), measure)
			want := tc.want
			if offered := float64(sent.Load()-sent0) / measure.Seconds(); offered > 0 {
				// A busy machine's ticker may send less than asked: H is
				// owed what it sent, the batch band the rest, 1:2.
				t.Logf("H offered %.2f/s", offered)
				want = map[string]float64{"H": offered, "L1": (90 - offered) / 3, "L2": 2 * (90 - offered) / 3}
			}
			checkBands(t, rates, total, want, 0.05)
		})
	}
}
