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
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// Defaults of Options.
const (
	// DefaultPeriod is the default exchange period.
	DefaultPeriod = 200 * time.Millisecond
	// DefaultHeadroom is the default factor by which gate rates exceed the
	// allocation. At 1 the gates sum to the shared capacity, and their one
	// interval of tolerance absorbs scheduling jitter; above 1 the shared bucket
	// binds and refuses the excess, not in proportion to the shares.
	DefaultHeadroom = 1.0
	// DefaultMaxKeys is the default bound on contended keys tracked.
	DefaultMaxKeys = 64
	// DefaultMaxTenants is the default bound on tenants tracked per key.
	DefaultMaxTenants = 1024
	// DefaultKeyGrace is how long replicas may hash with different keys
	// before it is reported: a rotation reaches every replica through the
	// ConfigMap watch within seconds, so a disagreement lasting longer is a
	// misconfiguration (replicas that each created their own key file).
	DefaultKeyGrace = 30 * time.Second
	// idlePeriods is how many silent periods a tenant or key is kept.
	idlePeriods = 25
	// ewmaAlpha weighs the newest period in the demand and admission rates.
	ewmaAlpha = 0.5
)

// Share is one tenant's part of one key in one priority band after an
// exchange round.
type Share struct {
	// Tenant is the tenant key (an identity hash).
	Tenant string
	// Band is the index of the priority band (0 without bands). A tenant
	// whose requests lowered their band has a Share in each band.
	Band int
	// BandName is the name of band Band ("" without bands), for labels.
	BandName string
	// Fleet is the tenant's fraction of the key's admissions across the
	// fleet during the last period.
	Fleet float64
	// Local is the same fraction on this replica alone.
	Local float64
	// Allocation is the tenant's fleet-wide max-min share of the key's
	// capacity, per second.
	Allocation float64
	// Gate is this replica's pacing rate for the tenant, per second; 0 means
	// the gate is open (the key is not contended), unless Closed.
	Gate float64
	// Closed is true when the bands above take the whole capacity: the gate
	// passes nothing until a later round.
	Closed bool
}

// Observer receives the outcome of every exchange round, typically to update
// metrics. It is called without the Pacer's lock held.
type Observer interface {
	// Synced reports the live replicas and the shares of key after a round.
	Synced(key string, replicas int, contended bool, shares []Share)
	// ExchangeFailed reports a round for key that could not reach the exchange.
	ExchangeFailed(key string, err error)
}

// MembersObserver receives the outcome of every membership round, when an
// Observer implements it too.
type MembersObserver interface {
	// Members reports the live replicas the exchange counted, and whether
	// the replicas have hashed identities with different keys for longer
	// than the grace (KeyHealth says how).
	Members(live int, keyMismatch bool)
}

// Options configure a Pacer.
type Options struct {
	// Replica names this replica, unique in the fleet (the pod name).
	Replica string
	// Exchange shares demand reports with the other replicas; required.
	Exchange Exchange
	// Period is the exchange period; 0 means DefaultPeriod.
	Period time.Duration
	// TTL is how long a report stays valid, so a replica that died without
	// leaving stops counting after it; 0 means three periods.
	TTL time.Duration
	// Headroom is the factor by which gate rates exceed allocations; values
	// below 1 mean DefaultHeadroom (see the package documentation).
	Headroom float64
	// MaxKeys bounds the keys tracked; 0 means DefaultMaxKeys. Requests on
	// further keys pass the gate unpaced.
	MaxKeys int
	// MaxTenants bounds the tenants tracked per key; 0 means
	// DefaultMaxTenants. Further tenants pass the gate unpaced.
	MaxTenants int
	// Observer, if set, is told the outcome of every round.
	Observer Observer
	// KeyGrace is how long the replicas' hash-key fingerprints may disagree
	// (a rotation in progress) before it is logged, counted and shown on
	// readiness; 0 means DefaultKeyGrace.
	KeyGrace time.Duration
}

