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
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/dataplane/limiter/limitertest"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func lim(requests int64, period time.Duration) *limiter.Limit {
	return &limiter.Limit{Requests: requests, Period: period}
}

// env is a Controller wired to the real limiter, the real fair queue and
// metrics on a fresh registry, all on a fake clock.
type env struct {
	clk     *testingclock.FakeClock
	lim     *limiter.Limiter
	queue   *fairqueue.Queue
	metrics *metrics.Metrics
	reg     *prometheus.Registry
	c       *Controller
}

type envOpts struct {
	cfg      limiter.Config
	settings Settings
	bounds   fairqueue.Bounds
	store    limiter.Store
	maxKeys  int
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	e := &env{clk: testingclock.NewFakeClock(t0), reg: prometheus.NewRegistry()}
	var err error
	if e.metrics, err = metrics.New(e.reg); err != nil {
		t.Fatal(err)
	}
	if e.lim, err = limiter.New(o.cfg, limiter.Options{Store: o.store, Observer: e.metrics, MaxKeysPerDimension: o.maxKeys}); err != nil {
		t.Fatal(err)
	}
	e.queue = fairqueue.New(e.clk, o.bounds, fairqueue.Weights{Default: 1}, e.metrics)
	t.Cleanup(e.queue.Close)
	if e.c, err = New(e.clk, e.lim, e.queue, o.settings, logr.Discard()); err != nil {
		t.Fatal(err)
	}
	return e
}

// admitAsync runs Admit in a goroutine; the result arrives on the channel.
func (e *env) admitAsync(ctx context.Context, r Request) <-chan Decision {
	ch := make(chan Decision, 1)
	go func() { ch <- e.c.Admit(ctx, r) }()
	return ch
}

func (e *env) depth() int {
	d, _ := e.queue.Stats()
	return d
}

// exhaust takes identity tokens for r straight from the limiter until one is refused.
func (e *env) exhaust(t testing.TB, r Request) {
	t.Helper()
	keys := limiter.Keys{APIKey: r.Identity.APIKey, User: r.Identity.User, Team: r.Identity.Team, Model: r.Model}
	for i := 0; ; i++ {
		d, err := e.lim.TakeIdentity(e.clk.Now(), keys)
		if err != nil || i > 1000 {
			t.Fatalf("cannot exhaust the limits for %+v: %v", r, err)
		}
		if !d.Allowed {
			return
		}
	}
}

func receive(t testing.TB, ch <-chan Decision) Decision {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("Admit did not return")
	}
	return Decision{}
}

var (
	alice = identity.Set{APIKey: "key-alice", User: "user-alice", Team: "team-red"}
	bob   = identity.Set{APIKey: "key-bob", User: "user-bob", Team: "team-blue"}
	on    = Settings{Enabled: true, TenantDimension: identity.DimensionUser}
)

