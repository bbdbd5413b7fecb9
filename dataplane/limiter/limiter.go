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

// Package limiter implements the token buckets of SPEC section 2: global and
// per-client limits checked before authentication, the identity dimensions
// (api key, user, team, model) checked and charged atomically, and per-backend
// limits charged at dispatch; and the token budgets of SPEC section 6, the
// same four identity dimensions with buckets of LLM tokens, charged a
// request's estimated tokens up front and settled with its actual usage.
//
// A Limiter resolves which buckets a request needs from its Config and asks a
// Store to check them. The default MemoryStore keeps per-replica state with a
// hard per-dimension key cap (see MemoryStore for the memory bound); a shared
// store can implement Store later and report ErrStoreUnavailable so the caller
// answers 503 instead of queuing. The package is pure Go: callers pass the
// current time, normally from an injected k8s.io/utils/clock.
package limiter

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Outcome classifies one dimension's part in a decision, for metrics.
type Outcome uint8

const (
	// OutcomeAllowed means the dimension's bucket was charged (a token, or
	// the request's tokens for a token dimension).
	OutcomeAllowed Outcome = iota
	// OutcomeRefused means the dimension's bucket did not hold the cost.
	OutcomeRefused
	// OutcomeUnavailable means the store could not be reached.
	OutcomeUnavailable
	// OutcomeTableFull means the dimension's key table had no room for a new
	// key: every tracked bucket still held debt.
	OutcomeTableFull

	// NumOutcomes is the number of outcomes.
	NumOutcomes = int(OutcomeTableFull) + 1
)

// String returns the metric label of o: "allowed", "refused", "unavailable"
// or "table_full".
func (o Outcome) String() string {
	switch o {
	case OutcomeAllowed:
		return "allowed"
	case OutcomeRefused:
		return "refused"
	case OutcomeUnavailable:
		return "unavailable"
	case OutcomeTableFull:
		return "table_full"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Observer receives one call per dimension per decision: allowed for each
// bucket charged, refused for each bucket without a token (the other buckets
// of a refused batch are neither charged nor reported), unavailable for each
// bucket of a batch the store could not check, table_full for each dimension
// whose key table had no room for the request's new key. It must be cheap and
// allocation-free; it is called on the request path.
type Observer interface {
	ObserveDecision(d Dimension, o Outcome)
}

// MemoryObserver is an Observer that can read the decisions of a MemoryStore
// from the store (MemoryStore.AddDecisions) instead of being told each one:
// the store counts them under the shard locks it already holds, which saves
// an atomic add per bucket on the request path.
type MemoryObserver interface {
	Observer
	// CountsMemory reports whether the observer reads s's counts from now
	// on; false leaves the limiter telling it each decision.
	CountsMemory(s *MemoryStore) bool
}

// Keys names the identity buckets a request is charged against. Each field is
// the hashed identity or the model name; empty means the request lacks it and
// the dimension does not apply.
type Keys struct {
	// APIKey is the hashed API key.
	APIKey string
	// User is the hashed user id.
	User string
	// Team is the hashed team id.
	Team string
	// Model is the model name.
	Model string
}

// Options tunes a Limiter.
type Options struct {
	// Store holds bucket state; nil means a new MemoryStore.
	Store Store
	// MaxKeysPerDimension caps the default MemoryStore; 0 means DefaultMaxKeysPerDimension.
	MaxKeysPerDimension int
	// Observer, if set, is told every decision.
	Observer Observer
}

// Limiter decides requests against the configured limits. It is safe for
// concurrent use; SetConfig may be called while requests are in flight.
type Limiter struct {
	store Store
	// mem is store when it is the in-memory store, called directly so that
	// a batch is neither copied nor passed through the interface.
	mem      *MemoryStore
	observer Observer
	// memCounted is set when the observer reads mem's own counts, so
	// decisions mem makes are not told to it.
	memCounted bool
	cfg        atomic.Pointer[resolved]
}

// resolved is a Config flattened for the request path.
type resolved struct {
	on        [NumDimensions]bool
	limits    [NumDimensions]shaped
	overrides map[string]*shaped
	// tokenOverrides replaces limits[DimensionModelTokens] per model.
	tokenOverrides map[string]*shaped
}

// New returns a Limiter for cfg, or an error naming the invalid limit.
func New(cfg Config, opts Options) (*Limiter, error) {
	l := &Limiter{store: opts.Store, observer: opts.Observer}
	if l.store == nil {
		l.store = NewMemoryStore(opts.MaxKeysPerDimension)
	}
	l.mem, _ = l.store.(*MemoryStore)
	if o, ok := l.observer.(MemoryObserver); ok && l.mem != nil {
		l.memCounted = o.CountsMemory(l.mem)
	}
	if err := l.SetConfig(cfg); err != nil {
		return nil, err
	}
	return l, nil
}

// Store returns the limiter's store.
func (l *Limiter) Store() Store { return l.store }

// SetConfig replaces the limits in place. Bucket state is kept: a bucket whose
// limit is unchanged behaves as if nothing happened, and a bucket whose limit
// changed keeps the fraction of its capacity in use. An invalid cfg is refused
// and the previous one stays in force.
func (l *Limiter) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid rate limits, keeping the previous ones: %w", err)
	}
	r := &resolved{
		overrides:      make(map[string]*shaped, len(cfg.ModelOverrides)),
		tokenOverrides: make(map[string]*shaped, len(cfg.ModelTokenOverrides)),
	}
	for d, lim := range cfg.limits() {
		if lim != nil {
			r.on[d], r.limits[d] = true, shapeOf(*lim)
		}
	}
	for m, lim := range cfg.ModelOverrides {
		s := shapeOf(lim)
		r.overrides[m] = &s
	}
	for m, lim := range cfg.ModelTokenOverrides {
		s := shapeOf(lim)
		r.tokenOverrides[m] = &s
	}
	l.cfg.Store(r)
	return nil
}