// Pacer paces, on one replica, the admissions of each tenant on each shared
// limit key to the tenant's part of the fleet's weighted max-min allocation
// (see the package documentation). It is safe for concurrent use.
type Pacer struct {
	clk  clock.WithTicker
	opts Options
	log  logr.Logger

	mu        sync.Mutex
	weights   fairqueue.Weights
	limits    limiter.Config
	keys      map[string]*keyState
	lastSync  time.Time
	failing   bool
	lastAlive time.Time

	// Membership (see MembersKey).
	fingerprint   string       // this replica's hash key fingerprint
	live          atomic.Int64 // replicas the last membership round counted; read without mu
	keyDisagree   time.Time    // since when fingerprints disagree; zero while they agree
	keyMismatch   error        // non-nil once they disagreed beyond the grace
	keyMinority   bool         // another fingerprint is held by more replicas
	membersFailed bool
}

// keyState is the Pacer's state for one limit key.
type keyState struct {
	tenants map[claimant]*tenantState
}

// tenantState is the Pacer's state for one claimant (a tenant in a band) on
// one key.
type tenantState struct {
	arrivals, admitted int64 // since the last round
	held               bool  // a request was held back since the last round
	demand, admitRate  float64
	rate               float64   // gate rate per second; 0 = open
	closed             bool      // the band is starved: nothing passes
	tat                time.Time // the gate's theoretical arrival time (GCRA)
	idle               int
}

