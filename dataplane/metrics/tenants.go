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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/metrics/collector"
)

// Per-tenant metric names. Their tenant label is an identity.Short hash
// prefix (12 hex digits, as in the fleet metrics) or OtherTenant.
const (
	// TenantGrantsName counts a tenant's admitted requests, at once or after
	// queuing, by tenant_dimension and tenant.
	TenantGrantsName = "rate_limit_fair_queue_tenant_grants_total"
	// TenantWaitName is the total time a tenant's admitted requests spent
	// queued, in seconds; divided by the grants it is the mean wait.
	TenantWaitName = "rate_limit_fair_queue_tenant_wait_seconds_total"
	// TenantRefusedName counts a tenant's refused requests by reason.
	TenantRefusedName = "rate_limit_fair_queue_tenant_refused_total"
	// TenantQueuedName is the gauge of a tenant's requests queued now, by
	// limit_type (what they wait for).
	TenantQueuedName = "rate_limit_fair_queue_tenant_queued"
	// TenantWeightName is the gauge of a tenant's configured weight.
	TenantWeightName = "rate_limit_fair_queue_tenant_weight"
)

// OtherTenant is the tenant label of every tenant without series of its own.
const OtherTenant = "other"

// DefaultTopTenants is how many tenants without a weights entry get series
// of their own when no other bound is given: the most active ones.
const DefaultTopTenants = 50

// TenantPeriod is how often the tenants with series of their own are chosen
// anew: the most active of the period keep or gain their series, and the
// series of tenants with no request in the period and none queued are deleted.
const TenantPeriod = time.Minute

// tenantReasons are the refusal reasons of TenantRefusedName: the fair
// queue's and admission.TenantRateLimited and TenantUnavailable (not imported:
// admission's tests import this package).
var tenantReasons = map[string]bool{
	string(fairqueue.ReasonQueueFull): true, string(fairqueue.ReasonTenantQueueFull): true,
	string(fairqueue.ReasonTenantTableFull): true, string(fairqueue.ReasonWaitExceedsBudget): true,
	string(fairqueue.ReasonDeadlineExceeded): true, string(fairqueue.ReasonDisabled): true,
	string(fairqueue.ReasonShutdown): true, "rate_limited": true, "unavailable": true,
}

// tenantSeries is a tenant with series of its own.
type tenantSeries struct {
	label, dim string
	weighted   bool
	grants     prometheus.Counter
	wait       prometheus.Counter
	// active counts the tenant's requests this period.
	active atomic.Uint64
}

// Tenants holds the per-tenant collectors; it implements
// admission.TenantObserver. Its cardinality is bounded: every tenant with a
// weights entry, plus at most top others (the most active of the last
// TenantPeriod) get series of their own; all other tenants are summed under
// OtherTenant. The candidates for the top are tracked in a table of 4*top
// entries that keeps the most active (space-saving counting), so any number
// of tenants costs bounded memory.
type Tenants struct {
	grants, wait, refused *prometheus.CounterVec
	queuedDesc            *prometheus.Desc
	weightDesc            *prometheus.Desc
	top                   int

	// series is the read-only snapshot of the tenants with series of their
	// own, by tenant hash, replaced whole under mu.
	series atomic.Pointer[map[string]*tenantSeries]
	// otherGrants and otherWait are the OtherTenant children by dimension.
	otherGrants, otherWait [len(tenantDimensions)]prometheus.Counter
	// next is when the current period ends, in Unix nanoseconds.
	next atomic.Int64

	mu      sync.Mutex
	weights fairqueue.Weights
	others  int               // tenants with series and no weights entry
	cand    map[string]uint64 // candidate tenants' requests this period
	dims    map[string]string // candidate tenants' dimensions
	// waiting holds the tenants with requests in the fair queue now: at
	// most one entry per waiting request, so the queue's bounds bound it.
	waiting map[string]waiting
}

// waiting is a tenant's requests queued now, in all and by limit type
// (limitTypes' index).
type waiting struct {
	dim    string
	n      int
	byType [len(limitTypes)]int
}

