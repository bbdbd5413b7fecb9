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

// Package admission joins the rate limiter, tenant selection and the fair
// queue into the one admission decision the HTTP layer turns into a response
// (SPEC sections 2, 3 and 5).
//
// For each request, Controller.Admit:
//
//  1. checks and charges the pre-authentication buckets (global, per client);
//     a refusal is an immediate 429 and is never queued;
//  2. with fair queuing on and a resolvable tenant, joins the tenant's queue
//     without taking a token when waiters are already queued on one of the
//     request's limit keys (no barging);
//  3. checks the identity buckets (api key, user, team, model) atomically;
//     if they pass, the request is admitted with no allocation;
//  4. on a refusal with fair queuing on and a tenant identity, waits in the
//     fair queue, re-checking the limiter each time its turn comes, within
//     its budget; otherwise answers 429 at once;
//  5. answers 503 at once, never queued, when the limiter store is unavailable.
//
// When step 2 finds nothing to wait behind and no fleet gate paces the
// request (the common case), steps 1 and 3 are one trip to the limiter's
// store (Limiter.TakeAdmission), still in that order: a pre-auth refusal
// charges no identity bucket, an identity refusal keeps the pre-auth charge.
//
// A request without any tenant identity cannot be queued, so it skips the
// no-barging check and keeps the behaviour it would have without fair
// queuing: a token if one is free, an immediate 429 otherwise.
//
// The package is pure Go (no net/http) with an injected clock.
package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// HTTP status codes carried by a Decision. They are spelled out here so the
// package need not import net/http.
const (
	// StatusOK means the request is admitted.
	StatusOK = 200
	// StatusTooManyRequests means a rate limit or a queue bound refused the request.
	StatusTooManyRequests = 429
	// StatusClientClosedRequest means the client went away while queued; no
	// response can be delivered, the code is for logs and access metrics.
	StatusClientClosedRequest = 499
	// StatusServiceUnavailable means the limiter store could not be reached or
	// the queue is shutting down; the refusal is not the caller's quota.
	StatusServiceUnavailable = 503
)

// Settings are the fair-queuing switches that a config reload may change.
type Settings struct {
	// Enabled turns fair queuing on. Off, every refusal is an immediate 429.
	Enabled bool
	// TenantDimension is the preferred tenant identity; empty means user.
	TenantDimension identity.Dimension
}

// tenant returns the tenant id queues a request from id under, the
// dimension it came from, and whether the request may queue at all: never
// with fair queuing off or without an identity of a queueable dimension.
func (s *Settings) tenant(id identity.Set) (tenant string, used identity.Dimension, queueable bool) {
	if !s.Enabled {
		return "", "", false
	}
	return id.Tenant(s.TenantDimension)
}

// Request is what admission needs to know about one HTTP request.
type Request struct {
	// ClientAddr keys the per-client bucket; empty skips it.
	ClientAddr string
	// Identity holds the request's identity hashes (empty = absent).
	Identity identity.Set
	// Model keys the per-model bucket; empty skips it.
	Model string
	// Deadline is when a request that cannot be admitted must have been
	// answered, from the client's own deadline (less a margin, so that the
	// refusal reaches the client before it gives up); zero means none.
	Deadline time.Time
	// TotalTimeout is the total timeout that applies to this request (its
	// model's, else the default); queued time counts against it. Zero means
	// none.
	TotalTimeout time.Duration
	// Tokens is the request's token reservation (estimated prompt tokens
	// plus its output cap), reserved after the request-count limits admit
	// it when deferred admission is on; 0 means token accounting is off.
	Tokens int64
	// Reserver, when Tokens is 0, estimates the reservation. Admit calls
	// it at most once: after the request-count limits admitted the request,
	// so a request they refuse never pays for a pass of the tokenizer over
	// its body; or first, when the fair queue charges the tenant by tokens
	// and so needs the reservation before the limits decide.
	Reserver Reserver
	// Band names the priority band the request asks to wait in (the
	// policy's request band header); empty means its tenant's band. Only a
	// band below the tenant's takes effect; another name is ignored and
	// reported to the BandObserver.
	Band string

	// band is the index Admit resolved Band to (bands.go).
	band int
	// preAuthed is set, to the settings admission decided with, once the
	// request passed the pre-authentication buckets: what admission decided
	// is then a decision about its tenant under those settings (observe).
	preAuthed *Settings

	// Capacity, with a Tracker, makes Begin take a backend slot once every
	// limit passed (SPEC 6b, capacity.go); Admit alone ignores it.
	Capacity Capacity
}

