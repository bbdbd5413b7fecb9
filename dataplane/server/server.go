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

	"github.com/fairqueue/fairqueue/dataplane/admission"
	"github.com/fairqueue/fairqueue/dataplane/capacity"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
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
	// DefaultMaxHeaderBytes bounds a request's line and headers; net/http
	// answers 431 past it (allowing itself 4 KiB of slack).
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultReadHeaderTimeout bounds the time a client may take to send
	// its request line and headers.
	DefaultReadHeaderTimeout = 10 * time.Second
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
	// HashKeys, when set, returns the hash key with a given fingerprint: a
	// config is then loaded with the key its hashKeySecret.fingerprint
	// names (see reload.HashKeys), so the key can rotate without a restart.
	// When unset, every config must name HashKey.
	HashKeys func(fingerprint string) ([]byte, bool)
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
	Store admission.Store
	// Fleet, if set, paces tenants to their fleet-wide fair share on model
	// limits kept in a shared Store (see admission.FleetGate).
	Fleet admission.FleetGate
	// ShutdownGrace bounds how long admitted requests may finish after
	// shutdown starts. Zero means DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// ShutdownDelay is how long, once shutdown starts, the server keeps
	// accepting and serving with readiness failing, so that load balancers
	// stop sending before the listeners close. Zero means none.
	ShutdownDelay time.Duration
	// MaxBufferedBodyBytes bounds the request-body bytes held in memory
	// across all requests; a body that would pass it gets 503. It must be
	// larger than MaxBodyBytes. Zero means DefaultMaxBufferedBytes.
	MaxBufferedBodyBytes int64
	// BodyReadTimeout bounds the time a client may take to send its body
	// after its headers; a slower one gets 408. Zero means
	// DefaultBodyReadTimeout, negative means no bound.
	BodyReadTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and headers; larger ones get
	// 431. Zero means DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds reading a request's line and headers. Zero
	// means DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// CapacityShared, if set, makes capacity mode's in-flight counts
	// fleet-wide (package redisslots, with the Redis store).
	CapacityShared capacity.Shared
	// TopTenants is how many tenants without a weights entry get
	// per-tenant metric series of their own (metrics.NewTenants). Zero
	// means metrics.DefaultTopTenants, negative none.
	TopTenants int
}

// Server is the admission proxy. Build it with New, give it a config with
// Load, serve traffic through ServeHTTP (or Run), and operational endpoints
// through OpsHandler.
type Server struct {
	log   logr.Logger
	clock clock.WithTickerAndDelayedExecution
	// hasher hashes with the key of the config in force; loadMu guards it.
	hasher   *identity.Hasher
	hashKey  []byte
	hashKeys func(fingerprint string) ([]byte, bool)
	trusted  []netip.Prefix
	maxBody  int64
	reg      prometheus.Registerer
	gatherer prometheus.Gatherer
	tr       http.RoundTripper
	store    admission.Store
	fleet    admission.FleetGate
	grace    time.Duration
	delay    time.Duration

	// Bounds on hostile or slow clients.
	bodies            *bodyBudget
	bodyTimeout       time.Duration
	maxHeaderBytes    int
	readHeaderTimeout time.Duration

	metrics      *metrics.Metrics
	guards       *metrics.Guards
	tenants      *metrics.Tenants
	tokenMetrics *metrics.Tokens

	// admit is built by the first Load and kept; loadMu guards it.
	admit    *admission.Controller
	rt       atomic.Pointer[runtime]
	draining atomic.Bool
	loadMu   sync.Mutex

	// capacity is capacity mode, built by the first config that has it
	// (capacity.go); capShared makes its counts fleet-wide.
	capacity  *capacityState
	capShared capacity.Shared
	// capLive is capacity for the metrics' scrapes; capMetrics observes
	// the tracker's pollers.
	capLive    atomic.Pointer[capacityState]
	capMetrics *metrics.Capacity

	// sourceHealth reports the config source's failures on /readyz.
	sourceHealth atomic.Pointer[func() error]
	// storeHealth reports a rate-limit store that does not apply charges.
	storeHealth atomic.Pointer[func() error]
}