// TakePreAuth checks and charges the global and per-client buckets together,
// before authentication. A refusal is never queueable. An empty client address
// skips the per-client bucket.
func (l *Limiter) TakePreAuth(now time.Time, client string) (Decision, error) {
	var b Batch
	l.cfg.Load().preAuthBatch(&b, client)
	return l.take(now, &b)
}

// TakeAdmission is TakePreAuth for client followed, only when it admits, by
// TakeIdentity for k: pre is the pre-authentication decision, id the
// identity one (zero unless pre.Allowed), err an error of either. With the
// in-memory store it is one trip, every bucket decided at one instant with
// the limits of one config; a refusal by the identity buckets leaves the
// pre-authentication buckets charged, as the two calls would.
func (l *Limiter) TakeAdmission(now time.Time, client string, k Keys) (pre, id Decision, err error) {
	r := l.cfg.Load()
	var pb, ib Batch
	r.preAuthBatch(&pb, client)
	r.keysBatch(&ib, k, 0, r.overrides, 0)
	if l.mem == nil {
		if pre, err = l.take(now, &pb); err != nil || !pre.Allowed {
			return pre, Decision{}, err
		}
		id, err = l.take(now, &ib)
		return pre, id, err
	}
	// Global and client come before every identity dimension in the store's
	// table order, as takeInOrder needs.
	l.mem.takeInOrder(now, &pb, &ib, &pre, &id)
	l.observe(&pb, &pre, nil)
	if pre.Allowed {
		l.observe(&ib, &id, nil)
	}
	return pre, id, nil
}

// preAuthBatch fills b with the global and per-client buckets that apply to
// a request from client.
func (r *resolved) preAuthBatch(b *Batch, client string) {
	if r.on[DimensionGlobal] {
		b.add(DimensionGlobal, "", &r.limits[DimensionGlobal], 0)
	}
	if r.on[DimensionClient] && client != "" {
		b.add(DimensionClient, client, &r.limits[DimensionClient], 0)
	}
}

