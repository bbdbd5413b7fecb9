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
	"errors"
	"fmt"
	"time"

	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// TokenSettings configure token budgets (SPEC section 6): deferred admission
// on the token buckets, and whether the fair queues charge tenants by tokens.
type TokenSettings struct {
	// Enabled turns deferred admission on: a request admitted by the
	// request-count limits then reserves its tokens, and a token refusal
	// whose size-aware Retry-After fits the budget is held.
	Enabled bool
	// CostTokens charges a tenant's virtual time by its reservation instead
	// of one per request (fairQueuing.cost Tokens), corrected at settle.
	CostTokens bool
	// MaxWait bounds a hold, counted from the request's arrival like the
	// fair-queue wait, so the two never stack beyond the request's budget.
	MaxWait time.Duration
}

// TokenObserver is told what token accounting does, for metrics. Its
// methods are called on the request path: they must be cheap and must not
// block.
type TokenObserver interface {
	// TokensReserved reports n tokens reserved in a bucket of dimension d.
	TokensReserved(d limiter.Dimension, n int64)
	// TokensSettled reports n tokens a request used, settled in a bucket of
	// dimension d.
	TokensSettled(d limiter.Dimension, n int64)
	// Estimated reports a settled request's reservation and actual usage.
	Estimated(reserved, used int64)
	// HeldAhead reports a change (+1, -1) in the holds admitted ahead of
	// their tokens and waiting for them, in the named priority band ("" without
	// bands).
	HeldAhead(band string, delta int)
	// DeferralRefused reports a token refusal answered without holding the
	// request, because its Retry-After did not fit the budget (reason
	// wait_exceeds_budget) or the key table was full (table_full), with the
	// band it would have been held in ("" without bands).
	DeferralRefused(band, reason string)
}

// TokenInfo describes the token budget's part in an admitted or refused
// request, for the x-ratelimit-*-tokens and x-fair-queue-deferred-ms headers.
type TokenInfo struct {
	// Requested is the reservation the request asked for: its estimated
	// prompt tokens plus its output cap.
	Requested int64
	// Reserved is the number of tokens reserved in the token buckets; 0 when
	// none applied or token accounting is off.
	Reserved int64
	// Quota is the tightest token bucket that applied (the refusing one on a
	// token refusal); valid when HasQuota.
	Quota limiter.Quota
	// HasQuota is false when no token bucket applied.
	HasQuota bool
	// Deferred is true when the request was held for its tokens.
	Deferred bool
	// Reason is the hold's refusal reason; empty when admitted.
	Reason fairqueue.Reason
	// Waited is the time held.
	Waited time.Duration
	// Estimate is the hold predicted when the request was held.
	Estimate time.Duration
	// Band names the priority band the request was held in; empty without
	// bands or when it was not held.
	Band string
}

// settlement is what Settle needs to correct an admitted request's
// reservation. It stays unexported: only the Controller reads it.
type settlement struct {
	// reserved is the reservation charged to the token buckets (0: none).
	reserved int64
	// accounted is the reservation a queue charged a tenant for.
	accounted int64
	// fq and dq are the queues (fair queue, deferral queue) that charged
	// tenant fqTenant / dqTenant, scheduled in band fqBand / dqBand (a
	// lowered request's queue is its own), nil when none did.
	fq, dq             *fairqueue.Queue
	fqTenant, dqTenant string
	fqBand, dqBand     int
}

// tokenSettings returns the token settings in force.
func (c *Controller) tokenSettings() *TokenSettings { return &c.pol.Load().tokens }

// SetTokenObserver installs o (nil removes it).
func (c *Controller) SetTokenObserver(o TokenObserver) {
	if o == nil {
		c.tokenObs.Store(nil)
		return
	}
	c.tokenObs.Store(&o)
}

func (c *Controller) tokenObserver() TokenObserver {
	if p := c.tokenObs.Load(); p != nil {
		return *p
	}
	return nil
}

// queueCost is what the request-count fair queue charges r's tenant at a
// grant: its reservation with fairQueuing.cost Tokens, else one.
func (c *Controller) queueCost(r Request) int64 {
	if s := c.tokenSettings(); s.CostTokens && r.Tokens > 0 {
		return r.Tokens
	}
	return 1
}

