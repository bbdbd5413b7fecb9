package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/admission"
	"github.com/fairqueue/fairqueue/dataplane/capacity"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/identity/resolver"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/dataplane/proxy"
)

var (
	_ admission.TenantObserver  = (*metrics.Tenants)(nil)
	_ admission.WeightsObserver = (*metrics.Tenants)(nil)
	_ admission.BandObserver    = (*metrics.Metrics)(nil)
)

// runtime is what the request path takes from one loaded config: identity
// rules, the backends, the timeouts and token estimation. It is immutable;
// the server holds it behind an atomic pointer so that a reload swaps it
// whole. The admission controller is the server's, shared by every runtime:
// it keeps bucket state and queued requests across reloads and swaps its own
// policy.
type runtime struct {
	cfg  *config.Config
	hash string
	// resolver tells each request's client, identities and model.
	resolver *resolver.Resolver
	admit    *admission.Controller
	// tokens is deferred admission for the request path; nil when off.
	tokens *tokenRuntime
	pool   *proxy.Pool
	// take charges per-backend tokens, nil without a per-backend limit;
	// built once so that Pick does not allocate.
	take proxy.TakeFunc
	// defaultTimeout and modelTimeouts are the request total timeouts; zero
	// means none.
	defaultTimeout time.Duration
	modelTimeouts  map[string]time.Duration
	// capacity is the server's capacity mode state (capacity.go), nil
	// before any config had one; capacityOn says this config uses it.
	// backendNames are the pool's backends in configured order: the
	// capacity tracker's pool, the candidates of every request.
	capacity     *capacityState
	capacityOn   bool
	backendNames []string
	// deadlineHeader is the canonical name of the policy's client deadline
	// header; empty means none.
	deadlineHeader string
	// bandHeader is the canonical name of the header with which a request
	// may lower its priority band; empty means none.
	bandHeader string
}

// newRuntime builds the runtime for cfg, hashing identities with hasher. It
// changes nothing the server holds: prev (the runtime in force, nil on the
// first load) only lends its tokenizer.
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
	rt := &runtime{
		cfg:            cfg,
		resolver:       resolver.New(cfg, hasher, s.trusted),
		pool:           pool,
		defaultTimeout: cfg.Timeouts.RequestTotal.Duration,
	}
	if cfg.Capacity != nil {
		if err := capacity.Validate(capacityBackends(cfg.Capacity)); err != nil {
			return nil, fmt.Errorf("capacity: %w", err)
		}
	}
	// With capacity off too: a request that waited for a slot through the
	// reload that turned it off goes to these, untracked.
	rt.backendNames = pool.Names()
	if h := cfg.Timeouts.ClientDeadlineHeader; h != "" {
		rt.deadlineHeader = http.CanonicalHeaderKey(h)
	}
	if h := cfg.FairQueuing.RequestBandHeader; h != "" {
		rt.bandHeader = http.CanonicalHeaderKey(h)
	}
	var prevTokens *tokenRuntime
	var prevCap int64
	if prev != nil && prev.tokens != nil {
		prevTokens, prevCap = prev.tokens, prev.cfg.DeferredAdmission.Estimation.DefaultMaxTokens
	}
	rt.tokens = newTokenRuntime(cfg.DeferredAdmission, prevTokens, prevCap)
	if len(cfg.Timeouts.Models) > 0 {
		rt.modelTimeouts = make(map[string]time.Duration, len(cfg.Timeouts.Models))
		for _, m := range cfg.Timeouts.Models {
			rt.modelTimeouts[m.Model] = m.Total.Duration
		}
	}
	return rt, nil
}

// loadAdmission puts cfg in force in the admission controller, building it
// on the first load; once it returns nil nothing can fail any more. A
// refused cfg changes nothing and starts nothing.
func (s *Server) loadAdmission(cfg *config.Config) (*admission.Controller, error) {
	if s.admit != nil {
		return s.admit, s.admit.Load(cfg)
	}
	opts := admission.Options{Store: s.store, Limits: s.metrics, Queue: s.metrics, Deferral: s.tokenMetrics,
		Tenants: s.tenants, Tokens: s.tokenMetrics, Fleet: s.fleet, Bands: s.metrics, Log: s.log.WithName("admission")}
	a, err := admission.NewController(s.clock, cfg, opts)
	if err != nil {
		return nil, err
	}
	s.admit = a
	return a, nil
}

// close answers every queued request with a shutdown refusal (503) and stops
// the queue's scheduling goroutine.
func (rt *runtime) close() {
	rt.admit.Close()
	if rt.capacity != nil {
		rt.capacity.close()
	}
}

// timeout returns the total timeout for a model; zero means none.
func (rt *runtime) timeout(model string) time.Duration {
	if d, ok := rt.modelTimeouts[model]; ok {
		return d
	}
	return rt.defaultTimeout
}
