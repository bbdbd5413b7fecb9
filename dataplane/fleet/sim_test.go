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
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/dataplane/limiter/redisstore"
)

// The simulation runs replicas on one fake clock in 1 ms ticks. Each replica
// holds, like the admission controller with its fair queue, one FIFO of
// waiters per tenant and grants retries across its local tenants by weighted
// fair queuing in virtual time; a waiter whose turn comes asks the pacing gate
// (when the fleet pacer is on) and then the limiter, and on a refusal waits
// out the Retry-After at the head of its queue. Replicas act in a random
// order every tick, as real replicas race for a shared bucket.

const (
	simModel = "m"
	simTick  = time.Millisecond
)

var simT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type simReplica struct {
	alive  bool
	pacer  *Pacer
	lim    *limiter.Limiter
	queues map[string][]time.Time // per tenant: ready time of each waiter, head first
	finish map[string]float64     // local virtual finish tag per tenant
	phase  time.Duration          // offset of the replica's exchange rounds
	old    bool                   // predates bands (simScenario.old)
}

// simLoad is one tenant's traffic: closed-loop clients per replica (a new
// request the moment one is admitted), or an open-loop rate spread round-robin
// over the live replicas (or over on, when set).
type simLoad struct {
	tenant  string
	weight  int
	clients map[int]int // replica index -> concurrent clients
	rate    float64     // open-loop requests per second, spread over replicas
	on      []int       // replicas of the open-loop rate; nil means every live one
	// band is the tenant's priority band (with simScenario.bands).
	band int
	// lower, when set, makes this load the tenant's requests that lowered
	// themselves to that band (fairqueue.Request.Band); name then tells
	// them apart from the tenant's other load in the results.
	lower int
	name  string
}

// key names the load in the replicas' queues and in the results.
func (l simLoad) key() string {
	if l.name != "" {
		return l.name
	}
	return l.tenant
}

type simScenario struct {
	replicas int
	shared   bool // one bucket for the fleet (Redis) instead of one per replica
	paced    bool // fleet pacer on
	// redis keeps the shared bucket and the pacers' exchange in Redis (the
	// Redis store's script and RedisExchange's, on miniredis, whose TIME
	// follows the fake clock) instead of in process.
	redis    bool
	loads    []simLoad
	duration time.Duration
	// scaleAt, when set, kills the last replica at that time without a
	// goodbye; its closed-loop clients reconnect to the other replicas.
	scaleAt time.Duration
	seed    uint64
	// bands are the priority bands (none when empty).
	bands []fairqueue.Band
	// exchange, when set, replaces the in-process exchange (redis must be
	// false): a RedisExchange on a real redis-server, whose report expiry
	// follows Redis's real clock, so ttl should cover the whole run.
	exchange Exchange
	ttl      time.Duration
	// old are replicas that predate bands: neither their pacer nor their
	// local queue knows the bands (as during a rolling upgrade).
	old map[int]bool
}

type simResult struct {
	// admitted per tenant in each window [from, to).
	windows map[[2]time.Duration]map[string]int
}

func (r simResult) rates(from, to time.Duration) (map[string]float64, float64) {
	got := r.windows[[2]time.Duration{from, to}]
	out := map[string]float64{}
	total := 0.0
	for t, n := range got {
		out[t] = float64(n) / (to - from).Seconds()
		total += out[t]
	}
	return out, total
}