// tokenKeysOf returns the deferral-queue keys of the token buckets of k, each
// carrying its token dimension.
func tokenKeysOf(k limiter.Keys) [limiter.MaxBatch]fairqueue.LimitKey {
	return [limiter.MaxBatch]fairqueue.LimitKey{
		{Kind: uint8(limiter.DimensionAPIKeyTokens), Key: k.APIKey},
		{Kind: uint8(limiter.DimensionUserTokens), Key: k.User},
		{Kind: uint8(limiter.DimensionTeamTokens), Key: k.Team},
		{Kind: uint8(limiter.DimensionModelTokens), Key: k.Model},
	}
}

// appliedTokenKeys returns the token-bucket keys of k whose dimension has a
// limit for it, in dimension order, and how many there are.
func (c *Controller) appliedTokenKeys(k limiter.Keys) (out [limiter.MaxBatch]fairqueue.LimitKey, n int) {
	for _, lk := range tokenKeysOf(k) {
		if lk.Key == "" {
			continue
		}
		if _, ok := c.limiter().LimitOf(limiter.Dimension(lk.Kind), lk.Key); ok {
			out[n] = lk
			n++
		}
	}
	return out, n
}

// NeedsTokens reports whether Admit would use r's token reservation: deferred
// admission is on and a token bucket applies to r, or a fair queue charges
// its tenant by tokens. Otherwise the caller may skip estimating it, which
// costs a tokenizer pass over the body.
func (c *Controller) NeedsTokens(r Request) bool {
	if !c.tokenSettings().Enabled {
		return false
	}
	return c.chargesTokens(r) || c.limiter().HasTokenLimits(r.keys())
}

// chargesTokens reports whether the request-count fair queue would charge
// r's tenant by its token reservation (fairQueuing.cost Tokens), so that the
// reservation must be known before the request-count limits decide.
func (c *Controller) chargesTokens(r Request) bool {
	if s := c.tokenSettings(); !s.Enabled || !s.CostTokens {
		return false
	}
	set := c.settings()
	if !set.Enabled {
		return false
	}
	_, _, ok := r.Identity.Tenant(set.TenantDimension)
	return ok
}

// reserve takes r's token reservation after the request-count limits
// admitted it (dec), holding it in the deferral queue when a token bucket
// refuses and the size-aware Retry-After fits the hold's budget. Every path
// that does not admit gives back the request-count tokens dec took.
func (c *Controller) reserve(ctx context.Context, arrival time.Time, r Request, dec Decision) Decision {
	s := c.tokenSettings()
	q := c.deferq
	if !s.Enabled || q == nil || r.Tokens <= 0 {
		return dec
	}
	keys := r.keys()
	if !c.limiter().HasTokenLimits(keys) {
		return dec
	}
	dec.Tokens.Requested = r.Tokens
	now := c.clk.Now()
	all := tokenKeysOf(keys)
	var d limiter.Decision
	if q.HasWaitersAny(all[:]) {
		// Holders go first (no barging): wait behind them for what the
		// buckets would need now.
		p, err := c.limiter().PeekTokens(now, keys, r.Tokens)
		if err != nil {
			c.undoCount(r, &dec)
			return unavailable(err)
		}
		d = p
	} else {
		got, err := c.limiter().TakeTokens(now, keys, r.Tokens)
		if err != nil {
			c.undoCount(r, &dec)
			return unavailable(err)
		}
		if got.Allowed {
			c.reserved(keys, r.Tokens, &dec, got)
			return dec
		}
		d = got
	}
	if d.TableFull != 0 {
		c.undoCount(r, &dec)
		if o := c.tokenObserver(); o != nil {
			o.DeferralRefused(c.holdBand(&r), "table_full")
		}
		return c.tokenRefusal(d, keys, dec)
	}
	end := c.holdDeadline(ctx, arrival, r, s)
	if !end.IsZero() && now.Add(d.RetryAfter).After(end) {
		c.undoCount(r, &dec)
		if o := c.tokenObserver(); o != nil {
			o.DeferralRefused(c.holdBand(&r), string(fairqueue.ReasonWaitExceedsBudget))
		}
		return c.tokenRefusal(d, keys, dec)
	}
	return c.hold(ctx, now, end, r, keys, dec, d, s, q)
}

// holdDeadline is the end of a hold: the request's budget (its own
// deadline, ctx's, its total timeout), and MaxWait, all counted from arrival.
func (c *Controller) holdDeadline(ctx context.Context, arrival time.Time, r Request, s *TokenSettings) time.Time {
	end := budget(ctx, arrival, r)
	if s.MaxWait > 0 {
		if t := arrival.Add(s.MaxWait); end.IsZero() || t.Before(end) {
			end = t
		}
	}
	return end
}

