package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/admission"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/identity/resolver"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/dataplane/proxy"
)

var _ admission.TenantObserver = (*metrics.Tenants)(nil)

// runtime is everything built from one loaded config: identity rules, the
// limiter, the fair queue and admission controller, and the backends. The
// server holds it behind an atomic pointer so a reload can swap it.
type runtime struct {
	cfg  *config.Config
	hash string
	// resolver tells each request's client, identities and model.
	resolver *resolver.Resolver
	lim      *limiter.Limiter
	queue    *fairqueue.Queue
	// deferq holds requests deferred for their token budget; created with
	// the first config and kept across reloads like queue.
	deferq *fairqueue.Queue
	// tokens is deferred admission for the request path; nil when off.
	tokens *tokenRuntime
	admit  *admission.Controller
	pool   *proxy.Pool
	// take charges per-backend tokens; built once so Pick does not allocate.
	take proxy.TakeFunc
	// defaultTimeout and modelTimeouts are the request total timeouts; zero
	// means none.
	defaultTimeout time.Duration
	modelTimeouts  map[string]time.Duration
	// deadlineHeader is the canonical name of the policy's client deadline
	// header; empty means none.
	deadlineHeader string
}

// newRuntime builds the runtime for cfg. With prev set (a reload) the
// limiter, queue and admission controller are kept and updated in place, so
// bucket state and queued requests survive: weights apply to the next
// scheduling decision and tightened bounds refuse new arrivals without
// stranding a waiter. Everything that can fail is checked before anything is
// applied, so a refused config leaves prev fully in force.
func (s *Server) newRuntime(cfg *config.Config, prev *runtime, hasher *identity.Hasher) (*runtime, error) {
	targets := make([]proxy.Target, len(cfg.Backends))
	for i, b := range cfg.Backends {
		targets[i] = proxy.Target{Name: b.Name, URL: b.URL, Weight: int(b.Weight)}
	}
	pool, err := proxy.NewPool(targets, proxy.Options{Transport: s.tr, ErrorHandler: s.proxyError,
		ResponseBodyError: s.upstreamBrokeOff})
	if err != nil {
		return nil, err
	}
	limits := limiterConfig(cfg.RateLimits)
	tokenLimits(&limits, cfg.DeferredAdmission)
	if err := limits.Validate(); err != nil {
		return nil, fmt.Errorf("rateLimits: %w", err)
	}
	fq := cfg.FairQueuing
	dim, err := identity.ParseDimension(fq.TenantDimension)
	if err != nil {
		return nil, fmt.Errorf("fairQueuing.tenantDimension: %w", err)
	}
	settings := admission.Settings{Enabled: fq.Enabled, TenantDimension: dim}
	weights := fairqueue.Weights{Default: int(fq.DefaultWeight), ByTenant: make(map[string]int, len(fq.Weights))}
	for _, w := range fq.Weights {
		weights.ByTenant[w.TenantHash] = int(w.Weight)
	}
	bounds := fairqueue.Bounds{
		MaxQueueDepthPerTenant: int(fq.Bounds.MaxQueueDepthPerTenant),
		MaxTotalQueued:         int(fq.Bounds.MaxTotalQueued),
		MaxTenants:             int(fq.Bounds.MaxTenants),
		MaxInFlight:            int(fq.Bounds.MaxInFlight),
		MaxWait:                fq.Bounds.MaxWait.Duration,
	}

	rt := &runtime{
		cfg:            cfg,
		resolver:       resolver.New(cfg, hasher, s.trusted),
		pool:           pool,
		defaultTimeout: cfg.Timeouts.RequestTotal.Duration,
	}
	if h := cfg.Timeouts.ClientDeadlineHeader; h != "" {
		rt.deadlineHeader = http.CanonicalHeaderKey(h)
	}
	da := cfg.DeferredAdmission
	tokenSettings := admission.TokenSettings{Enabled: da != nil, CostTokens: fq.Cost == config.CostTokens}
	if da != nil {
		tokenSettings.MaxWait = da.Bounds.MaxWait.Duration
	}
	dbounds := deferralBounds(da, fq.Bounds)
	if prev == nil {
		if rt.lim, err = limiter.New(limits, limiter.Options{Store: s.store, Observer: s.metrics}); err != nil {
			return nil, fmt.Errorf("rateLimits: %w", err)
		}
		rt.queue = fairqueue.New(s.clock, bounds, weights, s.metrics)
		rt.deferq = fairqueue.New(s.clock, dbounds, weights, s.tokenMetrics)
		if rt.admit, err = admission.New(s.clock, rt.lim, rt.queue, settings, s.log.WithName("admission")); err != nil {
			rt.queue.Close()
			rt.deferq.Close()
			return nil, fmt.Errorf("fairQueuing: %w", err)
		}
	} else {
		rt.lim, rt.queue, rt.deferq, rt.admit = prev.lim, prev.queue, prev.deferq, prev.admit
		if err := rt.lim.SetConfig(limits); err != nil {
			return nil, fmt.Errorf("rateLimits: %w", err)
		}
		rt.queue.SetBounds(bounds)
		rt.queue.SetWeights(weights)
		rt.deferq.SetBounds(dbounds)
		rt.deferq.SetWeights(weights)
		if err := rt.admit.SetSettings(settings); err != nil {
			return nil, fmt.Errorf("fairQueuing: %w", err)
		}
	}
	if err := rt.admit.SetTokens(rt.deferq, tokenSettings); err != nil {
		return nil, fmt.Errorf("deferredAdmission: %w", err)
	}
	rt.admit.SetTokenObserver(s.tokenMetrics)
	var prevTokens *tokenRuntime
	var prevCap int64
	if prev != nil && prev.tokens != nil {
		prevTokens, prevCap = prev.tokens, prev.cfg.DeferredAdmission.Estimation.DefaultMaxTokens
	}
	rt.tokens = newTokenRuntime(da, prevTokens, prevCap)
	s.applyFleet(rt.admit, limits, weights)
	s.tenants.SetWeights(weights, dim)
	rt.admit.SetTenantObserver(s.tenants)
	if len(cfg.Timeouts.Models) > 0 {
		rt.modelTimeouts = make(map[string]time.Duration, len(cfg.Timeouts.Models))
		for _, m := range cfg.Timeouts.Models {
			rt.modelTimeouts[m.Model] = m.Total.Duration
		}
	}
	if cfg.RateLimits.PerBackend != nil {
		rt.take = s.takeBackend(rt)
	}
	return rt, nil
}

