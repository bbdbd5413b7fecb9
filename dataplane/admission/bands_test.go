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
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// threeBands is a fair-queuing config with bands interactive, standard and
// batch, in which h-gold is interactive, h-bronze batch and everyone else
// standard.
func threeBands() *config.Config {
	return &config.Config{FairQueuing: config.FairQueuing{
		Enabled: true, TenantDimension: identity.DimensionUser, DefaultWeight: 1,
		Bands:       []config.Band{{Name: "interactive"}, {Name: "standard", MinShare: 0.1}, {Name: "batch", MinShare: 0.05}},
		DefaultBand: "standard",
		Weights: []config.Weight{
			{TenantHash: "h-gold", Weight: 3, Band: "interactive"},
			{TenantHash: "h-bronze", Weight: 1, Band: "batch"},
			{TenantHash: "h-silver", Weight: 2},
		},
	}}
}

func TestCompileBands(t *testing.T) {
	cases := []struct {
		name    string
		edit    func(*config.FairQueuing)
		want    fairqueue.Weights
		wantErr string
	}{{
		name: "no bands: one band, as before bands existed",
		edit: func(f *config.FairQueuing) {
			f.Bands, f.DefaultBand = nil, ""
			for i := range f.Weights {
				f.Weights[i].Band = ""
			}
		},
		want: fairqueue.Weights{Default: 1, ByTenant: map[string]int{"h-gold": 3, "h-bronze": 1, "h-silver": 2}},
	}, {
		name: "bands, the default and each weighted tenant's band",
		edit: func(*config.FairQueuing) {},
		want: fairqueue.Weights{
			Default: 1, ByTenant: map[string]int{"h-gold": 3, "h-bronze": 1, "h-silver": 2},
			Bands:       []fairqueue.Band{{Name: "interactive"}, {Name: "standard", MinShare: 0.1}, {Name: "batch", MinShare: 0.05}},
			DefaultBand: 1,
			TenantBand:  map[string]int{"h-gold": 0, "h-bronze": 2},
		},
	}, {
		name: "no default band named: the lowest",
		edit: func(f *config.FairQueuing) { f.DefaultBand = "" },
		want: fairqueue.Weights{
			Default: 1, ByTenant: map[string]int{"h-gold": 3, "h-bronze": 1, "h-silver": 2},
			Bands:       []fairqueue.Band{{Name: "interactive"}, {Name: "standard", MinShare: 0.1}, {Name: "batch", MinShare: 0.05}},
			DefaultBand: 2,
			TenantBand:  map[string]int{"h-gold": 0, "h-bronze": 2},
		},
	}, {
		name:    "unknown default band",
		edit:    func(f *config.FairQueuing) { f.DefaultBand = "gold" },
		wantErr: `fairQueuing.defaultBand: "gold" is not among fairQueuing.bands ("interactive", "standard", "batch")`,
	}, {
		name:    "unknown band of a weight",
		edit:    func(f *config.FairQueuing) { f.Weights[1].Band = "bulk" },
		wantErr: `fairQueuing.weights[1].band: "bulk" is not among`,
	}, {
		name:    "duplicate band",
		edit:    func(f *config.FairQueuing) { f.Bands[2].Name = "interactive" },
		wantErr: `fairQueuing.bands[2].name: "interactive" duplicates fairQueuing.bands[0]`,
	}, {
		name:    "unnamed band",
		edit:    func(f *config.FairQueuing) { f.Bands[1].Name = "" },
		wantErr: "fairQueuing.bands[1].name: must not be empty",
	}, {
		name:    "minShare of 1",
		edit:    func(f *config.FairQueuing) { f.Bands[1].MinShare = 1 },
		wantErr: "fairQueuing.bands[1].minShare: must be in [0, 1), got 1",
	}, {
		name:    "negative minShare",
		edit:    func(f *config.FairQueuing) { f.Bands[1].MinShare = -0.1 },
		wantErr: "fairQueuing.bands[1].minShare: must be in [0, 1)",
	}, {
		name:    "minShares summing to 1",
		edit:    func(f *config.FairQueuing) { f.Bands[1].MinShare, f.Bands[2].MinShare = 0.5, 0.5 },
		wantErr: "fairQueuing.bands: the minShares sum to 1",
	}, {
		name: "too many bands",
		edit: func(f *config.FairQueuing) {
			for i := range fairqueue.MaxBands {
				f.Bands = append(f.Bands, config.Band{Name: "extra" + string(rune('a'+i))})
			}
		},
		wantErr: "fairQueuing.bands: at most 8 priority bands, got 11",
	}, {
		name: "a weight's band without bands",
		edit: func(f *config.FairQueuing) {
			f.Bands, f.DefaultBand = nil, ""
			f.Weights[2].Band = "standard"
			f.Weights[0].Band, f.Weights[1].Band = "", ""
		},
		wantErr: `fairQueuing.weights[2].band: "standard" names a band but fairQueuing.bands is empty`,
	}, {
		name:    "a default band without bands",
		edit:    func(f *config.FairQueuing) { f.Bands = nil; f.Weights = nil },
		wantErr: `fairQueuing.defaultBand: "standard" names a band but fairQueuing.bands is empty`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := threeBands()
			tc.edit(&cfg.FairQueuing)
			p, err := compile(cfg, nil, nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("compile = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := p.queues.weights; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("weights = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// bandLog counts the request bands ignored, by reason.
type bandLog struct {
	mu      sync.Mutex
	ignored map[string]int
}

func (l *bandLog) BandIgnored(reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ignored == nil {
		l.ignored = map[string]int{}
	}
	l.ignored[reason]++
}

func TestRequestBand(t *testing.T) {
	gold, silver, bronze := identity.Set{User: "h-gold"}, identity.Set{User: "h-silver"}, identity.Set{User: "h-bronze"}
	cases := []struct {
		name        string
		off         bool
		id          identity.Set
		band        string
		want        int
		wantIgnored map[string]int
	}{
		{name: "no band asked", id: gold, want: 0},
		{name: "interactive tenant lowers to batch", id: gold, band: "batch", want: 2},
		{name: "interactive tenant lowers to standard", id: gold, band: "standard", want: 1},
		{name: "default-band tenant lowers to batch", id: silver, band: "batch", want: 2},
		{name: "its own band changes nothing and is no raise", id: silver, band: "standard", want: 1},
		{name: "batch tenant cannot raise", id: bronze, band: "interactive", want: 0, wantIgnored: map[string]int{"raise": 1}},
		{name: "default-band tenant cannot raise", id: silver, band: "interactive", want: 0, wantIgnored: map[string]int{"raise": 1}},
		{name: "unknown band", id: gold, band: "Batch", want: 0, wantIgnored: map[string]int{"unknown": 1}},
		{name: "no tenant identity: nothing to schedule", id: identity.Set{}, band: "nonsense", want: 0},
		{name: "fair queuing off: nothing to schedule", off: true, id: gold, band: "nonsense", want: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := threeBands()
			cfg.FairQueuing.Enabled = !tc.off
			var log bandLog
			c, err := NewController(t0Clock(), cfg, Options{Bands: &log})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r := Request{Identity: tc.id, Band: tc.band}
			if got := c.requestBand(&r); got != tc.want {
				t.Errorf("requestBand = %d, want %d", got, tc.want)
			}
			if !reflect.DeepEqual(log.ignored, tc.wantIgnored) {
				t.Errorf("ignored = %v, want %v", log.ignored, tc.wantIgnored)
			}
		})
	}
}

// TestTokenCostSettlesInTheLoweredQueue: with fairQueuing.cost Tokens, the
// settle correction of a request that lowered its band reaches the queue it
// waited in, so fairness holds in the tokens used: alice, using a fifth of
// what she reserves, gets about five times bob's requests, who uses all of
// his. Were the correction lost, both would be charged their reservations
// and get equal requests.
func TestTokenCostSettlesInTheLoweredQueue(t *testing.T) {
	w := fairqueue.Weights{
		Default:     1,
		Bands:       []fairqueue.Band{{Name: "interactive"}, {Name: "batch"}},
		DefaultBand: 1,
		TenantBand:  map[string]int{alice.User: 0, bob.User: 0},
	}
	tokens := TokenSettings{Enabled: true, MaxWait: 10 * time.Second, CostTokens: true}
	e := newTokenEnv(t, tokenOpts{
		cfg:      limiter.Config{ModelTokens: tokensPerSecond(20000)},
		settings: on,
		tokens:   tokens,
		bounds:   fairqueue.Bounds{MaxWait: 10 * time.Second},
		weights:  w,
	})
	// The band names come from the policy's weights, as a loaded config's do.
	reload(e.c, func(p *policy) {
		p.queues = &queueConfig{weights: w, bounds: fairqueue.Bounds{MaxWait: time.Hour}, deferralBounds: fairqueue.Bounds{MaxWait: 10 * time.Second}}
	})
	size := func(next func(uint64) uint64) int64 { return int64(900 + next(201)) }
	var clients []simClient
	for range 4 {
		clients = append(clients,
			simClient{id: alice, size: size, band: "batch", uses: 20},
			simClient{id: bob, size: size, band: "batch", uses: 100})
	}
	// Settles in a fixed order: racing the scheduler, they moved the gap
	// from 1% to over 5% under CPU load; lost, it is 80%.
	results, _ := simulate(t, e, clients, settleAfterGrants, 5*time.Second, 45*time.Second, 45*time.Second)
	var used, requests [2]float64
	for i, r := range results {
		used[i%2] += float64(r.settled)
		requests[i%2] += float64(r.admitted)
	}
	gap := math.Abs(used[0]-used[1]) / math.Max(used[0], used[1])
	t.Logf("lowered to batch, cost Tokens: alice (uses 20%%) %.0f requests %.0f tokens, bob (uses 100%%) %.0f requests %.0f tokens: tokens differ by %.1f%%",
		requests[0], used[0], requests[1], used[1], 100*gap)
	if gap > 0.05 {
		t.Errorf("tokens used differ by %.1f%%, want within 5%%: the settle corrections did not reach the lowered queues", 100*gap)
	}
	if requests[0] < 3*requests[1] {
		t.Errorf("alice got %.0f requests and bob %.0f; using a fifth of her reservations she should get about five times his", requests[0], requests[1])
	}
}

// bandGateLog is a BandGate that records its calls.
type bandGateLog struct {
	mu    sync.Mutex
	calls []string
}

func (g *bandGateLog) add(format string, a ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, fmt.Sprintf(format, a...))
}
func (g *bandGateLog) Arrive(tenant, key string) { g.add("Arrive %s %s", tenant, key) }
func (g *bandGateLog) Allow(_ time.Time, tenant, key string) (bool, time.Duration) {
	g.add("Allow %s %s", tenant, key)
	return true, 0
}
func (g *bandGateLog) Done(tenant, key string, ok bool) { g.add("Done %s %s %v", tenant, key, ok) }
func (g *bandGateLog) ArriveBand(tenant string, band int, key string) {
	g.add("ArriveBand %s %d %s", tenant, band, key)
}
func (g *bandGateLog) AllowBand(_ time.Time, tenant string, band int, key string) (bool, time.Duration) {
	g.add("AllowBand %s %d %s", tenant, band, key)
	return true, 0
}
func (g *bandGateLog) DoneBand(tenant string, band int, key string, ok bool) {
	g.add("DoneBand %s %d %s %v", tenant, band, key, ok)
}

// TestLoweredRequestIsPacedInItsBand: the fleet gate paces a request that
// lowered its band as demand of its tenant in that band, and every other
// request as before bands existed.
func TestLoweredRequestIsPacedInItsBand(t *testing.T) {
	for _, tc := range []struct {
		band string
		want []string
	}{
		{"batch", []string{"ArriveBand h-gold 2 m", "AllowBand h-gold 2 m", "DoneBand h-gold 2 m true"}},
		{"", []string{"Arrive h-gold m", "Allow h-gold m", "Done h-gold m true"}},
		{"interactive", []string{"Arrive h-gold m", "Allow h-gold m", "Done h-gold m true"}}, // its own band
	} {
		t.Run("band "+tc.band, func(t *testing.T) {
			c, err := NewController(t0Clock(), threeBands(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			g := &bandGateLog{}
			c.SetGate(g)
			if d := c.Admit(context.Background(), Request{Identity: identity.Set{User: "h-gold"}, Model: "m", Band: tc.band}); !d.Allowed {
				t.Fatalf("not admitted: %+v", d)
			}
			if !reflect.DeepEqual(g.calls, tc.want) {
				t.Errorf("gate calls %q, want %q", g.calls, tc.want)
			}
		})
	}
}