// New returns a Pacer; Run must be started for it to exchange reports.
func New(clk clock.WithTicker, opts Options, log logr.Logger) (*Pacer, error) {
	if clk == nil || opts.Exchange == nil {
		return nil, errors.New("fleet pacer: a clock and an exchange are required")
	}
	if opts.Replica == "" {
		return nil, errors.New("fleet pacer: the replica name is empty: set it to the pod name (or any name unique in the fleet)")
	}
	if opts.Period <= 0 {
		opts.Period = DefaultPeriod
	}
	if opts.TTL <= 0 {
		opts.TTL = 3 * opts.Period
	}
	if opts.Headroom < 1 {
		opts.Headroom = DefaultHeadroom
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	if opts.MaxTenants <= 0 {
		opts.MaxTenants = DefaultMaxTenants
	}
	if opts.KeyGrace <= 0 {
		opts.KeyGrace = DefaultKeyGrace
	}
	return &Pacer{clk: clk, opts: opts, log: log, keys: map[string]*keyState{}, weights: fairqueue.Weights{Default: 1}}, nil
}

// SetWeights sets the tenant weights and priority bands, the same ones
// given to the fair queue.
func (p *Pacer) SetWeights(w fairqueue.Weights) {
	c := w.Clone()
	p.mu.Lock()
	p.weights = c
	p.mu.Unlock()
}

// SetLimits sets the limits whose model buckets the fleet shares; the
// capacity of a key is its model limit's rate.
func (p *Pacer) SetLimits(cfg limiter.Config) {
	c := limiter.Config{Model: cfg.Model, ModelOverrides: make(map[string]limiter.Limit, len(cfg.ModelOverrides))}
	for k, v := range cfg.ModelOverrides {
		c.ModelOverrides[k] = v
	}
	p.mu.Lock()
	p.limits = c
	p.mu.Unlock()
}

// capacityLocked returns the rate of key's model bucket per second, or 0
// when no model limit applies.
func (p *Pacer) capacityLocked(key string) float64 {
	l, ok := p.limits.ModelOverrides[key]
	if !ok {
		if p.limits.Model == nil {
			return 0
		}
		l = *p.limits.Model
	}
	if l.Requests <= 0 || l.Period <= 0 {
		return 0
	}
	return float64(l.Requests) / l.Period.Seconds()
}

func (p *Pacer) weightLocked(tenant string) int {
	return p.weights.Of(tenant)
}

// bandLocked returns the band a request of tenant that asked for band is
// paced in, as the fair queue schedules it (fairqueue.Request.Band): band
// when it is below the tenant's own (a larger index) and exists, else the
// tenant's own band.
func (p *Pacer) bandLocked(tenant string, band int) int {
	own := p.weights.BandOf(tenant)
	if band > own && band < len(p.weights.Bands) {
		return band
	}
	return own
}

// stateLocked returns the state of tenant's requests that asked for band
// on key, creating it within the bounds; nil means the bounds are reached
// and the requests pass unpaced.
func (p *Pacer) stateLocked(tenant string, band int, key string) *tenantState {
	ks := p.keys[key]
	if ks == nil {
		if len(p.keys) >= p.opts.MaxKeys {
			return nil
		}
		ks = &keyState{tenants: map[claimant]*tenantState{}}
		p.keys[key] = ks
	}
	c := claimant{tenant: tenant, band: p.bandLocked(tenant, band)}
	ts := ks.tenants[c]
	if ts == nil {
		if len(ks.tenants) >= p.opts.MaxTenants {
			return nil
		}
		ts = &tenantState{}
		ks.tenants[c] = ts
	}
	return ts
}

// Arrive records a new request of tenant, in its own band, that needs key.
func (p *Pacer) Arrive(tenant, key string) { p.ArriveBand(tenant, 0, key) }

// ArriveBand records a new request of tenant that asked for band
// (fairqueue.Request.Band: a band below the tenant's own lowers the
// request, anything else means the tenant's own band) and needs key.
func (p *Pacer) ArriveBand(tenant string, band int, key string) {
	p.mu.Lock()
	if ts := p.stateLocked(tenant, band, key); ts != nil {
		ts.arrivals++
	}
	p.mu.Unlock()
}

// Allow reports whether tenant may try the shared bucket of key now, and
// consumes its turn if so. Otherwise it returns how long to wait, at most one
// exchange period (the allocation may change by then).
func (p *Pacer) Allow(now time.Time, tenant, key string) (bool, time.Duration) {
	return p.AllowBand(now, tenant, 0, key)
}

// AllowBand is Allow for a request of tenant that asked for band (see
// ArriveBand): a lowered request is paced to the tenant's allocation in the
// lower band, so it never takes a turn of the tenant's own band.
func (p *Pacer) AllowBand(now time.Time, tenant string, band int, key string) (bool, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ts := p.stateLocked(tenant, band, key)
	if ts == nil {
		return true, 0
	}
	if ts.closed {
		ts.held = true
		return false, p.opts.Period
	}
	if ts.rate <= 0 {
		return true, 0
	}
	interval := time.Duration(float64(time.Second) / ts.rate)
	next := ts.tat
	if next.Before(now) {
		next = now
	}
	// One interval of tolerance, at least gateJitter: a gate admits at most
	// two requests back to back (more above 1/gateJitter per second), then
	// one per interval.
	if wait := next.Sub(now) - tolerance(interval); wait > 0 {
		ts.held = true
		return false, min(wait, p.opts.Period)
	}
	ts.tat = next.Add(interval)
	return true, 0
}

// Done records the outcome of an attempt Allow let through: admitted, or
// refused by the shared bucket of key (which marks the tenant backlogged).
// Refusals by other buckets must not be reported.
func (p *Pacer) Done(tenant, key string, admitted bool) { p.DoneBand(tenant, 0, key, admitted) }

// DoneBand is Done for an attempt AllowBand let through.
func (p *Pacer) DoneBand(tenant string, band int, key string, admitted bool) {
	p.mu.Lock()
	if ts := p.stateLocked(tenant, band, key); ts != nil {
		if admitted {
			ts.admitted++
		} else {
			ts.held = true
		}
	}
	p.mu.Unlock()
}

// round is one key's part of an exchange round.
type round struct {
	key      string
	capacity float64
	report   Report
	leave    bool
	reports  []Report
	err      error
}

// SetKeyFingerprint sets the fingerprint of the hash key this replica hashes
// identities with (config.KeyFingerprint of the loaded config's key), which
// it publishes in its membership report.
func (p *Pacer) SetKeyFingerprint(fp string) {
	p.mu.Lock()
	p.fingerprint = fp
	p.mu.Unlock()
}

// Live returns the number of live replicas the last membership round
// counted (this one included), at least 1; while the exchange fails it keeps
// the last count. It implements redisstore.Replicas, so a store failing open
// divides every limit among the replicas last seen alive.
func (p *Pacer) Live() int {
	return max(int(p.live.Load()), 1)
}

// KeyHealth returns nil while the fleet's replicas hash identities with the
// same key (or have disagreed for less than the grace), else an error
// naming the fingerprints and the fix. A replica with another key turns
// every tenant it sees into a different tenant for the fleet's buckets and
// shares.
func (p *Pacer) KeyHealth() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.keyMismatch
}

