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
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// Store holds rate-limit bucket state; it outlives every config, so that a
// reload keeps the buckets (limiter.Store).
type Store = limiter.Store

// FleetGate paces tenants on model limits that several replicas share in
// Redis, so that the fleet's grants follow weighted max-min fair shares
// (dataplane/fleet.Pacer implements it; its Run loop is started by the
// caller). A Controller built by NewController installs it as its Gate and
// hands it every loaded config's limits and weights.
type FleetGate interface {
	Gate
	// SetLimits gives the limits whose model buckets the fleet shares.
	SetLimits(cfg limiter.Config)
	// SetWeights gives the tenant weights, the same as the fair queue's.
	SetWeights(w fairqueue.Weights)
}

// WeightsObserver is a TenantObserver that is also told each loaded
// config's weights (metrics.Tenants labels tenants by them).
type WeightsObserver interface {
	SetWeights(w fairqueue.Weights, dim identity.Dimension)
}

// Options wire a Controller built by NewController to what outlives every
// config.
type Options struct {
	// Store holds bucket state; nil means a per-replica in-memory store.
	Store Store
	// Limits is told every limiter decision; nil means none.
	Limits limiter.Observer
	// Queue and Deferral observe the fair queue and the deferral queue.
	Queue, Deferral fairqueue.Observer
	// Tenants and Tokens are the per-tenant and token observers; nil means none.
	Tenants TenantObserver
	Tokens  TokenObserver
	// Fleet, when set, paces tenants on shared model limits.
	Fleet FleetGate
	// Bands is told of the request bands ignored; nil means none.
	Bands BandObserver
	// Log receives the controller's logs.
	Log logr.Logger
}

// policy is everything admission takes from one config, validated and
// built: it is never modified once a Controller holds it, and a reload
// swaps it whole.
type policy struct {
	// lim decides with this config's limits over the controller's store.
	lim      *limiter.Limiter
	settings Settings
	tokens   TokenSettings
	// queues is nil for a Controller built by New, whose queue is its
	// caller's: its bounds and weights are then left alone.
	queues *queueConfig
	// limits are the limiter's configuration, for the fleet gate.
	limits limiter.Config
}

// queueConfig is what a config sets on the two queues.
type queueConfig struct {
	weights                fairqueue.Weights
	bounds, deferralBounds fairqueue.Bounds
}

// compile validates cfg and builds its policy, with a limiter over store.
// Everything a config can get wrong fails here, before anything is applied.
func compile(cfg *config.Config, store Store, obs limiter.Observer) (*policy, error) {
	limits := limiterConfig(cfg)
	if err := limits.Validate(); err != nil {
		return nil, fmt.Errorf("rateLimits: %w", err)
	}
	fq := cfg.FairQueuing
	dim, err := identity.ParseDimension(string(fq.TenantDimension))
	if err != nil {
		return nil, fmt.Errorf("fairQueuing.tenantDimension: %w", err)
	}
	da := cfg.DeferredAdmission
	p := &policy{
		settings: Settings{Enabled: fq.Enabled, TenantDimension: dim},
		tokens:   TokenSettings{Enabled: da != nil, CostTokens: fq.TokensCost()},
		limits:   limits,
		queues: &queueConfig{
			weights: fairqueue.Weights{Default: int(fq.DefaultWeight), ByTenant: make(map[string]int, len(fq.Weights))},
			bounds: fairqueue.Bounds{
				MaxQueueDepthPerTenant: int(fq.Bounds.MaxQueueDepthPerTenant),
				MaxTotalQueued:         int(fq.Bounds.MaxTotalQueued),
				MaxTenants:             int(fq.Bounds.MaxTenants),
				MaxInFlight:            int(fq.Bounds.MaxInFlight),
				MaxWait:                fq.Bounds.MaxWait.Duration,
			},
			// The deferral queue takes the fair queue's tenant table and
			// attempts in flight; maxHeld and maxHeldPerTenant bound the
			// holds, maxWait each hold.
			deferralBounds: fairqueue.Bounds{MaxTenants: int(fq.Bounds.MaxTenants), MaxInFlight: int(fq.Bounds.MaxInFlight)},
		},
	}
	if err := compileBands(&fq, &p.queues.weights); err != nil {
		return nil, err
	}
	for _, w := range fq.Weights {
		p.queues.weights.ByTenant[w.TenantHash] = int(w.Weight)
	}
	if da != nil {
		if da.Bounds.MaxWait.Duration < 0 {
			return nil, fmt.Errorf("deferredAdmission.bounds.maxWait: must not be negative, got %s", da.Bounds.MaxWait.Duration)
		}
		p.tokens.MaxWait = da.Bounds.MaxWait.Duration
		db := &p.queues.deferralBounds
		db.MaxTotalQueued, db.MaxQueueDepthPerTenant, db.MaxWait = int(da.Bounds.MaxHeld), int(da.Bounds.MaxHeldPerTenant), da.Bounds.MaxWait.Duration
	}
	// The limits are valid, so building the limiter cannot fail; it shares
	// the store, so bucket state outlives the config.
	if p.lim, err = limiter.New(limits, limiter.Options{Store: store, Observer: obs}); err != nil {
		return nil, fmt.Errorf("rateLimits: %w", err)
	}
	return p, nil
}

