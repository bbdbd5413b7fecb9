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

// Package metrics defines the data plane's Prometheus collectors: the five
// fair-queue metrics of the product specification and the limiter's decisions
// by dimension and outcome. Collectors are registered on a registry passed in
// (no global state), and every label value of Metrics comes from a fixed set,
// so no raw or hashed identity can reach its labels. The separate Fleet
// collectors (fleet.go) label at most MaxFleetTenants tenants per model by
// hash prefix, and the per-tenant Tenants collectors (tenants.go) the
// weighted tenants plus a bounded top of the most active others, by the same
// prefix; neither ever labels a raw identity.
package metrics

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairqueue/fairqueue/dataplane/capacity"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/dataplane/metrics/collector"
)

// Metric names, exactly as in the product specification.
const (
	// QueueDepthName is the gauge of requests held in the queues now.
	QueueDepthName = "rate_limit_fair_queue_depth"
	// QueueTenantsName is the gauge of tenant queues tracked now.
	QueueTenantsName = "rate_limit_fair_queue_tenants"
	// QueueWaitName is the histogram of time queued before a granted
	// attempt, by tenant_dimension, limit_type and band.
	QueueWaitName = "rate_limit_fair_queue_wait_seconds"
	// QueueGrantsName counts queued requests admitted, by tenant_dimension,
	// limit_type and band.
	QueueGrantsName = "rate_limit_fair_queue_grants_total"
	// QueueRefusedName counts queue refusals, by tenant_dimension, reason,
	// limit_type and band.
	QueueRefusedName = "rate_limit_fair_queue_refused_total"
	// QueueBandIgnoredName counts request band headers ignored, by reason:
	// an unknown band, or one above the tenant's.
	QueueBandIgnoredName = "rate_limit_fair_queue_band_header_ignored_total"
	// DecisionsName counts limiter bucket checks, by dimension and outcome.
	DecisionsName = "rate_limit_decisions_total"
)

// WaitBuckets are the wait histogram's upper bounds in seconds: 1ms to 10m,
// covering every allowed maxWait with roughly 2.5x steps.
var WaitBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// tenantDimensions are the label values of tenant_dimension, in index order.
var tenantDimensions = [...]identity.Dimension{identity.DimensionUser, identity.DimensionAPIKey, identity.DimensionTeam}

// limitTypes are the values of the queue series' limit_type label: what a
// request waited for, one of the SPEC limit types that can queue (the
// identity dimensions' and capacity's), or "unknown" for any other, in index
// order. Without the label an operator could not tell a wait for a backend
// slot from a wait for a rate limit's token.
var limitTypes = [...]string{
	limiter.DimensionAPIKey.String(), limiter.DimensionUser.String(), limiter.DimensionTeam.String(),
	limiter.DimensionModel.String(), capacity.LimitType, unknownLabel,
}

// limitTypeIndex returns the index of lt in limitTypes; any value outside
// them, "" included, is "unknown".
func limitTypeIndex(lt string) int {
	for i, v := range limitTypes[:len(limitTypes)-1] {
		if v == lt {
			return i
		}
	}
	return len(limitTypes) - 1
}

// reasons are the refusal reasons pre-created for every tenant dimension.
var reasons = [...]fairqueue.Reason{
	fairqueue.ReasonQueueFull, fairqueue.ReasonTenantQueueFull, fairqueue.ReasonTenantTableFull,
	fairqueue.ReasonWaitExceedsBudget, fairqueue.ReasonDeadlineExceeded,
	fairqueue.ReasonDisabled, fairqueue.ReasonShutdown, fairqueue.ReasonNoIdentity,
}

// Metrics holds the data plane's collectors with their label children
// created up front (a priority band's on its first event), so recording an
// event does no allocation. It implements fairqueue.Observer and
// limiter.Observer.
type Metrics struct {
	depth   *prometheus.GaugeVec
	tenants prometheus.Gauge
	wait    *prometheus.HistogramVec
	grants  *prometheus.CounterVec
	refused *prometheus.CounterVec
	// bands are the queue series of each band (bands.go).
	bands bandTable

	decisions *decisions

	bandIgnored   *prometheus.CounterVec
	bandIgnoredBy [len(bandIgnoredReasons)]prometheus.Counter
}

// bandIgnoredReasons are the reason label values of QueueBandIgnoredName
// (admission.BandIgnoredUnknown and admission.BandIgnoredRaise).
var bandIgnoredReasons = [...]string{"unknown", "raise"}

var (
	_ fairqueue.Observer     = (*Metrics)(nil)
	_ limiter.MemoryObserver = (*Metrics)(nil)
)