func simulate(t *testing.T, sc simScenario, windows ...[2]time.Duration) simResult {
	t.Helper()
	clk := testingclock.NewFakeClock(simT0)
	rng := rand.New(rand.NewPCG(sc.seed, 7))
	limits := limiter.Config{Model: &limiter.Limit{Requests: 90, Period: time.Second}}
	weights := fairqueue.Weights{Default: 1, ByTenant: map[string]int{}, Bands: sc.bands, TenantBand: map[string]int{}}
	loadOf := map[string]simLoad{}
	for _, l := range sc.loads {
		loadOf[l.key()] = l
		if l.lower == 0 {
			weights.ByTenant[l.tenant] = l.weight
			weights.TenantBand[l.tenant] = l.band
		}
	}
	// bandOf is the band a load's requests are scheduled in locally.
	bandOf := func(key string) int {
		l := loadOf[key]
		return max(weights.BandOf(l.tenant), min(l.lower, len(sc.bands)-1))
	}
	noBands := func(string) int { return 0 }
	var (
		ex         Exchange = NewMemoryExchange(clk)
		store      limiter.Store
		setRedisAt = func(time.Time) {}
	)
	if sc.redis {
		m := miniredis.RunT(t)
		client := redis.NewClient(&redis.Options{Addr: m.Addr()})
		// A call's timeout is real time: generous, so a loaded machine
		// cannot fail a simulated call.
		rs := redisstore.NewWithClient(client, redisstore.Options{Namespace: "ns", Policy: "p", Timeout: 10 * time.Second})
		t.Cleanup(func() { _ = rs.Close(); _ = client.Close() })
		ex, store, setRedisAt = NewRedisExchange(client, redisstore.KeyPrefix("ns", "p")+"fleet:"), rs, m.SetTime
	}
	var shared *limiter.Limiter
	newLimiter := func() *limiter.Limiter {
		l, err := limiter.New(limits, limiter.Options{Store: store})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if sc.exchange != nil {
		ex = sc.exchange
	}
	if sc.redis && !sc.shared {
		t.Fatal("a Redis store is shared by every replica: set shared too")
	}
	if sc.shared {
		shared = newLimiter()
	}
	reps := make([]*simReplica, sc.replicas)
	for i := range reps {
		r := &simReplica{alive: true, lim: shared, queues: map[string][]time.Time{}, finish: map[string]float64{},
			phase: time.Duration(i) * 67 * time.Millisecond, old: sc.old[i]}
		if !sc.shared {
			r.lim = newLimiter()
		}
		if sc.paced {
			p, err := New(clk, Options{Replica: fmt.Sprintf("replica-%d", i), Exchange: ex, TTL: sc.ttl}, logr.Discard())
			if err != nil {
				t.Fatal(err)
			}
			if r.old {
				p.SetWeights(fairqueue.Weights{Default: weights.Default, ByTenant: weights.ByTenant})
			} else {
				p.SetWeights(weights)
			}
			p.SetLimits(limits)
			r.pacer = p
		}
		reps[i] = r
	}
	weightOf := func(key string) float64 { return float64(weights.Of(loadOf[key].tenant)) }
	arrive := func(r *simReplica, tenant string, now time.Time) {
		if len(r.queues[tenant]) == 0 {
			// A tenant that becomes active starts at the smallest tag of the
			// active ones, as in virtual-time fair queuing.
			start := math.Inf(1)
			for other, q := range r.queues {
				if len(q) > 0 {
					start = math.Min(start, r.finish[other])
				}
			}
			if !math.IsInf(start, 1) {
				r.finish[tenant] = math.Max(r.finish[tenant], start)
			}
		}
		r.queues[tenant] = append(r.queues[tenant], now)
		if r.pacer != nil {
			r.pacer.ArriveBand(loadOf[tenant].tenant, loadOf[tenant].lower, simModel)
		}
	}
	// Start every closed-loop client.
	for _, l := range sc.loads {
		for i, n := range l.clients {
			for range n {
				arrive(reps[i], l.key(), simT0)
			}
		}
	}
	res := simResult{windows: map[[2]time.Duration]map[string]int{}}
	for _, w := range windows {
		res.windows[w] = map[string]int{}
	}
	openSent := map[string]int{}
	order := make([]int, sc.replicas)
	for i := range order {
		order[i] = i
	}
	ctx := context.Background()
	for el := time.Duration(0); el < sc.duration; el += simTick {
		now := simT0.Add(el)
		setRedisAt(now)
		if sc.scaleAt > 0 && el == sc.scaleAt {
			dead := reps[sc.replicas-1]
			dead.alive = false
			// Its clients reconnect round-robin to the survivors.
			k := 0
			for tenant, q := range dead.queues {
				for range q {
					arrive(reps[k%(sc.replicas-1)], tenant, now)
					k++
				}
			}
			dead.queues = nil
		}
		live := []int{}
		for i, r := range reps {
			if r.alive {
				live = append(live, i)
			}
		}
		// Open-loop arrivals.
		for _, l := range sc.loads {
			if l.rate <= 0 {
				continue
			}
			on := live
			if l.on != nil {
				on = l.on
			}
			for float64(openSent[l.key()]) < l.rate*el.Seconds() {
				arrive(reps[on[openSent[l.key()]%len(on)]], l.key(), now)
				openSent[l.key()]++
			}
		}
		// Exchange rounds.
		for _, r := range reps {
			if r.alive && r.pacer != nil && (el-r.phase)%DefaultPeriod == 0 {
				_ = r.pacer.Sync(ctx)
			}
		}
		rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, i := range order {
			r := reps[i]
			if !r.alive {
				continue
			}
			for {
				localBand := bandOf
				if r.old {
					localBand = noBands
				}
				tenant := r.next(now, localBand)
				if tenant == "" {
					break
				}
				l := loadOf[tenant]
				if r.pacer != nil {
					if ok, wait := r.pacer.AllowBand(now, l.tenant, l.lower, simModel); !ok {
						r.queues[tenant][0] = now.Add(max(wait, simTick))
						continue
					}
				}
				d, err := r.lim.TakeIdentity(now, limiter.Keys{Model: simModel})
				if err != nil {
					t.Fatal(err)
				}
				if r.pacer != nil {
					r.pacer.DoneBand(l.tenant, l.lower, simModel, d.Allowed)
				}
				if !d.Allowed {
					r.queues[tenant][0] = now.Add(max(d.RetryAfter, simTick))
					continue
				}
				r.queues[tenant] = r.queues[tenant][1:]
				r.finish[tenant] += 1 / weightOf(tenant)
				for w, got := range res.windows {
					if el >= w[0] && el < w[1] {
						got[tenant]++
					}
				}
				if isClosedLoop(sc.loads, tenant) {
					arrive(r, tenant, now)
				}
			}
		}
		clk.SetTime(now.Add(simTick))
	}
	return res
}

func isClosedLoop(loads []simLoad, key string) bool {
	for _, l := range loads {
		if l.key() == key {
			return len(l.clients) > 0
		}
	}
	return false
}

// next returns the ready load of the highest band (the smallest bandOf)
// with the smallest virtual finish tag, or "".
func (r *simReplica) next(now time.Time, bandOf func(string) int) string {
	best, band, tag := "", math.MaxInt, math.Inf(1)
	for key, q := range r.queues {
		if len(q) == 0 || q[0].After(now) {
			continue
		}
		b, f := bandOf(key), r.finish[key]
		if b < band || (b == band && (f < tag || (f == tag && key < best))) {
			best, band, tag = key, b, f
		}
	}
	return best
}

// skewed is the scenario: A only on replica 0, B only on replica 1,
// C on all three; weights 1:1:3; every tenant backlogged.
func skewed() []simLoad {
	return []simLoad{
		{tenant: "A", weight: 1, clients: map[int]int{0: 8}},
		{tenant: "B", weight: 1, clients: map[int]int{1: 8}},
		{tenant: "C", weight: 3, clients: map[int]int{0: 8, 1: 8, 2: 8}},
	}
}

func shareOf(rates map[string]float64, total float64, tenant string) float64 {
	if total == 0 {
		return 0
	}
	return rates[tenant] / total
}

// within reports whether got is within frac (relative) of want.
func within(got, want, frac float64) bool { return math.Abs(got-want) <= frac*want }

func TestFleetSharesSkewedRouting(t *testing.T) {
	const capacity = 90.0
	want := map[string]float64{"A": 0.2, "B": 0.2, "C": 0.6}
	warm, end := 3*time.Second, 30*time.Second
	tests := []struct {
		name string
		sc   simScenario
		// hit is whether the scenario must meet the targets (shares within
		// 5% of 0.2/0.2/0.6 and the total within 3% of 90/s) or must miss.
		hit bool
	}{
		{"shared bucket, fleet pacing", simScenario{replicas: 3, shared: true, paced: true, loads: skewed(), duration: end, seed: 1}, true},
		{"shared bucket, fleet pacing, other seed", simScenario{replicas: 3, shared: true, paced: true, loads: skewed(), duration: end, seed: 2}, true},
		{"negative control: per-replica buckets and queues", simScenario{replicas: 3, shared: false, paced: false, loads: skewed(), duration: end, seed: 1}, false},
		{"negative control: shared bucket, local fairness only", simScenario{replicas: 3, shared: true, paced: false, loads: skewed(), duration: end, seed: 1}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := simulate(t, tc.sc, [2]time.Duration{warm, end})
			rates, total := res.rates(warm, end)
			hit := within(total, capacity, 0.03)
			for tenant, w := range want {
				s := shareOf(rates, total, tenant)
				hit = hit && within(s, w, 0.05)
			}
			t.Logf("shares A=%.3f B=%.3f C=%.3f total=%.1f/s (target 0.2/0.2/0.6, 90/s)",
				shareOf(rates, total, "A"), shareOf(rates, total, "B"), shareOf(rates, total, "C"), total)
			if hit != tc.hit {
				t.Errorf("targets met = %v, want %v", hit, tc.hit)
			}
		})
	}
}