// New returns a Server that is not ready until Load succeeds.
func New(opts Options) (*Server, error) {
	if len(opts.HashKey) == 0 {
		return nil, errors.New("server: no hash key; pass --hash-key-file with the key from the policy's hash-key Secret")
	}
	s := &Server{
		log:       opts.Logger,
		clock:     opts.Clock,
		hasher:    identity.NewHasher(opts.HashKey),
		hashKey:   append([]byte(nil), opts.HashKey...),
		hashKeys:  opts.HashKeys,
		trusted:   opts.TrustedProxies,
		maxBody:   opts.MaxBodyBytes,
		reg:       opts.Registerer,
		gatherer:  opts.Gatherer,
		tr:        opts.Transport,
		store:     opts.Store,
		fleet:     opts.Fleet,
		capShared: opts.CapacityShared,
		grace:     opts.ShutdownGrace,
		delay:     max(opts.ShutdownDelay, 0),

		bodies:            &bodyBudget{max: opts.MaxBufferedBodyBytes},
		bodyTimeout:       opts.BodyReadTimeout,
		maxHeaderBytes:    opts.MaxHeaderBytes,
		readHeaderTimeout: opts.ReadHeaderTimeout,
	}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.bodies.max <= 0 {
		s.bodies.max = DefaultMaxBufferedBytes
	}
	if s.bodies.max <= s.maxBody {
		return nil, fmt.Errorf("server: the buffered-body bound (%d bytes) must be larger than the body bound (%d bytes), or no largest body could ever be read; raise --max-buffered-body-bytes or lower --max-body-bytes",
			s.bodies.max, s.maxBody)
	}
	switch {
	case s.bodyTimeout == 0:
		s.bodyTimeout = DefaultBodyReadTimeout
	case s.bodyTimeout < 0:
		s.bodyTimeout = 0
	}
	if s.maxHeaderBytes <= 0 {
		s.maxHeaderBytes = DefaultMaxHeaderBytes
	}
	if s.readHeaderTimeout <= 0 {
		s.readHeaderTimeout = DefaultReadHeaderTimeout
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
	if s.guards, err = metrics.NewGuards(s.reg, s.bodies.buffered); err != nil {
		return nil, err
	}
	if s.tenants, err = metrics.NewTenants(s.reg, opts.TopTenants); err != nil {
		return nil, err
	}
	if s.tokenMetrics, err = metrics.NewTokens(s.reg); err != nil {
		return nil, err
	}
	if s.capMetrics, err = metrics.NewCapacity(s.reg, s.capacityStats); err != nil {
		return nil, err
	}
	return s, nil
}

// Load puts cfg in force. Everything is built and checked before anything is
// applied: the runtime (identity rules, backends, timeouts), then the
// admission controller's policy, which the first Load builds the controller
// with and a reload swaps whole, so that bucket state and queued requests
// survive. A config is refused, leaving the previous one fully in force, when
// its hash key fingerprint does not match the server's key or a value cannot
// be applied.
func (s *Server) Load(cfg *config.Config, configHash string) error {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	if s.draining.Load() {
		return errors.New("server: shutting down, not loading a new config")
	}
	hasher, err := s.hasherFor(cfg.HashKeySecret)
	if err != nil {
		return err
	}
	prev := s.rt.Load()
	rt, err := s.newRuntime(cfg, prev, hasher)
	if err != nil {
		return err
	}
	if rt.admit, err = s.loadAdmission(cfg); err != nil {
		return err
	}
	// Nothing fails from here on.
	s.applyCapacity(rt, cfg)
	if cfg.RateLimits.PerBackend != nil {
		rt.take = rt.admit.TakeBackend
	}
	rt.hash = configHash
	s.hasher = hasher
	s.rt.Store(rt)
	s.log.Info("Loaded config", "policy", cfg.Policy.Namespace+"/"+cfg.Policy.Name,
		"generation", cfg.Policy.Generation, "configHash", configHash, "backends", rt.pool.Len(),
		"fairQueuing", cfg.FairQueuing.Enabled, "reload", prev != nil)
	return nil
}

// Ready reports whether a valid config is loaded and the server is not
// shutting down.
func (s *Server) Ready() bool { return s.rt.Load() != nil && !s.draining.Load() }

// Settled reports whether the admission queues have handled every event
// due by the server's clock: no attempt runs and nothing is due before
// their next wake-up (fairqueue.Queue.Settled). A driver of the server on a
// fake clock (kubectl fairqueue simulate) polls it before stepping the
// clock, so that a grant due now is made at now. Call it after Load.
func (s *Server) Settled() bool {
	fair, deferral := s.admit.Queues()
	return fair.Settled() && deferral.Settled()
}

// ConfigHash returns the hash of the loaded config, or "" before Load.
func (s *Server) ConfigHash() string {
	if rt := s.rt.Load(); rt != nil {
		return rt.hash
	}
	return ""
}

// OpsHandler serves /metrics, /healthz (the process is alive) and /readyz
// (a valid config is loaded and the server is not shutting down; the body
// also says when the config source fails, see SetConfigSourceHealth).
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
			body := "ok"
			if f := s.storeHealth.Load(); f != nil {
				if err := (*f)(); err != nil {
					// Still ready, as for the config source: the store's
					// failure mode answers every request, and a fleet
					// turning unready together on a Redis outage would
					// take the API down.
					body += ": " + err.Error()
				}
			}
			if f := s.sourceHealth.Load(); f != nil {
				if err := (*f)(); err != nil {
					// Still ready: the last good config is in force, and a
					// fleet turning unready together would take the API down.
					sep := ": "
					if body != "ok" {
						sep = "; "
					}
					body += sep + "serving the last good config; " + err.Error()
				}
			}
			_, _ = w.Write([]byte(body + "\n"))
		}
	})
	return mux
}

