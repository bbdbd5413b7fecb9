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
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// modelCounter counts model-bucket admissions, so the test knows when a
// freed token has been granted.
type modelCounter struct{ allowed atomic.Int64 }

func (m *modelCounter) ObserveDecision(d limiter.Dimension, o limiter.Outcome) {
	if d == limiter.DimensionModel && o == limiter.OutcomeAllowed {
		m.allowed.Add(1)
	}
}

// TestWeightedShareOfASharedLimit backlogs two tenants on one model limit,
// alice at weight 3 and bob at weight 1, and checks that freed tokens go to
// them 3:1 through the real limiter and queue.
func TestWeightedShareOfASharedLimit(t *testing.T) {
	const perTenant, grants = 12, 12
	clk := testingclock.NewFakeClock(t0)
	counter := &modelCounter{}
	lim, err := limiter.New(limiter.Config{Model: lim(10, time.Second)}, limiter.Options{Observer: counter})
	if err != nil {
		t.Fatal(err)
	}
	q := fairqueue.New(clk, fairqueue.Bounds{MaxWait: time.Hour}, fairqueue.Weights{Default: 1, ByTenant: map[string]int{alice.User: 3}}, nil)
	t.Cleanup(q.Close)
	c, err := New(clk, lim, q, on, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	e := &env{clk: clk, lim: lim, queue: q, c: c}
	e.exhaust(t, Request{Model: "m"})

	results := make(chan identity.Set, 2*perTenant)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < perTenant; i++ {
		for _, id := range []identity.Set{alice, bob} {
			go func() {
				if d := c.Admit(ctx, Request{Identity: id, Model: "m"}); d.Allowed {
					results <- id
				} else {
					results <- identity.Set{}
				}
			}()
		}
	}
	testutil.Eventually(t, "both tenants to be backlogged", func() bool { return e.depth() == 2*perTenant })

	got := map[string]int{}
	base := counter.allowed.Load()
	for k := 1; k <= grants; k++ {
		clk.Step(100 * time.Millisecond)
		// One token: one admission, then the heads that are due re-check and
		// re-queue; step again only once the queue has settled.
		testutil.Eventually(t, "one grant", func() bool {
			return counter.allowed.Load() == base+int64(k) && q.Settled()
		})
		got[recv(t, "an admission", results).User]++
	}
	t.Logf("of %d grants alice got %d, bob %d", grants, got[alice.User], got[bob.User])
	if got[alice.User] < 8 || got[bob.User] < 2 || got[alice.User]+got[bob.User] != grants {
		t.Fatalf("of %d grants alice got %d and bob %d, want about 9 and 3 (weights 3:1)", grants, got[alice.User], got[bob.User])
	}
	cancel()
	for i := grants; i < 2*perTenant; i++ {
		if id := recv(t, "a cancelled request's answer", results); id != (identity.Set{}) {
			t.Fatalf("a request was admitted after the test stopped granting: %+v", id)
		}
	}
}