// QueueInfo describes the fair queue's part in a decision, for the
// x-fair-queue-* headers and the fair_queue object of the error body.
type QueueInfo struct {
	// Queued is true when the queue was involved (the request waited or was
	// refused by a queue bound); the other fields are meaningful only then.
	Queued bool
	// TenantDimension is the identity the request was queued under.
	TenantDimension identity.Dimension
	// Reason is the refusal reason; empty when admitted.
	Reason fairqueue.Reason
	// Position is the 1-based place the request had, or would have had.
	Position int
	// Waited is the time spent queued.
	Waited time.Duration
	// Estimate is the wait predicted at enqueue.
	Estimate time.Duration
	// Band names the priority band the request waited in; empty without
	// bands.
	Band string
}

// Decision is the outcome of Admit.
type Decision struct {
	// Allowed is true when the request may be forwarded.
	Allowed bool
	// Status is StatusOK, StatusTooManyRequests, StatusServiceUnavailable or
	// StatusClientClosedRequest.
	Status int
	// LimitType is the SPEC limit_type of the refusing dimension; empty when allowed.
	LimitType string
	// RetryAfter is when the client should retry; set on every refusal.
	RetryAfter time.Duration
	// Quota is the tightest identity bucket that applied, for the
	// x-ratelimit-*-requests headers; valid when HasQuota.
	Quota limiter.Quota
	// HasQuota is false when no identity bucket applied.
	HasQuota bool
	// TableFull is true when the refusal is because the LimitType
	// dimension's key table was full of buckets still holding debt; such a
	// refusal is never queued.
	TableFull bool
	// Queue describes the fair queue's involvement.
	Queue QueueInfo
	// Tokens describes the token budget's part (SPEC section 6).
	Tokens TokenInfo
	// Err is the cause of a 503 or 499, for logs; nil otherwise.
	Err error

	// settle is what Settle corrects once the response has ended.
	settle settlement
}

// Controller makes admission decisions. It is safe for concurrent use.
type Controller struct {
	clk clock.PassiveClock
	log logr.Logger
	// pol is the config in force, swapped whole by Load (policy.go).
	pol atomic.Pointer[policy]
	// queue and deferq (deferred admission, tokens.go; nil for a
	// Controller built by New) outlive every config, like the store.
	queue  *fairqueue.Queue
	deferq *fairqueue.Queue
	// store, limitObs and fleet build and follow each loaded policy; nil
	// for a Controller built by New. loadMu serialises Load.
	store    Store
	limitObs limiter.Observer
	fleet    FleetGate
	loadMu   sync.Mutex
	gate     gateRef // optional fleet pacing (gate.go)
	tenants  obsRef  // optional per-tenant observer (tenants.go)
	bandObs  BandObserver
	tokenObs atomic.Pointer[TokenObserver]
	// aheadDue holds the due time of every admitted hold still waiting for
	// tokens it overdrew (bounded by the holds admitted: at most one per
	// request in flight).
	aheadMu  sync.Mutex
	aheadSeq uint64
	aheadDue map[uint64]time.Time
}