// hold waits in the deferral queue q until r's token buckets hold its
// reservation, d being the refusal (or, with d.RefusedBy empty, the peek of a
// request queued behind holders).
func (c *Controller) hold(ctx context.Context, now, end time.Time, r Request, keys limiter.Keys, dec Decision, d limiter.Decision, s *TokenSettings, q *fairqueue.Queue) Decision {
	all := tokenKeysOf(keys)
	limitKeys := make([]fairqueue.LimitKey, 0, len(all))
	for _, k := range all {
		if k.Key != "" && (d.RefusedBy.Has(limiter.Dimension(k.Kind)) || q.HasWaiters(k)) {
			limitKeys = append(limitKeys, k)
		}
	}
	if len(limitKeys) == 0 {
		if applied, n := c.appliedTokenKeys(keys); n > 0 {
			limitKeys = append(limitKeys, applied[0])
		}
	}
	// The hold's tenant: the fair-queue tenant when fair queuing is on, so
	// weights (and token cost) decide between tenants; otherwise one queue
	// per token key, which makes holders FIFO per key.
	tenant, used, cost := "", identity.Dimension(""), int64(1)
	if set := c.settings(); set.Enabled {
		var ok bool
		if tenant, used, ok = r.Identity.Tenant(set.TenantDimension); !ok {
			tenant = ""
		}
	}
	if tenant == "" && len(limitKeys) > 0 {
		tenant = "tokens/" + limiter.Dimension(limitKeys[0].Kind).String() + "/" + limitKeys[0].Key
	} else if s.CostTokens {
		cost = r.Tokens
	}
	var interval time.Duration
	if len(limitKeys) > 0 {
		if lim, ok := c.limiter().LimitOf(limiter.Dimension(limitKeys[0].Kind), limitKeys[0].Key); ok {
			// The time the bucket needs to refill this reservation.
			interval = lim.RefillInterval() * time.Duration(r.Tokens)
		}
	}
	// ahead is how long an admitted hold still waits for the tokens it
	// overdrew (see overdraw).
	var (
		last  limiter.Decision
		ahead time.Duration
	)
	attempt := func() (bool, time.Duration, error) {
		now := c.clk.Now()
		got, err := c.limiter().TakeTokens(now, keys, r.Tokens)
		if err != nil {
			return false, 0, err
		}
		last = got
		if got.Allowed || got.TableFull != 0 {
			return got.Allowed, got.RetryAfter, nil
		}
		return c.overdraw(now, end, keys, r.Tokens, got, &ahead)
	}
	res, err := q.Wait(ctx, fairqueue.Request{
		Tenant:     tenant,
		Dimension:  string(used),
		LimitKeys:  limitKeys,
		Deadline:   end,
		RetryAfter: d.RetryAfter,
		Interval:   interval,
		Cost:       cost,
		Size:       r.Tokens,
		Attempt:    attempt,
		Band:       r.band,
	})
	if err == nil && res.Reason == fairqueue.ReasonWaitExceedsBudget && res.Waited == 0 {
		// Refused at arrival: the place it would have had among the holds
		// (the waiters ahead of it, by its share) is expected only after
		// its budget. It is told when that place would be granted. (The
		// queue's observer has counted the refusal.)
		c.undoCount(r, &dec)
		dec.Tokens.Reason, dec.Tokens.Estimate, dec.Tokens.Band = res.Reason, res.Estimate, c.bandName(res.Band)
		if d.RefusedBy == 0 && len(limitKeys) > 0 {
			// Queued behind holders while its own tokens were free: the
			// bucket the holders wait on refuses it.
			dim := limiter.Dimension(limitKeys[0].Kind)
			d = limiter.Decision{LimitType: dim, RefusedBy: limiter.DimensionSet(0).Add(dim)}
		}
		out := c.tokenRefusal(d, keys, dec)
		out.RetryAfter = max(out.RetryAfter, res.RetryAfter)
		return out
	}
	dec.Tokens.Deferred = true
	dec.Tokens.Band = c.bandName(res.Band)
	dec.Tokens.Waited = res.Waited
	dec.Tokens.Estimate = res.Estimate
	dec.Tokens.Reason = res.Reason
	if err == nil && res.Admitted && ahead > 0 {
		if err = c.sleepAhead(ctx, dec.Tokens.Band, ahead); err != nil {
			// The client left before its overdrawn tokens were due: they
			// go back to the buckets.
			if rerr := c.limiter().SettleTokens(c.clk.Now(), keys, -r.Tokens); rerr != nil {
				c.log.V(1).Info("Could not give back the tokens of a hold the client left", "err", rerr)
			}
			if cost > 1 {
				q.AdjustIn(tenant, res.Band, -cost)
			}
		}
		dec.Tokens.Waited += ahead
	}
	switch {
	case errors.Is(err, limiter.ErrStoreUnavailable):
		c.undoCount(r, &dec)
		return unavailable(err)
	case err != nil:
		c.undoCount(r, &dec)
		return Decision{Status: StatusClientClosedRequest, Tokens: dec.Tokens, Err: err}
	case res.Admitted:
		c.reserved(keys, r.Tokens, &dec, last)
		if cost > 1 {
			dec.settle.dq, dec.settle.dqTenant, dec.settle.dqBand = q, tenant, res.Band
			dec.settle.accounted = r.Tokens
		}
		return dec
	case res.Reason == fairqueue.ReasonDisabled:
		// Deferred admission was switched off: admit as without it.
		return dec
	}
	c.undoCount(r, &dec)
	if last.RefusedBy != 0 {
		d = last
	}
	out := c.tokenRefusal(d, keys, dec)
	out.RetryAfter = max(out.RetryAfter, res.RetryAfter)
	if res.Reason == fairqueue.ReasonShutdown {
		out.Status = StatusServiceUnavailable
		out.Err = errors.New("deferral queue shut down while the request was held")
	}
	return out
}

