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
	"testing"
)

func TestMaxMin(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name     string
		capacity float64
		weights  []float64
		demands  []float64
		want     []float64
	}{
		{"all backlogged split by weight", 90, []float64{1, 1, 3}, []float64{inf, inf, inf}, []float64{18, 18, 54}},
		{"a small demand is met in full", 90, []float64{1, 1, 3, 1}, []float64{inf, inf, inf, 10}, []float64{16, 16, 48, 10}},
		{"demand just under the fair share", 60, []float64{1, 1}, []float64{29.5, inf}, []float64{29.5, 30.5}},
		{"demand above the fair share is capped", 60, []float64{1, 1}, []float64{40, inf}, []float64{30, 30}},
		{"everyone satisfied leaves capacity unused", 100, []float64{1, 2}, []float64{10, 20}, []float64{10, 20}},
		{"weighted cascade", 100, []float64{1, 1, 2}, []float64{5, 40, 200}, []float64{5, 31.666666666666668, 63.333333333333336}},
		{"zero weight or demand gets nothing", 10, []float64{0, 1, 1}, []float64{inf, 0, inf}, []float64{0, 0, 10}},
		{"no capacity", 0, []float64{1}, []float64{inf}, []float64{0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := MaxMin(tc.capacity, tc.weights, tc.demands)
			checkAllocation(t, got, tc.want, tc.capacity, fmt.Sprintf("MaxMin(%v, %v, %v)", tc.capacity, tc.weights, tc.demands))
		})
	}
}

// checkAllocation fails the test unless got is want (call names the call
// that returned it) and sums to at most capacity.
func checkAllocation(t *testing.T, got, want []float64, capacity float64, call string) {
	t.Helper()
	sum := 0.0
	for i := range got {
		sum += got[i]
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Fatalf("%s = %v, want %v", call, got, want)
		}
	}
	if sum > capacity+1e-9 {
		t.Fatalf("%s: allocations sum to %v, more than the capacity %v", call, sum, capacity)
	}
}

func TestPlanSplitsATenantBetweenItsReplicas(t *testing.T) {
	// C is backlogged on r1 and r2 and asks a finite 6/s on r3; A is
	// backlogged on r1 only; D asks 4/s on r2, under its fair share.
	reports := []Report{
		{Replica: "r1", Tenants: []TenantReport{{Tenant: "A", Weight: 1, Backlogged: true, Admitted: 18}, {Tenant: "C", Weight: 3, Backlogged: true, Admitted: 24}}},
		{Replica: "r2", Tenants: []TenantReport{{Tenant: "C", Weight: 3, Backlogged: true, Admitted: 24}, {Tenant: "D", Weight: 1, Demand: 4, Admitted: 4}}},
		{Replica: "r3", Tenants: []TenantReport{{Tenant: "C", Weight: 3, Demand: 6, Admitted: 6}}},
	}
	// Capacity 84: D gets 4, A and C split 80 as 1:3 = 20 and 60; C's 60 is
	// 6 for r3 and 27 each for r1 and r2.
	tests := []struct {
		self      string
		wantRates map[string]float64
	}{
		{"r1", map[string]float64{"A": 20, "C": 27}},
		{"r2", map[string]float64{"C": 27, "D": 0}},
		{"r3", map[string]float64{"C": 6}},
	}
	for _, tc := range tests {
		t.Run(tc.self, func(t *testing.T) {
			p := makePlan(84, tc.self, reports, 1, 0.1, nil)
			if !p.contended || p.replicas != 3 {
				t.Fatalf("plan contended=%v replicas=%d, want true and 3", p.contended, p.replicas)
			}
			for tenant, want := range tc.wantRates {
				if got := p.tenants[claimant{tenant: tenant}].rate; math.Abs(got-want) > 1e-9 {
					t.Errorf("gate of %s on %s = %v, want %v (0 = open)", tenant, tc.self, got, want)
				}
			}
			if got := p.tenants[claimant{tenant: "C"}].fleetShare; math.Abs(got-54.0/76) > 1e-9 {
				t.Errorf("fleet share of C = %v, want 54/76", got)
			}
		})
	}
}

func TestPlanLeavesAnUncontendedKeyOpen(t *testing.T) {
	reports := []Report{{Replica: "r1", Tenants: []TenantReport{{Tenant: "A", Weight: 1, Demand: 30}, {Tenant: "B", Weight: 1, Demand: 40}}}}
	p := makePlan(90, "r1", reports, 1, 0.1, nil)
	if p.contended || p.tenants[claimant{tenant: "A"}].rate != 0 || p.tenants[claimant{tenant: "B"}].rate != 0 {
		t.Fatalf("demand 70/s under capacity 90/s: got contended=%v and gates %v/%v, want open gates", p.contended, p.tenants[claimant{tenant: "A"}].rate, p.tenants[claimant{tenant: "B"}].rate)
	}
}
