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
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

func newMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m, reg
}

func TestQueueMetricsMatchTheSpec(t *testing.T) {
	m, reg := newMetrics(t)
	m.QueueChanged(3, 2)
	m.Granted("user", "model", "", 20*time.Millisecond)
	m.Granted("user", "capacity", "", 2*time.Second)
	m.Granted("team", "model", "", 0)
	m.Refused("apiKey", "model", "", fairqueue.ReasonTenantQueueFull)
	m.Refused("user", "capacity", "", fairqueue.ReasonWaitExceedsBudget)
	m.Refused("user", "capacity", "", fairqueue.ReasonWaitExceedsBudget)

	const want = `
# HELP rate_limit_fair_queue_depth Requests held in the fair queues now, by priority band.
# TYPE rate_limit_fair_queue_depth gauge
rate_limit_fair_queue_depth{band=""} 3
# HELP rate_limit_fair_queue_tenants Tenant queues tracked now.
# TYPE rate_limit_fair_queue_tenants gauge
rate_limit_fair_queue_tenants 2
# HELP rate_limit_fair_queue_grants_total Queued requests admitted, by what they waited for (limit_type).
# TYPE rate_limit_fair_queue_grants_total counter
`
	var b strings.Builder
	b.WriteString(want)
	// Each limit type's series appear on its first event, for every tenant
	// dimension.
	for _, d := range []string{"apiKey", "team", "user"} {
		for _, lt := range []string{"capacity", "model"} {
			v := map[string]string{"team/model": "1", "user/model": "1", "user/capacity": "1"}[d+"/"+lt]
			if v == "" {
				v = "0"
			}
			fmt.Fprintf(&b, "rate_limit_fair_queue_grants_total{band=\"\",limit_type=%q,tenant_dimension=%q} %s\n", lt, d, v)
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(b.String()), QueueDepthName, QueueTenantsName, QueueGrantsName); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		labels []string
		want   float64
	}{
		{[]string{"apiKey", "tenant_queue_full", "model", ""}, 1},
		{[]string{"user", "wait_exceeds_budget", "capacity", ""}, 2},
		{[]string{"user", "wait_exceeds_budget", "model", ""}, 0},
		{[]string{"user", "queue_full", "capacity", ""}, 0},
	}
	for _, tc := range cases {
		if got := testutil.ToFloat64(m.refused.WithLabelValues(tc.labels...)); got != tc.want {
			t.Errorf("refused_total%v = %v, want %v", tc.labels, got, tc.want)
		}
	}
	if got, want := testutil.CollectAndCount(m.wait), 2*len(tenantDimensions); got != want {
		t.Errorf("wait_seconds has %d series without bands, want %d: one per tenant dimension and limit type seen", got, want)
	}
	// The histogram: user waited 20ms for the model's limit and 2s for
	// capacity, team 0s for the model's limit.
	for _, tc := range []struct {
		dim, limitType string
		count          uint64
		under100ms     uint64
	}{{"user", "model", 1, 1}, {"user", "capacity", 1, 0}, {"team", "model", 1, 1}, {"apiKey", "model", 0, 0}} {
		h := histogram(t, reg, QueueWaitName, tc.dim, tc.limitType)
		if h.GetSampleCount() != tc.count {
			t.Errorf("wait_seconds{%s, %s} count = %d, want %d", tc.dim, tc.limitType, h.GetSampleCount(), tc.count)
		}
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == 0.1 && b.GetCumulativeCount() != tc.under100ms {
				t.Errorf("wait_seconds{%s, %s} le=0.1 = %d, want %d", tc.dim, tc.limitType, b.GetCumulativeCount(), tc.under100ms)
			}
		}
	}
}

// histogram returns the wait histogram series with the given
// tenant_dimension and limit_type, and no band.
func histogram(t *testing.T, reg *prometheus.Registry, name, dim, limitType string) *dto.Histogram {
	t.Helper()
	for _, m := range series(t, reg, name) {
		if label(m, "tenant_dimension") == dim && label(m, "limit_type") == limitType && label(m, "band") == "" {
			return m.GetHistogram()
		}
	}
	t.Fatalf("no %s{tenant_dimension=%q, limit_type=%q}", name, dim, limitType)
	return nil
}