// New returns a Controller deciding with lim and queuing in q, reading time
// from clk, without deferred admission: the form for a caller that builds
// its own limiter and queue (the fleet's tests and demo). q may be shared
// with nothing else; the Controller enables or disables it to follow
// s.Enabled. A server loading configs uses NewController.
func New(clk clock.PassiveClock, lim *limiter.Limiter, q *fairqueue.Queue, s Settings, log logr.Logger) (*Controller, error) {
	if clk == nil || lim == nil || q == nil {
		return nil, errors.New("admission: clock, limiter and queue are all required")
	}
	d, err := identity.ParseDimension(string(s.TenantDimension))
	if err != nil {
		return nil, fmt.Errorf("admission settings: %w", err)
	}
	s.TenantDimension = d
	c := &Controller{clk: clk, queue: q, log: log}
	c.apply(&policy{lim: lim, settings: s})
	return c, nil
}

// limiter returns the limiter of the config in force.
func (c *Controller) limiter() *limiter.Limiter { return c.pol.Load().lim }

// settings returns the fair-queuing settings in force.
func (c *Controller) settings() *Settings { return &c.pol.Load().settings }

// Admit decides r, blocking while it waits in the fair queue and, with
// deferred admission on, while it is held for its token reservation. ctx
// ending (the client disconnecting) takes the request out of either queue at
// once, giving back what it was charged.
func (c *Controller) Admit(ctx context.Context, r Request) (dec Decision) {
	arrival := c.clk.Now()
	c.admit(ctx, arrival, &r, &dec)
	c.observe(arrival, &r, &dec)
	return dec
}

// admit is Admit for a request that arrived at arrival, deciding into dec,
// which must be zero: the decision is written where the caller returns it,
// never copied up the calls. It leaves in r what it resolved: its band and,
// once estimated, its token reservation.
func (c *Controller) admit(ctx context.Context, arrival time.Time, r *Request, dec *Decision) {
	r.band = c.requestBand(r)
	estimate := r.Tokens <= 0 && r.Reserver != nil
	if estimate && c.chargesTokens(*r) {
		r.Tokens, estimate = r.Reserver.Reservation(), false
	}
	c.admitRequests(ctx, arrival, r, dec)
	if !dec.Allowed {
		return
	}
	if estimate {
		r.Tokens = r.Reserver.Reservation()
	}
	if r.Tokens > 0 {
		*dec = c.reserve(ctx, arrival, *r, *dec)
	}
}

// admitRequests decides r's request-count limits (SPEC sections 2 and 5),
// all with the limiter and settings of one policy, into dec, which must be
// zero. It holds only the common case, a request with nothing to queue
// behind and no gate to ask, so its frame stays small.
func (c *Controller) admitRequests(ctx context.Context, now time.Time, r *Request, dec *Decision) {
	p := c.pol.Load()
	keys := r.keys()
	tenant, used, queueable := p.settings.tenant(r.Identity)
	var gate Gate
	if queueable {
		if gate = c.gateFor(keys, r.band); gate != nil || c.hasWaiters(keys) {
			c.admitInTurn(ctx, now, r, p, keys, tenant, used, gate, dec)
			return
		}
	}
	// The pre-auth and identity buckets are charged in one trip to the
	// store, in that order. Waiters that arrive meanwhile are passed as
	// they would be between the check and TakeIdentity.
	pre, d, err := p.lim.TakeAdmission(now, r.ClientAddr, keys)
	if !pre.Allowed {
		*dec = c.preAuthRefusal(pre, err, r.ClientAddr)
		return
	}
	r.preAuthed = &p.settings
	if err == nil && d.Allowed { // as identityDecided would, without the call
		admitted(dec, d)
		return
	}
	c.identityDecided(ctx, now, r, keys, tenant, used, queueable, gate, d, err, dec)
}

