package server

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/fakeupstream"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

func TestRequestIDOnEveryResponse(t *testing.T) {
	tests := []struct {
		name       string
		clientID   string // x-request-id the client sends; "" for none
		upstreamID string // x-request-id the upstream answers with; "" for none
		want       func(got, sent string) bool
	}{
		{name: "upstream without one: generated, and sent upstream", want: func(got, sent string) bool {
			return requestIDPattern.MatchString(got) && got == sent
		}},
		{name: "upstream's own id wins over a generated one", upstreamID: "upstream-7", want: func(got, _ string) bool { return got == "upstream-7" }},
		{name: "client's own id: sent upstream and echoed", clientID: "client-3", want: func(got, sent string) bool {
			return got == "client-3" && sent == "client-3"
		}},
		{name: "client's own id wins over the upstream's", clientID: "client-4", upstreamID: "upstream-8", want: func(got, sent string) bool {
			return got == "client-4" && sent == "client-4"
		}},
		{name: "an empty client id counts as none", clientID: " ", want: func(got, sent string) bool {
			return requestIDPattern.MatchString(got) && got == sent
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sent := make(chan string, 1)
			up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sent <- r.Header.Get("X-Request-Id")
				if tc.upstreamID != "" {
					w.Header().Set("X-Request-Id", tc.upstreamID)
				}
				_, _ = w.Write([]byte(`{}`)) // a failed write shows as a failed request
			})
			hs := newHarness(t, up, nil)
			var header map[string]string
			if tc.clientID != "" {
				header = map[string]string{"X-Request-Id": tc.clientID}
			}
			resp := hs.do(`{"model":"m"}`, header)
			readAll(t, resp)
			got := resp.Header.Values("X-Request-Id")
			var upstreamSaw string
			select {
			case upstreamSaw = <-sent:
			case <-time.After(10 * time.Second):
				t.Fatal("upstream never called")
			}
			if len(got) != 1 || !tc.want(got[0], upstreamSaw) {
				t.Errorf("x-request-id = %q (upstream received %q)", got, upstreamSaw)
			}
		})
	}
}

// TestRefusalEchoesTheClientsRequestID: a refusal the data plane answers
// itself carries the client's own x-request-id too.
func TestRefusalEchoesTheClientsRequestID(t *testing.T) {
	hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), func(c *config.Config) { c.RateLimits.Global = limit(1, 1, time.Second) })
	readAll(t, hs.do(`{"model":"m"}`, nil))
	resp := hs.do(`{"model":"m"}`, map[string]string{"X-Request-Id": "client-9"})
	readAll(t, resp)
	if got := resp.Header.Values("X-Request-Id"); resp.StatusCode != http.StatusTooManyRequests || len(got) != 1 || got[0] != "client-9" {
		t.Errorf("status %d, x-request-id %q; want 429 with the client's own id client-9", resp.StatusCode, got)
	}
}

