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
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// TestEqualKeysOfDifferentDimensionsDoNotQueueTogether: a user id equal to
// a team id must not make a request on the user key wait behind requests
// queued on the team key (no-barging keys carry their dimension).
func TestEqualKeysOfDifferentDimensionsDoNotQueueTogether(t *testing.T) {
	e := newEnv(t, envOpts{cfg: limiter.Config{User: lim(10, time.Second), Team: lim(1, time.Second)}, settings: on})
	teamX := identity.Set{User: "bob-hash", Team: "x"}
	userX := identity.Set{User: "x"}
	e.c.Admit(context.Background(), Request{Identity: teamX})
	queued := e.admitAsync(context.Background(), Request{Identity: teamX})
	testutil.Eventually(t, "bob to be queued on team x", func() bool { return e.depth() == 1 })

	got := receive(t, e.admitAsync(context.Background(), Request{Identity: userX}))
	if !got.Allowed || got.Queue.Queued {
		t.Fatalf("user x, unrelated to team x: %+v, want admitted on the fast path", got)
	}
	e.clk.Step(time.Second)
	if got := receive(t, queued); !got.Allowed {
		t.Fatalf("bob: %+v", got)
	}
}

// TestRefusalQuotaDescribesTheRefusingBucket: on a model refusal the
// x-ratelimit-* quota is the model bucket's, not that of another bucket
// that was never charged (whose remaining count would be wrong).
func TestRefusalQuotaDescribesTheRefusingBucket(t *testing.T) {
	e := newEnv(t, envOpts{cfg: limiter.Config{APIKey: &limiter.Limit{Requests: 2, Period: 10 * time.Second}, Model: lim(1, time.Second)}})
	r := Request{Identity: identity.Set{APIKey: "k"}, Model: "m"}
	if d := e.c.Admit(context.Background(), r); !d.Allowed {
		t.Fatalf("first request refused: %+v", d)
	}
	got := e.c.Admit(context.Background(), r)
	want := Decision{Status: StatusTooManyRequests, LimitType: "model", RetryAfter: time.Second, HasQuota: true,
		Quota: limiter.Quota{Dimension: limiter.DimensionModel, Limit: 1, Remaining: 0, Reset: time.Second}}
	if got != want {
		t.Fatalf("model refusal =\n %+v\nwant\n %+v", got, want)
	}
}

// TestQueueRefusalRetryAfter: a request refused because its tenant's queue
// is full is told when that queue is expected to have room (when the head
// is expected to be admitted), not just when the next token arrives, and
// never less than the next token.
func TestQueueRefusalRetryAfter(t *testing.T) {
	// 8 tenants share a model bucket refilling every 125ms; each may hold
	// one queued request.
	e := newEnv(t, envOpts{cfg: limiter.Config{Model: &limiter.Limit{Requests: 8, Period: time.Second, Burst: 1}}, settings: on,
		bounds: fairqueue.Bounds{MaxQueueDepthPerTenant: 1}})
	tenant := func(i int) Request {
		return Request{Identity: identity.Set{User: string(rune('a' + i))}, Model: "m"}
	}
	if d := e.c.Admit(context.Background(), tenant(0)); !d.Allowed {
		t.Fatalf("first request refused: %+v", d)
	}
	var waiting []<-chan Decision
	for i := range 8 {
		waiting = append(waiting, e.admitAsync(context.Background(), tenant(i)))
		testutil.Eventually(t, "the request to queue", func() bool { return e.depth() == i+1 && e.queue.Settled() })
	}
	// The last tenant's head is eighth in line: expected at the next token
	// (125ms) plus seven more grants of 125ms.
	got := receive(t, e.admitAsync(context.Background(), tenant(7)))
	if got.Queue.Reason != fairqueue.ReasonTenantQueueFull || got.RetryAfter != time.Second {
		t.Fatalf("refusal = %+v, want tenant_queue_full with Retry-After 1s", got)
	}
	// The next refusal is told when the tenant's next place frees: one
	// grant of its share (one in eight grants of 125ms) later.
	got = receive(t, e.admitAsync(context.Background(), tenant(7)))
	if got.Queue.Reason != fairqueue.ReasonTenantQueueFull || got.RetryAfter != 2*time.Second {
		t.Fatalf("second refusal = %+v, want tenant_queue_full with Retry-After 2s", got)
	}
	if !got.HasQuota || got.Quota.Dimension != limiter.DimensionModel {
		t.Errorf("refusal quota = %+v, want the model bucket", got.Quota)
	}
	for i := range waiting {
		// The other heads' attempts at this instant must be refused
		// before the clock moves, or one of them could take the next
		// token out of turn.
		testutil.Eventually(t, "the queue to settle", e.queue.Settled)
		e.clk.Step(125 * time.Millisecond)
		if d := receive(t, waiting[i]); !d.Allowed {
			t.Fatalf("waiter %d: %+v", i, d)
		}
	}
}