// admitInTurn is admitRequests for a queueable request with a gate to ask
// or waiters on one of its keys: after the pre-auth buckets, it joins the
// tenant's queue without taking a token when waiters are there (no
// barging) or the gate holds it back, and checks the identity buckets
// otherwise.
func (c *Controller) admitInTurn(ctx context.Context, now time.Time, r *Request, p *policy, keys limiter.Keys, tenant string, used identity.Dimension, gate Gate, dec *Decision) {
	if pre, err := p.lim.TakePreAuth(now, r.ClientAddr); err != nil || !pre.Allowed {
		*dec = c.preAuthRefusal(pre, err, r.ClientAddr)
		return
	}
	r.preAuthed = &p.settings
	if gate != nil {
		gate.Arrive(tenant, keys.Model)
	}
	if c.hasWaiters(keys) {
		*dec = c.wait(ctx, now, r, keys, tenant, used, gate, limiter.Decision{})
		return
	}
	if ok, retry := gateAllow(gate, now, tenant, keys.Model); !ok {
		*dec = c.wait(ctx, now, r, keys, tenant, used, gate, gated(retry))
		return
	}
	d, err := p.lim.TakeIdentity(now, keys)
	if err == nil {
		gateDone(gate, tenant, keys.Model, d)
	}
	c.identityDecided(ctx, now, r, keys, tenant, used, true, gate, d, err, dec)
}

// admitted makes dec the decision of a request the identity buckets,
// deciding d, allowed.
func admitted(dec *Decision, d limiter.Decision) {
	dec.Allowed, dec.Status, dec.Quota, dec.HasQuota = true, StatusOK, d.Tightest, d.HasQuota
}

// identityDecided writes into dec what the identity buckets' decision d, or
// the store's err, means for r: admitted, refused at once, or queued when
// the request may queue and the refusal is queueable.
func (c *Controller) identityDecided(ctx context.Context, now time.Time, r *Request, keys limiter.Keys, tenant string, used identity.Dimension, queueable bool, gate Gate, d limiter.Decision, err error, dec *Decision) {
	switch {
	case err != nil:
		*dec = unavailable(err)
	case d.Allowed:
		admitted(dec, d)
	case !queueable || !canQueue(d):
		*dec = c.refusal(d, keys, "")
	default:
		*dec = c.wait(ctx, now, r, keys, tenant, used, gate, d)
	}
}

// hasWaiters reports whether requests wait in the fair queue on any of
// the identity buckets of keys.
func (c *Controller) hasWaiters(keys limiter.Keys) bool {
	all := limitKeysOf(keys)
	return c.queue.HasWaitersAny(all[:])
}

// canQueue reports whether a refusal may wait in the fair queue: one by an
// identity dimension, and not because that dimension's key table is full.
func canQueue(d limiter.Decision) bool {
	return d.LimitType.Queueable() && d.TableFull == 0
}

// PreAuth checks and charges the pre-authentication buckets (global, per
// client) for a request from client, the first step of Admit. It is also for
// a request answered before the admission core (a 401 or 413 still pays
// them). ok is true when they admit the request; otherwise dec is the
// immediate 429 (never queued) or, with the store unavailable, 503.
func (c *Controller) PreAuth(now time.Time, client string) (dec Decision, ok bool) {
	if pre, err := c.limiter().TakePreAuth(now, client); err != nil || !pre.Allowed {
		return c.preAuthRefusal(pre, err, client), false
	}
	return Decision{Allowed: true, Status: StatusOK}, true
}

// preAuthRefusal is the decision for a request from client that the
// pre-authentication buckets refused with pre, or that err kept from them.
func (c *Controller) preAuthRefusal(pre limiter.Decision, err error, client string) Decision {
	if err != nil {
		return unavailable(err)
	}
	return c.refusal(pre, limiter.Keys{}, client)
}

// backendRefusal is the immediate 429 for an admitted request that no
// backend can take, retryable after retry. Backend capacity is never queued,
// so the decision carries no queue details; its quota describes the
// per-backend limit when one is configured.
func (c *Controller) backendRefusal(retry time.Duration) Decision {
	return c.refusal(limiter.Decision{LimitType: limiter.DimensionBackend, RetryAfter: retry}, limiter.Keys{}, "")
}

// refund gives back the identity tokens Admit took for an admitted r, for a
// request a later stage refused (every backend exhausted), so none is lost
// to it (SPEC section 2).
func (c *Controller) refund(r Request) error {
	return c.limiter().RefundIdentity(c.clk.Now(), r.keys())
}