// NewTenants creates the per-tenant collectors and registers them on reg.
// top is how many tenants without a weights entry get series of their own:
// 0 means DefaultTopTenants, a negative value none.
func NewTenants(reg prometheus.Registerer, top int) (*Tenants, error) {
	switch {
	case top == 0:
		top = DefaultTopTenants
	case top < 0:
		top = 0
	}
	byTenant := []string{"tenant_dimension", "tenant"}
	t := &Tenants{
		grants: collector.CounterVec(TenantGrantsName, "Tenant's requests admitted, at once or after queuing (tenant is a hash prefix, or \"other\").", byTenant...),
		wait:   collector.CounterVec(TenantWaitName, "Total seconds the tenant's admitted requests spent queued; over the grants, the mean wait.", byTenant...),
		refused: collector.CounterVec(TenantRefusedName, "Tenant's requests refused, by reason: the fair queue's, rate_limited (429 without queuing) or unavailable (503).",
			"tenant_dimension", "tenant", "reason"),
		queuedDesc: prometheus.NewDesc(TenantQueuedName,
			"Tenant's requests queued now, by what they wait for (limit_type; absent on an idle tenant's 0).",
			append(byTenant[:len(byTenant):len(byTenant)], "limit_type"), nil),
		weightDesc: prometheus.NewDesc(TenantWeightName,
			"Tenant's configured fair-queuing weight (the default weight for tenants without a weights entry).", []string{"tenant"}, nil),
		top:     top,
		cand:    make(map[string]uint64),
		dims:    make(map[string]string),
		waiting: make(map[string]waiting),
	}
	empty := map[string]*tenantSeries{}
	t.series.Store(&empty)
	for i, d := range tenantDimensions {
		t.otherGrants[i] = t.grants.WithLabelValues(string(d), OtherTenant)
		t.otherWait[i] = t.wait.WithLabelValues(string(d), OtherTenant)
	}
	if err := registerAll(reg, "per-tenant metrics", "NewTenants", t.grants, t.wait, t.refused, t); err != nil {
		return nil, err
	}
	return t, nil
}

// TenantAdmitted implements admission.TenantObserver (asserted in
// dataplane/server). For a tenant with
// series of its own it takes no lock and allocates nothing.
func (t *Tenants) TenantAdmitted(now time.Time, tenant string, dim identity.Dimension, waited time.Duration) {
	t.tick(now)
	if s := (*t.series.Load())[tenant]; s != nil {
		s.grants.Inc()
		if waited > 0 {
			s.wait.Add(waited.Seconds())
		}
		s.active.Add(1)
		return
	}
	i := dimensionIndex(string(dim))
	if i < 0 {
		return
	}
	grants, wait := t.otherGrants[i], t.otherWait[i]
	if s := t.notice(tenant, string(dim)); s != nil {
		grants, wait = s.grants, s.wait
	}
	grants.Inc()
	if waited > 0 {
		wait.Add(waited.Seconds())
	}
}

// TenantRefused implements admission.TenantObserver.
func (t *Tenants) TenantRefused(now time.Time, tenant string, dim identity.Dimension, reason string) {
	t.tick(now)
	if !tenantReasons[reason] {
		reason = unknownLabel
	}
	if dimensionIndex(string(dim)) < 0 {
		return
	}
	if s := (*t.series.Load())[tenant]; s != nil {
		t.refused.WithLabelValues(s.dim, s.label, reason).Inc()
		s.active.Add(1)
		return
	}
	if s := t.notice(tenant, string(dim)); s != nil {
		t.refused.WithLabelValues(s.dim, s.label, reason).Inc()
		return
	}
	t.refused.WithLabelValues(string(dim), OtherTenant, reason).Inc()
}

