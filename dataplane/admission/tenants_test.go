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

package admission

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/dataplane/limiter/limitertest"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// tenantLog records TenantObserver calls.
type tenantLog struct {
	mu     sync.Mutex
	events []string
}

func (l *tenantLog) add(s string) { l.mu.Lock(); l.events = append(l.events, s); l.mu.Unlock() }
func (l *tenantLog) TenantAdmitted(_ time.Time, tenant string, dim identity.Dimension, waited time.Duration) {
	l.add(fmt.Sprintf("admitted %s %s %v", tenant, dim, waited))
}
func (l *tenantLog) TenantRefused(_ time.Time, tenant string, dim identity.Dimension, reason string) {
	l.add(fmt.Sprintf("refused %s %s %s", tenant, dim, reason))
}
func (l *tenantLog) TenantWaiting(tenant string, dim identity.Dimension, limitType string, delta int) {
	l.add(fmt.Sprintf("waiting %s %s for=%s %+d", tenant, dim, limitType, delta))
}

func TestTenantObserverSeesEveryOutcome(t *testing.T) {
	user := identity.Set{User: "h-alice"}
	cases := []struct {
		name     string
		cfg      limiter.Config
		settings Settings
		store    limiter.Store
		exhaust  bool
		budget   time.Duration
		step     time.Duration
		want     []string
	}{{
		name: "admitted at once", cfg: limiter.Config{User: lim(5, time.Second)}, settings: on,
		want: []string{"admitted h-alice user 0s"},
	}, {
		name: "admitted after waiting", cfg: limiter.Config{User: lim(1, time.Second)}, settings: on, exhaust: true,
		budget: 5 * time.Second, step: time.Second,
		want: []string{"waiting h-alice user for=user +1", "waiting h-alice user for=user -1", "admitted h-alice user 1s"},
	}, {
		name: "refused by the queue", cfg: limiter.Config{User: lim(1, time.Minute)}, settings: on, exhaust: true,
		budget: time.Second,
		want:   []string{"waiting h-alice user for=user +1", "waiting h-alice user for=user -1", "refused h-alice user wait_exceeds_budget"},
	}, {
		name: "store unavailable", cfg: limiter.Config{User: lim(1, time.Second)}, settings: on, store: limitertest.DownStore{},
		want: []string{"refused h-alice user unavailable"},
	}, {
		name: "fair queuing off: no tenant, nothing observed", cfg: limiter.Config{User: lim(1, time.Second)},
		settings: Settings{Enabled: false},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{cfg: tc.cfg, settings: tc.settings, store: tc.store})
			r := Request{Identity: user, TotalTimeout: tc.budget}
			if tc.exhaust {
				e.exhaust(t, r)
			}
			log := &tenantLog{}
			e.c.SetTenantObserver(log)
			ch := e.admitAsync(context.Background(), r)
			if tc.step > 0 {
				testutil.Eventually(t, "the request to queue", func() bool { return e.depth() == 1 })
				e.clk.Step(tc.step)
			}
			receive(t, ch)
			if !reflect.DeepEqual(log.events, tc.want) {
				t.Fatalf("observed %q, want %q", log.events, tc.want)
			}
		})
	}
}

// BenchmarkAdmitFastPathTenantMetrics is BenchmarkAdmitFastPath with the
// per-tenant metrics installed; compare the two in one run for the ratio.
func BenchmarkAdmitFastPathTenantMetrics(b *testing.B) {
	c, r, reg := newFastPath(b)
	tm, err := metrics.NewTenants(reg, 0)
	if err != nil {
		b.Fatal(err)
	}
	c.SetTenantObserver(tm)
	benchAdmit(b, c, r)
}

// TestTenantReasonsReachTheMetrics keeps the per-tenant metrics' reason set
// in step with the reasons admission reports (metrics cannot import them).
func TestTenantReasonsReachTheMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	tm, err := metrics.NewTenants(reg, 0)
	if err != nil {
		t.Fatal(err)
	}
	h := identity.Hash([]byte("0123456789abcdef0123456789abcdef"), "alice")
	for _, reason := range []string{TenantRateLimited, TenantUnavailable, string(fairqueue.ReasonWaitExceedsBudget)} {
		tm.TenantRefused(time.Unix(1000, 0), h, identity.DimensionUser, reason)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range families {
		if f.GetName() != metrics.TenantRefusedName {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					got[l.GetValue()] = true
				}
			}
		}
	}
	for _, want := range []string{TenantRateLimited, TenantUnavailable, string(fairqueue.ReasonWaitExceedsBudget)} {
		if !got[want] {
			t.Errorf("refusal reason %q is not exported (got %v)", want, got)
		}
	}
}
