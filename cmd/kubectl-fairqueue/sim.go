package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/yaml"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/dataplane/server"
	"github.com/fairqueue/fairqueue/internal/loadgen"
)

// Load is the offered load of `kubectl fairqueue simulate -f load.yaml`.
type Load struct {
	// Duration is how long arrivals are offered.
	Duration metav1.Duration `json:"duration"`
	// Model is the model of every request; empty means loadgen's default.
	Model string `json:"model,omitempty"`
	// ServiceTime is how long the backend takes per request; zero means 50ms.
	ServiceTime metav1.Duration `json:"serviceTime,omitzero"`
	// Tenants are the clients and the rates they offer.
	Tenants []LoadTenant `json:"tenants"`
	// ModelServer shapes the simulated model servers of a policy with
	// spec.capacity; unset, internal/modelsim's calibrated defaults.
	ModelServer *LoadModelServer `json:"modelServer,omitempty"`
}

// LoadTenant is one client of a Load.
type LoadTenant struct {
	// Name labels the tenant in the output.
	Name string `json:"name"`
	// Rate is the offered requests per second.
	Rate float64 `json:"rate"`
	// APIKey, User and Team are the identities the tenant sends, as
	// "Authorization: Bearer APIKey", x-user-id and x-team-id (loadgen's headers).
	APIKey string `json:"apiKey,omitempty"`
	User   string `json:"user,omitempty"`
	Team   string `json:"team,omitempty"`
	// Headers are extra request headers.
	Headers map[string]string `json:"headers,omitempty"`
	// Start and Stop bound the tenant's arrivals within the run.
	Start metav1.Duration `json:"start,omitzero"`
	Stop  metav1.Duration `json:"stop,omitzero"`
	// PromptTokens and OutputTokens are the lengths of the tenant's
	// requests, for a policy with spec.capacity (default 256 and 128).
	PromptTokens int `json:"promptTokens,omitempty"`
	OutputTokens int `json:"outputTokens,omitempty"`
}

// defaultServiceTime is the backend's time per request when the load names none.
const defaultServiceTime = 50 * time.Millisecond

// simStep is the fake clock's step: the resolution of simulated time.
const simStep = time.Millisecond

// maxSettleSpins bounds the polls of one settle (about 0.2s), so a request
// parked somewhere the simulator does not see slows it but cannot stall it.
const maxSettleSpins = 10000

// maxSimRequests bounds the requests one simulation offers.
const maxSimRequests = 2_000_000

// ReadLoad reads and validates a load file.
func ReadLoad(path string) (*Load, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the load file (-f): %w", err)
	}
	var l Load
	if err := yaml.UnmarshalStrict(data, &l); err != nil {
		return nil, fmt.Errorf("load file %s: %w", path, err)
	}
	lc := l.LoadgenConfig("http://sim")
	if err := lc.Validate(); err != nil {
		return nil, fmt.Errorf("load file %s: %w", path, err)
	}
	if err := l.validateTokens(); err != nil {
		return nil, fmt.Errorf("load file %s: %w", path, err)
	}
	var total float64
	for _, t := range l.Tenants {
		total += t.Rate
	}
	if n := total * l.Duration.Seconds(); n > maxSimRequests {
		return nil, fmt.Errorf("load file %s offers %.0f requests, more than the %d simulated; shorten duration or lower rates", path, n, maxSimRequests)
	}
	return &l, nil
}

// LoadgenConfig returns the load as a loadgen configuration against target,
// so the same load can be offered to a real data plane.
func (l *Load) LoadgenConfig(target string) loadgen.Config {
	c := loadgen.Config{Targets: []string{target}, Duration: l.Duration.Duration, Model: l.Model}
	for _, t := range l.Tenants {
		c.Tenants = append(c.Tenants, loadgen.Tenant{Name: t.Name, Rate: t.Rate, APIKey: t.APIKey, User: t.User, Team: t.Team,
			Headers: t.Headers, Start: t.Start.Duration, Stop: t.Stop.Duration})
	}
	c.Default()
	return c
}

// serviceTime returns the backend's time per request.
func (l *Load) serviceTime() time.Duration {
	if l.ServiceTime.Duration > 0 {
		return l.ServiceTime.Duration
	}
	return defaultServiceTime
}

// SimOptions tune a simulation.
type SimOptions struct {
	// Seed seeds the arrival jitter; the same seed gives the same run.
	Seed uint64
	// Warmup is how long from the start of the arrivals is left out of the
	// steady-state figures; negative means DefaultWarmup of the load.
	Warmup time.Duration
}

// DefaultWarmup is the warm-up left out of the steady-state figures when
// none is given: a tenth of the arrival window, at least 1s (bursts are
// spent and queues formed by then at any rate a limit binds at) and at most
// half of it.
func DefaultWarmup(duration time.Duration) time.Duration {
	return min(max(duration/10, time.Second), duration/2)
}