// Sync runs one exchange round: it publishes this replica's report for every
// tracked key, reads the fleet's, and recomputes the gate rates. A key whose
// exchange fails keeps its rates while the last good round is within TTL and
// opens its gates after (local fairness, the shared bucket still caps the
// total). The error joins every key's failure.
func (p *Pacer) Sync(ctx context.Context) error {
	p.mu.Lock()
	me := Report{Replica: p.opts.Replica, Fingerprint: p.fingerprint}
	p.mu.Unlock()
	members, merr := p.opts.Exchange.Swap(ctx, MembersKey, me, p.opts.TTL)
	p.applyMembers(me.Fingerprint, members, merr)
	rounds := p.collect()
	for i := range rounds {
		r := &rounds[i]
		if r.leave {
			r.err = p.opts.Exchange.Leave(ctx, r.key, p.opts.Replica)
			continue
		}
		r.reports, r.err = p.opts.Exchange.Swap(ctx, r.key, r.report, p.opts.TTL)
	}
	return p.apply(rounds)
}

// collect closes the current period: it turns counters into rates, drops
// idle tenants and keys, and returns the reports to publish.
func (p *Pacer) collect() []round {
	now := p.clk.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	dt := now.Sub(p.lastSync).Seconds()
	if p.lastSync.IsZero() || dt <= 0 {
		dt = p.opts.Period.Seconds()
	}
	p.lastSync = now
	var shares []float64 // nil without bands: the report is as before bands
	for _, b := range p.weights.Bands {
		shares = append(shares, b.MinShare)
	}
	rounds := make([]round, 0, len(p.keys))
	for key, ks := range p.keys {
		r := round{key: key, capacity: p.capacityLocked(key), report: Report{Replica: p.opts.Replica, BandShares: shares}}
		for c, ts := range ks.tenants {
			ts.demand = ewma(ts.demand, float64(ts.arrivals)/dt)
			ts.admitRate = ewma(ts.admitRate, float64(ts.admitted)/dt)
			if ts.arrivals == 0 && ts.admitted == 0 && !ts.held {
				ts.idle++
			} else {
				ts.idle = 0
			}
			held := ts.held
			ts.arrivals, ts.admitted, ts.held = 0, 0, false
			if ts.idle > idlePeriods {
				delete(ks.tenants, c)
				continue
			}
			r.report.Tenants = append(r.report.Tenants, TenantReport{
				Tenant: c.tenant, Weight: p.weightLocked(c.tenant), Band: c.band,
				Demand: ts.demand, Backlogged: held, Admitted: ts.admitRate,
			})
		}
		if len(ks.tenants) == 0 {
			delete(p.keys, key)
			r.leave = true
		}
		rounds = append(rounds, r)
	}
	return rounds
}

// apply installs the plans of a round and reports them.
func (p *Pacer) apply(rounds []round) error {
	now := p.clk.Now()
	var errs []error
	type synced struct {
		key       string
		replicas  int
		contended bool
		shares    []Share
	}
	var out []synced
	p.mu.Lock()
	for _, r := range rounds {
		if r.leave {
			continue
		}
		if errors.Is(r.err, ErrNotShared) {
			// Per-replica buckets: there is no fleet to divide.
			if ks := p.keys[r.key]; ks != nil {
				for _, ts := range ks.tenants {
					ts.open()
				}
			}
			continue
		}
		if r.err != nil {
			errs = append(errs, fmt.Errorf("fleet exchange for key %q: %w", r.key, r.err))
			continue
		}
		pl := makePlan(r.capacity, p.opts.Replica, r.reports, p.opts.Headroom, minRate(r.capacity), &p.weights)
		ks := p.keys[r.key]
		if ks == nil {
			continue
		}
		s := synced{key: r.key, replicas: pl.replicas, contended: pl.contended}
		for c, tp := range pl.tenants {
			if ts := ks.tenants[c]; ts != nil {
				ts.closed = tp.closed
				ts.setRate(now, tp.rate)
			}
			s.shares = append(s.shares, Share{Tenant: c.tenant, Band: c.band, BandName: p.weights.BandName(c.band), Fleet: tp.fleetShare, Local: tp.localShare,
				Allocation: tp.allocation, Gate: tp.rate, Closed: tp.closed})
		}
		out = append(out, s)
	}
	err := errors.Join(errs...)
	wasFailing := p.failing
	p.failing = err != nil
	if err == nil {
		p.lastAlive = now
	} else if now.Sub(p.lastAlive) > p.opts.TTL {
		// The fleet's view is stale: fall back to local fairness.
		for _, ks := range p.keys {
			for _, ts := range ks.tenants {
				ts.open()
			}
		}
	}
	p.mu.Unlock()

	switch {
	case err != nil && !wasFailing:
		p.log.Error(err, "Fleet exchange failed: keeping the last fleet shares for the report TTL, then pacing by local fairness only", "replica", p.opts.Replica, "ttl", p.opts.TTL)
	case err == nil && wasFailing:
		p.log.Info("Fleet exchange recovered", "replica", p.opts.Replica)
	}
	if obs := p.opts.Observer; obs != nil {
		for _, r := range rounds {
			if r.err != nil && !errors.Is(r.err, ErrNotShared) {
				obs.ExchangeFailed(r.key, r.err)
			}
		}
		for _, s := range out {
			obs.Synced(s.key, s.replicas, s.contended, s.shares)
		}
	}
	return err
}