func TestFleetScaleThreeToTwo(t *testing.T) {
	warm, scale, end := 3*time.Second, 15*time.Second, 30*time.Second
	// The gates make a paced run independent of the replicas' random order,
	// so one seed or another gives the same numbers; two are run.
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			res := simulate(t, simScenario{replicas: 3, shared: true, paced: true, loads: skewed(), duration: end, scaleAt: scale, seed: seed},
				[2]time.Duration{warm, scale}, [2]time.Duration{scale, end}, [2]time.Duration{scale, scale + time.Second})
			_, before := res.rates(warm, scale)
			rates, after := res.rates(scale, end)
			_, first := res.rates(scale, scale+time.Second)
			t.Logf("total %.1f/s before, %.1f/s after the scale-down (%.1f/s in its first second); shares after A=%.3f B=%.3f C=%.3f",
				before, after, first, shareOf(rates, after, "A"), shareOf(rates, after, "B"), shareOf(rates, after, "C"))
			if !within(before, 90, 0.03) || !within(after, 90, 0.03) {
				t.Errorf("total %.1f/s before and %.1f/s after the scale-down, want both within 3%% of 90/s", before, after)
			}
			for tenant, w := range map[string]float64{"A": 0.2, "B": 0.2, "C": 0.6} {
				if s := shareOf(rates, after, tenant); !within(s, w, 0.05) {
					t.Errorf("after the scale-down tenant %s has share %.3f, want within 5%% of %.1f", tenant, s, w)
				}
			}
		})
	}
}

