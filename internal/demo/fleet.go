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

package demo

// The fleet scenario (Options.Scenario ScenarioFleet, `make demo-fleet`):
// three data-plane replicas (in one process, each with its own fair queue,
// fleet pacer and Redis connections; they share nothing but Redis) admit
// requests against one model limit kept in Redis. Tenant A reaches only
// replica 0, B only replica 1, C all three; weights 1:1:3. The run prints
// each second's fleet and per-replica shares, kills Redis for a few seconds
// to show the failure mode, and charts the fleet shares over time.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/admission"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/fleet"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/dataplane/limiter/redisstore"
	"github.com/fairqueue/fairqueue/internal/chart"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// FleetReplicas is the number of data-plane replicas of the fleet scenario.
const FleetReplicas = 3

// tickSlack lets an event due a little after a one-second tick happen at that
// tick rather than a whole second late.
const tickSlack = 100 * time.Millisecond

// FleetTenants is the skewed routing of the fleet scenario: each tenant's
// closed-loop clients per replica.
var FleetTenants = []Tenant{
	{Name: "A", Clients: []int{8, 0, 0}},
	{Name: "B", Clients: []int{0, 8, 0}},
	{Name: "C", Clients: []int{8, 8, 8}},
}

// FleetWeights are the fleet scenario's weights, indexed like FleetTenants.
var FleetWeights = []float64{1, 1, 3}

// validateFleet checks the options of the fleet scenario.
func (o *Options) validateFleet() error {
	switch {
	case o.Duration < 5*time.Second:
		return fmt.Errorf("duration %s is too short: give at least 5s", o.Duration)
	case o.PerModel <= 0:
		return fmt.Errorf("per-model limit %d must be positive", o.PerModel)
	case o.FailureMode != redisstore.FailClosed && o.FailureMode != redisstore.FailOpen:
		return fmt.Errorf("failure mode %q: give %s or %s", o.FailureMode, redisstore.FailClosed, redisstore.FailOpen)
	}
	return nil
}

// replica is one data plane's admission path.
type replica struct {
	client *redis.Client
	store  *redisstore.Store
	queue  *fairqueue.Queue
	ctrl   *admission.Controller
	done   chan struct{}
}

// runFleet runs the fleet scenario until o.Duration has passed or ctx ends.
func runFleet(ctx context.Context, o Options) (*Result, error) {
	out := &progress{out: o.Out}
	redis.SetLogger(quietRedisLog{})
	rb, note, err := startRedis(ctx, o.RedisServer)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rb.Close() }()
	if note != "" {
		out.printf("==> %s\n", note)
	}
	res := &Result{Scenario: ScenarioFleet, Tenants: FleetTenants, Duration: o.Duration, Redis: rb.Describe(),
		OutageStart: -1, OutageEnd: -1, PerModel: o.PerModel}
	out.printf("==> Redis: %s; %d replicas share one model limit of %d/s; failure mode %s\n", res.Redis, FleetReplicas, o.PerModel, o.FailureMode)

	limits := limiter.Config{Model: &limiter.Limit{Requests: int64(o.PerModel), Period: time.Second}}
	weights := fairqueue.Weights{Default: 1, ByTenant: map[string]int{}}
	for i, t := range FleetTenants {
		weights.ByTenant[t.Name] = int(FleetWeights[i])
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	reps := make([]*replica, FleetReplicas)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		for _, r := range reps {
			if r != nil {
				r.close()
			}
		}
		wg.Wait()
	}()
	for i := range reps {
		if reps[i], err = newReplica(runCtx, fmt.Sprintf("replica-%d", i), rb.Addr(), o.FailureMode, limits, weights); err != nil {
			return nil, err
		}
	}

	seconds := int(o.Duration / time.Second)
	counts := make([][FleetReplicas]atomic.Int64, len(FleetTenants))
	var unavailable atomic.Int64
	for ti, t := range FleetTenants {
		for ri, n := range t.Clients {
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					fleetClient(runCtx, reps[ri], t.Name, &counts[ti][ri], &unavailable)
				}()
			}
		}
	}
	res.ReplicaAdmitted = make([][FleetReplicas][]int, len(FleetTenants))
	prev := make([][FleetReplicas]int64, len(FleetTenants))
	var prevUnavailable int64
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var errs []error
	for s := 1; s <= seconds; s++ {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
		}
		for ti := range FleetTenants {
			for ri := range FleetReplicas {
				now := counts[ti][ri].Load()
				res.ReplicaAdmitted[ti][ri] = append(res.ReplicaAdmitted[ti][ri], int(now-prev[ti][ri]))
				prev[ti][ri] = now
			}
		}
		u := unavailable.Load()
		res.Unavailable = append(res.Unavailable, int(u-prevUnavailable))
		prevUnavailable = u
		out.printf("%s\n", res.fleetLine(s-1))

		el := time.Since(start)
		switch {
		case o.Outage > 0 && res.OutageStart < 0 && el+tickSlack >= o.OutageAt:
			res.OutageStart = el
			out.printf("==> Killing Redis for %s (failure mode %s)\n", o.Outage, o.FailureMode)
			errs = append(errs, rb.Kill())
		case res.OutageStart >= 0 && res.OutageEnd < 0 && el+tickSlack >= res.OutageStart+o.Outage:
			res.OutageEnd = el
			out.printf("==> Restarting Redis (empty) on the same address\n")
			if err := rb.Restart(ctx); err != nil {
				return res, err
			}
		}
	}
	return res, errors.Join(errs...)
}

