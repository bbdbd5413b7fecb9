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
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairqueue/fairqueue/dataplane/fleet"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/metrics/collector"
)

// Fleet metric names.
const (
	// FleetShareName is the gauge of a tenant's share of a model's
	// admissions across the fleet, by model, tenant (hash prefix) and
	// priority band.
	FleetShareName = "rate_limit_fleet_share"
	// FleetLocalShareName is the same share on this replica alone.
	FleetLocalShareName = "rate_limit_fleet_local_share"
	// FleetGateRateName is this replica's pacing rate for a tenant, per
	// second; 0 means not paced, unless FleetGateClosedName is 1.
	FleetGateRateName = "rate_limit_fleet_gate_rate"
	// FleetGateClosedName is 1 while a tenant's gate passes nothing: the
	// bands above take the model's whole capacity (fleet.Share.Closed).
	FleetGateClosedName = "rate_limit_fleet_gate_closed"
	// FleetReplicasName is the gauge of live replicas reporting on a model,
	// as this replica sees them.
	FleetReplicasName = "rate_limit_fleet_replicas"
	// FleetContendedName is 1 while a model's fleet demand exceeds its limit.
	FleetContendedName = "rate_limit_fleet_contended"
	// FleetExchangeErrorsName counts exchange rounds that failed, by model.
	FleetExchangeErrorsName = "rate_limit_fleet_exchange_errors_total"
	// FleetHashKeyMismatchName is 1 while the replicas sharing the store
	// have hashed identities with different keys for longer than a
	// rotation's grace (see fleet.Pacer.KeyHealth).
	FleetHashKeyMismatchName = "rate_limit_fleet_hash_key_mismatch"
)

// MaxFleetTenants is the most (tenant, band) pairs per model the fleet
// gauges carry: the ones with the largest fleet shares. Tenant labels are
// identity.Short hash prefixes, never raw identities; this bound keeps their
// number fixed. A tenant whose requests lowered their band has a pair in
// each band.
const MaxFleetTenants = 20

// Fleet holds the fleet-fairness collectors; it implements fleet.Observer.
// Unlike Metrics its tenant label is not from a fixed set: it is the hash
// prefix of at most MaxFleetTenants tenants per model, replaced every round.
// Its band label is bounded like the queue series' (MaxBandSeries), and ""
// without bands.
type Fleet struct {
	share, local, gate  *prometheus.GaugeVec
	closed              *prometheus.GaugeVec
	bands               bandLabels[string]
	replicas, contended *prometheus.GaugeVec
	exchangeErrors      *prometheus.CounterVec
	keyMismatch         prometheus.Gauge
	// OnLive, if set, is told the live replicas of every membership round
	// (for the store's live-replicas gauge when the fleet counts them).
	OnLive func(int)
}

var (
	_ fleet.Observer        = (*Fleet)(nil)
	_ fleet.MembersObserver = (*Fleet)(nil)
)

// NewFleet creates the fleet collectors and registers them on reg.
func NewFleet(reg prometheus.Registerer) (*Fleet, error) {
	byTenant := []string{"model", "tenant", "band"}
	f := &Fleet{
		share: collector.GaugeVec(FleetShareName, "Tenant's share of the model's admissions across the fleet over the last exchange period (tenant is a hash prefix).",
			byTenant...),
		local:          collector.GaugeVec(FleetLocalShareName, "Tenant's share of the model's admissions on this replica over the last exchange period.", byTenant...),
		gate:           collector.GaugeVec(FleetGateRateName, "This replica's pacing rate for the tenant on the model in the band, requests per second; 0 when not paced (or closed: see "+FleetGateClosedName+").", byTenant...),
		closed:         collector.GaugeVec(FleetGateClosedName, "1 while the tenant's gate on the model passes nothing in the band: the bands above take the whole capacity.", byTenant...),
		replicas:       collector.GaugeVec(FleetReplicasName, "Live data-plane replicas reporting on the model, as this replica sees them.", "model"),
		contended:      collector.GaugeVec(FleetContendedName, "1 while the fleet's demand on the model exceeds its limit and grants are paced.", "model"),
		exchangeErrors: collector.CounterVec(FleetExchangeErrorsName, "Fleet exchange rounds that could not reach the shared store.", "model"),
		keyMismatch:    collector.Gauge(FleetHashKeyMismatchName, "1 while the replicas sharing the rate-limit store hash identities with different keys (beyond a rotation's grace), splitting every tenant; give them one hash key."),
	}
	if err := registerAll(reg, "fleet metrics", "NewFleet", f.share, f.local, f.gate, f.closed, f.replicas, f.contended, f.exchangeErrors, f.keyMismatch); err != nil {
		return nil, err
	}
	f.bands.init(func(band string) string { return band })
	return f, nil
}

// Synced implements fleet.Observer.
func (f *Fleet) Synced(model string, replicas int, contended bool, shares []fleet.Share) {
	f.replicas.WithLabelValues(model).Set(float64(replicas))
	f.contended.WithLabelValues(model).Set(b2f(contended))
	byModel := prometheus.Labels{"model": model}
	f.share.DeletePartialMatch(byModel)
	f.local.DeletePartialMatch(byModel)
	f.gate.DeletePartialMatch(byModel)
	f.closed.DeletePartialMatch(byModel)
	top := append([]fleet.Share(nil), shares...)
	sort.Slice(top, func(i, j int) bool {
		if top[i].Fleet != top[j].Fleet {
			return top[i].Fleet > top[j].Fleet
		}
		if top[i].Tenant != top[j].Tenant {
			return top[i].Tenant < top[j].Tenant
		}
		return top[i].Band < top[j].Band
	})
	for _, s := range top[:min(len(top), MaxFleetTenants)] {
		l := []string{model, identity.Short(s.Tenant), f.bands.of(s.BandName)}
		f.share.WithLabelValues(l...).Set(s.Fleet)
		f.local.WithLabelValues(l...).Set(s.Local)
		f.gate.WithLabelValues(l...).Set(s.Gate)
		f.closed.WithLabelValues(l...).Set(b2f(s.Closed))
	}
}

// ExchangeFailed implements fleet.Observer.
func (f *Fleet) ExchangeFailed(model string, _ error) {
	f.exchangeErrors.WithLabelValues(model).Inc()
}

// Members implements fleet.MembersObserver.
func (f *Fleet) Members(live int, keyMismatch bool) {
	f.keyMismatch.Set(b2f(keyMismatch))
	if f.OnLive != nil {
		f.OnLive(live)
	}
}
