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

package metrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fairqueue/fairqueue/dataplane/fleet"
)

func TestFleetGaugesAreBoundedAndUseHashPrefixes(t *testing.T) {
	f, _ := register(t, NewFleet)
	shares := make([]fleet.Share, 25)
	for i := range shares {
		shares[i] = fleet.Share{Tenant: fmt.Sprintf("%02d%s", i, strings.Repeat("f", 62)), Fleet: float64(i) / 300, Gate: 1}
	}
	f.Synced("m", 3, true, shares)
	if n := testutil.CollectAndCount(f.share); n != MaxFleetTenants {
		t.Fatalf("%d fleet share series for 25 tenants, want the top %d", n, MaxFleetTenants)
	}
	// The largest share is exported under its 12-character hash prefix.
	top := shares[24].Tenant[:12]
	if got := testutil.ToFloat64(f.share.WithLabelValues("m", top, "")); got != shares[24].Fleet {
		t.Fatalf("share of %s = %v, want %v", top, got, shares[24].Fleet)
	}
	if got := testutil.ToFloat64(f.replicas.WithLabelValues("m")); got != 3 {
		t.Fatalf("replicas = %v, want 3", got)
	}

	// The next round replaces the model's tenants.
	f.Synced("m", 2, false, shares[:2])
	if n := testutil.CollectAndCount(f.share); n != 2 {
		t.Fatalf("%d fleet share series after a round with 2 tenants, want 2", n)
	}
	if got := testutil.ToFloat64(f.contended.WithLabelValues("m")); got != 0 {
		t.Fatalf("contended = %v, want 0", got)
	}
	f.ExchangeFailed("m", nil)
	if got := testutil.ToFloat64(f.exchangeErrors.WithLabelValues("m")); got != 1 {
		t.Fatalf("exchange errors = %v, want 1", got)
	}
}

func TestFleetSeriesByBandAndClosedGate(t *testing.T) {
	f, reg := register(t, NewFleet)
	gold, bronze := strings.Repeat("a", 64), strings.Repeat("b", 64)
	f.Synced("m", 2, true, []fleet.Share{
		// Without bands the band is "": the series keep the identity they
		// had before the band label (Prometheus drops an empty label).
		{Tenant: gold, Fleet: 0.5, Local: 0.5, Gate: 4},
	})
	const unbanded = `
# HELP rate_limit_fleet_gate_closed 1 while the tenant's gate on the model passes nothing in the band: the bands above take the whole capacity.
# TYPE rate_limit_fleet_gate_closed gauge
rate_limit_fleet_gate_closed{band="",model="m",tenant="aaaaaaaaaaaa"} 0
# HELP rate_limit_fleet_gate_rate This replica's pacing rate for the tenant on the model in the band, requests per second; 0 when not paced (or closed: see rate_limit_fleet_gate_closed).
# TYPE rate_limit_fleet_gate_rate gauge
rate_limit_fleet_gate_rate{band="",model="m",tenant="aaaaaaaaaaaa"} 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(unbanded), FleetGateRateName, FleetGateClosedName); err != nil {
		t.Fatal(err)
	}

	// With bands, gold lowered some requests to batch: one series per band,
	// neither hiding the other. Batch is starved: its gates are closed, not
	// open (a rate of 0 alone would read as not paced).
	f.Synced("m", 2, true, []fleet.Share{
		{Tenant: gold, Band: 0, BandName: "interactive", Fleet: 0.6, Local: 0.6, Gate: 6},
		{Tenant: gold, Band: 1, BandName: "batch", Fleet: 0.1, Local: 0.1, Closed: true},
		{Tenant: bronze, Band: 1, BandName: "batch", Fleet: 0.3, Local: 0.2, Closed: true},
	})
	const banded = `
# HELP rate_limit_fleet_gate_closed 1 while the tenant's gate on the model passes nothing in the band: the bands above take the whole capacity.
# TYPE rate_limit_fleet_gate_closed gauge
rate_limit_fleet_gate_closed{band="batch",model="m",tenant="aaaaaaaaaaaa"} 1
rate_limit_fleet_gate_closed{band="batch",model="m",tenant="bbbbbbbbbbbb"} 1
rate_limit_fleet_gate_closed{band="interactive",model="m",tenant="aaaaaaaaaaaa"} 0
# HELP rate_limit_fleet_gate_rate This replica's pacing rate for the tenant on the model in the band, requests per second; 0 when not paced (or closed: see rate_limit_fleet_gate_closed).
# TYPE rate_limit_fleet_gate_rate gauge
rate_limit_fleet_gate_rate{band="batch",model="m",tenant="aaaaaaaaaaaa"} 0
rate_limit_fleet_gate_rate{band="batch",model="m",tenant="bbbbbbbbbbbb"} 0
rate_limit_fleet_gate_rate{band="interactive",model="m",tenant="aaaaaaaaaaaa"} 6
# HELP rate_limit_fleet_share Tenant's share of the model's admissions across the fleet over the last exchange period (tenant is a hash prefix).
# TYPE rate_limit_fleet_share gauge
rate_limit_fleet_share{band="batch",model="m",tenant="aaaaaaaaaaaa"} 0.1
rate_limit_fleet_share{band="batch",model="m",tenant="bbbbbbbbbbbb"} 0.3
rate_limit_fleet_share{band="interactive",model="m",tenant="aaaaaaaaaaaa"} 0.6
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(banded), FleetShareName, FleetGateRateName, FleetGateClosedName); err != nil {
		t.Fatal(err)
	}
}

func TestFleetBandLabelIsBounded(t *testing.T) {
	f, reg := register(t, NewFleet)
	var shares []fleet.Share
	for i := range 3 * MaxBandSeries {
		shares = append(shares, fleet.Share{Tenant: strings.Repeat("c", 64), Band: i, BandName: fmt.Sprintf("band-%d", i), Fleet: 0.01})
		// Each round is one band, as after a reload renaming every band.
		f.Synced("m", 1, true, shares[i:])
	}
	bands := map[string]bool{}
	for _, m := range series(t, reg, FleetShareName) {
		bands[label(m, "band")] = true
	}
	if !bands[unknownLabel] {
		t.Errorf("bands past the bound are not recorded as %q: %v", unknownLabel, bands)
	}
	f.Synced("m", 1, true, shares) // every band in one round
	seen := map[string]bool{}
	for _, m := range series(t, reg, FleetShareName) {
		seen[label(m, "band")] = true
	}
	if len(seen) > MaxBandSeries+1 {
		t.Errorf("%d band label values, want at most %d (MaxBandSeries and unknown)", len(seen), MaxBandSeries+1)
	}
}

func TestFleetHashKeyMismatchGauge(t *testing.T) {
	f, err := NewFleet(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var live int
	f.OnLive = func(n int) { live = n }
	if got := testutil.ToFloat64(f.keyMismatch); got != 0 {
		t.Fatalf("%s = %v before any round, want 0", FleetHashKeyMismatchName, got)
	}
	f.Members(3, true)
	if got := testutil.ToFloat64(f.keyMismatch); got != 1 || live != 3 {
		t.Fatalf("%s = %v, live %d after a round with different keys on 3 replicas, want 1 and 3", FleetHashKeyMismatchName, got, live)
	}
	f.Members(2, false)
	if got := testutil.ToFloat64(f.keyMismatch); got != 0 || live != 2 {
		t.Fatalf("%s = %v, live %d after the keys agree on 2 replicas, want 0 and 2", FleetHashKeyMismatchName, got, live)
	}
}