// Counts are a tenant's requests over a stretch of a simulation.
type Counts struct {
	// Offered counts arrivals; Admitted, the requests dispatched to the
	// backend; Refused, refusals by reason (loadgen's reason, with the
	// limit_type after a slash for refusals that never queued, such as
	// "immediate/global").
	Offered, Admitted int
	Refused           map[string]int
	// Completed counts streamed answers that ended with [DONE], and
	// OutputTokens the tokens the tenant received (capacity mode).
	Completed, OutputTokens int
}

// TenantResult is what one tenant of a simulation got.
type TenantResult struct {
	Name string
	// Weight is the tenant's weight in the rendered config (0 when fair
	// queuing is off or the tenant sends no identity of its dimension).
	Weight int32
	// Band is the priority band its requests are scheduled in; empty when
	// the config has no bands.
	Band string
	// Total counts every request of the run, each by its own outcome, the
	// queue's drain after the arrivals stop included.
	Total Counts
	// Steady counts the steady-state window: arrivals, admissions and
	// refusals that happened in it (each at its own time: an admission when
	// it was dispatched, a refusal when it was answered).
	Steady Counts
	// Waits are the queue waits of the requests admitted in the window.
	Waits []time.Duration
	// TTFTs are the times from arrival to the first token of the streamed
	// requests admitted in the window (capacity mode).
	TTFTs []time.Duration
}

// WaitQuantile returns the q-quantile of the steady-state admissions' waits.
func (r *TenantResult) WaitQuantile(q float64) time.Duration { return quantileOf(r.Waits, q) }

// quantileOf returns the q-quantile of ds (0 when empty).
func quantileOf(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	w := append([]time.Duration(nil), ds...)
	sort.Slice(w, func(i, j int) bool { return w[i] < w[j] })
	return w[min(len(w)-1, int(q*float64(len(w))))]
}

// SimResult is the outcome of a simulation.
type SimResult struct {
	// From and To bound the steady-state window, as offsets from the start
	// of the arrivals: from the end of the warm-up to the end of the
	// arrivals, so neither the bursts spent at the start nor the queue
	// draining after the last arrival count in its rates.
	From, To time.Duration
	// Seed is the arrival jitter's seed.
	Seed    uint64
	Tenants []TenantResult
	// Servers are the simulated model servers of capacity mode, by backend.
	Servers []*modelServer
}

// Seconds returns the steady-state window's length in seconds.
func (r *SimResult) Seconds() float64 { return (r.To - r.From).Seconds() }

// arrival is one request of the offered load.
type arrival struct {
	at     time.Duration
	tenant int
}

// schedule returns every tenant's arrivals, in time order. Tenant t's k-th
// request is due in its k-th slot of 1/rate from its start, at a random point
// of that slot: the offered rate is exact, but arrivals of different tenants
// are not in a fixed order, as requests from independent clients are not.
// In a fixed order (all tenants at the same instants) the one served first
// would win every token a first-come-first-served limit hands out.
func schedule(lc *loadgen.Config, seed uint64) []arrival {
	var out []arrival
	for i, t := range lc.Tenants {
		rng := rand.New(rand.NewPCG(seed, uint64(i))) // jitter for a simulation, not a secret: math/rand is enough
		until := lc.Duration
		if t.Stop > 0 {
			until = min(until, t.Stop)
		}
		for k := int64(0); ; k++ {
			at := t.Start + time.Duration((float64(k)+rng.Float64())*float64(time.Second)/t.Rate)
			if at >= until {
				break
			}
			out = append(out, arrival{at: at, tenant: i})
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].at < out[b].at })
	return out
}

// dispatchKey keys the *time.Time the simulated backend sets, in a request's
// context, to the (fake) time the data plane dispatched the request.
type dispatchKey struct{}