// TestImmediateDecisions covers every path that must answer without waiting.
func TestImmediateDecisions(t *testing.T) {
	cases := []struct {
		name string
		opts envOpts
		// before are admitted first (same clock instant) to exhaust a limit.
		before []Request
		req    Request
		want   Decision
	}{{
		name: "limits not exhausted: admitted with the tightest quota",
		opts: envOpts{cfg: limiter.Config{User: lim(10, time.Minute), Model: lim(3, time.Second)}, settings: on},
		req:  Request{Identity: alice, Model: "m"},
		want: Decision{Allowed: true, Status: StatusOK, HasQuota: true,
			Quota: limiter.Quota{Dimension: limiter.DimensionModel, Limit: 3, Remaining: 2, Reset: time.Second / 3}},
	}, {
		name:   "fair queuing off: an identity refusal is an immediate 429",
		opts:   envOpts{cfg: limiter.Config{User: lim(1, time.Second)}},
		before: []Request{{Identity: alice}},
		req:    Request{Identity: alice},
		want: Decision{Status: StatusTooManyRequests, LimitType: "user", RetryAfter: time.Second, HasQuota: true,
			Quota: limiter.Quota{Dimension: limiter.DimensionUser, Limit: 1, Reset: time.Second}},
	}, {
		name:   "no identity: a model refusal is not queueable",
		opts:   envOpts{cfg: limiter.Config{Model: lim(1, time.Second)}, settings: on},
		before: []Request{{Model: "m"}},
		req:    Request{Model: "m"},
		want: Decision{Status: StatusTooManyRequests, LimitType: "model", RetryAfter: time.Second, HasQuota: true,
			Quota: limiter.Quota{Dimension: limiter.DimensionModel, Limit: 1, Reset: time.Second}},
	}, {
		name:   "global refusal is never queued",
		opts:   envOpts{cfg: limiter.Config{Global: lim(1, time.Second)}, settings: on},
		before: []Request{{Identity: bob}},
		req:    Request{Identity: alice},
		want: Decision{Status: StatusTooManyRequests, LimitType: "global", RetryAfter: time.Second, HasQuota: true,
			Quota: limiter.Quota{Dimension: limiter.DimensionGlobal, Limit: 1, Reset: time.Second}},
	}, {
		name:   "per-client refusal is never queued",
		opts:   envOpts{cfg: limiter.Config{Client: lim(1, time.Second)}, settings: on},
		before: []Request{{ClientAddr: "10.0.0.1", Identity: bob}},
		req:    Request{ClientAddr: "10.0.0.1", Identity: alice},
		want: Decision{Status: StatusTooManyRequests, LimitType: "client", RetryAfter: time.Second, HasQuota: true,
			Quota: limiter.Quota{Dimension: limiter.DimensionClient, Limit: 1, Reset: time.Second}},
	}, {
		name: "store outage is a 503, never queued",
		opts: envOpts{cfg: limiter.Config{User: lim(1, time.Second)}, settings: on, store: limitertest.DownStore{}},
		req:  Request{Identity: alice},
		want: Decision{Status: StatusServiceUnavailable, RetryAfter: time.Second},
	}, {
		name:   "retry-after longer than the budget: refused at once",
		opts:   envOpts{cfg: limiter.Config{User: lim(1, time.Second)}, settings: on},
		before: []Request{{Identity: alice}},
		req:    Request{Identity: alice, TotalTimeout: 500 * time.Millisecond},
		want: Decision{Status: StatusTooManyRequests, LimitType: "user", RetryAfter: time.Second, HasQuota: true,
			Quota: limiter.Quota{Dimension: limiter.DimensionUser, Limit: 1, Reset: time.Second},
			Queue: QueueInfo{Queued: true, TenantDimension: identity.DimensionUser, Reason: fairqueue.ReasonWaitExceedsBudget, Position: 1, Estimate: time.Second}},
	}, {
		name:   "retry-after exactly the budget: refused at once",
		opts:   envOpts{cfg: limiter.Config{User: lim(1, time.Second)}, settings: on},
		before: []Request{{Identity: alice}},
		req:    Request{Identity: alice, TotalTimeout: time.Second},
		want: Decision{Status: StatusTooManyRequests, LimitType: "user", RetryAfter: time.Second, HasQuota: true,
			Quota: limiter.Quota{Dimension: limiter.DimensionUser, Limit: 1, Reset: time.Second},
			Queue: QueueInfo{Queued: true, TenantDimension: identity.DimensionUser, Reason: fairqueue.ReasonWaitExceedsBudget, Position: 1, Estimate: time.Second}},
	}, {
		name:   "retry-after beyond maxWait: refused at once",
		opts:   envOpts{cfg: limiter.Config{Team: lim(1, time.Minute)}, settings: on, bounds: fairqueue.Bounds{MaxWait: 10 * time.Second}},
		before: []Request{{Identity: alice}},
		req:    Request{Identity: identity.Set{Team: alice.Team}},
		want: Decision{Status: StatusTooManyRequests, LimitType: "team", RetryAfter: time.Minute, HasQuota: true,
			Quota: limiter.Quota{Dimension: limiter.DimensionTeam, Limit: 1, Reset: time.Minute},
			Queue: QueueInfo{Queued: true, TenantDimension: identity.DimensionTeam, Reason: fairqueue.ReasonWaitExceedsBudget, Position: 1, Estimate: time.Minute}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts)
			for i, r := range tc.before {
				if d := e.c.Admit(context.Background(), r); !d.Allowed {
					t.Fatalf("setup request %d refused: %+v", i, d)
				}
			}
			got := receive(t, e.admitAsync(context.Background(), tc.req))
			gotErr := got.Err
			got.Err = nil
			if got != tc.want {
				t.Fatalf("Admit =\n %+v\nwant\n %+v", got, tc.want)
			}
			if (tc.want.Status == StatusServiceUnavailable) != errors.Is(gotErr, limiter.ErrStoreUnavailable) {
				t.Fatalf("Err = %v", gotErr)
			}
			if d := e.depth(); d != 0 {
				t.Fatalf("queue depth %d after an immediate decision", d)
			}
		})
	}
}

