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
	"math"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
)

// claimant is one tenant's demand in one priority band: a tenant whose
// requests lowered their band (fairqueue.Request.Band) claims in two, so
// its lowered requests never use its allocation in its own band.
type claimant struct {
	tenant string
	band   int
}

// tenantPlan is what one exchange round decides for one claimant.
type tenantPlan struct {
	// rate is this replica's gate rate for the claimant in requests per
	// second; 0 leaves the gate open.
	rate float64
	// closed is true when the claimant's band gets nothing while the bands
	// above it take the whole capacity: its gate passes nothing until the
	// next round.
	closed bool
	// allocation is the claimant's share of the key's capacity across the
	// fleet, per second.
	allocation float64
	// fleetShare is the claimant's fraction of the key's admissions across
	// the fleet during the last period; localShare the same on this replica.
	fleetShare, localShare float64
}

// plan is what one exchange round decides for one key.
type plan struct {
	// contended is true when the fleet wants more than the key's capacity.
	contended bool
	// replicas is the number of live replicas that reported on the key.
	replicas int
	// tenants holds a plan for every claimant any replica reported.
	tenants map[claimant]tenantPlan
}

// tenantView aggregates the reports of every replica for one claimant.
type tenantView struct {
	weight      float64
	demand      float64 // summed over non-backlogged replicas
	backlogged  int     // replicas where the claimant is backlogged
	admitted    float64
	self        TenantReport
	selfPresent bool
}

// bandTable returns the minShares of the priority bands the fleet
// allocates with: those of the report with the smallest replica name among
// the reports that carry bands, so that every replica reading the same
// reports picks the same table while a reload reaches them one by one. ok
// is false when no report carries bands: the fleet has one band.
func bandTable(reports []Report) (minShares []float64, ok bool) {
	from := ""
	for _, r := range reports {
		if len(r.BandShares) > 0 && (!ok || r.Replica < from) {
			minShares, from, ok = r.BandShares, r.Replica, true
		}
	}
	return minShares, ok
}

// makePlan computes the fleet's allocation of capacity (requests per
// second) from reports, and the gate rates of replica self.
//
// Claimants are tenants in priority bands. While this replica has no bands
// (local, its weights, has none) or no report carries BandShares, every
// tenant is in one band and the plan is exactly what it was before bands:
// a replica without bands behaves like one that predates them, whatever it
// reads. Otherwise a tenant's band is the one its report gives, or local's
// for a report that carries no bands (from a replica that does not know
// them); the capacity is divided strictly by band with the minShare floors
// of bandTable (Banded), and within a band by weighted max-min fairness.
//
// Each claimant's fleet demand is unbounded when any replica reports it
// backlogged, else the sum of its arrival rates. Its allocation a is then
// split between the replicas that host it: a replica where it is not
// backlogged gets the demand it reported (scaled down if those alone exceed
// a), and the replicas where it is backlogged split the rest evenly. A
// backlogged replica that needs less soon stops being backlogged, reports a
// finite demand, and hands the difference back at the next round. Gate
// rates are the split times headroom, so that the shared bucket, not the
// gates, is the binding limit; minRate is the floor of a gate. A claimant
// allocated nothing (its band is starved) has a closed gate.
func makePlan(capacity float64, self string, reports []Report, headroom, minRate float64, local *fairqueue.Weights) plan {
	p := plan{replicas: len(reports), tenants: map[claimant]tenantPlan{}}
	minShares, banded := bandTable(reports)
	banded = banded && local != nil && len(local.Bands) > 0
	views := map[claimant]*tenantView{}
	names := []claimant{}
	var totalDemand, totalAdmitted, selfAdmitted float64
	for _, r := range reports {
		for _, t := range r.Tenants {
			c := claimant{tenant: t.Tenant}
			switch {
			case !banded:
			case len(r.BandShares) > 0:
				c.band = min(max(t.Band, 0), fairqueue.MaxBands-1)
			default:
				c.band = local.BandOf(t.Tenant)
			}
			v := views[c]
			if v == nil {
				v = &tenantView{}
				views[c] = v
				names = append(names, c)
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
	bands := make([]int, len(names))
	for i, n := range names {
		v := views[n]
		weights[i], demands[i], bands[i] = v.weight, v.demand, n.band
		if v.backlogged > 0 {
			demands[i] = unbounded
			p.contended = true
		}
	}
	if totalDemand > capacity {
		p.contended = true
	}
	alloc := Banded(capacity, minShares, bands, weights, demands)
	for i, n := range names {
		v := views[n]
		tp := tenantPlan{allocation: alloc[i]}
		if totalAdmitted > 0 {
			tp.fleetShare = v.admitted / totalAdmitted
		}
		if selfAdmitted > 0 {
			tp.localShare = v.self.Admitted / selfAdmitted
		}
		// Only claimants at their band's water level are paced: one whose
		// whole demand fits under its allocation is entitled to all it asks
		// for, so its gate stays open and it never waits for a round to see
		// a burst.
		if p.contended && capacity > 0 && v.selfPresent && (v.backlogged > 0 || v.demand > alloc[i]) {
			if alloc[i] > 0 {
				tp.rate = math.Max(headroom*splitFor(alloc[i], v), minRate)
			} else {
				tp.closed = true
			}
		}
		p.tenants[n] = tp
	}
	return p
}

// splitFor returns this replica's part of a claimant's fleet allocation a.
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