// Simulate offers load to the real data-plane server loaded with cfg, in
// process, on a fake clock: arrivals follow loadgen's open-loop rates, each
// at a random point of its slot (see schedule), are offered one at a time in
// time order, the backend answers after the load's service time, and the
// clock advances only when every request is parked (queued or at the
// backend), so the outcome is what the scheduler and limiter decide, not how
// fast this machine is.
//
// With spec.capacity the backends are model-server simulators
// (internal/modelsim) on the same fake clock, the requests streamed chat
// completions of each tenant's prompt and output lengths, and the clock
// steps to each simulator step exactly (other timers keep a millisecond's
// resolution).
func Simulate(ctx context.Context, cfg *config.Config, key []byte, load *Load, opts SimOptions) (*SimResult, error) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	start := clk.Now()
	var (
		be      simBackend = &simUpstream{clk: clk, service: load.serviceTime()}
		servers *modelServers
	)
	if cfg.Capacity != nil {
		var err error
		if servers, cfg, err = newModelServers(clk, cfg, load.ModelServer); err != nil {
			return nil, err
		}
		defer servers.close()
		be = servers
	}
	reg := &depthRegistry{Registry: prometheus.NewRegistry()}
	srv, err := server.New(server.Options{Logger: logr.Discard(), Clock: clk, HashKey: key, Transport: be, Registerer: reg, Gatherer: reg.Registry})
	if err != nil {
		return nil, err
	}
	// The backends are simulated: any URL works, the transport never dials.
	if servers != nil {
		servers.start()
	}
	if err := srv.Load(cfg, "simulated"); err != nil {
		return nil, fmt.Errorf("loading the rendered config: %w", err)
	}
	lc := load.LoadgenConfig("http://sim")
	warmup := opts.Warmup
	if warmup < 0 {
		warmup = DefaultWarmup(lc.Duration)
	}
	if warmup >= lc.Duration {
		return nil, fmt.Errorf("the warm-up %v leaves nothing of the load's %v duration to measure; give a shorter --warmup", warmup, lc.Duration)
	}
	res := &SimResult{From: warmup, To: lc.Duration, Seed: opts.Seed, Tenants: make([]TenantResult, len(lc.Tenants))}
	inWindow := func(at time.Duration) bool { return at >= res.From && at < res.To }
	var mu sync.Mutex
	var inServe atomic.Int64
	var wg sync.WaitGroup
	bodies := make([][]byte, len(lc.Tenants))
	headers := make([]map[string]string, len(lc.Tenants))
	plain, _ := json.Marshal(map[string]any{"model": lc.Model, "messages": []map[string]string{{"role": "user", "content": "simulate"}}, "max_tokens": 1})
	for i, t := range lc.Tenants {
		res.Tenants[i] = TenantResult{Name: t.Name, Weight: weightOf(cfg, key, t), Band: bandOf(cfg, key, t),
			Total: Counts{Refused: map[string]int{}}, Steady: Counts{Refused: map[string]int{}}}
		bodies[i] = plain
		if servers != nil {
			bodies[i], headers[i] = load.requestFor(i, lc.Model)
		}
	}
	arrivals := schedule(&lc, opts.Seed)
	for elapsed := time.Duration(0); ; {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		for len(arrivals) > 0 && arrivals[0].at <= elapsed {
			a := arrivals[0]
			arrivals = arrivals[1:]
			t := &lc.Tenants[a.tenant]
			var dispatched time.Time
			req := httptest.NewRequest(http.MethodPost, "http://sim"+lc.Path, bytes.NewReader(bodies[a.tenant]))
			req = req.WithContext(context.WithValue(req.Context(), dispatchKey{}, &dispatched))
			req.Header.Set("Content-Type", "application/json")
			if t.APIKey != "" {
				req.Header.Set("Authorization", "Bearer "+t.APIKey)
			}
			if t.User != "" {
				req.Header.Set(lc.UserHeader, t.User)
			}
			if t.Team != "" {
				req.Header.Set(lc.TeamHeader, t.Team)
			}
			for k, v := range t.Headers {
				req.Header.Set(k, v)
			}
			for k, v := range headers[a.tenant] {
				req.Header.Set(k, v)
			}
			req.RemoteAddr = "127.0.0.1:1"
			arrived := clk.Since(start)
			inServe.Add(1)
			wg.Add(1)
			rec := &simWriter{ResponseRecorder: httptest.NewRecorder()}
			first := time.Duration(-1)
			if servers != nil {
				rec.tokens = func(n int) {
					at := clk.Since(start)
					mu.Lock()
					r := &res.Tenants[a.tenant]
					r.Total.OutputTokens += n
					if inWindow(at) {
						r.Steady.OutputTokens += n
					}
					if first < 0 {
						first = at
					}
					mu.Unlock()
					servers.received.Add(int64(n))
				}
			}
			go func(i int) {
				defer wg.Done()
				srv.ServeHTTP(rec, req)
				answered := clk.Since(start)
				mu.Lock()
				r := &res.Tenants[i]
				r.Total.Offered++
				if inWindow(arrived) {
					r.Steady.Offered++
				}
				if rec.Code/100 == 2 {
					r.Total.Admitted++
					at := answered
					if !dispatched.IsZero() {
						at = dispatched.Sub(start)
					}
					if inWindow(at) {
						r.Steady.Admitted++
						w, _ := loadgen.WaitHeader(rec.Header())
						r.Waits = append(r.Waits, w)
						if first >= 0 {
							r.TTFTs = append(r.TTFTs, first-arrived)
						}
					}
					if servers != nil && bytes.Contains(rec.Body.Bytes(), []byte("data: [DONE]")) {
						r.Total.Completed++
						if inWindow(answered) {
							r.Steady.Completed++
						}
					}
				} else {
					reason, limitType, _ := loadgen.Classify(rec.Body.Bytes())
					switch {
					case !loadgen.IsRefusal(rec.Code):
						reason = fmt.Sprintf("status %d", rec.Code)
					case reason == loadgen.ReasonImmediate && limitType != "":
						reason += "/" + limitType
					}
					r.Total.Refused[reason]++
					if inWindow(answered) {
						r.Steady.Refused[reason]++
					}
				}
				mu.Unlock()
				inServe.Add(-1)
			}(a.tenant)
			// One arrival at a time, so they reach the limiter in
			// their (jittered) order, not in the order goroutines run.
			settle(reg, &inServe, be, srv.Settled)
		}
		settle(reg, &inServe, be, srv.Settled)
		if len(arrivals) == 0 && elapsed >= lc.Duration && inServe.Load() == 0 {
			break
		}
		// To the next millisecond, or to the backend's next timer when it
		// comes first (a simulator's step).
		step := simStep - elapsed%simStep
		if d, ok := be.next(); ok && d < step {
			step = d
		}
		if servers != nil {
			servers.observe(elapsed, step, res.From, res.To)
		}
		clk.Step(step)
		elapsed += step
	}
	wg.Wait()
	if servers != nil {
		servers.observe(res.To, 0, res.From, res.To) // the window's end, when the drain was short
		res.Servers = servers.list
	}
	return res, nil
}

