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
	"sync"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/capacity"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// capSpacing is the time between slots coming free in these tests: on e's
// fake clock, a slot taken is released after capSpacing, so the spacing
// assumed before the first release and the one measured after agree.
const capSpacing = capacity.DefaultReleaseSpacing

// oneSlot returns a tracker on e's clock with one backend of one slot that
// wakes e's capacity waiters when it frees, and the capacity part of a
// request for it.
func oneSlot(t *testing.T, e *env) Capacity {
	t.Helper()
	tr := capacity.New(capacity.Options{OnRoom: func(string) { e.c.WakeCapacity() }, Clock: e.clk})
	t.Cleanup(tr.Close)
	if err := tr.Apply([]capacity.Backend{{Name: "a", MaxInFlight: 1}}, 0); err != nil {
		t.Fatal(err)
	}
	return Capacity{Tracker: tr}
}

// capacityRefused returns rate_limit_fair_queue_refused_total summed over
// the series of limit_type capacity and reason.
func capacityRefused(t *testing.T, e *env, reason fairqueue.Reason) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != metrics.QueueRefusedName {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["limit_type"] == LimitTypeCapacity && labels["reason"] == string(reason) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestCapacityRefusedAtOnceIsCountedAndToldSuccessiveSlots: a request that
// cannot wait for a slot (fair queuing off, or no identity) is refused at
// once with limit_type capacity, counted in the queue's refused series, and
// told when a slot is expected: refusals close together the successive
// slots, so their clients do not all come back at once to find one.
func TestCapacityRefusedAtOnceIsCountedAndToldSuccessiveSlots(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings Settings
		id       identity.Set
		reason   fairqueue.Reason
	}{
		{name: "fair queuing off", settings: Settings{TenantDimension: identity.DimensionUser}, id: alice, reason: fairqueue.ReasonDisabled},
		{name: "no identity", settings: on, reason: fairqueue.ReasonNoIdentity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{settings: tc.settings})
			r := Request{Identity: tc.id, Model: "m", Capacity: oneSlot(t, e)}
			var holder Ticket
			if d := e.c.Begin(context.Background(), r, &holder); !d.Allowed {
				t.Fatalf("first request: %+v, want the free slot", d)
			}
			defer holder.Done(0)
			for i, want := range []time.Duration{capSpacing, 2 * capSpacing, 3 * capSpacing} {
				var tk Ticket
				d := e.c.Begin(context.Background(), r, &tk)
				if d.Allowed || d.Status != StatusTooManyRequests || d.LimitType != LimitTypeCapacity || d.RetryAfter != want {
					t.Fatalf("refusal %d: %+v; want 429 limit_type capacity, retry after %v", i+1, d, want)
				}
			}
			if got := capacityRefused(t, e, tc.reason); got != 3 {
				t.Errorf("refused_total{limit_type=capacity,reason=%s} = %v, want 3", tc.reason, got)
			}
		})
	}
}

// capWaits records the waits of the admitted requests told a TenantObserver.
type capWaits struct {
	mu      sync.Mutex
	waits   []time.Duration
	refused []string
}

func (o *capWaits) TenantAdmitted(_ time.Time, _ string, _ identity.Dimension, waited time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.waits = append(o.waits, waited)
}
func (o *capWaits) TenantRefused(_ time.Time, _ string, _ identity.Dimension, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.refused = append(o.refused, reason)
}
func (o *capWaits) TenantWaiting(string, identity.Dimension, string, int) {}

// TestCapacityWaitEstimateIsTheSlotsAhead: a request waiting for a slot is
// estimated at the slots it waits for (the next, then one per request ahead
// by its tenant's share), on a fake clock where the waits are exact, and
// its tenant is told the time it waited for the slot.
func TestCapacityWaitEstimateIsTheSlotsAhead(t *testing.T) {
	e := newEnv(t, envOpts{settings: on, bounds: fairqueue.Bounds{MaxWait: time.Hour}})
	obs := &capWaits{}
	e.c.SetTenantObserver(obs)
	cp := oneSlot(t, e)
	bob := identity.Set{User: "user-bob"}
	holder := new(Ticket)
	if d := e.c.Begin(context.Background(), Request{Identity: alice, Model: "m", Capacity: cp}, holder); !d.Allowed {
		t.Fatalf("first request: %+v, want the free slot", d)
	}
	type result struct {
		d  Decision
		tk *Ticket
	}
	results := make(chan result, 2)
	begin := func(id identity.Set) {
		tk := new(Ticket)
		results <- result{e.c.Begin(context.Background(), Request{Identity: id, Model: "m", Capacity: cp}, tk), tk}
	}
	// Alice's second request waits for the next slot; bob's, of another
	// tenant of equal weight, for the one after (alice's tenant is served
	// first).
	go begin(alice)
	testutil.Eventually(t, "alice's request to wait", func() bool { return e.depth() == 1 })
	go begin(bob)
	testutil.Eventually(t, "bob's request to wait", func() bool { return e.depth() == 2 })
	for range 2 {
		testutil.Eventually(t, "the queue to settle", e.queue.Settled)
		e.clk.Step(capSpacing)
		testutil.Eventually(t, "the queue to settle", e.queue.Settled)
		holder.Done(0) // the slot frees: the next waiter takes it
		got := recv(t, "a waiter's decision", results)
		holder = got.tk
		q := got.d.Queue
		if !got.d.Allowed || !q.Queued {
			t.Fatalf("waiter: %+v, want admitted after waiting", got.d)
		}
		if q.Estimate < q.Waited/2 || q.Estimate > 2*q.Waited {
			t.Errorf("waited %v, estimated %v: want the estimate within a factor of 2", q.Waited, q.Estimate)
		}
	}
	holder.Done(0)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	// Each request is reported once, when it holds its slot: the holder at
	// once, the waiters with the time they waited for theirs.
	if len(obs.waits) != 3 || obs.waits[0] != 0 || obs.waits[1] != capSpacing || obs.waits[2] != 2*capSpacing {
		t.Errorf("admitted waits told the tenant observer = %v, want [0s %v %v]", obs.waits, capSpacing, 2*capSpacing)
	}
}

