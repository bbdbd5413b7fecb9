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
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
)

func TestBanded(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name      string
		capacity  float64
		minShares []float64
		bands     []int
		weights   []float64
		demands   []float64
		want      []float64
	}{
		{"one band is MaxMin", 100, nil, []int{0, 0, 0}, []float64{1, 1, 2}, []float64{5, 40, 200}, []float64{5, 31.666666666666668, 63.333333333333336}},
		{"the high band asks half, the low band takes the rest by weight", 90, []float64{0, 0}, []int{0, 1, 1}, []float64{1, 1, 2}, []float64{45, inf, inf}, []float64{45, 15, 30}},
		{"the high band floods: strict priority starves the low band", 90, []float64{0, 0}, []int{0, 1, 1}, []float64{1, 1, 2}, []float64{inf, inf, inf}, []float64{90, 0, 0}},
		{"minShare is taken from the band above", 90, []float64{0, 0.2}, []int{0, 1, 1}, []float64{1, 1, 2}, []float64{inf, inf, inf}, []float64{72, 6, 12}},
		{"minShare is capped by the band's demand", 90, []float64{0, 0.2}, []int{0, 1}, []float64{1, 1}, []float64{inf, 5}, []float64{85, 5}},
		{"minShare does not cap the band when the band above leaves more", 90, []float64{0, 0.2}, []int{0, 1}, []float64{1, 1}, []float64{30, inf}, []float64{30, 60}},
		{"the high band's tenants split by weight", 90, []float64{0, 0.2}, []int{0, 0, 1}, []float64{1, 3, 1}, []float64{inf, inf, inf}, []float64{18, 54, 18}},
		{"three bands, floors below the top", 100, []float64{0, 0.1, 0.05}, []int{0, 1, 2}, []float64{1, 1, 1}, []float64{inf, inf, inf}, []float64{85, 10, 5}},
		{"three bands, the middle takes what the top leaves above the bottom's floor", 100, []float64{0, 0, 0.1}, []int{0, 1, 2}, []float64{1, 1, 1}, []float64{30, inf, inf}, []float64{30, 60, 10}},
		{"an empty band in between", 100, []float64{0, 0.5, 0}, []int{0, 2}, []float64{1, 1}, []float64{inf, inf}, []float64{100, 0}},
		{"a band beyond minShares has none", 90, []float64{0}, []int{0, 1}, []float64{1, 1}, []float64{inf, inf}, []float64{90, 0}},
		{"everyone satisfied leaves capacity unused", 90, []float64{0, 0.1}, []int{0, 1}, []float64{1, 1}, []float64{20, 30}, []float64{20, 30}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Banded(tc.capacity, tc.minShares, tc.bands, tc.weights, tc.demands)
			checkAllocation(t, got, tc.want, tc.capacity,
				fmt.Sprintf("Banded(%v, %v, %v, %v, %v)", tc.capacity, tc.minShares, tc.bands, tc.weights, tc.demands))
		})
	}
}

// bandReports is the skewed routing as reports: the interactive
// tenant H backlogged on r1 only, the batch tenants L1 and L2 (weights
// 1:2) backlogged on r1, r2 and r3.
func bandReports(shares []float64) []Report {
	batch := []TenantReport{{Tenant: "L1", Weight: 1, Band: 1, Backlogged: true}, {Tenant: "L2", Weight: 2, Band: 1, Backlogged: true}}
	return []Report{
		{Replica: "r1", BandShares: shares, Tenants: append([]TenantReport{{Tenant: "H", Weight: 1, Backlogged: true}}, batch...)},
		{Replica: "r2", BandShares: shares, Tenants: batch},
		{Replica: "r3", BandShares: shares, Tenants: batch},
	}
}

func twoBands(minShare float64) *fairqueue.Weights {
	return &fairqueue.Weights{Default: 1, Bands: []fairqueue.Band{{Name: "interactive"}, {Name: "batch", MinShare: minShare}},
		TenantBand: map[string]int{"L1": 1, "L2": 1}}
}