// applyMembers counts the live replicas of a membership round and checks
// that they publish one hash-key fingerprint.
func (p *Pacer) applyMembers(own string, members []Report, err error) {
	now := p.clk.Now()
	type logLine struct {
		err      error
		msg      string
		fps      map[string]int
		minority bool
	}
	var line *logLine
	p.mu.Lock()
	switch {
	case errors.Is(err, ErrNotShared):
		// Per-replica buckets: nothing to count or to split.
		p.live.Store(1)
		p.membersFailed = false
		p.keyDisagree, p.keyMismatch, p.keyMinority = time.Time{}, nil, false
	case err != nil && len(members) == 0:
		// Keep the last count: it is what the fail-open fallback needs
		// while the store (and with it the exchange) is unreachable.
		if !p.membersFailed {
			// The store's own outage is logged by the store.
			p.log.V(1).Info("Counting the fleet's replicas failed; the fail-open fallback keeps dividing limits by the last count",
				"error", err.Error(), "liveReplicas", p.Live())
		}
		p.membersFailed = true
	default:
		p.membersFailed = false
		p.live.Store(int64(max(len(members), 1)))
		fps := map[string]int{}
		for _, m := range members {
			if m.Fingerprint != "" {
				fps[m.Fingerprint]++
			}
		}
		if len(fps) <= 1 {
			if p.keyMismatch != nil {
				line = &logLine{msg: "The fleet's replicas hash identities with one key again"}
			}
			p.keyDisagree, p.keyMismatch, p.keyMinority = time.Time{}, nil, false
			break
		}
		if p.keyDisagree.IsZero() {
			p.keyDisagree = now
		}
		most := 0
		for _, n := range fps {
			most = max(most, n)
		}
		p.keyMinority = fps[own] < most
		if now.Sub(p.keyDisagree) < p.opts.KeyGrace {
			break
		}
		was := p.keyMismatch != nil
		p.keyMismatch = keyMismatchError(own, fps, p.keyMinority, now.Sub(p.keyDisagree))
		if !was {
			line = &logLine{err: p.keyMismatch, msg: "Replicas sharing the rate-limit store hash identities with different keys: " +
				"each key turns a tenant into a different tenant for the fleet's buckets and fair shares", fps: fps, minority: p.keyMinority}
		}
	}
	live, mismatch := p.Live(), p.keyMismatch != nil
	p.mu.Unlock()

	if line != nil {
		switch {
		case line.fps != nil:
			p.log.Error(line.err, line.msg, "replica", p.opts.Replica, "fingerprint", own, "fingerprints", line.fps, "minority", line.minority)
		default:
			p.log.Info(line.msg, "replica", p.opts.Replica, "fingerprint", own)
		}
	}
	if mo, ok := p.opts.Observer.(MembersObserver); ok && !errors.Is(err, ErrNotShared) {
		mo.Members(live, mismatch)
	}
}