// label returns the value of m's label name, "" when it has none.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestDecisionsAreCountedByDimensionAndOutcome(t *testing.T) {
	m, _ := newMetrics(t)
	m.ObserveDecision(limiter.DimensionUser, limiter.OutcomeAllowed)
	m.ObserveDecision(limiter.DimensionUser, limiter.OutcomeAllowed)
	m.ObserveDecision(limiter.DimensionModel, limiter.OutcomeRefused)
	m.ObserveDecision(limiter.DimensionGlobal, limiter.OutcomeUnavailable)
	m.ObserveDecision(limiter.DimensionModelTokens, limiter.OutcomeRefused)
	m.ObserveDecision(limiter.Dimension(99), limiter.OutcomeAllowed) // ignored, no panic
	if got := testutil.CollectAndCount(m.decisions); got != limiter.NumDimensions*limiter.NumOutcomes {
		t.Fatalf("%d decision series, want every dimension x outcome pre-created", got)
	}
	const want = `
# HELP rate_limit_decisions_total Rate-limit bucket checks by dimension (limit_type) and outcome.
# TYPE rate_limit_decisions_total counter
`
	var b strings.Builder
	b.WriteString(want)
	for _, d := range []string{"api_key", "api_key_tokens", "backend", "client", "global", "model", "model_tokens", "team", "team_tokens", "user", "user_tokens"} {
		for _, o := range []string{"allowed", "refused", "table_full", "unavailable"} {
			v := map[string]string{"user/allowed": "2", "model/refused": "1", "global/unavailable": "1", "model_tokens/refused": "1"}[d+"/"+o]
			if v == "" {
				v = "0"
			}
			b.WriteString(`rate_limit_decisions_total{dimension="` + d + `",outcome="` + o + `"} ` + v + "\n")
		}
	}
	if err := testutil.CollectAndCompare(m.decisions, strings.NewReader(b.String())); err != nil {
		t.Fatal(err)
	}
}

func TestLintAndLabelNames(t *testing.T) {
	m, reg := newMetrics(t)
	// The wait, grant and refusal series of a limit type appear on its first event.
	m.Granted("user", "model", "", time.Millisecond)
	m.Refused("team", "capacity", "batch", fairqueue.ReasonQueueFull)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
	wantLabels := map[string][]string{
		QueueDepthName:   {"band"},
		QueueTenantsName: nil,
		QueueWaitName:    {"tenant_dimension", "limit_type", "band"},
		QueueGrantsName:  {"tenant_dimension", "limit_type", "band"},
		QueueRefusedName: {"tenant_dimension", "reason", "limit_type", "band"},
		DecisionsName:    {"dimension", "outcome"},

		QueueBandIgnoredName: {"reason"},
	}
	seen := map[string]bool{}
	eachFamily(t, reg, func(mf *dto.MetricFamily) {
		want, ok := wantLabels[mf.GetName()]
		if !ok {
			t.Errorf("unexpected metric %s", mf.GetName())
			return
		}
		seen[mf.GetName()] = true
		for _, m := range mf.GetMetric() {
			var got []string
			for _, l := range m.GetLabel() {
				got = append(got, l.GetName())
			}
			if strings.Join(got, ",") != strings.Join(sorted(want), ",") {
				t.Errorf("%s labels %v, want %v", mf.GetName(), got, want)
			}
		}
	})
	for name := range wantLabels {
		if !seen[name] {
			t.Errorf("metric %s not registered", name)
		}
	}
}

func sorted(s []string) []string {
	c := append([]string(nil), s...)
	slices.Sort(c)
	return c
}

func TestNewTwiceOnOneRegistryFails(t *testing.T) {
	_, reg := newMetrics(t)
	if _, err := New(reg); err == nil || !strings.Contains(err.Error(), "once per registry") {
		t.Fatalf("second New = %v, want a duplicate registration error", err)
	}
}

func TestRecordingDoesNotAllocate(t *testing.T) {
	m, _ := newMetrics(t)
	allocs := testing.AllocsPerRun(100, func() {
		m.QueueChanged(1, 1)
		m.Granted("team", "model", "", time.Millisecond)
		m.Refused("user", "capacity", "", fairqueue.ReasonQueueFull)
		m.Granted("team", "capacity", "interactive", time.Millisecond)
		m.Refused("user", "model", "batch", fairqueue.ReasonQueueFull)
		m.BandQueueChanged("batch", 2)
		m.ObserveDecision(limiter.DimensionModel, limiter.OutcomeAllowed)
	})
	if allocs != 0 {
		t.Fatalf("recording allocates %v times per event set, want 0", allocs)
	}
}