func newReplica(ctx context.Context, name, addr string, mode redisstore.FailureMode, limits limiter.Config, weights fairqueue.Weights) (*replica, error) {
	r := &replica{client: redis.NewClient(&redis.Options{Addr: addr}), done: make(chan struct{})}
	fail := func(err error) (*replica, error) {
		close(r.done)
		r.close()
		return nil, err
	}
	r.store = redisstore.NewWithClient(r.client, redisstore.Options{
		Namespace: "demo", Policy: "fleet", FailureMode: mode, Replicas: redisstore.StaticReplicas(FleetReplicas),
	})
	clk := clock.RealClock{}
	r.queue = fairqueue.New(clk, fairqueue.Bounds{MaxWait: 10 * time.Second}, weights, nil)
	lim, err := limiter.New(limits, limiter.Options{Store: r.store})
	if err != nil {
		return fail(err)
	}
	if r.ctrl, err = admission.New(clk, lim, r.queue, admission.Settings{Enabled: true}, logr.Discard()); err != nil {
		return fail(err)
	}
	p, err := fleet.New(clk, fleet.Options{
		Replica:  name,
		Exchange: fleet.NewRedisExchange(r.client, redisstore.KeyPrefix("demo", "fleet")+"fleet:"),
	}, logr.Discard())
	if err != nil {
		return fail(err)
	}
	p.SetLimits(limits)
	p.SetWeights(weights)
	r.ctrl.SetGate(p)
	go func() { defer close(r.done); p.Run(ctx) }()
	return r, nil
}

// close stops the replica once the context its pacer runs under has ended.
func (r *replica) close() {
	<-r.done
	r.queue.Close()
	_ = r.store.Close()
	_ = r.client.Close()
}