func TestPlanBandsSkewedRouting(t *testing.T) {
	h, l1, l2 := claimant{"H", 0}, claimant{"L1", 1}, claimant{"L2", 1}
	tests := []struct {
		name    string
		shares  []float64
		self    string
		want    map[claimant]float64 // gate rates; -1 closed, 0 open
		wantOff bool                 // H not on self
	}{
		{"no minShare, r1", []float64{0, 0}, "r1", map[claimant]float64{h: 90, l1: -1, l2: -1}, false},
		{"no minShare, r2", []float64{0, 0}, "r2", map[claimant]float64{l1: -1, l2: -1}, true},
		{"minShare 0.2, r1", []float64{0, 0.2}, "r1", map[claimant]float64{h: 72, l1: 2, l2: 4}, false},
		{"minShare 0.2, r3", []float64{0, 0.2}, "r3", map[claimant]float64{l1: 2, l2: 4}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := makePlan(90, tc.self, bandReports(tc.shares), 1, 0.1, twoBands(tc.shares[1]))
			for c, want := range tc.want {
				tp := p.tenants[c]
				got := tp.rate
				if tp.closed {
					got = -1
				}
				if math.Abs(got-want) > 1e-9 {
					t.Errorf("gate of %v on %s = %v, want %v (-1 closed, 0 open)", c, tc.self, got, want)
				}
			}
		})
	}
}

func TestPlanLoweredRequestsClaimInTheLowerBand(t *testing.T) {
	// H asks 20/s in its own band and floods with requests lowered to the
	// batch band on r1; L floods the batch band on r2. H keeps its 20/s, and
	// its lowered requests split the other 70/s with L by weight (1:1).
	reports := []Report{
		{Replica: "r1", BandShares: []float64{0, 0}, Tenants: []TenantReport{
			{Tenant: "H", Weight: 1, Demand: 20}, {Tenant: "H", Weight: 1, Band: 1, Backlogged: true}}},
		{Replica: "r2", BandShares: []float64{0, 0}, Tenants: []TenantReport{{Tenant: "L", Weight: 1, Band: 1, Backlogged: true}}},
	}
	w := &fairqueue.Weights{Default: 1, Bands: twoBands(0).Bands, TenantBand: map[string]int{"L": 1}}
	p := makePlan(90, "r1", reports, 1, 0.1, w)
	for c, want := range map[claimant]struct{ alloc, rate float64 }{
		{"H", 0}: {20, 0}, {"H", 1}: {35, 35}, {"L", 1}: {35, 0},
	} {
		if tp := p.tenants[c]; math.Abs(tp.allocation-want.alloc) > 1e-9 || math.Abs(tp.rate-want.rate) > 1e-9 {
			t.Errorf("%v: allocation %v gate %v on r1, want %v and %v", c, tp.allocation, tp.rate, want.alloc, want.rate)
		}
	}
}

