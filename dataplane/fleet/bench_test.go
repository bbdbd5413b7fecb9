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
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/admission"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// newBenchController returns an admission controller on the in-memory store
// with limits too large to refuse, and, when gated, a fleet Pacer whose gate
// for the tenant is closed at a rate too high to hold anything back, so
// every request takes the fast path through Arrive, Allow and Done.
func newBenchController(tb testing.TB, gated bool) (*admission.Controller, admission.Request) {
	tb.Helper()
	huge := &limiter.Limit{Requests: 1 << 40, Period: time.Second}
	cfg := limiter.Config{User: huge, Model: huge}
	lim, err := limiter.New(cfg, limiter.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	clk := clock.RealClock{}
	q := fairqueue.New(clk, fairqueue.Bounds{}, fairqueue.Weights{Default: 1}, nil)
	tb.Cleanup(q.Close)
	c, err := admission.New(clk, lim, q, admission.Settings{Enabled: true}, logr.Discard())
	if err != nil {
		tb.Fatal(err)
	}
	req := admission.Request{Identity: identity.Set{User: "tenant"}, Model: "m"}
	if gated {
		p, err := New(clk, Options{Replica: "r", Exchange: NewMemoryExchange(clk)}, logr.Discard())
		if err != nil {
			tb.Fatal(err)
		}
		p.SetLimits(cfg)
		p.Arrive("tenant", "m")
		p.mu.Lock()
		p.keys["m"].tenants[claimant{tenant: "tenant"}].rate = 1e12
		p.mu.Unlock()
		c.SetGate(p)
	}
	c.Admit(context.Background(), req) // create the buckets
	return c, req
}

func TestGatedFastPathDoesNotAllocate(t *testing.T) {
	c, req := newBenchController(t, true)
	ctx := context.Background()
	if allocs := testing.AllocsPerRun(1000, func() {
		if !c.Admit(ctx, req).Allowed {
			t.Fatal("refused")
		}
	}); allocs != 0 {
		t.Fatalf("a gated admission allocates %v times, want 0", allocs)
	}
}

// BenchmarkGatedAdmit measures an admission without a gate and then through
// the fleet gate, and reports the gated cost as a ratio to the ungated one
// measured in the same run ("x-ungated").
func BenchmarkGatedAdmit(b *testing.B) {
	ctx := context.Background()
	var base float64
	for _, gated := range []bool{false, true} {
		name := "ungated"
		if gated {
			name = "gated"
		}
		b.Run(name, func(b *testing.B) {
			c, req := newBenchController(b, gated)
			b.ReportAllocs()
			for b.Loop() {
				c.Admit(ctx, req)
			}
			perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if !gated {
				base = perOp
			} else if base > 0 {
				b.ReportMetric(perOp/base, "x-ungated")
			}
		})
	}
}