// keys returns the identity bucket keys of r without copying it.
func (r *Request) keys() limiter.Keys {
	return limiter.Keys{APIKey: r.Identity.APIKey, User: r.Identity.User, Team: r.Identity.Team, Model: r.Model}
}

// limitKeysOf returns the fair-queue keys of the identity buckets, each
// carrying its dimension, so equal strings of different dimensions (a user
// id equal to a team id) are different keys. Empty keys never match a waiter.
func limitKeysOf(k limiter.Keys) [limiter.MaxBatch]fairqueue.LimitKey {
	return [limiter.MaxBatch]fairqueue.LimitKey{
		{Kind: uint8(limiter.DimensionAPIKey), Key: k.APIKey},
		{Kind: uint8(limiter.DimensionUser), Key: k.User},
		{Kind: uint8(limiter.DimensionTeam), Key: k.Team},
		{Kind: uint8(limiter.DimensionModel), Key: k.Model},
	}
}

// keyOf returns the bucket key of dimension d in k, or client for the
// per-client dimension.
func keyOf(d limiter.Dimension, k limiter.Keys, client string) string {
	switch d {
	case limiter.DimensionClient:
		return client
	case limiter.DimensionAPIKey, limiter.DimensionAPIKeyTokens:
		return k.APIKey
	case limiter.DimensionUser, limiter.DimensionUserTokens:
		return k.User
	case limiter.DimensionTeam, limiter.DimensionTeamTokens:
		return k.Team
	case limiter.DimensionModel, limiter.DimensionModelTokens:
		return k.Model
	}
	return ""
}

// refusedQuota returns the x-ratelimit-* description of the bucket that
// refused d: the refusing dimension with the longest Retry-After, with no
// token remaining. Other buckets of the batch were not charged, so they say
// nothing about the refusal.
func (c *Controller) refusedQuota(d limiter.Decision, keys limiter.Keys, client string) (limiter.Quota, bool) {
	if lim, ok := c.limiter().LimitOf(d.LimitType, keyOf(d.LimitType, keys, client)); ok {
		return lim.RefusedQuota(d.LimitType, d.RetryAfter), true
	}
	return d.Tightest, d.HasQuota
}

// interval returns the refill interval of the bucket d refused with, or of
// the first identity bucket that applies to keys when d is not a refusal:
// the grant spacing the fair queue assumes until it has measured one.
func (c *Controller) interval(d limiter.Decision, keys limiter.Keys) time.Duration {
	if !d.Allowed && d.RefusedBy != 0 {
		if lim, ok := c.limiter().LimitOf(d.LimitType, keyOf(d.LimitType, keys, "")); ok {
			return lim.RefillInterval()
		}
	}
	var longest time.Duration
	for _, lk := range limitKeysOf(keys) {
		if lk.Key == "" {
			continue
		}
		if lim, ok := c.limiter().LimitOf(limiter.Dimension(lk.Kind), lk.Key); ok {
			longest = max(longest, lim.RefillInterval())
		}
	}
	return longest
}