// TestClientDeadlineBoundsTheBudget: with a per-user limit of 1/s exhausted,
// a request whose budget is under a second is refused at once
// (wait_exceeds_budget), whichever bound is the smallest; with a budget over
// a second it is queued and admitted. A client's deadline counts less the
// 250ms margin that lets the refusal reach the client in time; another
// model's shorter total timeout does not count.
func TestClientDeadlineBoundsTheBudget(t *testing.T) {
	tests := []struct {
		name       string
		mutate     func(*config.Config)
		header     map[string]string
		wantQueued bool
	}{
		{name: "X-Stainless-Timeout in seconds", header: map[string]string{"X-Stainless-Timeout": "0.5"}},
		{name: "X-Envoy-Expected-Rq-Timeout-Ms", header: map[string]string{"X-Envoy-Expected-Rq-Timeout-Ms": "900"}},
		{
			name:   "the policy's header, as a duration",
			mutate: func(c *config.Config) { c.Timeouts.ClientDeadlineHeader = "x-deadline" },
			header: map[string]string{"X-Deadline": "750ms"},
		},
		{
			name:   "the policy's header, in seconds",
			mutate: func(c *config.Config) { c.Timeouts.ClientDeadlineHeader = "X-Deadline" },
			header: map[string]string{"X-Deadline": "0.25"},
		},
		{
			name: "this model's total timeout",
			mutate: func(c *config.Config) {
				c.Timeouts.RequestTotal = dur(time.Minute)
				c.Timeouts.Models = []config.ModelTimeout{{Model: "m", Total: dur(800 * time.Millisecond)}}
			},
		},
		{
			name: "another model's shorter total timeout does not count",
			mutate: func(c *config.Config) {
				c.Timeouts.RequestTotal = dur(time.Minute)
				c.Timeouts.Models = []config.ModelTimeout{{Model: "short", Total: dur(time.Millisecond)}}
			},
			wantQueued: true,
		},
		{name: "a client deadline within the margin of the Retry-After", header: map[string]string{"X-Stainless-Timeout": "1.2"}},
		{name: "an Envoy deadline within the margin of the Retry-After", header: map[string]string{"X-Envoy-Expected-Rq-Timeout-Ms": "1200"}},
		{name: "the shortest of several client headers", header: map[string]string{"X-Stainless-Timeout": "600", "X-Envoy-Expected-Rq-Timeout-Ms": "500"}},
		{name: "a budget over the Retry-After queues", header: map[string]string{"X-Stainless-Timeout": "1.5"}, wantQueued: true},
		{name: "an unparseable header is ignored", header: map[string]string{"X-Stainless-Timeout": "soon"}, wantQueued: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), func(c *config.Config) {
				perUserQueueing(c)
				if tc.mutate != nil {
					tc.mutate(c)
				}
			})
			if r := wait(t, hs.start(context.Background(), `{"model":"m"}`, alice)); r.resp.StatusCode != 200 {
				t.Fatalf("first request: status %d", r.resp.StatusCode)
			}
			h := map[string]string{"X-User": "alice"}
			for k, v := range tc.header {
				h[k] = v
			}
			ch := hs.start(context.Background(), `{"model":"m"}`, h)
			if tc.wantQueued {
				hs.queued(1)
				hs.clk.Step(time.Second)
				if r := wait(t, ch); r.resp.StatusCode != 200 {
					t.Fatalf("status %d, want 200 after queueing: %s", r.resp.StatusCode, r.body)
				}
				return
			}
			r := wait(t, ch)
			if r.resp.StatusCode != 429 || !strings.Contains(r.body, `"reason":"wait_exceeds_budget"`) {
				t.Fatalf("status %d body %s, want 429 wait_exceeds_budget", r.resp.StatusCode, r.body)
			}
			if got := r.resp.Header.Get("Retry-After-Ms"); got != "1000" {
				t.Errorf("retry-after-ms = %q, want 1000 (the next token)", got)
			}
		})
	}
}

// estimateSample is one queued request's estimate and actual wait.
type estimateSample struct{ estimate, waited time.Duration }

// samples collects the estimate and wait headers of admitted queued
// requests.
func samples(t *testing.T, chs []<-chan result) []estimateSample {
	t.Helper()
	var out []estimateSample
	for _, c := range chs {
		r := wait(t, c)
		if r.resp.StatusCode != 200 {
			t.Fatalf("status %d, want 200: %s", r.resp.StatusCode, r.body)
		}
		est, err1 := strconv.ParseInt(r.resp.Header.Get("X-Fair-Queue-Estimated-Wait-Ms"), 10, 64)
		waited, err2 := strconv.ParseInt(r.resp.Header.Get("X-Fair-Queue-Wait-Ms"), 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("admitted request without queue headers: %v", r.resp.Header)
		}
		out = append(out, estimateSample{time.Duration(est) * time.Millisecond, time.Duration(waited) * time.Millisecond})
	}
	return out
}

// medianRelativeError returns the median of |estimate-waited|/waited.
func medianRelativeError(ss []estimateSample) float64 {
	errs := make([]float64, 0, len(ss))
	for _, s := range ss {
		d := float64(s.estimate - s.waited)
		if d < 0 {
			d = -d
		}
		errs = append(errs, d/float64(s.waited))
	}
	slices.Sort(errs)
	return errs[len(errs)/2]
}

