package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/yaml"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
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

// TenantResult is what one tenant of a simulation got.
type TenantResult struct {
	Name     string
	Offered  int
	Admitted int
	// Refused counts refusals by reason, as loadgen classifies them.
	Refused map[string]int
	// Waits are the queue waits of the admitted requests.
	Waits []time.Duration
	// Weight is the tenant's weight in the rendered config (0 when fair
	// queuing is off or the tenant sends no identity of its dimension).
	Weight int32
}

// WaitQuantile returns the q-quantile of the admitted requests' waits.
func (r *TenantResult) WaitQuantile(q float64) time.Duration {
	if len(r.Waits) == 0 {
		return 0
	}
	w := append([]time.Duration(nil), r.Waits...)
	sort.Slice(w, func(i, j int) bool { return w[i] < w[j] })
	return w[min(len(w)-1, int(q*float64(len(w))))]
}

// Simulate offers load to the real data-plane server loaded with cfg, in
// process, on a fake clock: arrivals follow loadgen's open-loop schedule, the
// backend answers after the load's service time, and the clock advances only
// when every request is parked (queued or at the backend), so the outcome is
// what the scheduler and limiter decide, not how fast this machine is.
func Simulate(ctx context.Context, cfg *config.Config, key []byte, load *Load) ([]TenantResult, error) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	up := &simUpstream{clk: clk, service: load.serviceTime()}
	reg := prometheus.NewRegistry()
	srv, err := server.New(server.Options{Logger: logr.Discard(), Clock: clk, HashKey: key, Transport: up, Registerer: reg, Gatherer: reg})
	if err != nil {
		return nil, err
	}
	// The backends are simulated: any URL works, the transport never dials.
	if err := srv.Load(cfg, "simulated"); err != nil {
		return nil, fmt.Errorf("loading the rendered config: %w", err)
	}
	lc := load.LoadgenConfig("http://sim")
	results := make([]TenantResult, len(lc.Tenants))
	var mu sync.Mutex
	var inServe atomic.Int64
	var wg sync.WaitGroup
	next := make([]int64, len(lc.Tenants))
	for i, t := range lc.Tenants {
		results[i] = TenantResult{Name: t.Name, Refused: map[string]int{}, Weight: weightOf(cfg, key, t)}
	}
	body, _ := json.Marshal(map[string]any{"model": lc.Model, "messages": []map[string]string{{"role": "user", "content": "simulate"}}, "max_tokens": 1})
	for elapsed := time.Duration(0); ; elapsed += simStep {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		for i, t := range lc.Tenants {
			until := lc.Duration
			if t.Stop > 0 {
				until = min(until, t.Stop)
			}
			for {
				at := t.Start + time.Duration(float64(next[i])*float64(time.Second)/t.Rate)
				if at > elapsed || at >= until {
					break
				}
				next[i]++
				req := httptest.NewRequest(http.MethodPost, "http://sim"+lc.Path, bytes.NewReader(body))
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
				req.RemoteAddr = "127.0.0.1:1"
				inServe.Add(1)
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					rec := httptest.NewRecorder()
					srv.ServeHTTP(rec, req)
					mu.Lock()
					r := &results[i]
					r.Offered++
					if rec.Code/100 == 2 {
						r.Admitted++
						if w, ok := loadgen.WaitHeader(rec.Header()); ok {
							r.Waits = append(r.Waits, w)
						} else {
							r.Waits = append(r.Waits, 0)
						}
					} else {
						reason, _, _ := loadgen.Classify(rec.Body.Bytes())
						if !loadgen.IsRefusal(rec.Code) {
							reason = fmt.Sprintf("status %d", rec.Code)
						}
						r.Refused[reason]++
					}
					mu.Unlock()
					inServe.Add(-1)
				}(i)
			}
		}
		settle(reg, &inServe, up)
		if elapsed >= lc.Duration && inServe.Load() == 0 {
			break
		}
		clk.Step(simStep)
	}
	wg.Wait()
	return results, nil
}

// settle waits until every request in the server is parked: at the backend
// or queued, with the same counts over several polls.
func settle(reg *prometheus.Registry, inServe *atomic.Int64, up *simUpstream) {
	stable := 0
	var last [3]int64
	for spins := 0; stable < 3; spins++ {
		runtime.Gosched()
		if spins > 50 {
			time.Sleep(20 * time.Microsecond)
		}
		cur := [3]int64{inServe.Load(), up.inFlight.Load(), queueDepth(reg)}
		if cur == last && cur[0] == cur[1]+cur[2] {
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

// queueDepth reads the data plane's queue depth gauge.
func queueDepth(reg *prometheus.Registry) int64 {
	families, err := reg.Gather()
	if err != nil {
		return -1
	}
	for _, f := range families {
		if f.GetName() == metrics.QueueDepthName && len(f.GetMetric()) > 0 {
			return int64(f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	return 0
}

// simUpstream is the simulated backend: every request takes service on the
// fake clock, then gets a small OpenAI-style answer.
type simUpstream struct {
	clk      *testingclock.FakeClock
	service  time.Duration
	inFlight atomic.Int64
}

func (u *simUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	u.inFlight.Add(1)
	defer u.inFlight.Add(-1)
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

// weightOf returns the weight the rendered config gives tenant t.
func weightOf(cfg *config.Config, key []byte, t loadgen.Tenant) int32 {
	if !cfg.FairQueuing.Enabled {
		return 0
	}
	var raw string
	switch cfg.FairQueuing.TenantDimension {
	case config.TenantAPIKey:
		raw = t.APIKey
	case config.TenantUser:
		raw = t.User
	case config.TenantTeam:
		raw = t.Team
	}
	if raw == "" {
		return 0
	}
	h := identity.Hash(key, raw)
	for _, w := range cfg.FairQueuing.Weights {
		if w.TenantHash == h {
			return w.Weight
		}
	}
	return cfg.FairQueuing.DefaultWeight
}

var errNoLoad = errors.New("simulate needs -f LOAD.yaml describing the offered load (see kubectl fairqueue simulate --help)")