// TestQueuedRequests covers requests that wait and then are admitted or refused.
func TestQueuedRequests(t *testing.T) {
	cases := []struct {
		name     string
		cfg      limiter.Config
		settings Settings
		id       identity.Set
		budget   time.Duration
		// then runs after the request is queued (limits may be hot-swapped);
		// it returns the error of the reconfiguration it makes.
		then  func(e *env) error
		steps []time.Duration
		want  Decision
	}{{
		name:     "admitted when its retry-after has passed, just inside the budget",
		cfg:      limiter.Config{User: lim(1, time.Second)},
		settings: on,
		id:       alice,
		budget:   time.Second + time.Nanosecond,
		steps:    []time.Duration{time.Second},
		want: Decision{Allowed: true, Status: StatusOK, HasQuota: true,
			Quota: limiter.Quota{Dimension: limiter.DimensionUser, Limit: 1, Reset: time.Second},
			Queue: QueueInfo{Queued: true, TenantDimension: identity.DimensionUser, Position: 1, Waited: time.Second, Estimate: time.Second}},
	}, {
		name:     "absent preferred identity falls back to the next one",
		cfg:      limiter.Config{APIKey: lim(1, time.Second)},
		settings: Settings{Enabled: true, TenantDimension: identity.DimensionTeam},
		id:       identity.Set{APIKey: "key-carol", User: "user-carol"},
		steps:    []time.Duration{time.Second},
		want: Decision{Allowed: true, Status: StatusOK, HasQuota: true,
			Quota: limiter.Quota{Dimension: limiter.DimensionAPIKey, Limit: 1, Reset: time.Second},
			Queue: QueueInfo{Queued: true, TenantDimension: identity.DimensionUser, Position: 1, Waited: time.Second, Estimate: time.Second}},
	}, {
		name:     "re-queued after a refused re-check, admitted within its budget",
		cfg:      limiter.Config{User: lim(2, time.Second)},
		settings: on,
		id:       alice,
		budget:   5 * time.Second,
		// Quarter the limit: at 500ms the bucket is half used, which now
		// means 1s until the next token.
		then:  func(e *env) error { return e.lim.SetConfig(limiter.Config{User: lim(1, 2*time.Second)}) },
		steps: []time.Duration{500 * time.Millisecond, time.Second},
		want: Decision{Allowed: true, Status: StatusOK, HasQuota: true,
			Quota: limiter.Quota{Dimension: limiter.DimensionUser, Limit: 1, Reset: 2 * time.Second},
			Queue: QueueInfo{Queued: true, TenantDimension: identity.DimensionUser, Position: 1, Waited: 1500 * time.Millisecond, Estimate: 500 * time.Millisecond}},
	}, {
		name:     "refused after waiting when the re-check's retry-after no longer fits",
		cfg:      limiter.Config{User: lim(2, time.Second)},
		settings: on,
		id:       alice,
		budget:   time.Second,
		then:     func(e *env) error { return e.lim.SetConfig(limiter.Config{User: lim(1, 2*time.Second)}) },
		steps:    []time.Duration{500 * time.Millisecond},
		want: Decision{Status: StatusTooManyRequests, LimitType: "user", RetryAfter: time.Second, HasQuota: true,
			Quota: limiter.Quota{Dimension: limiter.DimensionUser, Limit: 1, Reset: time.Second},
			Queue: QueueInfo{Queued: true, TenantDimension: identity.DimensionUser, Reason: fairqueue.ReasonWaitExceedsBudget, Position: 1, Waited: 500 * time.Millisecond, Estimate: 500 * time.Millisecond}},
	}, {
		name:     "fair queuing switched off while queued: answered as without it",
		cfg:      limiter.Config{User: lim(1, time.Second)},
		settings: on,
		id:       alice,
		then:     func(e *env) error { reload(e.c, func(p *policy) { p.settings = Settings{} }); return nil },
		want: Decision{Status: StatusTooManyRequests, LimitType: "user", RetryAfter: time.Second, HasQuota: true,
			Quota: limiter.Quota{Dimension: limiter.DimensionUser, Limit: 1, Reset: time.Second}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{cfg: tc.cfg, settings: tc.settings})
			r := Request{Identity: tc.id, TotalTimeout: tc.budget}
			e.exhaust(t, r)
			ch := e.admitAsync(context.Background(), r)
			testutil.Eventually(t, "the request to be queued", func() bool { return e.depth() == 1 && e.queue.Settled() })
			if tc.then != nil {
				if err := tc.then(e); err != nil {
					t.Fatalf("reconfiguring while queued: %v", err)
				}
			}
			for i, s := range tc.steps {
				if i > 0 {
					// The previous attempt was refused: wait until it is re-queued.
					testutil.Eventually(t, "the re-queue", e.queue.Settled)
				}
				e.clk.Step(s)
			}
			got := receive(t, ch)
			if got != tc.want {
				t.Fatalf("Admit =\n %+v\nwant\n %+v", got, tc.want)
			}
			testutil.Eventually(t, "the depth gauge to return to 0", func() bool {
				return promtest.ToFloat64(gauge(e, metrics.QueueDepthName)) == 0
			})
		})
	}
}

