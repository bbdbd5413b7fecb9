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
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

var hashKey = []byte("0123456789abcdef0123456789abcdef")

func tenantHash(name string) string { return identity.Hash(hashKey, name) }

// tenantLabels returns the tenant label values of name's series in reg.
func tenantLabels(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range series(t, reg, name) {
		for _, l := range m.GetLabel() {
			if l.GetName() == "tenant" {
				out[l.GetValue()] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return out
}

func newTenants(t *testing.T, top int) (*Tenants, *prometheus.Registry) {
	t.Helper()
	return register(t, func(reg prometheus.Registerer) (*Tenants, error) { return NewTenants(reg, top) })
}

func TestTenantSeriesAreBoundedUnderChurn(t *testing.T) {
	const top, weighted, churn = 5, 3, 10000
	m, reg := newTenants(t, top)
	w := fairqueue.Weights{Default: 1, ByTenant: map[string]int{}}
	for i := range weighted {
		w.ByTenant[tenantHash(fmt.Sprintf("vip-%d", i))] = 10
	}
	m.SetWeights(w, identity.DimensionUser)
	start := time.Unix(1000, 0)
	heavy := tenantHash("heavy")
	maxSeries := 0
	for i := range churn {
		now := start.Add(time.Duration(i) * 30 * time.Millisecond) // 300s: five periods
		m.TenantAdmitted(now, tenantHash(fmt.Sprintf("one-off-%d", i)), identity.DimensionUser, 0)
		if i%3 == 0 {
			m.TenantRefused(now, tenantHash(fmt.Sprintf("refused-%d", i)), identity.DimensionUser, "queue_full")
		}
		if i > churn/2 {
			m.TenantAdmitted(now, heavy, identity.DimensionUser, time.Millisecond)
		}
		if i%500 == 0 {
			maxSeries = max(maxSeries, len(tenantLabels(t, reg, TenantGrantsName)), len(tenantLabels(t, reg, TenantRefusedName)))
		}
	}
	t.Logf("at most %d tenant label values under a churn of %d tenants (%d weighted, top %d)", maxSeries, churn, weighted, top)
	// Every weighted tenant, at most top others, and "other".
	if limit := weighted + top + 1; maxSeries > limit {
		t.Fatalf("%d tenant label values under a churn of %d tenants, want at most %d", maxSeries, churn, limit)
	}
	if n := len(m.cand); n > 4*top {
		t.Fatalf("%d candidates tracked, want at most %d", n, 4*top)
	}
	grants := tenantLabels(t, reg, TenantGrantsName)
	for name := range w.ByTenant {
		if _, ok := grants[identity.Short(name)]; !ok {
			t.Errorf("weighted tenant %s has no grants series", identity.Short(name))
		}
	}
	if _, ok := grants[identity.Short(heavy)]; !ok {
		t.Errorf("the most active tenant %s has no series of its own after a period among %d one-off tenants: %v", identity.Short(heavy), churn, grants)
	}
	var total float64
	for _, v := range grants {
		total += v
	}
	if total < churn {
		t.Errorf("grants over all series = %v, want at least the %d one-off admissions (none lost in folding)", total, churn)
	}
	weights := tenantLabels(t, reg, TenantWeightName)
	for name := range w.ByTenant {
		if weights[identity.Short(name)] != 10 {
			t.Errorf("weight of %s = %v, want 10", identity.Short(name), weights[identity.Short(name)])
		}
	}
	if weights[identity.Short(heavy)] != 1 {
		t.Errorf("weight of an unweighted tenant = %v, want the default 1", weights[identity.Short(heavy)])
	}
}

func TestTenantSeriesOfTenantsThatLeftAreDeleted(t *testing.T) {
	m, reg := newTenants(t, 10)
	m.SetWeights(fairqueue.Weights{Default: 1}, identity.DimensionAPIKey)
	now := time.Unix(1000, 0)
	gone, stays := tenantHash("gone"), tenantHash("stays")
	m.TenantAdmitted(now, gone, identity.DimensionAPIKey, 0)
	m.TenantAdmitted(now, stays, identity.DimensionAPIKey, 0)
	if got := tenantLabels(t, reg, TenantGrantsName); got[identity.Short(gone)] != 1 || got[identity.Short(stays)] != 1 {
		t.Fatalf("grants = %v, want one for each tenant under its hash prefix", got)
	}
	// One period with only "stays", then the next period starts.
	m.TenantAdmitted(now.Add(TenantPeriod), stays, identity.DimensionAPIKey, 0)
	m.TenantAdmitted(now.Add(2*TenantPeriod), stays, identity.DimensionAPIKey, 0)
	got := tenantLabels(t, reg, TenantGrantsName)
	if _, ok := got[identity.Short(gone)]; ok {
		t.Errorf("series of a tenant idle for a whole period still exported: %v", got)
	}
	if got[identity.Short(stays)] != 3 {
		t.Errorf("grants of the active tenant = %v, want 3", got[identity.Short(stays)])
	}
	if w := tenantLabels(t, reg, TenantWeightName); len(w) != 1 {
		t.Errorf("weight series = %v, want only the active tenant's", w)
	}
}

func TestTenantQueuedAndStarvedTenantKeepsItsSeries(t *testing.T) {
	m, reg := newTenants(t, 1)
	m.SetWeights(fairqueue.Weights{Default: 1}, identity.DimensionUser)
	now := time.Unix(1000, 0)
	busy, starved := tenantHash("busy"), tenantHash("starved")
	m.TenantAdmitted(now, busy, identity.DimensionUser, 0) // takes the only slot
	m.TenantWaiting(starved, identity.DimensionUser, "user", 1)
	m.TenantWaiting(starved, identity.DimensionUser, "user", 1)
	if got := tenantLabels(t, reg, TenantQueuedName); got[OtherTenant] != 2 {
		t.Fatalf("queued = %v, want 2 under other while the top is full", got)
	}
	for i := range 100 {
		m.TenantAdmitted(now.Add(TenantPeriod+time.Duration(i)), busy, identity.DimensionUser, 0)
	}
	got := tenantLabels(t, reg, TenantQueuedName)
	if got[identity.Short(starved)] != 2 || got[OtherTenant] != 0 {
		t.Fatalf("queued = %v, want the queued tenant's 2 requests under its own prefix: queued tenants are preferred for the top", got)
	}
	m.TenantWaiting(starved, identity.DimensionUser, "user", -1)
	m.TenantWaiting(starved, identity.DimensionUser, "user", -1)
	if got := tenantLabels(t, reg, TenantQueuedName); got[identity.Short(starved)] != 0 {
		t.Fatalf("queued after both left = %v, want 0", got)
	}
}

func TestTenantLabelsNeverHoldARawIdentityOrFullHash(t *testing.T) {
	m, reg := newTenants(t, 0)
	now := time.Unix(1000, 0)
	m.TenantAdmitted(now, "alice-raw", identity.DimensionUser, 0) // a caller's mistake: not a hash
	h := tenantHash("bob")
	m.TenantRefused(now, h, "bogus-dimension", "queue_full")
	m.TenantRefused(now, h, identity.DimensionUser, "some reason with bob in it")
	eachLabel(t, reg, func(family string, l *dto.LabelPair) {
		if strings.Contains(l.GetValue(), "bob") || l.GetValue() == h || l.GetValue() == "alice-raw" || len(l.GetValue()) > 17 {
			t.Errorf("%s has label %s=%q: an identity or a full hash", family, l.GetName(), l.GetValue())
		}
	})
	if got := testutil.ToFloat64(m.refused.WithLabelValues("user", identity.Short(h), unknownLabel)); got != 1 {
		t.Errorf("refusal with an unknown reason counted %v times under reason=unknown, want 1", got)
	}
}

// BenchmarkTenantAdmitted is the per-request cost of the per-tenant metrics
// for a tenant with its own series; BenchmarkQueueGranted, the queue-wide
// observer every queued grant already pays, is its reference in the same run.
func BenchmarkTenantAdmitted(b *testing.B) {
	m, err := NewTenants(prometheus.NewRegistry(), 0)
	if err != nil {
		b.Fatal(err)
	}
	h := tenantHash("alice")
	now := time.Unix(1000, 0)
	m.TenantAdmitted(now, h, identity.DimensionUser, 0)
	b.ReportAllocs()
	for b.Loop() {
		m.TenantAdmitted(now, h, identity.DimensionUser, 0)
	}
}

func BenchmarkQueueGranted(b *testing.B) {
	m, err := New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		m.Granted("user", "model", "", 0)
	}
}

func TestTenantsAreSafeForConcurrentUse(t *testing.T) {
	m, reg := newTenants(t, 3)
	start := time.Unix(1000, 0)
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 2000 {
				now := start.Add(time.Duration(i) * 100 * time.Millisecond) // crosses periods
				h := tenantHash(fmt.Sprintf("t-%d-%d", g, i%20))
				m.TenantWaiting(h, identity.DimensionUser, "user", 1)
				m.TenantAdmitted(now, h, identity.DimensionUser, time.Millisecond)
				m.TenantWaiting(h, identity.DimensionUser, "user", -1)
				m.TenantRefused(now, h, identity.DimensionUser, "queue_full")
				if i%500 == 0 {
					m.SetWeights(fairqueue.Weights{Default: 1, ByTenant: map[string]int{h: 2}}, identity.DimensionUser)
				}
			}
		}()
	}
	for range 20 {
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("observers did not finish within 30s")
		}
	}
	// Every queued request left: no tenant, nor "other", shows one queued.
	for label, n := range tenantLabels(t, reg, TenantQueuedName) {
		if n != 0 {
			t.Errorf("queued of %s after every request left = %v, want 0", label, n)
		}
	}
}