// TakeIdentity checks the api key, user, team and model buckets that apply to
// k and charges all of them or none.
func (l *Limiter) TakeIdentity(now time.Time, k Keys) (Decision, error) {
	var b Batch
	l.identityBatch(&b, k)
	return l.decide(now, &b, true)
}

// PeekIdentity reports what TakeIdentity would decide, without charging.
func (l *Limiter) PeekIdentity(now time.Time, k Keys) (Decision, error) {
	var b Batch
	l.identityBatch(&b, k)
	return l.decide(now, &b, false)
}

// RefundIdentity gives back the identity tokens a TakeIdentity for k charged,
// for a request that a later stage refused (every backend exhausted), so no
// token is lost to it (SPEC section 2). Buckets whose limit was switched off
// since are left alone.
func (l *Limiter) RefundIdentity(now time.Time, k Keys) error {
	var b Batch
	l.identityBatch(&b, k)
	if b.n == 0 {
		return nil
	}
	if err := l.store.Refund(now, b); err != nil {
		return fmt.Errorf("rate-limit refund: %w", err)
	}
	return nil
}

// identityBatch fills b with the request-count buckets that apply to k.
func (l *Limiter) identityBatch(b *Batch, k Keys) {
	r := l.cfg.Load()
	r.keysBatch(b, k, 0, r.overrides, 0)
}

// tokenBatch fills b with the token buckets that apply to k, each asking
// for cost.
func (l *Limiter) tokenBatch(b *Batch, k Keys, cost int64) {
	r := l.cfg.Load()
	r.keysBatch(b, k, tokenOffset, r.tokenOverrides, cost)
}

// keysBatch adds to b the buckets of k's api key, user, team and model in
// the dimensions shifted by offset from DimensionAPIKey..DimensionModel (0
// for the request-count buckets, tokenOffset for the token buckets), each
// asking for cost; overrides replaces the model dimension's limit per model.
func (r *resolved) keysBatch(b *Batch, k Keys, offset Dimension, overrides map[string]*shaped, cost int64) {
	if d := DimensionAPIKey + offset; r.on[d] && k.APIKey != "" {
		b.add(d, k.APIKey, &r.limits[d], cost)
	}
	if d := DimensionUser + offset; r.on[d] && k.User != "" {
		b.add(d, k.User, &r.limits[d], cost)
	}
	if d := DimensionTeam + offset; r.on[d] && k.Team != "" {
		b.add(d, k.Team, &r.limits[d], cost)
	}
	if d := DimensionModel + offset; k.Model != "" {
		if lim, ok := overrides[k.Model]; ok {
			b.add(d, k.Model, lim, cost)
		} else if r.on[d] {
			b.add(d, k.Model, &r.limits[d], cost)
		}
	}
}

// TakeTokens checks the token buckets (api key, user, team, model) that apply
// to k and, only if every one holds n tokens, charges each n: all or none. n
// is the request's reservation (estimated prompt plus output cap); below 1 it
// counts as 1. A reservation above a bucket's capacity waits for that bucket
// to be full and is then charged in full, leaving debt. A refusal's
// RetryAfter is the time until every refusing bucket holds n tokens, and its
// LimitType a token dimension.
func (l *Limiter) TakeTokens(now time.Time, k Keys, n int64) (Decision, error) {
	var b Batch
	l.tokenBatch(&b, k, n)
	return l.decide(now, &b, true)
}

// PeekTokens reports what TakeTokens would decide, without charging.
func (l *Limiter) PeekTokens(now time.Time, k Keys, n int64) (Decision, error) {
	var b Batch
	l.tokenBatch(&b, k, n)
	return l.decide(now, &b, false)
}

// SettleTokens corrects the token buckets of k once a request's actual usage
// is known: delta is actual minus reserved tokens. A positive delta is
// charged unconditionally (the tokens were used), leaving at most
// MaxAdjustDebt capacities of debt; a negative one is given back, never
// above a bucket's capacity. Buckets whose limit was switched off since are
// left alone.
func (l *Limiter) SettleTokens(now time.Time, k Keys, delta int64) error {
	if delta == 0 {
		return nil
	}
	var b Batch
	l.tokenBatch(&b, k, delta)
	if b.n == 0 {
		return nil
	}
	if err := l.store.Adjust(now, b); err != nil {
		return fmt.Errorf("rate-limit token settle: %w", err)
	}
	return nil
}