// gauge returns the named gauge from e's registry as a collector.
func gauge(e *env, name string) prometheus.Collector {
	return collectorFunc(func(ch chan<- prometheus.Metric) {
		mfs, _ := e.reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == name {
				ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, "", nil, nil), prometheus.GaugeValue, mf.GetMetric()[0].GetGauge().GetValue())
			}
		}
	})
}

type collectorFunc func(chan<- prometheus.Metric)

func (f collectorFunc) Describe(chan<- *prometheus.Desc)    {}
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }

func TestCancellationLeavesTheQueueAtOnce(t *testing.T) {
	e := newEnv(t, envOpts{cfg: limiter.Config{User: lim(1, time.Second)}, settings: on})
	e.c.Admit(context.Background(), Request{Identity: alice})
	ctx, cancel := context.WithCancel(context.Background())
	ch := e.admitAsync(ctx, Request{Identity: alice})
	testutil.Eventually(t, "the request to be queued", func() bool { return e.depth() == 1 })
	cancel()
	got := receive(t, ch)
	if got.Allowed || got.Status != StatusClientClosedRequest || !errors.Is(got.Err, context.Canceled) || !got.Queue.Queued {
		t.Fatalf("cancelled request: %+v", got)
	}
	if d := e.depth(); d != 0 {
		t.Fatalf("depth %d after cancellation, want 0", d)
	}
	// No work was done for it: the token that refills at 1s is still there.
	e.clk.Step(time.Second)
	if d := e.c.Admit(context.Background(), Request{Identity: alice}); !d.Allowed || d.Queue.Queued {
		t.Fatalf("next request after the refill: %+v, want admitted at once", d)
	}
}