// New creates the collectors and registers them on reg. It fails when one is
// already registered there, e.g. when New is called twice on one registry.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		depth:   collector.GaugeVec(QueueDepthName, "Requests held in the fair queues now, by priority band.", "band"),
		tenants: collector.Gauge(QueueTenantsName, "Tenant queues tracked now."),
		wait: collector.HistogramVec(QueueWaitName, "Time a request spent queued before its admission attempt was granted.",
			WaitBuckets, "tenant_dimension", "limit_type", "band"),
		grants: collector.CounterVec(QueueGrantsName, "Queued requests admitted, by what they waited for (limit_type).",
			"tenant_dimension", "limit_type", "band"),
		refused: collector.CounterVec(QueueRefusedName, "Requests refused at enqueue or after waiting, by reason and what they waited for (limit_type).",
			"tenant_dimension", "reason", "limit_type", "band"),
		decisions: newDecisions(),
		bandIgnored: collector.CounterVec(QueueBandIgnoredName,
			"Request band headers ignored: naming no configured band (unknown) or a band above the tenant's (raise).", "reason"),
	}
	for i, r := range bandIgnoredReasons {
		m.bandIgnoredBy[i] = m.bandIgnored.WithLabelValues(r)
	}
	m.bands.init(m)

	if err := registerAll(reg, "data-plane metrics", "New", m.depth, m.tenants, m.wait, m.grants, m.refused, m.decisions, m.bandIgnored); err != nil {
		return nil, err
	}
	return m, nil
}

// dimensionIndex returns the index of d in tenantDimensions, or -1.
func dimensionIndex(d string) int {
	switch identity.Dimension(d) {
	case identity.DimensionUser:
		return 0
	case identity.DimensionAPIKey:
		return 1
	case identity.DimensionTeam:
		return 2
	}
	return -1
}

// QueueChanged implements fairqueue.Observer.
func (m *Metrics) QueueChanged(depth, tenants int) {
	m.bands.setTotal(depth)
	m.tenants.Set(float64(tenants))
}

// unknownLabel replaces a tenant dimension or reason outside the known sets,
// so a caller's mistake can never put an identity into a label.
const unknownLabel = "unknown"

// Granted implements fairqueue.Observer. A dimension other than user, apiKey
// or team is recorded as "unknown", and so are a limit type outside
// limitTypes and a band past the bound of bands.go.
func (m *Metrics) Granted(dimension, limitType, band string, waited time.Duration) {
	l := m.bands.of(band).limit(m, limitTypeIndex(limitType))
	if i := dimensionIndex(dimension); i >= 0 {
		l.wait[i].Observe(waited.Seconds())
		l.grants[i].Inc()
		return
	}
	lt, b := m.labelsOf(limitType, band)
	m.wait.WithLabelValues(unknownLabel, lt, b).Observe(waited.Seconds())
	m.grants.WithLabelValues(unknownLabel, lt, b).Inc()
}

// Refused implements fairqueue.Observer. A dimension, limit type or reason
// outside the known sets is recorded as "unknown", and so is a band past the
// bound of bands.go.
func (m *Metrics) Refused(dimension, limitType, band string, reason fairqueue.Reason) {
	l := m.bands.of(band).limit(m, limitTypeIndex(limitType))
	i := dimensionIndex(dimension)
	if j := slices.Index(reasons[:], reason); i >= 0 && j >= 0 {
		l.refused[i][j].Inc()
		return
	}
	d, r := unknownLabel, unknownLabel
	if i >= 0 {
		d = dimension
	}
	if slices.Contains(reasons[:], reason) {
		r = string(reason)
	}
	lt, b := m.labelsOf(limitType, band)
	m.refused.WithLabelValues(d, r, lt, b).Inc()
}

// labelsOf returns the limit_type and band label values of an event.
func (m *Metrics) labelsOf(limitType, band string) (lt, b string) {
	return limitTypes[limitTypeIndex(limitType)], m.bands.of(band).name
}

// BandQueueChanged implements fairqueue.Observer: the depth of one band.
func (m *Metrics) BandQueueChanged(band string, depth int) { m.bands.setDepth(band, depth) }

// BandIgnored implements admission.BandObserver: it counts a request band
// header ignored for reason; a reason outside the known set is not counted.
func (m *Metrics) BandIgnored(reason string) {
	for i, r := range bandIgnoredReasons {
		if r == reason {
			m.bandIgnoredBy[i].Inc()
			return
		}
	}
}

// ObserveDecision implements limiter.Observer.
func (m *Metrics) ObserveDecision(d limiter.Dimension, o limiter.Outcome) {
	m.decisions.observe(d, o)
}

// CountsMemory implements limiter.MemoryObserver: the decisions of s are
// read from s at scrape time.
func (m *Metrics) CountsMemory(s *limiter.MemoryStore) bool {
	return m.decisions.countsMemory(s)
}

// registerAll registers every collector on reg and reports all failures at
// once, naming the constructor that must run only once per registry.
func registerAll(reg prometheus.Registerer, what, ctor string, cs ...prometheus.Collector) error {
	var errs []error
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registering %s (%s must be called once per registry): %w", what, ctor, err)
	}
	return nil
}