// keyMismatchError says which fingerprints the fleet holds and what to do.
func keyMismatchError(own string, fps map[string]int, minority bool, since time.Duration) error {
	names := slices.Sorted(maps.Keys(fps))
	parts := make([]string, len(names))
	for i, fp := range names {
		parts[i] = fmt.Sprintf("%s on %d", fp, fps[fp])
	}
	most, atMost := 0, 0
	for _, n := range fps {
		switch {
		case n > most:
			most, atMost = n, 1
		case n == most:
			atMost++
		}
	}
	where := "this replica holds the key most replicas hold"
	switch {
	case minority:
		where = "most replicas hold another key than this one"
	case atMost > 1:
		where = "no key is held by more replicas than every other"
	}
	return fmt.Errorf("the replicas sharing the rate-limit store have hashed identities with different keys for %s "+
		"(fingerprints: %s; this replica's: %s; %s): give every replica the same hash key "+
		"(one --hash-key-file, or the policy's hash-key Secret)", since.Round(time.Second), strings.Join(parts, ", "), own, where)
}

// Run exchanges reports every period until ctx ends, then withdraws this
// replica's reports so the fleet re-divides its share at once.
func (p *Pacer) Run(ctx context.Context) {
	t := p.clk.NewTicker(p.opts.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			p.leaveAll()
			return
		case <-t.C():
			rctx, cancel := context.WithTimeout(ctx, p.opts.Period)
			_ = p.Sync(rctx) // logged by apply on every transition
			cancel()
		}
	}
}

// leaveAll withdraws every report, bounded by one period.
func (p *Pacer) leaveAll() {
	p.mu.Lock()
	keys := make([]string, 0, len(p.keys))
	for k := range p.keys {
		keys = append(keys, k)
	}
	p.mu.Unlock()
	keys = append(keys, MembersKey)
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.Period)
	defer cancel()
	for _, k := range keys {
		if err := p.opts.Exchange.Leave(ctx, k, p.opts.Replica); err != nil {
			p.log.V(1).Info("Could not withdraw the fleet report; it expires after the TTL", "key", k, "err", err)
			return
		}
	}
}

// Gates returns this replica's gate rates on key per tenant (named by
// identity.Short, followed by "@" and the band's name with bands), as of
// the last round, for a demo or a debug endpoint. A closed gate's rate is
// -1.
func (p *Pacer) Gates(key string) map[string]float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]float64{}
	if ks := p.keys[key]; ks != nil {
		for c, ts := range ks.tenants {
			name := identity.Short(c.tenant)
			if len(p.weights.Bands) > 0 {
				name += "@" + p.weights.BandName(c.band)
			}
			out[name] = ts.rate
			if ts.closed {
				out[name] = -1
			}
		}
	}
	return out
}

// open opens the gate: local fairness only.
func (ts *tenantState) open() { ts.rate, ts.closed = 0, false }

// gateJitter is the least tolerance of a gate: a replica's waiter that
// wakes this late (a busy CPU, a slow Redis call) still finds its turn, so
// a fast gate (above 40/s, an interactive band taking most of a key) does
// not lose capacity to every scheduling delay longer than its interval.
const gateJitter = 25 * time.Millisecond

// tolerance is how far ahead of now a gate of the given interval may have
// scheduled its next turn and still pass a request.
func tolerance(interval time.Duration) time.Duration { return max(interval, gateJitter) }

// setRate changes the gate's rate. At a steady rate the theoretical arrival
// time is at most one interval plus the tolerance ahead; a
// turn scheduled further ahead at a lower rate is pulled back to that, so a
// tenant owed more is not held back by its old pace, and a steady gate is
// left alone.
func (ts *tenantState) setRate(now time.Time, rate float64) {
	ts.rate = rate
	if rate <= 0 {
		return
	}
	interval := time.Duration(float64(time.Second) / rate)
	if limit := now.Add(interval + tolerance(interval)); ts.tat.After(limit) {
		ts.tat = limit
	}
}

func ewma(old, sample float64) float64 { return old + ewmaAlpha*(sample-old) }

// minRate is the floor of a gate on a key of capacity c: one request per
// second, or c/1000 on larger keys, so a tenant that was idle at the last
// round is held back for at most one period.
func minRate(c float64) float64 { return max(1, c/1000) }