func TestNoBarging(t *testing.T) {
	e := newEnv(t, envOpts{cfg: limiter.Config{Model: lim(1, time.Second)}, settings: on})
	m := func(id identity.Set) Request { return Request{Identity: id, Model: "llama"} }
	e.c.Admit(context.Background(), m(alice))
	waiting := e.admitAsync(context.Background(), m(alice))
	testutil.Eventually(t, "alice to be queued", func() bool { return e.depth() == 1 })

	// The model limit goes away while alice waits for her retry time: the
	// limiter alone would admit bob at once.
	if err := e.lim.SetConfig(limiter.Config{}); err != nil {
		t.Fatal(err)
	}
	got := receive(t, e.admitAsync(context.Background(), m(bob)))
	if !got.Allowed || !got.Queue.Queued || got.Queue.TenantDimension != identity.DimensionUser {
		t.Fatalf("bob needs a key alice waits on: %+v, want admitted through the queue", got)
	}
	// Another model has no waiters: straight through.
	if got := e.c.Admit(context.Background(), Request{Identity: bob, Model: "other"}); !got.Allowed || got.Queue.Queued {
		t.Fatalf("bob on an uncontended key: %+v, want the fast path", got)
	}
	e.clk.Step(time.Second)
	if got := receive(t, waiting); !got.Allowed {
		t.Fatalf("alice: %+v", got)
	}
}

func TestSettingsValidation(t *testing.T) {
	_, err := NewController(testingclock.NewFakeClock(t0), &config.Config{FairQueuing: config.FairQueuing{Enabled: true, TenantDimension: "org"}}, Options{})
	if err == nil || !strings.Contains(err.Error(), `"org"`) || !strings.Contains(err.Error(), "fairQueuing.tenantDimension") {
		t.Fatalf("NewController(tenantDimension org) = %v, want an error naming the field and the value", err)
	}
	if _, err := New(t0Clock(), newLimiter(t), newQueue(t), Settings{Enabled: true, TenantDimension: "org"}, logr.Discard()); err == nil || !strings.Contains(err.Error(), `"org"`) {
		t.Fatalf("New(tenantDimension org) = %v, want an error naming the value", err)
	}
	if _, err := New(nil, nil, nil, Settings{}, logr.Discard()); err == nil {
		t.Fatal("New without dependencies succeeded")
	}
}

// TestNoBargingRequestThatCannotFitIsRefusedAtOnce: a request that must queue
// behind its own tenant's waiter takes the limiter's Retry-After without
// being charged; when even that does not fit its budget it is refused at
// once, with an estimate one grant behind the waiter ahead and, as its
// Retry-After, when that place would be granted: the next token goes to the
// waiter ahead.
func TestNoBargingRequestThatCannotFitIsRefusedAtOnce(t *testing.T) {
	e := newEnv(t, envOpts{cfg: limiter.Config{User: lim(1, time.Second)}, settings: on})
	e.c.Admit(context.Background(), Request{Identity: alice})
	first := e.admitAsync(context.Background(), Request{Identity: alice})
	testutil.Eventually(t, "the first waiter", func() bool { return e.depth() == 1 })
	got := receive(t, e.admitAsync(context.Background(), Request{Identity: alice, TotalTimeout: 500 * time.Millisecond}))
	want := Decision{Status: StatusTooManyRequests, LimitType: "user", RetryAfter: 2 * time.Second, HasQuota: true,
		Quota: limiter.Quota{Dimension: limiter.DimensionUser, Limit: 1, Reset: time.Second},
		Queue: QueueInfo{Queued: true, TenantDimension: identity.DimensionUser, Reason: fairqueue.ReasonWaitExceedsBudget, Position: 2, Estimate: 2 * time.Second}}
	if got != want {
		t.Fatalf("second request =\n %+v\nwant\n %+v", got, want)
	}
	e.clk.Step(time.Second)
	if got := receive(t, first); !got.Allowed {
		t.Fatalf("first waiter: %+v", got)
	}
}

func TestFastPathDoesNotAllocate(t *testing.T) {
	huge := lim(1<<40, time.Second)
	e := newEnv(t, envOpts{cfg: limiter.Config{Global: huge, Client: huge, APIKey: huge, User: huge, Team: huge, Model: huge}, settings: on})
	r := Request{ClientAddr: "10.0.0.1", Identity: alice, Model: "m", TotalTimeout: time.Minute}
	e.c.Admit(context.Background(), r) // create the buckets
	ctx := context.Background()
	if allocs := testing.AllocsPerRun(1000, func() {
		if !e.c.Admit(ctx, r).Allowed {
			t.Fatal("refused")
		}
	}); allocs != 0 {
		t.Fatalf("fast path allocates %v times per request, want 0", allocs)
	}
}