// compileBands puts fq's priority bands into w: the bands in order, the
// default band's index and each weighted tenant's band by its hash. Without
// bands w is left as it was, so the scheduler sees one band as before bands
// existed. A tenant's band comes only from its weights entry or the default:
// the request band header may lower a request's band, never its tenant's.
func compileBands(fq *config.FairQueuing, w *fairqueue.Weights) error {
	if len(fq.Bands) == 0 {
		for i, e := range fq.Weights {
			if e.Band != "" {
				return fmt.Errorf("fairQueuing.weights[%d].band: %q names a band but fairQueuing.bands is empty; define the bands or remove the entry's band", i, e.Band)
			}
		}
		if fq.DefaultBand != "" {
			return fmt.Errorf("fairQueuing.defaultBand: %q names a band but fairQueuing.bands is empty; define the bands or remove defaultBand", fq.DefaultBand)
		}
		return nil
	}
	if len(fq.Bands) > fairqueue.MaxBands {
		return fmt.Errorf("fairQueuing.bands: at most %d priority bands, got %d", fairqueue.MaxBands, len(fq.Bands))
	}
	w.Bands = make([]fairqueue.Band, len(fq.Bands))
	var shares float64
	for i, b := range fq.Bands {
		if b.Name == "" {
			return fmt.Errorf("fairQueuing.bands[%d].name: must not be empty", i)
		}
		if j, dup := w.BandIndex(b.Name); dup && j < i {
			return fmt.Errorf("fairQueuing.bands[%d].name: %q duplicates fairQueuing.bands[%d]; band names must be unique", i, b.Name, j)
		}
		if !(b.MinShare >= 0 && b.MinShare < 1) {
			return fmt.Errorf("fairQueuing.bands[%d].minShare: must be in [0, 1), got %v", i, b.MinShare)
		}
		shares += b.MinShare
		w.Bands[i] = fairqueue.Band{Name: b.Name, MinShare: b.MinShare}
	}
	if shares >= 1 {
		return fmt.Errorf("fairQueuing.bands: the minShares sum to %v, which leaves the highest band nothing; their sum must be below 1", shares)
	}
	// Without a named default, a tenant without an entry is in the lowest
	// band: a tenant nobody listed never outranks one somebody did.
	w.DefaultBand = len(w.Bands) - 1
	if fq.DefaultBand != "" {
		i, ok := w.BandIndex(fq.DefaultBand)
		if !ok {
			return fmt.Errorf("fairQueuing.defaultBand: %q is not among fairQueuing.bands (%s)", fq.DefaultBand, bandNames(w.Bands))
		}
		w.DefaultBand = i
	}
	for i, e := range fq.Weights {
		if e.Band == "" {
			continue
		}
		b, ok := w.BandIndex(e.Band)
		if !ok {
			return fmt.Errorf("fairQueuing.weights[%d].band: %q is not among fairQueuing.bands (%s)", i, e.Band, bandNames(w.Bands))
		}
		if w.TenantBand == nil {
			w.TenantBand = make(map[string]int, len(fq.Weights))
		}
		w.TenantBand[e.TenantHash] = b
	}
	return nil
}

// bandNames lists the names of bs for an error message.
func bandNames(bs []fairqueue.Band) string {
	names := make([]string, len(bs))
	for i, b := range bs {
		names[i] = strconv.Quote(b.Name)
	}
	return strings.Join(names, ", ")
}