// reserved records an admitted reservation of n tokens in dec.
func (c *Controller) reserved(keys limiter.Keys, n int64, dec *Decision, d limiter.Decision) {
	dec.Tokens.Reserved = n
	dec.Tokens.Quota, dec.Tokens.HasQuota = d.Tightest, d.HasQuota
	dec.settle.reserved = n
	if o := c.tokenObserver(); o != nil {
		applied, na := c.appliedTokenKeys(keys)
		for _, k := range applied[:na] {
			o.TokensReserved(limiter.Dimension(k.Kind), n)
		}
	}
}

// tokenRefusal is the 429 for a token-budget refusal: limit_type the token
// dimension, the size-aware Retry-After, and the refusing token bucket in the
// x-ratelimit-*-tokens quota.
func (c *Controller) tokenRefusal(d limiter.Decision, keys limiter.Keys, dec Decision) Decision {
	out := Decision{
		Status:     StatusTooManyRequests,
		LimitType:  d.LimitType.String(),
		RetryAfter: d.RetryAfter,
		TableFull:  d.TableFull != 0,
		Quota:      dec.Quota,
		HasQuota:   dec.HasQuota,
		Queue:      dec.Queue,
		Tokens:     dec.Tokens,
	}
	if d.RefusedBy != 0 {
		if lim, ok := c.limiter().LimitOf(d.LimitType, keyOf(d.LimitType, keys, "")); ok {
			out.Tokens.Quota, out.Tokens.HasQuota = lim.RefusedCostQuota(d.LimitType, d.RetryAfter, dec.Tokens.Requested), true
		}
	}
	if out.RetryAfter <= 0 {
		out.RetryAfter = time.Millisecond
	}
	return out
}

// undoCount gives back what the request-count admission in dec charged: the
// identity tokens, and the cost the fair queue charged its tenant.
func (c *Controller) undoCount(r Request, dec *Decision) {
	if err := c.limiter().RefundIdentity(c.clk.Now(), r.keys()); err != nil {
		c.log.V(1).Info("Could not give back request-count tokens of a request refused for its token budget", "err", err)
	}
	if st := &dec.settle; st.fq != nil && st.accounted > 0 {
		st.fq.AdjustIn(st.fqTenant, st.fqBand, -st.accounted)
		st.fq = nil
	}
}