// client is one closed-loop client: a new request as soon as one is answered;
// after a 503 it backs off 100ms, as a client honouring Retry-After would.
func fleetClient(ctx context.Context, r *replica, tenant string, admitted, unavailable *atomic.Int64) {
	req := admission.Request{Identity: identity.Set{User: tenant}, Model: "m", TotalTimeout: 10 * time.Second}
	for ctx.Err() == nil {
		d := r.ctrl.Admit(ctx, req)
		switch {
		case d.Allowed:
			admitted.Add(1)
		case d.Status == admission.StatusServiceUnavailable && ctx.Err() == nil:
			unavailable.Add(1)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// FleetShares returns each tenant's share of the fleet's admissions in
// seconds [from, to), and the total rate; NaN shares when nothing was admitted.
func (r *Result) FleetShares(from, to int) ([]float64, float64) {
	per := make([]float64, len(r.ReplicaAdmitted))
	total := 0.0
	for ti := range r.ReplicaAdmitted {
		for ri := range FleetReplicas {
			for s := from; s < to && s < len(r.ReplicaAdmitted[ti][ri]); s++ {
				per[ti] += float64(r.ReplicaAdmitted[ti][ri][s])
			}
		}
		total += per[ti]
	}
	return normalize(per), total / float64(max(to-from, 1))
}

// fleetLine formats second s of the live table.
func (r *Result) fleetLine(s int) string {
	shares, total := r.FleetShares(s, s+1)
	out := fmt.Sprintf("%4ds  fleet", s+1)
	for ti, t := range r.Tenants {
		out += fmt.Sprintf(" %s %.2f", t.Name, shares[ti])
	}
	out += fmt.Sprintf("  total %3.0f/s |", total)
	for ri := range FleetReplicas {
		n := 0
		for ti := range r.Tenants {
			n += r.ReplicaAdmitted[ti][ri][s]
		}
		out += fmt.Sprintf(" r%d", ri)
		for ti, t := range r.Tenants {
			if t.Clients[ri] > 0 && n > 0 {
				out += fmt.Sprintf(" %s %.2f", t.Name, float64(r.ReplicaAdmitted[ti][ri][s])/float64(n))
			}
		}
		out += " |"
	}
	return out + fmt.Sprintf(" 503s %d", r.Unavailable[s])
}

// writeFleetReport prints the shares and totals outside the outage (skipping
// the first 2 seconds of warm-up and 2 seconds after the outage), and the
// 503s during it.
func (r *Result) writeFleetReport(w io.Writer) {
	p := &progress{out: w}
	n := len(r.Unavailable)
	type span struct{ from, to int }
	var steady []span
	if r.OutageStart < 0 {
		steady = []span{{2, n}}
	} else {
		steady = []span{{2, int(r.OutageStart / time.Second)}}
		if r.OutageEnd >= 0 {
			steady = append(steady, span{int(r.OutageEnd/time.Second) + 2, n})
		}
	}
	want := testutil.WeightedShares(FleetWeights)
	for _, sp := range steady {
		if sp.to-sp.from < 1 {
			continue
		}
		shares, total := r.FleetShares(sp.from, sp.to)
		p.printf("==> Seconds %d-%d: fleet shares", sp.from+1, sp.to)
		for ti, t := range r.Tenants {
			p.printf(" %s %.3f (want %.1f)", t.Name, shares[ti], want[ti])
		}
		p.printf("; total %.1f/s (limit %d/s)\n", total, r.PerModel)
	}
	if r.OutageStart >= 0 {
		u := 0
		for _, v := range r.Unavailable {
			u += v
		}
		end := r.OutageEnd
		if end < 0 {
			end = time.Duration(n) * time.Second
		}
		_, total := r.FleetShares(int(r.OutageStart/time.Second), int(end/time.Second))
		p.printf("==> Redis down from %s to %s: %d answers 503, %.1f/s admitted meanwhile\n",
			r.OutageStart.Round(time.Second), end.Round(time.Second), u, total)
	}
}

// fleetChart returns the fleet shares per second with the weighted shares
// and markers at the outage.
func (r *Result) fleetChart() *chart.Shares {
	c := &chart.Shares{Title: fmt.Sprintf("fairqueue fleet demo: fleet share of admitted requests per second, %d replicas, skewed routing", FleetReplicas)}
	want := testutil.WeightedShares(FleetWeights)
	n := min(len(r.Unavailable), chart.MaxPoints)
	for ti, t := range r.Tenants {
		ct := chart.Tenant{Name: fmt.Sprintf("%s (weight %g)", t.Name, FleetWeights[ti])}
		for s := range n {
			shares, _ := r.FleetShares(s, s+1)
			ct.Share = append(ct.Share, shares[ti])
			ct.Weighted = append(ct.Weighted, want[ti])
		}
		c.Tenants = append(c.Tenants, ct)
	}
	if r.OutageStart >= 0 {
		c.Markers = append(c.Markers, chart.Marker{At: r.OutageStart.Seconds(), Label: "Redis killed"})
	}
	if r.OutageEnd >= 0 {
		c.Markers = append(c.Markers, chart.Marker{At: r.OutageEnd.Seconds(), Label: "Redis back"})
	}
	return c
}