// NewController validates cfg and returns a Controller deciding by it, with
// its fair queue and deferral queue started. Nothing is started when cfg is
// refused.
func NewController(clk clock.Clock, cfg *config.Config, o Options) (*Controller, error) {
	if o.Store == nil {
		o.Store = limiter.NewMemoryStore(0)
	}
	p, err := compile(cfg, o.Store, o.Limits)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		clk: clk, log: o.Log, store: o.Store, limitObs: o.Limits, fleet: o.Fleet, bandObs: o.Bands,
		queue:  fairqueue.New(clk, p.queues.bounds, p.queues.weights, o.Queue),
		deferq: fairqueue.New(clk, p.queues.deferralBounds, p.queues.weights, o.Deferral),
	}
	c.SetTenantObserver(o.Tenants)
	c.SetTokenObserver(o.Tokens)
	if o.Fleet != nil {
		c.SetGate(o.Fleet)
	}
	c.apply(p)
	return c, nil
}

// Load puts cfg in force for the next decision. Bucket state, queued and
// held requests survive: weights apply to the next scheduling decision, and
// tightened bounds refuse new arrivals without stranding a waiter. A cfg
// that fails validation is refused with nothing changed. Only a Controller
// built by NewController can load a config.
func (c *Controller) Load(cfg *config.Config) error {
	if c.store == nil {
		return errors.New("admission: this controller was built by New, around its caller's limiter and queue; build it with NewController to load configs")
	}
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	p, err := compile(cfg, c.store, c.limitObs)
	if err != nil {
		return err
	}
	c.apply(p)
	return nil
}

// apply puts p in force: nothing in it can fail. The queues and the fleet
// gate are told first, so that a request deciding by p finds them ready.
func (c *Controller) apply(p *policy) {
	old := c.pol.Load()
	if q := p.queues; q != nil {
		c.queue.SetBounds(q.bounds)
		c.queue.SetWeights(q.weights)
		if c.deferq != nil {
			c.deferq.SetBounds(q.deferralBounds)
			c.deferq.SetWeights(q.weights)
		}
		if c.fleet != nil {
			c.fleet.SetLimits(p.limits)
			c.fleet.SetWeights(q.weights)
		}
		if w, ok := c.tenantObserver().(WeightsObserver); ok {
			w.SetWeights(q.weights, p.settings.TenantDimension)
		}
	}
	c.pol.Store(p)
	switch on := p.settings.Enabled; {
	case on && (old == nil || !old.settings.Enabled):
		c.queue.Enable()
	case !on && (old == nil || old.settings.Enabled):
		c.queue.Disable()
	}
	if c.deferq != nil {
		switch on := p.tokens.Enabled; {
		case on && (old == nil || !old.tokens.Enabled):
			c.deferq.Enable()
		case !on:
			c.deferq.Disable()
		}
	}
}

// Close answers every queued and held request with a shutdown refusal (503)
// and stops the queues' goroutines.
func (c *Controller) Close() {
	c.queue.Close()
	if c.deferq != nil {
		c.deferq.Close()
	}
}

// Queues returns the fair queue and the deferral queue (nil for a
// Controller built by New), for status and tests.
func (c *Controller) Queues() (fair, deferral *fairqueue.Queue) { return c.queue, c.deferq }

// limiterConfig converts the rendered request and token limits into the
// limiter's form: the one place a config.Limit becomes a limiter.Limit.
func limiterConfig(cfg *config.Config) limiter.Config {
	conv := func(l *config.Limit) *limiter.Limit {
		if l == nil {
			return nil
		}
		return &limiter.Limit{Requests: l.Rate(), Period: l.Period.Duration, Burst: l.Burst}
	}
	overrides := func(m *config.ModelLimits) map[string]limiter.Limit {
		if len(m.Overrides) == 0 {
			return nil
		}
		o := make(map[string]limiter.Limit, len(m.Overrides))
		for _, ov := range m.Overrides {
			o[ov.Model] = *conv(&ov.Limit)
		}
		return o
	}
	rl := cfg.RateLimits
	c := limiter.Config{
		Global: conv(rl.Global), Client: conv(rl.PerClient), APIKey: conv(rl.PerAPIKey),
		User: conv(rl.PerUser), Team: conv(rl.PerTeam), Backend: conv(rl.PerBackend),
	}
	if m := rl.PerModel; m != nil {
		c.Model, c.ModelOverrides = conv(m.Default), overrides(m)
	}
	if da := cfg.DeferredAdmission; da != nil {
		tl := da.TokenLimits
		c.APIKeyTokens, c.UserTokens, c.TeamTokens = conv(tl.PerAPIKey), conv(tl.PerUser), conv(tl.PerTeam)
		if m := tl.PerModel; m != nil {
			c.ModelTokens, c.ModelTokenOverrides = conv(m.Default), overrides(m)
		}
	}
	return c
}