// TenantWaiting implements admission.TenantObserver: limitType is what the
// request waits for (a limit type outside limitTypes counts as "unknown").
// Queued tenants are tracked exactly (the fair queue bounds how many there
// are) and are preferred for series of their own, so a starved tenant is
// visible.
func (t *Tenants) TenantWaiting(tenant string, dim identity.Dimension, limitType string, delta int) {
	if dimensionIndex(string(dim)) < 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.waiting[tenant]
	w.n += delta
	w.byType[limitTypeIndex(limitType)] += delta
	if w.n <= 0 {
		delete(t.waiting, tenant)
		return
	}
	w.dim = string(dim)
	t.waiting[tenant] = w
	if delta > 0 && (*t.series.Load())[tenant] == nil {
		t.noticeLocked(tenant, string(dim))
	}
}

// SetWeights gives the configured weights and tenant dimension: every
// tenant with a weights entry gets series of its own, labelled with dim, and
// a tenant whose entry is gone competes for the top.
func (t *Tenants) SetWeights(w fairqueue.Weights, dim identity.Dimension) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.weights = fairqueue.Weights{Default: w.Default, ByTenant: make(map[string]int, len(w.ByTenant))}
	for k, v := range w.ByTenant {
		t.weights.ByTenant[k] = v
	}
	old := *t.series.Load()
	next := make(map[string]*tenantSeries, len(old)+len(w.ByTenant))
	t.others = 0
	for h, s := range old {
		_, s.weighted = w.ByTenant[h]
		if !s.weighted {
			t.others++
		}
		next[h] = s
	}
	for h := range w.ByTenant {
		if next[h] == nil {
			next[h] = t.newSeries(h, string(dim), true)
		}
	}
	// Unweighted tenants beyond the top lose their series at the next period.
	t.series.Store(&next)
}

// newSeries creates the series of tenant h.
func (t *Tenants) newSeries(h, dim string, weighted bool) *tenantSeries {
	l := identity.Short(h)
	return &tenantSeries{label: l, dim: dim, weighted: weighted,
		grants: t.grants.WithLabelValues(dim, l), wait: t.wait.WithLabelValues(dim, l)}
}

// deleteSeries removes every series of s.
func (t *Tenants) deleteSeries(s *tenantSeries) {
	byTenant := prometheus.Labels{"tenant": s.label}
	t.grants.DeletePartialMatch(byTenant)
	t.wait.DeletePartialMatch(byTenant)
	t.refused.DeletePartialMatch(byTenant)
}

// notice counts a request of a tenant without series of its own, and
// returns its series if it has them now.
func (t *Tenants) notice(tenant, dim string) *tenantSeries {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.noticeLocked(tenant, dim)
}

func (t *Tenants) noticeLocked(tenant, dim string) *tenantSeries {
	old := *t.series.Load()
	if s := old[tenant]; s != nil {
		s.active.Add(1)
		return s
	}
	if !isHash(tenant) {
		return nil // never label a value that is not an identity hash
	}
	if t.others < t.top {
		// Room in the top: series at once.
		next := make(map[string]*tenantSeries, len(old)+1)
		for h, s := range old {
			next[h] = s
		}
		s := t.newSeries(tenant, dim, false)
		s.active.Add(1)
		next[tenant] = s
		t.others++
		t.series.Store(&next)
		return s
	}
	if t.top == 0 {
		return nil
	}
	if _, ok := t.cand[tenant]; ok || len(t.cand) < 4*t.top {
		t.cand[tenant]++
		t.dims[tenant] = dim
		return nil
	}
	// Space-saving: the new tenant replaces the least active candidate and
	// inherits its count, so a heavy tenant arriving late still rises.
	var minKey string
	var minN uint64
	for k, n := range t.cand {
		if minKey == "" || n < minN {
			minKey, minN = k, n
		}
	}
	delete(t.cand, minKey)
	delete(t.dims, minKey)
	t.cand[tenant] = minN + 1
	t.dims[tenant] = dim
	return nil
}

// isHash reports whether tenant looks like an identity hash: at least
// identity.Short's length of lower-case hex digits.
// shortHashLen is the length of identity.Short's tenant labels.
var shortHashLen = len(identity.Short(strings.Repeat("0", 64)))

