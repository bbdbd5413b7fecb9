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

import "math"

// tenantPlan is what one exchange round decides for one tenant of a key.
type tenantPlan struct {
	// rate is this replica's gate rate for the tenant in requests per
	// second; 0 leaves the gate open.
	rate float64
	// allocation is the tenant's weighted max-min share of the key's
	// capacity across the fleet, per second.
	allocation float64
	// fleetShare is the tenant's fraction of the key's admissions across
	// the fleet during the last period; localShare the same on this replica.
	fleetShare, localShare float64
}

// plan is what one exchange round decides for one key.
type plan struct {
	// contended is true when the fleet wants more than the key's capacity.
	contended bool
	// replicas is the number of live replicas that reported on the key.
	replicas int
	// tenants holds a plan for every tenant any replica reported.
	tenants map[string]tenantPlan
}

// tenantView aggregates the reports of every replica for one tenant.
type tenantView struct {
	weight      float64
	demand      float64 // summed over non-backlogged replicas
	backlogged  int     // replicas where the tenant is backlogged
	admitted    float64
	self        TenantReport
	selfPresent bool
}

// makePlan computes the fleet's weighted max-min allocation of capacity
// (requests per second) from reports, and the gate rates of replica self.
//
// Each tenant's fleet demand is unbounded when any replica reports it
// backlogged, else the sum of its arrival rates. Its allocation a is then
// split between the replicas that host it: a replica where it is not
// backlogged gets the demand it reported (scaled down if those alone exceed
// a), and the replicas where it is backlogged split the rest evenly. A
// backlogged replica that needs less soon stops being backlogged, reports a
// finite demand, and hands the difference back at the next round. Gate
// rates are the split times headroom, so that the shared bucket, not the
// gates, is the binding limit; minRate is the floor of a gate.
func makePlan(capacity float64, self string, reports []Report, headroom, minRate float64) plan {
	p := plan{replicas: len(reports), tenants: map[string]tenantPlan{}}
	views := map[string]*tenantView{}
	names := []string{}
	var totalDemand, totalAdmitted, selfAdmitted float64
	for _, r := range reports {
		for _, t := range r.Tenants {
			v := views[t.Tenant]
			if v == nil {
				v = &tenantView{}
				views[t.Tenant] = v
				names = append(names, t.Tenant)
			}
			v.weight = math.Max(v.weight, float64(max(t.Weight, 1)))
			v.admitted += t.Admitted
			totalAdmitted += t.Admitted
			if t.Backlogged {
				v.backlogged++
			} else {
				v.demand += t.Demand
				totalDemand += t.Demand
			}
			if r.Replica == self {
				v.self, v.selfPresent = t, true
				selfAdmitted += t.Admitted
			}
		}
	}
	weights := make([]float64, len(names))
	demands := make([]float64, len(names))
	for i, n := range names {
		v := views[n]
		weights[i], demands[i] = v.weight, v.demand
		if v.backlogged > 0 {
			demands[i] = unbounded
			p.contended = true
		}
	}
	if totalDemand > capacity {
		p.contended = true
	}
	alloc := MaxMin(capacity, weights, demands)
	for i, n := range names {
		v := views[n]
		tp := tenantPlan{allocation: alloc[i]}
		if totalAdmitted > 0 {
			tp.fleetShare = v.admitted / totalAdmitted
		}
		if selfAdmitted > 0 {
			tp.localShare = v.self.Admitted / selfAdmitted
		}
		// Only tenants at the water level are paced: one whose whole demand
		// fits under its fair share is entitled to all it asks for, so its
		// gate stays open and it never waits for a round to see a burst.
		if p.contended && capacity > 0 && v.selfPresent && (v.backlogged > 0 || v.demand > alloc[i]) {
			tp.rate = math.Max(headroom*splitFor(alloc[i], v), minRate)
		}
		p.tenants[n] = tp
	}
	return p
}

// splitFor returns this replica's part of a tenant's fleet allocation a.
func splitFor(a float64, v *tenantView) float64 {
	finite := math.Min(v.demand, a)
	if !v.self.Backlogged {
		if v.demand <= 0 {
			return 0
		}
		return v.self.Demand * finite / v.demand
	}
	return (a - finite) / float64(v.backlogged)
}