func TestPlanVersionSkew(t *testing.T) {
	banded := bandReports([]float64{0, 0.2})
	// r2 predates bands: its report carries neither BandShares nor bands.
	skewed := bandReports([]float64{0, 0.2})
	skewed[1] = Report{Replica: "r2", Tenants: []TenantReport{{Tenant: "L1", Weight: 1, Backlogged: true}, {Tenant: "L2", Weight: 2, Backlogged: true}}}
	for _, self := range []string{"r1", "r3"} {
		want := makePlan(90, self, banded, 1, 0.1, twoBands(0.2))
		if got := makePlan(90, self, skewed, 1, 0.1, twoBands(0.2)); !reflect.DeepEqual(got.tenants, want.tenants) {
			t.Errorf("on %s a report without bands gave %v, want its tenants placed in this replica's bands: %v", self, got.tenants, want.tenants)
		}
	}
	// A replica without bands (an old one, or bands not configured here)
	// plans exactly as before bands, whatever the others report.
	flat := []Report{
		{Replica: "r1", Tenants: []TenantReport{{Tenant: "H", Weight: 1, Backlogged: true}, {Tenant: "L1", Weight: 1, Backlogged: true}, {Tenant: "L2", Weight: 2, Backlogged: true}}},
		{Replica: "r2", Tenants: []TenantReport{{Tenant: "L1", Weight: 1, Backlogged: true}, {Tenant: "L2", Weight: 2, Backlogged: true}}},
		{Replica: "r3", Tenants: []TenantReport{{Tenant: "L1", Weight: 1, Backlogged: true}, {Tenant: "L2", Weight: 2, Backlogged: true}}},
	}
	for _, local := range []*fairqueue.Weights{nil, {Default: 1}} {
		want := makePlan(90, "r2", flat, 1, 0.1, local)
		if got := makePlan(90, "r2", banded, 1, 0.1, local); !reflect.DeepEqual(got.tenants, want.tenants) {
			t.Errorf("a replica without bands planned %v from banded reports, want the plan without bands %v", got.tenants, want.tenants)
		}
		if a := want.tenants[claimant{"L2", 0}].allocation; math.Abs(a-45) > 1e-9 {
			t.Errorf("without bands L2 is allocated %v, want 45 (weights 1:1:2 of 90)", a)
		}
	}
	// The fleet agrees on one band table while a reload reaches the
	// replicas one by one: the smallest replica name's.
	reloading := bandReports([]float64{0, 0.2})
	reloading[0].BandShares = []float64{0, 0.1}
	for _, self := range []string{"r1", "r2"} {
		got := makePlan(90, self, reloading, 1, 0.1, twoBands(0.2)).tenants[claimant{"L2", 1}].allocation
		if math.Abs(got-6) > 1e-9 {
			t.Errorf("on %s L2 is allocated %v, want 6 (r1's minShare 0.1: 9/s split 1:2)", self, got)
		}
	}
}