// wait queues a request refused by d (or, with d.RefusedBy empty, one that
// must not barge past waiters) and turns the queue's result into a Decision.
// gate is the fleet gate Admit consulted, so one request reports to one gate
// even when a reload swaps it meanwhile.
func (c *Controller) wait(ctx context.Context, now time.Time, r *Request, keys limiter.Keys, tenant string, used identity.Dimension, gate Gate, d limiter.Decision) Decision {
	limitKeys, limitType := c.limitKeys(keys, d)
	if d.RefusedBy == 0 && len(limitKeys) == 0 {
		// The waiters we would have queued behind are gone: take the normal path.
		var err error
		if ok, retry := gateAllow(gate, now, tenant, keys.Model); !ok {
			d = gated(retry)
		} else {
			if d, err = c.limiter().TakeIdentity(now, keys); err != nil {
				return unavailable(err)
			}
			gateDone(gate, tenant, keys.Model, d)
		}
		if d.Allowed {
			return Decision{Allowed: true, Status: StatusOK, Quota: d.Tightest, HasQuota: d.HasQuota}
		}
		if !canQueue(d) {
			return c.refusal(d, keys, "")
		}
		limitKeys, _ = c.limitKeys(keys, d)
	}
	if d.RefusedBy == 0 {
		// Queued only so as not to barge: the limiter's Retry-After, asked
		// without charging, is when the request could be served at the
		// earliest, and its quota describes the buckets it waits for.
		if p, err := c.limiter().PeekIdentity(now, keys); err == nil {
			d.RetryAfter, d.Tightest, d.HasQuota = p.RetryAfter, p.Tightest, p.HasQuota
			if !p.Allowed {
				d.Tightest, d.HasQuota = c.refusedQuota(p, keys, "")
				limitType = p.LimitType
			}
		}
	} else {
		limitType = d.LimitType
		d.Tightest, d.HasQuota = c.refusedQuota(d, keys, "")
	}
	last := d
	attempt := func() (bool, time.Duration, error) {
		now := c.clk.Now()
		if ok, retry := gateAllow(gate, now, tenant, keys.Model); !ok {
			return false, retry, nil
		}
		got, err := c.limiter().TakeIdentity(now, keys)
		if err != nil {
			return false, 0, err
		}
		gateDone(gate, tenant, keys.Model, got)
		if !got.Allowed {
			got.Tightest, got.HasQuota = c.refusedQuota(got, keys, "")
		}
		last = got
		return got.Allowed, got.RetryAfter, nil
	}
	if o := c.tenantObserver(); o != nil {
		o.TenantWaiting(tenant, used, limitType.String(), 1)
		defer o.TenantWaiting(tenant, used, limitType.String(), -1)
	}
	res, err := c.queue.Wait(ctx, fairqueue.Request{
		Tenant:     tenant,
		Dimension:  string(used),
		LimitType:  limitType.String(),
		LimitKeys:  limitKeys,
		Deadline:   budget(ctx, now, *r),
		RetryAfter: d.RetryAfter,
		Interval:   c.interval(d, keys),
		Cost:       c.queueCost(*r),
		Size:       1, // a request-count bucket: one token whatever the cost
		Attempt:    attempt,
		Band:       r.band,
	})
	info := QueueInfo{
		Queued:          true,
		TenantDimension: used,
		Reason:          res.Reason,
		Position:        res.Position,
		Waited:          res.Waited,
		Estimate:        res.Estimate,
		Band:            c.bandName(res.Band),
	}
	log := c.log.WithValues("tenant", identity.Short(tenant), "tenantDimension", used)

	switch {
	case errors.Is(err, limiter.ErrStoreUnavailable):
		log.V(1).Info("Rate-limit store unavailable while queued", "err", err)
		dec := unavailable(err)
		dec.Queue = info
		return dec
	case err != nil:
		log.V(4).Info("Client left the fair queue", "waited", res.Waited, "err", err)
		return Decision{Status: StatusClientClosedRequest, Queue: info, Err: err}
	case res.Admitted:
		dec := Decision{Allowed: true, Status: StatusOK, Quota: last.Tightest, HasQuota: last.HasQuota, Queue: info}
		if cost := c.queueCost(*r); cost > 1 {
			dec.settle = settlement{accounted: cost, fq: c.queue, fqTenant: tenant, fqBand: res.Band}
		}
		return dec
	case res.Reason == fairqueue.ReasonDisabled:
		// Fair queuing was switched off: answer exactly as without it.
		return c.unqueued(keys)
	}

	if last.RefusedBy != 0 {
		limitType = last.LimitType
	}
	dec := Decision{
		Status:     StatusTooManyRequests,
		LimitType:  limitType.String(),
		RetryAfter: max(res.RetryAfter, last.RetryAfter),
		Quota:      last.Tightest,
		HasQuota:   last.HasQuota,
		Queue:      info,
	}
	if res.Reason == fairqueue.ReasonShutdown {
		dec.Status = StatusServiceUnavailable
		dec.Err = errors.New("fair queue shut down while the request was queued")
	}
	if dec.RetryAfter <= 0 {
		// Queued only to avoid barging and never refused by the limiter: ask
		// it now. With a token free, the requests ahead are about to take
		// it, so the next token is the earliest a retry could succeed.
		if p, err := c.limiter().PeekIdentity(c.clk.Now(), keys); err == nil && !p.Allowed {
			dec.LimitType, dec.RetryAfter = p.LimitType.String(), p.RetryAfter
			dec.Quota, dec.HasQuota = c.refusedQuota(p, keys, "")
		} else {
			dec.RetryAfter = max(c.interval(limiter.Decision{}, keys), time.Millisecond)
		}
	}
	log.V(4).Info("Fair queue refused request", "reason", res.Reason, "position", res.Position, "waited", res.Waited)
	return dec
}