// TestFleetSharesOnRedis is the scenario with the shared bucket and
// the pacers' exchange in Redis, on the fake clock: the Redis store's script
// and RedisExchange's run on miniredis, whose TIME is the simulation's. Three
// replicas must give 0.2/0.2/0.6 of 90/s, and two after one goes away. (The
// same scenario in real time on a real redis-server, through the admission
// controller and its fair queue, is TestRealRedisFleet, behind the soak
// build tag.)
func TestFleetSharesOnRedis(t *testing.T) {
	warm, scale, end := 3*time.Second, 12*time.Second, 21*time.Second
	res := simulate(t, simScenario{replicas: 3, shared: true, paced: true, redis: true, loads: skewed(), duration: end, scaleAt: scale, seed: 1},
		[2]time.Duration{warm, scale}, [2]time.Duration{scale + time.Second, end})
	for _, w := range [][2]time.Duration{{warm, scale}, {scale + time.Second, end}} {
		rates, total := res.rates(w[0], w[1])
		t.Logf("%s-%s: shares A=%.3f B=%.3f C=%.3f, total %.1f/s", w[0], w[1],
			shareOf(rates, total, "A"), shareOf(rates, total, "B"), shareOf(rates, total, "C"), total)
		if !within(total, 90, 0.03) {
			t.Errorf("%s-%s: total %.1f/s, want within 3%% of 90/s", w[0], w[1], total)
		}
		for tenant, want := range map[string]float64{"A": 0.2, "B": 0.2, "C": 0.6} {
			if s := shareOf(rates, total, tenant); !within(s, want, 0.05) {
				t.Errorf("%s-%s: tenant %s has share %.3f, want within 5%% of %.1f", w[0], w[1], tenant, s, want)
			}
		}
	}
}

// TestFleetMaxMin adds a tenant D asking 10/s spread over the replicas, below
// its fair share of 90/6 = 15/s: it must get all it asks for, and the
// backlogged tenants split the remaining 80/s 1:1:3.
func TestFleetMaxMin(t *testing.T) {
	warm, end := 3*time.Second, 30*time.Second
	loads := append(skewed(), simLoad{tenant: "D", weight: 1, rate: 10})
	for _, paced := range []bool{true, false} {
		t.Run(fmt.Sprintf("paced=%v", paced), func(t *testing.T) {
			res := simulate(t, simScenario{replicas: 3, shared: true, paced: paced, loads: loads, duration: end, seed: 1}, [2]time.Duration{warm, end})
			rates, total := res.rates(warm, end)
			t.Logf("D %.2f/s of 10/s asked; A=%.1f B=%.1f C=%.1f total=%.1f/s (want 10, 16, 16, 48)", rates["D"], rates["A"], rates["B"], rates["C"], total)
			if !paced {
				return // shown for comparison only
			}
			if rates["D"] < 9.7 {
				t.Errorf("tenant D got %.2f/s of the 10/s it asked for, below its fair share: want at least 9.7/s", rates["D"])
			}
			for tenant, w := range map[string]float64{"A": 16, "B": 16, "C": 48} {
				if !within(rates[tenant], w, 0.05) {
					t.Errorf("tenant %s got %.1f/s, want within 5%% of %.0f/s", tenant, rates[tenant], w)
				}
			}
			if !within(total, 90, 0.03) {
				t.Errorf("total %.1f/s, want within 3%% of 90/s", total)
			}
		})
	}
}