// settle waits until every request in the server is parked: at the backend
// or queued, with the same counts over several polls, the server's queues
// have made every grant due now (queued), and the backend itself waits for
// the clock. Counts alone can look still while a grant is on its way, and
// a clock stepped then gives its token to whoever asks next.
func settle(reg *depthRegistry, inServe *atomic.Int64, be simBackend, queued func() bool) {
	stable := 0
	var last [4]int64
	for spins := 0; stable < 3; spins++ {
		runtime.Gosched()
		if spins > 50 {
			time.Sleep(20 * time.Microsecond)
		}
		cur := [4]int64{inServe.Load(), be.inFlight(), reg.queueDepth(), be.progress()}
		if cur == last && cur[0] == cur[1]+cur[2] && be.parked() && queued() {
			stable++
		} else {
			stable = 0
		}
		last = cur
		if spins > maxSettleSpins {
			return // something is not parked; advance the clock anyway
		}
	}
}

// depthRegistry is the simulation's registry; it keeps the data plane's
// queue depth collector apart as it is registered, so that a settle reads
// the depth without gathering every metric at each of its polls.
type depthRegistry struct {
	*prometheus.Registry
	depth prometheus.Collector
}

func (r *depthRegistry) Register(c prometheus.Collector) error {
	descs := make(chan *prometheus.Desc, 64)
	go func() {
		c.Describe(descs)
		close(descs)
	}()
	for d := range descs {
		if strings.Contains(d.String(), `fqName: "`+metrics.QueueDepthName+`"`) {
			r.depth = c
		}
	}
	return r.Registry.Register(c)
}

func (r *depthRegistry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// queueDepth reads the data plane's queue depth gauge, summed over its
// series (one per priority band when the config has bands).
func (r *depthRegistry) queueDepth() int64 {
	if r.depth == nil {
		return -1
	}
	ch := make(chan prometheus.Metric, 64)
	go func() {
		r.depth.Collect(ch)
		close(ch)
	}()
	var depth float64
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) == nil && pb.GetGauge() != nil && strings.Contains(m.Desc().String(), `fqName: "`+metrics.QueueDepthName+`"`) {
			depth += pb.GetGauge().GetValue()
		}
	}
	return int64(depth)
}

// simUpstream is the simulated backend: every request takes service on the
// fake clock, then gets a small OpenAI-style answer.
type simUpstream struct {
	clk     *testingclock.FakeClock
	service time.Duration
	n       atomic.Int64 // requests at the backend
}

func (u *simUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	if at, ok := req.Context().Value(dispatchKey{}).(*time.Time); ok {
		*at = u.clk.Now()
	}
	u.n.Add(1)
	defer u.n.Add(-1)
	select {
	case <-u.clk.After(u.service):
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	return &http.Response{
		StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": []string{"application/json"}},
		Body:    io.NopCloser(strings.NewReader(`{"object":"chat.completion","choices":[]}`)),
		Request: req,
	}, nil
}

var errNoLoad = errors.New("simulate needs -f LOAD.yaml describing the offered load (see kubectl fairqueue simulate --help)")