// SetConfigSourceHealth makes /readyz name the config source's failure, as f
// reports it (nil while healthy). Readiness itself does not change: the
// replica keeps serving its last good config.
func (s *Server) SetConfigSourceHealth(f func() error) { s.sourceHealth.Store(&f) }

// SetStoreHealth makes /readyz name the rate-limit store's failure, as f
// reports it (nil while the store works). Readiness itself does not change.
func (s *Server) SetStoreHealth(f func() error) { s.storeHealth.Store(&f) }

// Run serves traffic on trafficLn and the operational endpoints on opsLn
// until ctx ends, then shuts down gracefully: readiness fails at once while
// traffic is still served for ShutdownDelay (without keep-alive, so clients
// reconnect to replicas that stay), then queued requests are answered 503,
// listeners stop accepting, and admitted requests get ShutdownGrace to finish
// before their connections are closed. Every step is bounded: Run returns at
// most ShutdownDelay + ShutdownGrace after ctx ends, nil after a clean
// shutdown, or the first serving error. Run is meant to be called once per
// Server.
func (s *Server) Run(ctx context.Context, trafficLn, opsLn net.Listener) error {
	traffic := &http.Server{Handler: s, ReadHeaderTimeout: s.readHeaderTimeout, MaxHeaderBytes: s.maxHeaderBytes,
		IdleTimeout: 2 * time.Minute}
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
	if s.delay > 0 && runErr == nil {
		// Before readiness fails, so that no request seen unready is
		// answered on a connection kept alive.
		traffic.SetKeepAlivesEnabled(false) // idle connections close; clients reconnect elsewhere
	}
	s.draining.Store(true) // readiness fails first
	if s.delay > 0 && runErr == nil {
		s.log.Info("Shutting down: unready, still serving until load balancers stop sending", "delay", s.delay.String())
		t := s.clock.NewTimer(s.delay)
		select {
		case <-t.C():
		case runErr = <-errc:
		}
		t.Stop()
	}
	s.log.Info("Shutting down", "grace", s.grace.String())
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

// upstreamBrokeOff records an upstream response that broke off while its
// body was relayed: answered 502 when nothing had reached the client yet,
// otherwise cut short at the client. Both are logged and counted by backend.
func (s *Server) upstreamBrokeOff(r *http.Request, backend string, err error, committed bool) {
	outcome, msg := metrics.UpstreamBadGateway, "Backend response broke off before any byte reached the client; answered 502"
	if committed {
		outcome, msg = metrics.UpstreamAborted, "Backend response broke off mid-body; the client's response was cut short"
	}
	s.guards.UpstreamResponseError(backend, outcome)
	s.log.Info(msg, "backend", backend, "path", r.URL.Path, "error", err.Error())
}

// hasherFor returns the hasher of the key the config's fingerprint names:
// the one in force when the key is unchanged. loadMu is held.
func (s *Server) hasherFor(ref config.HashKeySecret) (*identity.Hasher, error) {
	key := s.hashKey
	if s.hashKeys != nil {
		k, ok := s.hashKeys(ref.Fingerprint)
		if !ok {
			return nil, fmt.Errorf("hashKeySecret.fingerprint: the config was rendered with key fingerprint %q, which Secret %s/%s has not held yet; "+
				"it is loaded as soon as that key is seen, the config in force stays until then", ref.Fingerprint, ref.Namespace, ref.Name)
		}
		key = k
	}
	if got := config.KeyFingerprint(key); got != ref.Fingerprint {
		return nil, fmt.Errorf("hashKeySecret.fingerprint: the config was rendered with key fingerprint %q but --hash-key-file has fingerprint %q; mount the key from Secret %s/%s",
			ref.Fingerprint, got, ref.Namespace, ref.Name)
	}
	if s.hasher.Uses(key) {
		return s.hasher, nil
	}
	return identity.NewHasher(key), nil
}