// settle corrects an admitted request's token reservation by what it used:
// the token buckets are charged or refunded the difference, and a queue that
// charged its tenant the reservation (fairQueuing.cost Tokens) is corrected
// the same way. Ticket.Done calls it once per admitted request, when its
// response has ended (used = 0 for a request that never reached a backend).
func (c *Controller) settle(r Request, st *settlement, used int64) error {
	used = max(used, 0)
	if st.accounted > 0 {
		delta := used - st.accounted
		if st.fq != nil {
			st.fq.AdjustIn(st.fqTenant, st.fqBand, delta)
		}
		if st.dq != nil {
			st.dq.AdjustIn(st.dqTenant, st.dqBand, delta)
		}
	}
	if st.reserved <= 0 {
		*st = settlement{}
		return nil
	}
	keys := r.keys()
	o := c.tokenObserver()
	if o != nil {
		o.Estimated(st.reserved, used)
		applied, na := c.appliedTokenKeys(keys)
		for _, k := range applied[:na] {
			o.TokensSettled(limiter.Dimension(k.Kind), used)
		}
	}
	delta := used - st.reserved
	*st = settlement{}
	if delta == 0 {
		return nil
	}
	if err := c.limiter().SettleTokens(c.clk.Now(), keys, delta); err != nil {
		return fmt.Errorf("settling %d tokens: %w", delta, err)
	}
	return nil
}

// overdraw lets the held request whose turn it is take its reservation
// before the buckets hold it, so that a large request cannot be starved by
// smaller ones that fit sooner (work-conserving scheduling would otherwise
// let every small request that is ready take the tokens the large one waits
// to accumulate). It may do so only while no bucket is overdrawn already
// (each holds at least one token) and when the wait for the overdrawn
// tokens, got.RetryAfter, fits the hold's end; the request then waits that
// long after its grant (*ahead), and later requests wait behind the debt.
// Otherwise it reports the refusal, retryable once the buckets are out of
// debt, which is when every waiting tenant may compete again in fair order.
func (c *Controller) overdraw(now, end time.Time, keys limiter.Keys, n int64, got limiter.Decision, ahead *time.Duration) (bool, time.Duration, error) {
	p, err := c.limiter().PeekTokens(now, keys, 1)
	if err != nil {
		return false, 0, err
	}
	if !p.Allowed {
		return false, p.RetryAfter, nil
	}
	if !end.IsZero() && now.Add(got.RetryAfter).After(end) {
		return false, got.RetryAfter, nil
	}
	if err := c.limiter().SettleTokens(now, keys, n); err != nil {
		return false, 0, err
	}
	*ahead = got.RetryAfter
	return true, 0, nil
}

// sleepAhead waits d on the controller's clock, or until ctx ends; band
// names the hold's band for the TokenObserver.
func (c *Controller) sleepAhead(ctx context.Context, band string, d time.Duration) error {
	var ch <-chan time.Time
	if clk, ok := c.clk.(clock.Clock); ok {
		t := clk.NewTimer(d)
		defer t.Stop()
		ch = t.C()
	} else {
		t := time.NewTimer(d)
		defer t.Stop()
		ch = t.C
	}
	// Registered once the timer runs, so a due entry always has a timer
	// that has fired or will fire by its due time.
	c.aheadMu.Lock()
	c.aheadSeq++
	id := c.aheadSeq
	if c.aheadDue == nil {
		c.aheadDue = make(map[uint64]time.Time)
	}
	c.aheadDue[id] = c.clk.Now().Add(d)
	c.aheadMu.Unlock()
	defer func() {
		c.aheadMu.Lock()
		delete(c.aheadDue, id)
		c.aheadMu.Unlock()
	}()
	if o := c.tokenObserver(); o != nil {
		o.HeldAhead(band, 1)
		defer o.HeldAhead(band, -1)
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// HeldAhead returns the admitted holds still waiting for the tokens they
// overdrew, and how many of them are due (their wait has ended by the
// clock, but they have not resumed yet). Tests driving a fake clock step it
// only while none is due.
func (c *Controller) HeldAhead() (waiting, due int) {
	now := c.clk.Now()
	c.aheadMu.Lock()
	defer c.aheadMu.Unlock()
	for _, at := range c.aheadDue {
		waiting++
		if !at.After(now) {
			due++
		}
	}
	return waiting, due
}

// TokenRefusal reports whether d is a refusal by a token bucket (SPEC
// section 6), whose answer describes the reservation.
func (d *Decision) TokenRefusal() bool {
	switch d.LimitType {
	case limiter.DimensionAPIKeyTokens.String(), limiter.DimensionUserTokens.String(),
		limiter.DimensionTeamTokens.String(), limiter.DimensionModelTokens.String():
		return true
	}
	return false
}
