package admission

import (
	"context"
	"errors"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/capacity"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// LimitTypeCapacity is the limit_type of a refusal because every candidate
// backend was saturated (SPEC 6b).
const LimitTypeCapacity = capacity.LimitType

// CapacityKind is the fairqueue.LimitKey kind of a wait for backend
// capacity: a key space of its own, after the limiter's dimensions, so no
// barging holds for slots as it does for tokens.
const CapacityKind = uint8(limiter.NumDimensions)

// CapacityKey is the fair-queue key of a wait for a slot. Every request's
// candidates are the same (the pool in force), so there is one key.
var CapacityKey = fairqueue.LimitKey{Kind: CapacityKind, Key: "backends"}

// ErrCapacityUnavailable is the cause of a 503 when the fleet-wide slot
// count could not be read and the store fails closed.
var ErrCapacityUnavailable = errors.New("the fleet-wide backend slot count is unavailable")

// Capacity is a request's part in capacity mode (SPEC 6b): the tracker that
// counts slots, whose pool in force the request may go to, tried in the
// pool's weighted round-robin order from Start. A nil Tracker means
// capacity mode is off.
type Capacity struct {
	Tracker *capacity.Tracker
	Start   int
}

// Backend returns the name of the backend the ticket's slot was taken for,
// or "" when capacity mode is off or nothing was taken.
func (t *Ticket) Backend() string { return t.backend }

// release returns the expected time until the next of the pool's slots
// frees, and the spacing of releases after it, as the tracker knows them
// now (capacity.Tracker.NextRelease), never below a millisecond. The next
// is when the first grant is expected; the spacing, the grant spacing
// assumed before the queue has measured its own. A wait's estimate, the
// arrival check against the request's budget and every capacity refusal's
// Retry-After count from them. Asked only of a request that found no room,
// so the fast path reads no clock for it.
func (cp *Capacity) release() (next, spacing time.Duration) {
	next, spacing = cp.Tracker.NextRelease(cp.Tracker.Pool())
	return max(next, time.Millisecond), max(spacing, time.Millisecond)
}

// takeSlot acquires a backend slot into t for an admitted request, after
// every rate limit passed, leaving dec, its decision, as it is, or making
// it the refusal. Without room it waits in the fair queue when the request
// has a tenant and fair queuing is on, else it is refused at once. A
// refused request gets back everything admission charged it (identity
// tokens, token reservation, queue cost): no token is lost to a refusal.
func (c *Controller) takeSlot(ctx context.Context, arrival time.Time, t *Ticket, dec *Decision) {
	r := &t.r
	cp := &r.Capacity
	tenant, used, queueable := c.settings().tenant(r.Identity)
	claim := c.claim(r, tenant, queueable)
	if !queueable || !c.queue.HasWaiters(CapacityKey) {
		name, res := cp.Tracker.AcquireAnyFor(&t.slot, claim, cp.Start)
		switch res {
		case capacity.Acquired, capacity.Untracked:
			t.backend = name
			return
		case capacity.Unavailable:
			c.giveBack(t)
			*dec = unavailable(ErrCapacityUnavailable)
			return
		}
		if !queueable {
			c.giveBack(t)
			*dec = c.capacityRefusal(ctx, arrival, r, tenant)
			return
		}
	}
	*dec = c.waitSlot(ctx, arrival, t, dec, tenant, used, claim)
}

// claim is whom r's slot is for: its tenant, weight, band and queue cost,
// so that a tenant under its share of a backend, or a higher band than a
// holder, may overdraft the backend's saturation window (package capacity).
// Without fair queuing it is anonymous and never overdrafts.
func (c *Controller) claim(r *Request, tenant string, queueable bool) capacity.Claim {
	if !queueable || !r.Capacity.Tracker.Claims() {
		return capacity.Claim{}
	}
	p := c.pol.Load()
	if p.queues == nil {
		return capacity.Claim{Tenant: tenant, Band: r.band, Weight: 1, Cost: c.queueCost(*r)}
	}
	w := &p.queues.weights
	return capacity.Claim{Tenant: tenant, Band: r.bandIn(w, tenant), Weight: w.Of(tenant), Cost: c.queueCost(*r)}
}

// capacityRefusal is the immediate 429 of a request that cannot wait for a
// slot: fair queuing is off, or it has no identity of the tenant dimension
// (SPEC 6b). The fair queue counts it (refused_total, limit_type capacity,
// reason disabled or no_identity) and tells it the next room time not yet
// promised, so refusals close together come back one slot apart.
func (c *Controller) capacityRefusal(ctx context.Context, arrival time.Time, r *Request, tenant string) Decision {
	s := c.settings()
	reason := fairqueue.ReasonNoIdentity
	if !s.Enabled {
		reason = fairqueue.ReasonDisabled
	}
	band, _ := c.resolveBand(r)
	next, spacing := r.Capacity.release()
	retry := c.queue.Refuse(fairqueue.Request{Tenant: tenant, Dimension: string(s.TenantDimension), LimitType: LimitTypeCapacity,
		Band: band, Deadline: budget(ctx, arrival, *r), FirstGrant: next, Interval: spacing}, reason)
	return Decision{Status: StatusTooManyRequests, LimitType: LimitTypeCapacity, RetryAfter: retry}
}

// waitSlot queues a request for a backend slot; the queue's attempt takes
// one, and a released slot wakes the queue (Queue.Wake on CapacityKey).
func (c *Controller) waitSlot(ctx context.Context, arrival time.Time, t *Ticket, dec *Decision, tenant string, used identity.Dimension, claim capacity.Claim) Decision {
	r := &t.r
	cp := &r.Capacity
	next, spacing := cp.release()
	// The attempt takes a slot of its own and captures it and chosen, not
	// t, so that t stays off the heap on the fast path (escape analysis is
	// per function). t holds it from now on, so every ending releases it.
	// Each attempt tries the pool in force, so a reload during the wait
	// sends the request to the backends it put in force.
	slot, tracker, start := new(capacity.Slot), cp.Tracker, cp.Start
	t.waited = slot
	chosen := ""
	defer tracker.Waiting(claim)()
	attempt := func() (bool, time.Duration, error) {
		name, res := tracker.AcquireAnyFor(slot, claim, start)
		switch res {
		case capacity.Acquired, capacity.Untracked:
			chosen = name
			return true, 0, nil
		case capacity.Unavailable:
			return false, 0, ErrCapacityUnavailable
		}
		// A release wakes the waiters at once; the Retry-After only bounds
		// the wait for room that comes without a local release (another
		// replica's, or a signal falling back under its max).
		return false, spacing, nil
	}
	// A request that already waited for a rate limit was charged its cost
	// then; this wait charges one grant, not the cost again.
	cost := claim.Cost // the queue cost, when the tracker counts claims
	if claim.Tenant == "" {
		cost = c.queueCost(*r)
	}
	if t.settle.accounted > 0 {
		cost = 1
	}
	band, _ := c.resolveBand(r)
	if o := c.tenantObserver(); o != nil {
		o.TenantWaiting(tenant, used, LimitTypeCapacity, 1)
		defer o.TenantWaiting(tenant, used, LimitTypeCapacity, -1)
	}
	res, err := c.queue.Wait(ctx, fairqueue.Request{
		Tenant:    tenant,
		Dimension: string(used),
		LimitType: LimitTypeCapacity,
		Band:      band,
		LimitKeys: capacityKeys[:],
		Deadline:  budget(ctx, arrival, *r),
		// Ready at once, so that a release grants it at once; expected to
		// be granted when the next slot frees, the grants ahead after.
		RetryAfter: 0,
		FirstGrant: next,
		Interval:   spacing,
		Cost:       cost,
		Size:       1,
		Attempt:    attempt,
	})
	t.backend = chosen
	info := QueueInfo{Queued: true, TenantDimension: used, Reason: res.Reason, Position: res.Position,
		Waited: res.Waited + dec.Queue.Waited, Estimate: res.Estimate + dec.Queue.Estimate, Band: c.bandName(res.Band)}
	switch {
	case errors.Is(err, ErrCapacityUnavailable):
		c.giveBack(t)
		d := unavailable(err)
		d.Queue = info
		return d
	case err != nil:
		c.giveBack(t)
		return Decision{Status: StatusClientClosedRequest, Queue: info, Err: err}
	case res.Admitted:
		out := *dec
		out.Queue = info
		if cost > 1 && t.settle.accounted == 0 {
			t.settle.accounted, t.settle.fq, t.settle.fqTenant, t.settle.fqBand = cost, c.queue, tenant, res.Band
		}
		return out
	case res.Reason == fairqueue.ReasonDisabled:
		// Fair queuing was switched off meanwhile: answer as without it.
		name, got := cp.Tracker.AcquireAny(&t.slot, cp.Start)
		if got.OK() {
			t.backend = name
			return *dec
		}
		c.giveBack(t)
		next, _ := cp.release()
		return Decision{Status: StatusTooManyRequests, LimitType: LimitTypeCapacity, RetryAfter: next}
	}
	c.giveBack(t)
	d := Decision{Status: StatusTooManyRequests, LimitType: LimitTypeCapacity,
		RetryAfter: max(res.RetryAfter, next), Queue: info}
	if res.Reason == fairqueue.ReasonShutdown {
		d.Status = StatusServiceUnavailable
		d.Err = errors.New("fair queue shut down while the request waited for backend capacity")
	}
	c.log.V(4).Info("Fair queue refused request waiting for capacity", "reason", res.Reason,
		"position", res.Position, "waited", res.Waited, "tenant", identity.Short(tenant))
	return d
}

// capacityKeys is the LimitKeys of every capacity wait; the queue copies
// them, so one array serves all.
var capacityKeys = [1]fairqueue.LimitKey{CapacityKey}

// giveBack undoes what admission charged a request that capacity refused:
// its identity tokens, its token reservation and its queue cost. The ticket
// is then empty, so its Done and NoBackend do nothing.
func (c *Controller) giveBack(t *Ticket) {
	t.NoBackend(0)
	t.Done(0)
	t.c = nil
}

// WakeCapacity tells the fair queue a backend slot came free: the requests
// waiting for one are granted by band and weight, without polling.
func (c *Controller) WakeCapacity() { c.queue.Wake(CapacityKey) }

// endSlot gives back the ticket's backend slot, if it holds one, by end:
// (*capacity.Slot).Release, or Withdraw for a request that reached no
// backend, whose time held is not measured as a backend's.
func (t *Ticket) endSlot(end func(*capacity.Slot)) {
	if t.r.Capacity.Tracker == nil {
		return // capacity mode off: no slot was taken
	}
	end(&t.slot)
	if t.waited != nil {
		end(t.waited)
	}
}