// unqueued decides the identity buckets as if fair queuing were off.
func (c *Controller) unqueued(keys limiter.Keys) Decision {
	d, err := c.limiter().TakeIdentity(c.clk.Now(), keys)
	switch {
	case err != nil:
		return unavailable(err)
	case d.Allowed:
		return Decision{Allowed: true, Status: StatusOK, Quota: d.Tightest, HasQuota: d.HasQuota}
	}
	return c.refusal(d, keys, "")
}

// limitKeys returns the keys the request is queued on: those of the
// dimensions that refused it, plus any of its keys that already have waiters.
// The second result is the dimension of the first such key, the limit_type
// of a request queued only to avoid barging. Each key carries its dimension,
// so a user id equal to a team id never makes unrelated requests queue
// behind each other.
func (c *Controller) limitKeys(keys limiter.Keys, d limiter.Decision) ([]fairqueue.LimitKey, limiter.Dimension) {
	all := limitKeysOf(keys)
	out := make([]fairqueue.LimitKey, 0, len(all))
	first := limiter.Dimension(limiter.NumDimensions)
	for _, k := range all {
		dim := limiter.Dimension(k.Kind)
		// A key belongs to the wait when its bucket refused the request or
		// other requests already wait on it (no barging).
		if k.Key == "" || (!d.RefusedBy.Has(dim) && !c.queue.HasWaiters(k)) {
			continue
		}
		out = append(out, k)
		if first == limiter.Dimension(limiter.NumDimensions) {
			first = dim
		}
	}
	return out, first
}

// budget returns the absolute end of the request's admission budget: the
// earliest of its own deadline, ctx's deadline and now plus its total
// timeout. The queue applies maxWait on top. Zero means none.
func budget(ctx context.Context, now time.Time, r Request) time.Time {
	end := r.Deadline
	if dl, ok := ctx.Deadline(); ok && (end.IsZero() || dl.Before(end)) {
		end = dl
	}
	if r.TotalTimeout > 0 {
		if t := now.Add(r.TotalTimeout); end.IsZero() || t.Before(end) {
			end = t
		}
	}
	return end
}

// refusal is the immediate 429 for a limiter refusal that is not queued. Its
// quota describes the refusing bucket, whatever its dimension, so every 429
// carries the x-ratelimit-* headers.
func (c *Controller) refusal(d limiter.Decision, keys limiter.Keys, client string) Decision {
	dec := Decision{Status: StatusTooManyRequests, LimitType: d.LimitType.String(), RetryAfter: d.RetryAfter, TableFull: d.TableFull != 0}
	dec.Quota, dec.HasQuota = c.refusedQuota(d, keys, client)
	return dec
}

// unavailable is the immediate 503 for a store outage.
func unavailable(err error) Decision {
	return Decision{Status: StatusServiceUnavailable, RetryAfter: time.Second, Err: err}
}

// TakeBackend charges one token of the named backend's per-backend limit; it
// is the proxy pool's TakeFunc. A store error refuses the backend for a
// second.
func (c *Controller) TakeBackend(name string) (ok bool, retryAfter time.Duration) {
	d, err := c.limiter().TakeBackend(c.clk.Now(), name)
	if err != nil {
		return false, time.Second
	}
	return d.Allowed, d.RetryAfter
}