// TestCapacityQueueRefusalsAreToldSuccessiveSlots: requests refused because
// their tenant's queue for a slot is full are told when successive places
// free, one slot spacing apart from the next slot on, never less than it and
// never beyond their budget.
func TestCapacityQueueRefusalsAreToldSuccessiveSlots(t *testing.T) {
	e := newEnv(t, envOpts{settings: on, bounds: fairqueue.Bounds{MaxQueueDepthPerTenant: 1, MaxWait: capSpacing * 5 / 2}})
	cp := oneSlot(t, e)
	r := Request{Identity: alice, Model: "m", Capacity: cp}
	holder := new(Ticket)
	if d := e.c.Begin(context.Background(), r, holder); !d.Allowed {
		t.Fatalf("first request: %+v, want the free slot", d)
	}
	waiter := make(chan Decision, 1)
	go func() {
		tk := new(Ticket)
		d := e.c.Begin(context.Background(), r, tk)
		tk.Done(0)
		waiter <- d
	}()
	testutil.Eventually(t, "the second request to wait", func() bool { return e.depth() == 1 })
	// The waiter's place frees with the next slot; each refused request
	// after it is told the place after, up to the budget of 2.5 spacings.
	for i, want := range []time.Duration{capSpacing, 2 * capSpacing, capSpacing * 5 / 2} {
		var tk Ticket
		d := e.c.Begin(context.Background(), r, &tk)
		if d.Allowed || d.Queue.Reason != fairqueue.ReasonTenantQueueFull || d.LimitType != LimitTypeCapacity || d.RetryAfter != want {
			t.Fatalf("refusal %d: %+v; want tenant_queue_full for capacity, told %v", i+1, d, want)
		}
	}
	holder.Done(0)
	if d := recv(t, "the waiter's decision", waiter); !d.Allowed {
		t.Errorf("waiter: %+v, want admitted when the slot freed", d)
	}
}

// TestCapacityRefusalIsNoTenantGrant: a request that passed its rate limits
// and was then refused a backend slot is reported to the tenant observer as
// a refusal with the fair queue's reason, never as an admitted request.
func TestCapacityRefusalIsNoTenantGrant(t *testing.T) {
	// The budget (maxWait) is shorter than the time to the next slot, so the
	// second request is refused at arrival.
	e := newEnv(t, envOpts{settings: on, bounds: fairqueue.Bounds{MaxWait: capSpacing / 2}})
	obs := &capWaits{}
	e.c.SetTenantObserver(obs)
	cp := oneSlot(t, e)
	holder := new(Ticket)
	if d := e.c.Begin(context.Background(), Request{Identity: alice, Model: "m", Capacity: cp}, holder); !d.Allowed {
		t.Fatalf("first request: %+v, want the free slot", d)
	}
	defer holder.Done(0)
	d := e.c.Begin(context.Background(), Request{Identity: alice, Model: "m", Capacity: cp}, new(Ticket))
	if d.Allowed || d.LimitType != LimitTypeCapacity || d.Queue.Reason != fairqueue.ReasonWaitExceedsBudget {
		t.Fatalf("second request: %+v, want refused for capacity, wait_exceeds_budget", d)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.waits) != 1 || len(obs.refused) != 1 || obs.refused[0] != string(fairqueue.ReasonWaitExceedsBudget) {
		t.Errorf("tenant observer told %d admitted and refusals %v, want 1 admitted and [%s]",
			len(obs.waits), obs.refused, fairqueue.ReasonWaitExceedsBudget)
	}
}

// TestPreAuthRefusalIsNoTenantDecision: a request refused by the
// pre-authentication buckets (global, client) is not reported to the tenant
// observer: that refusal says nothing about its tenant.
func TestPreAuthRefusalIsNoTenantDecision(t *testing.T) {
	e := newEnv(t, envOpts{cfg: limiter.Config{Global: lim(1, time.Second)}, settings: on})
	obs := &capWaits{}
	e.c.SetTenantObserver(obs)
	if d := e.c.Admit(context.Background(), Request{Identity: alice}); !d.Allowed {
		t.Fatalf("first request: %+v, want admitted", d)
	}
	if d := e.c.Admit(context.Background(), Request{Identity: alice}); d.Allowed || d.LimitType != "global" {
		t.Fatalf("second request: %+v, want refused by the global bucket", d)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.waits) != 1 || len(obs.refused) != 0 {
		t.Errorf("tenant observer told %d admitted and refusals %v, want 1 admitted and none", len(obs.waits), obs.refused)
	}
}