// TestEstimatesOverHTTP measures the x-fair-queue-estimated-wait-ms header
// against the wait each request actually had: on a cold replica's first
// backlog (no grant measured yet: the spacing is the bucket's refill
// interval) and in a steady backlog of two tenants with arrivals at every
// phase of the refill interval.
func TestEstimatesOverHTTP(t *testing.T) {
	t.Run("cold replica, first backlog", func(t *testing.T) {
		// 1 token/s with a burst of 4: four admitted at once, four queued.
		hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), func(c *config.Config) {
			c.Identity.TrustHeaders = true
			c.RateLimits.PerModel = &config.ModelLimits{Default: limit(1, 4, time.Second)}
			c.FairQueuing.Enabled = true
			c.FairQueuing.Bounds.MaxWait = dur(10 * time.Second)
		})
		for range 4 {
			if r := wait(t, hs.start(context.Background(), `{"model":"m"}`, alice)); r.resp.StatusCode != 200 {
				t.Fatalf("burst request: status %d", r.resp.StatusCode)
			}
		}
		var chs []<-chan result
		for i, user := range []string{"b", "c", "d", "e"} {
			chs = append(chs, hs.start(context.Background(), `{"model":"m"}`, map[string]string{"X-User": user}))
			hs.queued(i + 1)
		}
		for range 4 {
			hs.clk.Step(time.Second)
			hs.settled()
		}
		ss := samples(t, chs)
		med := medianRelativeError(ss)
		t.Logf("cold first backlog: estimate/actual %v, median relative error %.3f", ss, med)
		for i, s := range ss {
			if s.estimate <= 0 {
				t.Errorf("request %d estimated 0 for a %v wait", i, s.waited)
			}
		}
		if med > 0.10 {
			t.Errorf("median relative error %.3f, want <= 0.10", med)
		}
	})
	t.Run("steady backlog", func(t *testing.T) {
		// 4 tokens/s shared by two tenants holding about three requests
		// each; the clock moves 100ms at a time so requests arrive at every
		// phase of the 250ms refill interval.
		hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), func(c *config.Config) {
			c.Identity.TrustHeaders = true
			c.RateLimits.PerModel = &config.ModelLimits{Default: limit(4, 1, time.Second)}
			c.FairQueuing.Enabled = true
		})
		const backlog, arrivals = 6, 60
		var chs []<-chan result
		users := []string{"a", "b"}
		sent := 0
		for step := 0; sent < arrivals; step++ {
			if step > 10*arrivals {
				t.Fatalf("only %d requests sent after %d steps", sent, step)
			}
			depth, _ := hs.srv.rt.Load().fairQueue().Stats()
			for depth < backlog && sent < arrivals {
				c := hs.start(context.Background(), `{"model":"m"}`, map[string]string{"X-User": users[sent%2]})
				sent++
				testutil.Eventually(t, "the request to be queued or answered", func() bool {
					d, _ := hs.srv.rt.Load().fairQueue().Stats()
					return d > depth || len(c) > 0
				})
				if d, _ := hs.srv.rt.Load().fairQueue().Stats(); d > depth {
					chs = append(chs, c)
					depth = d
					hs.settled()
					continue
				}
				if r := wait(t, c); r.resp.StatusCode != 200 {
					t.Fatalf("unqueued request: status %d", r.resp.StatusCode)
				}
			}
			hs.clk.Step(100 * time.Millisecond)
			hs.settled()
		}
		for {
			if d, _ := hs.srv.rt.Load().fairQueue().Stats(); d == 0 {
				break
			}
			hs.clk.Step(100 * time.Millisecond)
			hs.settled()
		}
		ss := samples(t, chs)[backlog:] // the first backlog is the cold case above
		med := medianRelativeError(ss)
		t.Logf("steady backlog: median relative error %.3f over %d requests", med, len(ss))
		if med > 0.05 {
			t.Errorf("median relative error %.3f, want <= 0.05", med)
		}
	})
}