func TestReportWireFormat(t *testing.T) {
	// Without bands a report is byte for byte what replicas that predate
	// bands publish and read.
	flat := Report{Replica: "r1", Tenants: []TenantReport{{Tenant: "A", Weight: 2, Demand: 3.5, Backlogged: true, Admitted: 1.25}}}
	b, err := json.Marshal(flat)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"r":"r1","ts":[{"t":"A","w":2,"d":3.5,"b":true,"a":1.25}]}`; string(b) != want {
		t.Fatalf("a report without bands encodes as %s, want %s", b, want)
	}
	banded := Report{Replica: "r1", BandShares: []float64{0, 0.2}, Tenants: []TenantReport{
		{Tenant: "A", Weight: 2, Demand: 3.5, Admitted: 1.25}, {Tenant: "A", Weight: 2, Band: 1, Backlogged: true}}}
	if b, err = json.Marshal(banded); err != nil {
		t.Fatal(err)
	}
	if want := `{"r":"r1","ts":[{"t":"A","w":2,"d":3.5,"a":1.25},{"t":"A","w":2,"d":0,"b":true,"a":0,"p":1}],"ps":[0,0.2]}`; string(b) != want {
		t.Fatalf("a report with bands encodes as %s, want %s", b, want)
	}
	// A replica that predates bands decodes it without error, ignoring the
	// band fields.
	type oldTenant struct {
		Tenant     string  `json:"t"`
		Weight     int     `json:"w"`
		Demand     float64 `json:"d"`
		Backlogged bool    `json:"b,omitempty"`
		Admitted   float64 `json:"a"`
	}
	var old struct {
		Replica string      `json:"r"`
		Tenants []oldTenant `json:"ts"`
	}
	if err := json.Unmarshal(b, &old); err != nil || len(old.Tenants) != 2 || old.Tenants[1].Tenant != "A" || !old.Tenants[1].Backlogged {
		t.Fatalf("the old report type decoded %s as %+v (err %v)", b, old, err)
	}
}

// bandedPacer is a pacer on a 10/s model limit with the bands interactive
// (H) and batch (L).
func bandedPacer(t *testing.T, clk *testingclock.FakeClock, minShare float64) *Pacer {
	t.Helper()
	p := newTestPacer(t, clk, NewMemoryExchange(clk), "r1", Options{})
	w := twoBands(minShare)
	w.TenantBand = map[string]int{"L": 1}
	p.SetWeights(*w)
	return p
}

func TestGateStarvedBandIsClosed(t *testing.T) {
	for _, tc := range []struct {
		minShare float64
		wantH    int // passes in 10s of H's gate
		wantL    int
	}{{0, 100, 0}, {0.2, 80, 20}} {
		clk := testingclock.NewFakeClock(simT0)
		p := bandedPacer(t, clk, tc.minShare)
		backlog(p, "H", "L")
		if err := p.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		if tc.wantL == 0 {
			if ok, wait := p.Allow(clk.Now(), "L", "m"); ok || wait != DefaultPeriod {
				t.Errorf("minShare 0: L's gate gave ok=%v wait=%v, want held for one period while H floods", ok, wait)
			}
		}
		for _, c := range []struct {
			tenant string
			want   int
		}{{"L", tc.wantL}, {"H", tc.wantH}} {
			backlog(p, c.tenant)
			if got := countAllowed(p, clk, c.tenant, 10*time.Second); got < c.want || got > c.want+2 {
				t.Errorf("minShare %v: %s passed its gate %d times in 10s, want %d (+2 tolerance)", tc.minShare, c.tenant, got, c.want)
			}
		}
	}
}

func TestLoweredRequestsHaveTheirOwnGate(t *testing.T) {
	clk := testingclock.NewFakeClock(simT0)
	p := bandedPacer(t, clk, 0)
	ctx := context.Background()
	// H's lowered requests and L flood the batch band; H's own requests ask
	// 5/s (one in a 200 ms period), below the capacity of 10/s.
	p.ArriveBand("H", 1, "m")
	p.DoneBand("H", 1, "m", false)
	p.Arrive("L", "m")
	p.Done("L", "m", false)
	p.Arrive("H", "m")
	p.Done("H", "m", true)
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// H's own band asked 2.5/s (the EWMA of its first period): its gate is
	// open however hard its lowered requests are paced.
	if n := countAllowed(p, clk, "H", 100*time.Millisecond); n != 100 {
		t.Fatalf("H's own requests passed %d of 100 polls, want all: its lowered requests must not use its band's turns", n)
	}
	n := 0
	for end := clk.Now().Add(10 * time.Second); clk.Now().Before(end); clk.Step(time.Millisecond) {
		if ok, _ := p.AllowBand(clk.Now(), "H", 1, "m"); ok {
			n++
		}
	}
	// The batch band gets 10 − 2.5 = 7.5/s, split 1:1 with L.
	if n < 37 || n > 39 {
		t.Fatalf("H's lowered requests passed %d times in 10s, want 37 (3.75/s, +2 tolerance)", n)
	}
	// A request may not raise its band: L asking for the interactive band
	// is paced in its own.
	p.ArriveBand("L", 0, "m")
	p.mu.Lock()
	_, raised := p.keys["m"].tenants[claimant{"L", 0}]
	p.mu.Unlock()
	if raised {
		t.Fatal("L's request asking for band 0 was tracked in band 0, want it counted in L's own band 1")
	}
}

func TestReportsCarryBands(t *testing.T) {
	clk := testingclock.NewFakeClock(simT0)
	ex := NewMemoryExchange(clk)
	p := newTestPacer(t, clk, ex, "r1", Options{})
	w := twoBands(0.25)
	w.TenantBand = map[string]int{"L": 1}
	p.SetWeights(*w)
	backlog(p, "H", "L")
	p.ArriveBand("H", 1, "m")
	if err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, err := ex.Swap(context.Background(), "m", Report{Replica: "probe"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bands := map[claimant]bool{}
	for _, r := range got {
		if r.Replica != "r1" {
			continue
		}
		if !reflect.DeepEqual(r.BandShares, []float64{0, 0.25}) {
			t.Errorf("r1 published band shares %v, want [0 0.25]", r.BandShares)
		}
		for _, tr := range r.Tenants {
			bands[claimant{tr.Tenant, tr.Band}] = true
		}
	}
	if want := map[claimant]bool{{"H", 0}: true, {"H", 1}: true, {"L", 1}: true}; !reflect.DeepEqual(bands, want) {
		t.Errorf("r1 reported the claimants %v, want %v", bands, want)
	}
}