func TestUnknownLabelValuesNeverCarryIdentities(t *testing.T) {
	m, reg := newMetrics(t)
	const hash = "433deb45467e4e53dbaba594c88bc3a200f705a2150788c3d11e6040e63e8510"
	m.Granted(hash, "model", "", time.Second)
	m.Refused(hash, "model", "", fairqueue.ReasonQueueFull)
	m.Refused("user", "model", "", fairqueue.Reason(hash))
	m.Granted("user", hash, "", time.Second)
	eachLabel(t, reg, func(family string, l *dto.LabelPair) {
		if strings.Contains(l.GetValue(), hash[:12]) {
			t.Errorf("%s{%s=%q}: an identity reached a label", family, l.GetName(), l.GetValue())
		}
	})
	cases := []struct {
		c      prometheus.Collector
		labels []string
	}{
		{m.grants, []string{"unknown", "model", ""}},
		{m.refused, []string{"unknown", "queue_full", "model", ""}},
		{m.refused, []string{"user", "unknown", "model", ""}},
		{m.grants, []string{"user", "unknown", ""}},
	}
	for _, tc := range cases {
		vec, ok := tc.c.(*prometheus.CounterVec)
		if !ok {
			t.Fatalf("%T is not a CounterVec", tc.c)
		}
		if got := testutil.ToFloat64(vec.WithLabelValues(tc.labels...)); got != 1 {
			t.Errorf("%v = %v, want 1", tc.labels, got)
		}
	}
}

// toldOnly hides Metrics' limiter.MemoryObserver side, so a limiter tells
// it every decision.
type toldOnly struct{ limiter.Observer }

// TestMemoryStoreCountsExportTheSameSeries: decisions a memory store counts
// itself are exported exactly as the same decisions told one by one.
func TestMemoryStoreCountsExportTheSameSeries(t *testing.T) {
	decide := func(obs limiter.Observer) {
		cfg := limiter.Config{
			Global: &limiter.Limit{Requests: 100, Period: time.Hour},
			User:   &limiter.Limit{Requests: 1, Period: time.Hour},
			Model:  &limiter.Limit{Requests: 100, Period: time.Hour},
		}
		// One key per dimension: a second user finds the table full.
		lim, err := limiter.New(cfg, limiter.Options{Store: limiter.NewMemoryStore(1), Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(1000, 0)
		steps := []struct {
			keys    limiter.Keys
			allowed bool
		}{
			{limiter.Keys{User: "a", Model: "m"}, true},
			{limiter.Keys{User: "a", Model: "m"}, false}, // refused by user
			{limiter.Keys{User: "b", Model: "m"}, false}, // user table full
			{limiter.Keys{Model: "m"}, true},
		}
		for i, s := range steps {
			if d, err := lim.TakeIdentity(now, s.keys); err != nil || d.Allowed != s.allowed {
				t.Fatalf("step %d: allowed %v err %v, want allowed %v", i, d.Allowed, err, s.allowed)
			}
		}
		if _, err := lim.TakePreAuth(now, ""); err != nil {
			t.Fatal(err)
		}
	}
	export := func(reg *prometheus.Registry) string {
		var out string
		eachFamily(t, reg, func(mf *dto.MetricFamily) {
			if mf.GetName() == DecisionsName {
				out = mf.String()
			}
		})
		return out
	}
	counted, countedReg := newMetrics(t)
	decide(counted)
	told, toldReg := newMetrics(t)
	decide(toldOnly{told})
	if got, want := export(countedReg), export(toldReg); got != want {
		t.Fatalf("series from the store's counts:\n%s\nwant, as told:\n%s", got, want)
	}
	nonzero := map[string]float64{}
	eachFamily(t, countedReg, func(mf *dto.MetricFamily) {
		if mf.GetName() != DecisionsName {
			return
		}
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v != 0 {
				nonzero[label(m, "dimension")+"/"+label(m, "outcome")] = v
			}
		}
	})
	want := map[string]float64{"global/allowed": 1, "model/allowed": 2, "user/allowed": 1, "user/refused": 1, "user/table_full": 1}
	if !maps.Equal(nonzero, want) {
		t.Fatalf("decisions %v, want %v", nonzero, want)
	}
}
