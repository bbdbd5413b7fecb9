// Package server is the data plane's HTTP admission layer: it resolves each
// request's client address and identities, runs the admission core (limiter,
// tenant queues, weighted scheduler), picks a backend, and proxies the request
// with the remaining total timeout, answering every refusal with the headers
// and OpenAI-style JSON error body of the product specification. It also
// serves the operational endpoints (/metrics, /healthz, /readyz) on a separate
// listener and shuts down gracefully.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/dataplane/proxy"
)

// Defaults for Options fields left zero.
const (
	// DefaultMaxBodyBytes bounds the request body read to find the model.
	DefaultMaxBodyBytes = 8 << 20
	// DefaultShutdownGrace is how long admitted requests may run after
	// shutdown starts.
	DefaultShutdownGrace = 10 * time.Second
)

// errTotalTimeout is the cancellation cause of a request whose total timeout
// (queued time included) ran out.
var errTotalTimeout = errors.New("request total timeout exceeded")

// Options configures a Server.
type Options struct {
	// Logger receives structured logs; identities appear only as short hashes.
	Logger logr.Logger
	// Clock drives queue timing and the total timeout; nil means the real clock.
	Clock clock.WithTickerAndDelayedExecution
	// HashKey is the per-policy HMAC key incoming identities are hashed with.
	HashKey []byte
	// TrustedProxies are the peers whose X-Forwarded-For is believed when
	// deciding the client address for the per-client limit.
	TrustedProxies []netip.Prefix
	// MaxBodyBytes bounds the body read to find the model; larger bodies get
	// 413. Zero means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Registerer receives the data plane's Prometheus collectors; nil means
	// a private registry.
	Registerer prometheus.Registerer
	// Gatherer is served on /metrics; nil means the Registerer when it is
	// also a Gatherer (a *prometheus.Registry), else prometheus.DefaultGatherer.
	Gatherer prometheus.Gatherer
	// Transport sends requests upstream; nil means proxy.NewTransport().
	Transport http.RoundTripper
	// Store holds rate-limit bucket state; nil means a per-replica
	// in-memory store.
	Store limiter.Store
	// Fleet, if set, paces tenants to their fleet-wide fair share on model
	// limits kept in a shared Store (see FleetGate).
	Fleet FleetGate
	// ShutdownGrace bounds how long admitted requests may finish after
	// shutdown starts. Zero means DefaultShutdownGrace.
	ShutdownGrace time.Duration
}

// Server is the admission proxy. Build it with New, give it a config with
// Load, serve traffic through ServeHTTP (or Run), and operational endpoints
// through OpsHandler.
type Server struct {
	log      logr.Logger
	clock    clock.WithTickerAndDelayedExecution
	hasher   *hasher
	hashKey  []byte
	trusted  trustedProxies
	maxBody  int64
	reg      prometheus.Registerer
	gatherer prometheus.Gatherer
	tr       http.RoundTripper
	store    limiter.Store
	fleet    FleetGate
	grace    time.Duration

	metrics *metrics.Metrics

	rt       atomic.Pointer[runtime]
	draining atomic.Bool
	loadMu   sync.Mutex
}

// New returns a Server that is not ready until Load succeeds.
func New(opts Options) (*Server, error) {
	if len(opts.HashKey) == 0 {
		return nil, errors.New("server: no hash key; pass --hash-key-file with the key from the policy's hash-key Secret")
	}
	s := &Server{
		log:      opts.Logger,
		clock:    opts.Clock,
		hasher:   newHasher(opts.HashKey),
		hashKey:  append([]byte(nil), opts.HashKey...),
		trusted:  trustedProxies(opts.TrustedProxies),
		maxBody:  opts.MaxBodyBytes,
		reg:      opts.Registerer,
		gatherer: opts.Gatherer,
		tr:       opts.Transport,
		store:    opts.Store,
		fleet:    opts.Fleet,
		grace:    opts.ShutdownGrace,
	}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.tr == nil {
		s.tr = proxy.NewTransport()
	}
	if s.grace <= 0 {
		s.grace = DefaultShutdownGrace
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
	}
	if s.gatherer == nil {
		if g, ok := s.reg.(prometheus.Gatherer); ok {
			s.gatherer = g // a *prometheus.Registry serves what it holds
		} else {
			s.gatherer = prometheus.DefaultGatherer
		}
	}
	m, err := metrics.New(s.reg)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	return s, nil
}