func TestTenantQueuedByLimitType(t *testing.T) {
	m, reg := newTenants(t, 0)
	m.SetWeights(fairqueue.Weights{Default: 1}, identity.DimensionUser)
	now := time.Unix(1000, 0)
	busy, idle := tenantHash("busy"), tenantHash("idle")
	m.TenantAdmitted(now, idle, identity.DimensionUser, 0)
	m.TenantWaiting(busy, identity.DimensionUser, "capacity", 1)
	m.TenantWaiting(busy, identity.DimensionUser, "capacity", 1)
	m.TenantWaiting(busy, identity.DimensionUser, "model", 1)
	m.TenantWaiting(busy, identity.DimensionUser, "a-raw-value", 1) // never a label: "unknown"
	type key struct{ tenant, limitType string }
	queued := func() map[key]float64 {
		out := map[key]float64{}
		for _, s := range series(t, reg, TenantQueuedName) {
			out[key{label(s, "tenant"), label(s, "limit_type")}] += s.GetGauge().GetValue()
		}
		return out
	}
	want := map[key]float64{
		{identity.Short(busy), "capacity"}: 2, {identity.Short(busy), "model"}: 1, {identity.Short(busy), "unknown"}: 1,
		// A tenant with nothing queued keeps one 0 without the label.
		{identity.Short(idle), ""}: 0,
		{OtherTenant, ""}:          0,
	}
	if got := queued(); !maps.Equal(got, want) {
		t.Fatalf("queued = %v, want %v", got, want)
	}
	for _, lt := range []string{"capacity", "capacity", "model", "a-raw-value"} {
		m.TenantWaiting(busy, identity.DimensionUser, lt, -1)
	}
	want = map[key]float64{{identity.Short(busy), ""}: 0, {identity.Short(idle), ""}: 0, {OtherTenant, ""}: 0}
	if got := queued(); !maps.Equal(got, want) {
		t.Fatalf("queued after every request left = %v, want %v", got, want)
	}
}
