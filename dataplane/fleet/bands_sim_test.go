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
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
)

// bandCase is the fleet scenario with priority bands on a model
// limit of 90/s: the interactive tenant H only on replica 0, the batch
// tenants L1 and L2 (weights 1:2) on all three replicas, flooding. want is
// the strict-priority allocation in requests per second per load.
type bandCase struct {
	name  string
	bands []fairqueue.Band
	loads []simLoad
	want  map[string]float64
}

func bandCases() []bandCase {
	bands := func(minShare float64) []fairqueue.Band {
		return []fairqueue.Band{{Name: "interactive"}, {Name: "batch", MinShare: minShare}}
	}
	batch := []simLoad{
		{tenant: "L1", weight: 1, band: 1, clients: map[int]int{0: 4, 1: 4, 2: 4}},
		{tenant: "L2", weight: 2, band: 1, clients: map[int]int{0: 4, 1: 4, 2: 4}},
	}
	with := func(loads ...simLoad) []simLoad { return append(loads, batch...) }
	flood := simLoad{tenant: "H", weight: 1, clients: map[int]int{0: 8}}
	steady := func(rate float64) simLoad { return simLoad{tenant: "H", weight: 1, rate: rate, on: []int{0}} }
	return []bandCase{
		{"interactive asks half", bands(0), with(steady(45)),
			map[string]float64{"H": 45, "L1": 15, "L2": 30}},
		{"interactive floods, no minShare", bands(0), with(flood),
			map[string]float64{"H": 90, "L1": 0, "L2": 0}},
		{"interactive floods, batch minShare 0.2", bands(0.2), with(flood),
			map[string]float64{"H": 72, "L1": 6, "L2": 12}},
		{"interactive tenant lowers its batch requests", bands(0), with(steady(30),
			simLoad{tenant: "H", weight: 1, lower: 1, name: "H-batch", clients: map[int]int{0: 8}}),
			map[string]float64{"H": 30, "H-batch": 15, "L1": 15, "L2": 30}},
	}
}

// checkBands compares the measured rates with the strict-priority
// allocation: every load within 5% of its allocation (tol), or at most 1%
// of the capacity when it is allocated nothing, and the total within 3% of
// the capacity.
func checkBands(t *testing.T, rates map[string]float64, total float64, want map[string]float64, tol float64) {
	t.Helper()
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	var got, asked []string
	for _, n := range names {
		got = append(got, fmt.Sprintf("%s=%.2f/s (%.3f)", n, rates[n], shareOf(rates, total, n)))
		asked = append(asked, fmt.Sprintf("%s=%.0f", n, want[n]))
	}
	t.Logf("measured %s, total %.1f/s; strict-priority allocation %s", strings.Join(got, " "), total, strings.Join(asked, " "))
	for _, n := range names {
		w := want[n]
		if w == 0 && rates[n] > 0.01*90 || w > 0 && math.Abs(rates[n]-w) > tol*w {
			t.Errorf("%s got %.2f/s, want %.0f/s (within %.0f%%, or at most 1%% of the capacity for 0)", n, rates[n], w, 100*tol)
		}
	}
	if !within(total, 90, 0.03) {
		t.Errorf("total %.1f/s, want within 3%% of 90/s", total)
	}
}

// TestFleetBands runs the band scenarios on the simulated fleet (in-process
// exchange and shared bucket, fake clock).
func TestFleetBands(t *testing.T) {
	warm, end := 3*time.Second, 30*time.Second
	for _, tc := range bandCases() {
		t.Run(tc.name, func(t *testing.T) {
			res := simulate(t, simScenario{replicas: 3, shared: true, paced: true, bands: tc.bands, loads: tc.loads, duration: end, seed: 1},
				[2]time.Duration{warm, end})
			rates, total := res.rates(warm, end)
			checkBands(t, rates, total, tc.want, 0.05)
		})
	}
}

// TestFleetBandsNeedTheExchange is the negative control: with the shared
// bucket but local strict priority only, the interactive tenant on one
// replica of three gets far less than the capacity it asks for.
func TestFleetBandsNeedTheExchange(t *testing.T) {
	tc := bandCases()[1]
	warm, end := 3*time.Second, 30*time.Second
	res := simulate(t, simScenario{replicas: 3, shared: true, paced: false, bands: tc.bands, loads: tc.loads, duration: end, seed: 1},
		[2]time.Duration{warm, end})
	rates, total := res.rates(warm, end)
	t.Logf("local priority only: H=%.1f/s L1=%.1f/s L2=%.1f/s of %.1f/s (fleet allocation 90/0/0)", rates["H"], rates["L1"], rates["L2"], total)
	if rates["H"] > 0.9*90 {
		t.Errorf("without the exchange H got %.1f/s, want the control to miss the 90/s allocation", rates["H"])
	}
}

// TestFleetBandsVersionSkew runs the flooding scenario during a rolling
// upgrade: replica 2 predates bands (its reports carry none and it ignores
// the others'). The bands no longer hold strictly, but nothing breaks: the
// shared bucket still caps the fleet at its capacity, the interactive
// tenant keeps more than its share without bands (22.5/s of 90/s at
// weights 1:1:2), and once replica 2 is upgraded (here: every replica
// knows bands) the allocation is exact again (TestFleetBands).
func TestFleetBandsVersionSkew(t *testing.T) {
	for _, tc := range bandCases()[1:3] {
		t.Run(tc.name, func(t *testing.T) {
			warm, end := 3*time.Second, 30*time.Second
			res := simulate(t, simScenario{replicas: 3, shared: true, paced: true, bands: tc.bands, loads: tc.loads, duration: end, seed: 1,
				old: map[int]bool{2: true}}, [2]time.Duration{warm, end})
			rates, total := res.rates(warm, end)
			t.Logf("replica 2 predating bands: H=%.1f/s L1=%.1f/s L2=%.1f/s, total %.1f/s (allocation H=%.0f L1=%.0f L2=%.0f)",
				rates["H"], rates["L1"], rates["L2"], total, tc.want["H"], tc.want["L1"], tc.want["L2"])
			if total > 90*1.01 || !within(total, 90, 0.03) {
				t.Errorf("total %.1f/s, want the shared capacity 90/s (within 3%%)", total)
			}
			if rates["H"] < 22.5 {
				t.Errorf("H got %.1f/s, want at least its share without bands, 22.5/s", rates["H"])
			}
		})
	}
}