// Load puts cfg in force. The first Load builds the limiter, queue and
// backends; a later Load (a reload) updates the limiter, queue and admission
// settings in place, so bucket state and queued requests survive, and swaps
// in new identity rules, backends and timeouts for the next request. A config
// is refused, keeping the previous one in force, when its hash key
// fingerprint does not match the server's key or a value cannot be applied.
func (s *Server) Load(cfg *config.Config, configHash string) error {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	if s.draining.Load() {
		return errors.New("server: shutting down, not loading a new config")
	}
	if got := config.KeyFingerprint(s.hashKey); got != cfg.HashKeySecret.Fingerprint {
		return fmt.Errorf("hashKeySecret.fingerprint: the config was rendered with key fingerprint %q but --hash-key-file has fingerprint %q; mount the key from Secret %s/%s",
			cfg.HashKeySecret.Fingerprint, got, cfg.HashKeySecret.Namespace, cfg.HashKeySecret.Name)
	}
	prev := s.rt.Load()
	rt, err := s.newRuntime(cfg, prev)
	if err != nil {
		return err
	}
	rt.hash = configHash
	s.rt.Store(rt)
	s.log.Info("Loaded config", "policy", cfg.Policy.Namespace+"/"+cfg.Policy.Name,
		"generation", cfg.Policy.Generation, "configHash", configHash, "backends", rt.pool.Len(),
		"fairQueuing", cfg.FairQueuing.Enabled, "reload", prev != nil)
	return nil
}

// Ready reports whether a valid config is loaded and the server is not
// shutting down.
func (s *Server) Ready() bool { return s.rt.Load() != nil && !s.draining.Load() }

// ConfigHash returns the hash of the loaded config, or "" before Load.
func (s *Server) ConfigHash() string {
	if rt := s.rt.Load(); rt != nil {
		return rt.hash
	}
	return ""
}

// OpsHandler serves /metrics, /healthz (the process is alive) and /readyz
// (a valid config is loaded and the server is not shutting down).
func (s *Server) OpsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case s.draining.Load():
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		case s.rt.Load() == nil:
			http.Error(w, "no valid config loaded yet", http.StatusServiceUnavailable)
		default:
			_, _ = w.Write([]byte("ok\n"))
		}
	})
	return mux
}

// Run serves traffic on trafficLn and the operational endpoints on opsLn
// until ctx ends, then shuts down gracefully: readiness fails, queued
// requests are answered 503, listeners stop accepting, and admitted requests
// get ShutdownGrace to finish before their connections are closed. It returns
// nil after a clean shutdown, or the first serving error. Run is meant to be
// called once per Server.
func (s *Server) Run(ctx context.Context, trafficLn, opsLn net.Listener) error {
	traffic := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	ops := &http.Server{Handler: s.OpsHandler(), ReadHeaderTimeout: 5 * time.Second}

	errc := make(chan error, 2)
	var wg sync.WaitGroup
	for _, sv := range []struct {
		srv *http.Server
		ln  net.Listener
	}{{traffic, trafficLn}, {ops, opsLn}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sv.srv.Serve(sv.ln); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serving on %s: %w", sv.ln.Addr(), err)
			}
		}()
	}
	s.log.Info("Serving", "traffic", trafficLn.Addr().String(), "ops", opsLn.Addr().String())

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	s.log.Info("Shutting down", "grace", s.grace.String())
	s.draining.Store(true)
	if rt := s.rt.Load(); rt != nil {
		rt.close() // queued requests are answered 503 now, not dropped
	}
	graceCtx, cancel := context.WithTimeout(context.Background(), s.grace)
	defer cancel()
	if err := traffic.Shutdown(graceCtx); err != nil {
		s.log.Info("Grace period over, closing remaining connections", "grace", s.grace.String())
		_ = traffic.Close()
	}
	_ = ops.Close()
	wg.Wait()
	s.log.Info("Shut down")
	return runErr
}

// proxyError answers a request whose upstream exchange failed: 504 when the
// total timeout ran out or the backend timed out, nothing when the client
// went away, 502 otherwise.
func (s *Server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	var netErr net.Error
	switch {
	case errors.Is(context.Cause(ctx), errTotalTimeout):
		writeTimeout(w)
	case ctx.Err() != nil:
		// The client went away: nobody is left to answer. Aborting keeps a
		// half-written streamed response from looking complete.
		s.log.V(1).Info("Client went away during the upstream call", "error", err.Error())
	case errors.As(err, &netErr) && netErr.Timeout():
		(&apiError{status: http.StatusGatewayTimeout, errType: errorTypeUpstream, code: "upstream_timeout",
			message: "the backend timed out"}).write(w)
	default:
		s.log.Info("Backend request failed", "error", err.Error())
		(&apiError{status: http.StatusBadGateway, errType: errorTypeUpstream, code: "bad_gateway",
			message: "the backend could not be reached or failed; retry later"}).write(w)
	}
}

// shortHash returns the log form of an identity hash: a short prefix, or "-"
// for no identity.
func shortHash(h string) string {
	if h == "" {
		return "-"
	}
	return identity.Short(h)
}