// HasTokenLimits reports whether any token bucket applies to k, so a caller
// can skip estimating tokens for a request no token budget limits.
func (l *Limiter) HasTokenLimits(k Keys) bool {
	r := l.cfg.Load()
	if k.Model != "" {
		if _, ok := r.tokenOverrides[k.Model]; ok || r.on[DimensionModelTokens] {
			return true
		}
	}
	return (r.on[DimensionAPIKeyTokens] && k.APIKey != "") ||
		(r.on[DimensionUserTokens] && k.User != "") ||
		(r.on[DimensionTeamTokens] && k.Team != "")
}

// TakeBackend charges the named backend's bucket at dispatch. A refused
// backend should be dropped from the candidates; it is never queued.
func (l *Limiter) TakeBackend(now time.Time, name string) (Decision, error) {
	return l.backend(now, name, true)
}

// HasBackendToken reports whether the named backend's bucket has a token now,
// without charging it, so exhausted backends can be skipped at selection.
func (l *Limiter) HasBackendToken(now time.Time, name string) (bool, error) {
	d, err := l.backend(now, name, false)
	return d.Allowed, err
}

// backend decides the named backend's bucket, charging it when charge is set.
func (l *Limiter) backend(now time.Time, name string, charge bool) (Decision, error) {
	var b Batch
	if r := l.cfg.Load(); r.on[DimensionBackend] {
		b.add(DimensionBackend, name, &r.limits[DimensionBackend], 0)
	}
	return l.decide(now, &b, charge)
}

// decide asks the store about b: a Peek, or when charge is set a Take whose
// outcome for each bucket the observer is told. The batches are built in
// place and passed by pointer to the in-memory store; another Store gets a
// copy, which keeps a call through the interface from allocating.
func (l *Limiter) decide(now time.Time, b *Batch, charge bool) (Decision, error) {
	switch {
	case charge:
		return l.take(now, b)
	case l.mem != nil:
		return l.mem.decide(now, b, false), nil
	}
	return l.store.Peek(now, *b)
}

// take charges b and tells the observer the outcome of each bucket.
func (l *Limiter) take(now time.Time, b *Batch) (Decision, error) {
	if b.n == 0 {
		return Decision{Allowed: true}, nil
	}
	var (
		d   Decision
		err error
	)
	if l.mem != nil {
		d = l.mem.decide(now, b, true)
	} else if d, err = l.store.Take(now, *b); err != nil {
		d = Decision{}
	}
	l.observe(b, &d, err)
	if err != nil {
		return d, fmt.Errorf("rate-limit check: %w", err)
	}
	return d, nil
}

// observe tells the observer the outcome of each bucket of b, a Take decided
// as d or failed with err, unless it reads them from the in-memory store.
func (l *Limiter) observe(b *Batch, d *Decision, err error) {
	o := l.observer
	if o == nil || l.memCounted {
		return
	}
	for i := 0; i < b.n; i++ {
		dim := b.reqs[i].Dimension
		if err != nil {
			o.ObserveDecision(dim, OutcomeUnavailable)
		} else if out, ok := outcomeOf(d, dim); ok {
			o.ObserveDecision(dim, out)
		}
	}
}

// outcomeOf returns what d, a Take's decision, means for the bucket of dim
// (see Observer), and false for a bucket of a refused batch that was neither
// charged nor refused.
func outcomeOf(d *Decision, dim Dimension) (Outcome, bool) {
	switch {
	case d.Allowed:
		return OutcomeAllowed, true
	case d.TableFull.Has(dim):
		return OutcomeTableFull, true
	case d.RefusedBy.Has(dim):
		return OutcomeRefused, true
	}
	return 0, false
}