// TestQueueRefusalRetryAfterIsWhenARetryFits: eight tenants share a bucket
// refilling every 125ms and may each hold one queued request. A request
// refused tenant_queue_full is told when its tenant's queue will have room;
// retrying every 25ms from then on, the first retry that is queued comes
// no earlier than that and within one refill interval after it.
func TestQueueRefusalRetryAfterIsWhenARetryFits(t *testing.T) {
	hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), func(c *config.Config) {
		c.Identity.TrustHeaders = true
		c.RateLimits.PerModel = &config.ModelLimits{Default: limit(8, 1, time.Second)}
		c.FairQueuing.Enabled = true
		c.FairQueuing.Bounds.MaxQueueDepthPerTenant = 1
	})
	user := func(i int) map[string]string { return map[string]string{"X-User": "u" + strconv.Itoa(i)} }
	if r := wait(t, hs.start(context.Background(), `{"model":"m"}`, user(0))); r.resp.StatusCode != 200 {
		t.Fatalf("first request: status %d", r.resp.StatusCode)
	}
	var chs []<-chan result
	for i := range 8 {
		chs = append(chs, hs.start(context.Background(), `{"model":"m"}`, user(i)))
		hs.queued(i + 1)
	}
	refused := wait(t, hs.start(context.Background(), `{"model":"m"}`, user(7)))
	if refused.resp.StatusCode != 429 || !strings.Contains(refused.body, `"tenant_queue_full"`) {
		t.Fatalf("status %d body %s, want 429 tenant_queue_full", refused.resp.StatusCode, refused.body)
	}
	retryAfter, err := strconv.ParseInt(refused.resp.Header.Get("Retry-After-Ms"), 10, 64)
	if err != nil {
		t.Fatalf("retry-after-ms %q: %v", refused.resp.Header.Get("Retry-After-Ms"), err)
	}
	const step = 25 * time.Millisecond
	var fit time.Duration
	for elapsed := step; fit == 0; elapsed += step {
		if elapsed > 5*time.Second {
			t.Fatal("no retry fitted within 5s")
		}
		hs.clk.Step(step)
		hs.settled()
		depth, _ := hs.srv.rt.Load().fairQueue().Stats()
		c := hs.start(context.Background(), `{"model":"m"}`, user(7))
		testutil.Eventually(t, "the retry to be queued or answered", func() bool {
			d, _ := hs.srv.rt.Load().fairQueue().Stats()
			return d > depth || len(c) > 0
		})
		if d, _ := hs.srv.rt.Load().fairQueue().Stats(); d > depth {
			fit = elapsed
			chs = append(chs, c)
			continue
		}
		if r := wait(t, c); r.resp.StatusCode != 429 {
			t.Fatalf("retry: status %d, want 429 or queued", r.resp.StatusCode)
		}
	}
	t.Logf("retry-after-ms %d; first retry that fitted after %v", retryAfter, fit)
	ra := time.Duration(retryAfter) * time.Millisecond
	if ra > fit || fit-ra > 125*time.Millisecond {
		t.Errorf("Retry-After %v, but a retry first fitted after %v: want at most that and within one refill interval of it", ra, fit)
	}
	for range 20 {
		hs.clk.Step(125 * time.Millisecond)
		hs.settled()
	}
	for _, c := range chs {
		wait(t, c)
	}
}

func TestClientTimeoutParsing(t *testing.T) {
	tests := []struct {
		name   string
		header http.Header
		custom string
		want   time.Duration
		wantOK bool
	}{
		{name: "none", header: http.Header{}},
		{name: "stainless seconds", header: http.Header{"X-Stainless-Timeout": {"600"}}, want: 10 * time.Minute, wantOK: true},
		{name: "stainless fraction", header: http.Header{"X-Stainless-Timeout": {"2.5"}}, want: 2500 * time.Millisecond, wantOK: true},
		{name: "envoy milliseconds", header: http.Header{"X-Envoy-Expected-Rq-Timeout-Ms": {"15000"}}, want: 15 * time.Second, wantOK: true},
		{name: "custom duration", header: http.Header{"X-Deadline": {"1m30s"}}, custom: "X-Deadline", want: 90 * time.Second, wantOK: true},
		{name: "custom header not configured", header: http.Header{"X-Deadline": {"1s"}}},
		{name: "the shortest wins", header: http.Header{"X-Stainless-Timeout": {"3"}, "X-Envoy-Expected-Rq-Timeout-Ms": {"2000"}, "X-Deadline": {"4s"}}, custom: "X-Deadline", want: 2 * time.Second, wantOK: true},
		{name: "zero, negative, NaN and junk are ignored", header: http.Header{"X-Stainless-Timeout": {"NaN"}, "X-Envoy-Expected-Rq-Timeout-Ms": {"-5"}, "X-Deadline": {"0"}}, custom: "X-Deadline"},
		{name: "huge values saturate", header: http.Header{"X-Stainless-Timeout": {"1e300"}}, want: maxClientTimeout, wantOK: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := clientTimeout(tc.header, tc.custom)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("clientTimeout = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestAccessLogCarriesTheRequestID(t *testing.T) {
	var (
		mu    sync.Mutex
		lines []string
	)
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{Verbosity: 2})
	hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), nil, func(o *Options) { o.Logger = logger })
	resp := hs.do(`{"model":"m"}`, nil)
	readAll(t, resp)
	id := resp.Header.Get("X-Request-Id")
	testutil.Eventually(t, "the access log line", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			if strings.Contains(l, `"msg"="Request"`) && strings.Contains(l, `"requestID"="`+id+`"`) && strings.Contains(l, `"status"=200`) {
				return true
			}
		}
		return false
	})
}