func isHash(tenant string) bool {
	if len(tenant) < shortHashLen {
		return false
	}
	for i := 0; i < len(tenant); i++ {
		if c := tenant[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// tick starts a new period when the current one is over.
func (t *Tenants) tick(now time.Time) {
	n := now.UnixNano()
	next := t.next.Load()
	if n < next || !t.next.CompareAndSwap(next, n+int64(TenantPeriod)) {
		return
	}
	if next == 0 {
		return // the first request starts the first period
	}
	t.rotate()
}

// rotate chooses the unweighted tenants with series of their own for the
// next period: queued tenants first, then the most active, at most top; the
// others' series are deleted.
func (t *Tenants) rotate() {
	t.mu.Lock()
	defer t.mu.Unlock()
	type entry struct {
		hash, dim string
		n         uint64
		queued    bool
		s         *tenantSeries
	}
	old := *t.series.Load()
	next := make(map[string]*tenantSeries, len(old))
	var entries []entry
	for h, s := range old {
		n := s.active.Swap(0)
		if s.weighted {
			next[h] = s
			continue
		}
		entries = append(entries, entry{hash: h, dim: s.dim, n: n, queued: t.waiting[h].n > 0, s: s})
	}
	for h, n := range t.cand {
		entries = append(entries, entry{hash: h, dim: t.dims[h], n: n, queued: t.waiting[h].n > 0})
	}
	sort.Slice(entries, func(i, j int) bool {
		a, b := entries[i], entries[j]
		if a.queued != b.queued {
			return a.queued
		}
		if a.n != b.n {
			return a.n > b.n
		}
		return a.hash < b.hash
	})
	t.others = 0
	for _, e := range entries {
		keep := t.others < t.top && (e.n > 0 || e.queued)
		switch {
		case keep && e.s != nil:
			next[e.hash] = e.s
		case keep:
			next[e.hash] = t.newSeries(e.hash, e.dim, false)
		case e.s != nil:
			t.deleteSeries(e.s)
			continue
		default:
			continue
		}
		t.others++
	}
	clear(t.cand)
	clear(t.dims)
	t.series.Store(&next)
}

// collectQueued sends a tenant's queued gauges: one per limit type it has
// requests queued for, or, with none queued, a single 0 with an empty
// limit_type, which Prometheus stores without the label (the series an idle
// tenant had before the label existed).
func (t *Tenants) collectQueued(ch chan<- prometheus.Metric, dim, label string, byType *[len(limitTypes)]int) {
	queued := false
	for i, n := range byType {
		if n > 0 {
			queued = true
			ch <- prometheus.MustNewConstMetric(t.queuedDesc, prometheus.GaugeValue, float64(n), dim, label, limitTypes[i])
		}
	}
	if !queued {
		ch <- prometheus.MustNewConstMetric(t.queuedDesc, prometheus.GaugeValue, 0, dim, label, "")
	}
}

// Describe implements prometheus.Collector for the queued and weight gauges.
func (t *Tenants) Describe(ch chan<- *prometheus.Desc) {
	ch <- t.queuedDesc
	ch <- t.weightDesc
}

// Collect implements prometheus.Collector: each tenant with series of its
// own gets its queued requests and weight, the rest are summed under
// OtherTenant (which has no weight).
func (t *Tenants) Collect(ch chan<- prometheus.Metric) {
	t.mu.Lock()
	defer t.mu.Unlock()
	series := *t.series.Load()
	var other [len(tenantDimensions)][len(limitTypes)]int
	for h, w := range t.waiting {
		if series[h] == nil {
			o := &other[dimensionIndex(w.dim)]
			for i, n := range w.byType {
				o[i] += n
			}
		}
	}
	for i, d := range tenantDimensions {
		t.collectQueued(ch, string(d), OtherTenant, &other[i])
	}
	for h, s := range series {
		q := t.waiting[h]
		t.collectQueued(ch, s.dim, s.label, &q.byType)
		w, ok := t.weights.ByTenant[h]
		if !ok {
			w = t.weights.Default
		}
		ch <- prometheus.MustNewConstMetric(t.weightDesc, prometheus.GaugeValue, float64(min(max(w, 1), fairqueue.MaxWeight)), s.label)
	}
}
