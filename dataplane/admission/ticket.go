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
	"time"

	"github.com/fairqueue/fairqueue/dataplane/capacity"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

// Reserver estimates a request's token reservation: its prompt tokens plus
// its output cap (usage.Account implements it).
type Reserver interface {
	Reservation() int64
}

// Ticket is an admitted request's hold on what admission charged it: its
// identity tokens, its token reservation, and the cost a fair queue charged
// its tenant by tokens. The caller dispatches the request to a backend (the
// backend pool charges the per-backend limit through TakeBackend), or gives
// the ticket back with NoBackend when none can take it, and ends it with
// Done once the response has ended.
//
// Done and NoBackend take effect once however often they are called, so a
// single deferred Done right after Begin settles every ending exactly once:
// a complete response, a client that left or cancelled, an upstream that
// broke, a total timeout, a panic. A Ticket is used by one request and must
// not be copied once Begin has filled it.
type Ticket struct {
	c      *Controller
	r      Request
	settle settlement
	// done is set by the first Done; refunded by the first NoBackend.
	done, refunded atomic.Bool
	// slot is the backend slot of capacity mode (capacity.go) when one was
	// free at once, waited the one taken after a wait in the fair queue;
	// Done and NoBackend release them. backend is the backend chosen (a
	// slot's, or one without a capacity entry), "" none.
	slot    capacity.Slot
	waited  *capacity.Slot
	backend string
}

// Begin decides r as Admit does and, when it is admitted, makes t the
// request's ticket. A refused request is charged nothing to give back: t
// stays empty and its Done does nothing.
func (c *Controller) Begin(ctx context.Context, r Request, t *Ticket) (dec Decision) {
	arrival := c.clk.Now()
	// The ticket keeps r as admission resolved it: a capacity wait charges
	// its estimated reservation when the fair queue charges tokens.
	c.admit(ctx, arrival, &r, &dec)
	if dec.Allowed {
		t.c, t.r, t.settle = c, r, dec.settle
		dec.settle = settlement{}
		if r.Capacity.Tracker != nil {
			c.takeSlot(ctx, arrival, t, &dec)
		}
	}
	c.observe(arrival, &r, &dec)
	return dec
}

// Settles reports whether Done has a reservation to settle: without one the
// caller may skip measuring the response.
func (t *Ticket) Settles() bool { return t.settle.reserved > 0 || t.settle.accounted > 0 }

// NoBackend gives back the identity tokens of a request that no backend can
// take (SPEC section 2: no token is lost to a refusal), and returns its
// immediate 429, retryable after retry: backend capacity is never queued, so
// it carries no queue details. Its reservation is settled at nothing by Done.
func (t *Ticket) NoBackend(retry time.Duration) Decision {
	t.endSlot((*capacity.Slot).Withdraw)
	if t.c == nil {
		return Decision{}
	}
	if t.refunded.CompareAndSwap(false, true) {
		if err := t.c.refund(t.r); err != nil {
			// The tokens refill on their own.
			t.c.log.V(1).Info("Refunding identity tokens failed", "error", err.Error(),
				"apiKey", identity.Short(t.r.Identity.APIKey), "user", identity.Short(t.r.Identity.User))
		}
	}
	return t.c.backendRefusal(retry)
}

// Done ends the ticket with used, the tokens the request used (0 when it
// reached no backend): the token buckets are charged or refunded the
// difference from the reservation, and a queue that charged the tenant by
// tokens is corrected the same way. Only the first call counts. A store that
// cannot take the settlement is logged, never fails the request: the buckets
// then keep the reservation, which refills on its own.
func (t *Ticket) Done(used int64) {
	t.endSlot((*capacity.Slot).Release)
	if t.c == nil || !t.done.CompareAndSwap(false, true) {
		return
	}
	if err := t.c.settle(t.r, &t.settle, used); err != nil {
		t.c.log.V(1).Info("Settling a token reservation failed", "error", err.Error(),
			"apiKey", identity.Short(t.r.Identity.APIKey), "user", identity.Short(t.r.Identity.User))
	}
}