// close answers every queued request with a shutdown refusal (503) and stops
// the queue's scheduling goroutine.
func (rt *runtime) close() {
	rt.queue.Close()
	rt.deferq.Close()
}

// timeout returns the total timeout for a model; zero means none.
func (rt *runtime) timeout(model string) time.Duration {
	if d, ok := rt.modelTimeouts[model]; ok {
		return d
	}
	return rt.defaultTimeout
}

// takeBackend charges one per-backend token; it is the pool's TakeFunc.
func (s *Server) takeBackend(rt *runtime) proxy.TakeFunc {
	return func(name string) (bool, time.Duration) {
		d, err := rt.lim.TakeBackend(s.clock.Now(), name)
		if err != nil {
			return false, time.Second
		}
		return d.Allowed, d.RetryAfter
	}
}

// limiterConfig converts the rendered limits into the limiter's form.
func limiterConfig(rl config.RateLimits) limiter.Config {
	conv := func(l *config.Limit) *limiter.Limit {
		if l == nil {
			return nil
		}
		return &limiter.Limit{Requests: l.Requests, Period: l.Period.Duration, Burst: l.Burst}
	}
	c := limiter.Config{
		Global: conv(rl.Global), Client: conv(rl.PerClient), APIKey: conv(rl.PerAPIKey),
		User: conv(rl.PerUser), Team: conv(rl.PerTeam), Backend: conv(rl.PerBackend),
	}
	if m := rl.PerModel; m != nil {
		c.Model = conv(m.Default)
		if len(m.Overrides) > 0 {
			c.ModelOverrides = make(map[string]limiter.Limit, len(m.Overrides))
			for _, o := range m.Overrides {
				c.ModelOverrides[o.Model] = *conv(&o.Limit)
			}
		}
	}
	return c
}
