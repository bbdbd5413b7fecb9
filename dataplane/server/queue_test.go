package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/fakeupstream"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// result is a response read in the background.
type result struct {
	resp *http.Response
	body string
	err  error
}

// start sends a request in the background; the response body is read fully.
func (hs *harness) start(ctx context.Context, body string, header map[string]string) <-chan result {
	out := make(chan result, 1)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.front.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		hs.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	go func() {
		resp, err := hs.client.Do(req)
		if err != nil {
			out <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close() // read-only: a close error loses nothing
		out <- result{resp: resp, body: string(b), err: err}
	}()
	return out
}

// queued waits until n requests are queued and the scheduler has settled:
// nothing is due before its next wake-up on the fake clock.
func (hs *harness) queued(n int) {
	hs.t.Helper()
	rt := hs.srv.rt.Load()
	testutil.Eventually(hs.t, "requests are queued", func() bool {
		depth, _ := rt.fairQueue().Stats()
		return depth == n && rt.fairQueue().Settled()
	})
}

// settled waits until the fair queue has handled every event and nothing is
// due before its next wake-up on the fake clock.
func (hs *harness) settled() {
	hs.t.Helper()
	rt := hs.srv.rt.Load()
	testutil.Eventually(hs.t, "the fair queue settles", rt.fairQueue().Settled)
}

// recvResult receives one result, whatever its error, failing the test after
// 10s.
func recvResult(t *testing.T, c <-chan result) result {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no response")
	}
	return result{}
}

// recvSignal waits for c to be closed or signalled, failing the test after
// 10s.
func recvSignal(t *testing.T, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream was never reached")
	}
}

func wait(t *testing.T, c <-chan result) result {
	t.Helper()
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("request failed: %v", r.err)
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no response")
	}
	return result{}
}

// perUserQueueing enables fair queuing on a per-user limit of one request per
// second and trusts the X-User header.
func perUserQueueing(c *config.Config) {
	c.Identity.TrustHeaders = true
	c.RateLimits.PerUser = limit(1, 1, time.Second)
	c.FairQueuing.Enabled = true
}

var alice = map[string]string{"X-User": "alice"}

func TestQueuedRequestIsAdmittedWithHeaders(t *testing.T) {
	hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), perUserQueueing)
	if r := wait(t, hs.start(context.Background(), `{"model":"m"}`, alice)); r.resp.StatusCode != 200 {
		t.Fatalf("first request: status %d, want 200", r.resp.StatusCode)
	}
	second := hs.start(context.Background(), `{"model":"m"}`, alice)
	hs.queued(1)
	hs.clk.Step(time.Second)
	r := wait(t, second)
	if r.resp.StatusCode != 200 {
		t.Fatalf("queued request: status %d, want 200: %s", r.resp.StatusCode, r.body)
	}
	for header, want := range map[string]string{
		"X-Fair-Queue-Position":          "1",
		"X-Fair-Queue-Wait-Ms":           "1000",
		"X-Fair-Queue-Estimated-Wait-Ms": "1000",
		"X-Ratelimit-Limit-Requests":     "1",
		"X-Ratelimit-Remaining-Requests": "0",
	} {
		if got := r.resp.Header.Get(header); got != want {
			t.Errorf("%s = %q, want %q", header, got, want)
		}
	}
}

func TestQueueRefusals(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*config.Config)
		// queuedFirst requests are left waiting before the one under test,
		// sent by queuedBy (default alice).
		queuedFirst  int
		queuedBy     string
		wantReason   string
		wantPosition int
	}{
		{
			name:        "tenant queue full",
			mutate:      func(c *config.Config) { c.FairQueuing.Bounds.MaxQueueDepthPerTenant = 1 },
			queuedFirst: 1, wantReason: "tenant_queue_full", wantPosition: 2,
		},
		{
			name: "whole queue full",
			mutate: func(c *config.Config) {
				c.FairQueuing.Bounds.MaxQueueDepthPerTenant = 1
				c.FairQueuing.Bounds.MaxTotalQueued = 1
			},
			queuedFirst: 1, queuedBy: "bob", wantReason: "queue_full", wantPosition: 2,
		},
		{
			name:       "Retry-After does not fit the total timeout",
			mutate:     func(c *config.Config) { c.Timeouts.RequestTotal = dur(500 * time.Millisecond) },
			wantReason: "wait_exceeds_budget", wantPosition: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), func(c *config.Config) {
				perUserQueueing(c)
				tc.mutate(c)
			})
			if r := wait(t, hs.start(context.Background(), `{"model":"m"}`, alice)); r.resp.StatusCode != 200 {
				t.Fatalf("first request: status %d, want 200", r.resp.StatusCode)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var pending []<-chan result
			if tc.queuedBy != "" {
				wait(t, hs.start(context.Background(), `{"model":"m"}`, map[string]string{"X-User": tc.queuedBy}))
			}
			for range tc.queuedFirst {
				by := alice
				if tc.queuedBy != "" {
					by = map[string]string{"X-User": tc.queuedBy}
				}
				pending = append(pending, hs.start(ctx, `{"model":"m"}`, by))
			}
			if tc.queuedFirst > 0 {
				hs.queued(tc.queuedFirst)
			}
			resp := hs.do(`{"model":"m"}`, alice)
			if resp.StatusCode != 429 {
				t.Fatalf("status = %d, want 429: %s", resp.StatusCode, readAll(t, resp))
			}
			if got := resp.Header.Get("X-Fair-Queue-Position"); got != itoa(int64(tc.wantPosition)) {
				t.Errorf("x-fair-queue-position = %q, want %d", got, tc.wantPosition)
			}
			if got := resp.Header.Get("X-Fair-Queue-Wait-Ms"); got != "0" {
				t.Errorf("x-fair-queue-wait-ms = %q, want 0 for a refusal at enqueue", got)
			}
			if resp.Header.Get("Retry-After") == "" || resp.Header.Get("Retry-After-Ms") == "" {
				t.Errorf("Retry-After %q / retry-after-ms %q missing", resp.Header.Get("Retry-After"), resp.Header.Get("Retry-After-Ms"))
			}
			e := decodeError(t, resp)
			d := e.Error.Details
			if e.Error.Type != "rate_limit_exceeded" || d == nil || d.LimitType != "user" || d.RetryAfterMS == nil || *d.RetryAfterMS <= 0 {
				t.Fatalf("error = %+v, want rate_limit_exceeded with limit_type user and a positive retry_after_ms", e.Error)
			}
			fq := d.FairQueue
			if fq == nil || fq.TenantDimension != "user" || fq.Reason != tc.wantReason ||
				fq.Position == nil || *fq.Position != tc.wantPosition || fq.WaitedMS == nil || *fq.WaitedMS != 0 {
				t.Errorf("details.fair_queue = %+v, want user/%s at position %d, waited 0", fq, tc.wantReason, tc.wantPosition)
			}
			cancel()
			for _, p := range pending {
				recvResult(t, p)
			}
		})
	}
}

func TestCancelledClientFreesItsQueueSlot(t *testing.T) {
	up := fakeupstream.New(fakeupstream.Options{})
	hs := newHarness(t, up, func(c *config.Config) {
		perUserQueueing(c)
		c.FairQueuing.Bounds.MaxQueueDepthPerTenant = 1
	})
	wait(t, hs.start(context.Background(), `{"model":"m"}`, alice))

	ctx, cancel := context.WithCancel(context.Background())
	gone := hs.start(ctx, `{"model":"m"}`, alice)
	hs.queued(1)
	cancel()
	if r := recvResult(t, gone); r.err == nil {
		t.Fatalf("cancelled request got a response: %d", r.resp.StatusCode)
	}
	hs.queued(0)

	// The freed slot takes the next request, which is admitted in turn.
	next := hs.start(context.Background(), `{"model":"m"}`, alice)
	hs.queued(1)
	hs.clk.Step(time.Second)
	if r := wait(t, next); r.resp.StatusCode != 200 {
		t.Fatalf("request after the cancelled one: status %d, want 200: %s", r.resp.StatusCode, r.body)
	}
	if got := up.Count(); got != 2 {
		t.Errorf("upstream saw %d requests, want 2 (none for the cancelled client)", got)
	}
}

func TestTotalTimeoutDeductsQueuedTime(t *testing.T) {
	var calls atomic.Int32
	reached := make(chan struct{})
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // a short body shows as a failed request on the client side
		if calls.Add(1) == 1 {
			return // the first request passes at once
		}
		close(reached)
		<-r.Context().Done()
	})
	hs := newHarness(t, upstream, func(c *config.Config) {
		perUserQueueing(c)
		c.Timeouts.RequestTotal = dur(3 * time.Second)
	})
	wait(t, hs.start(context.Background(), `{"model":"m"}`, alice))

	slow := hs.start(context.Background(), `{"model":"m"}`, alice)
	hs.queued(1)
	hs.clk.Step(time.Second) // admitted after one second in the queue
	recvSignal(t, reached)
	// Two of the three seconds are left: stepping them must time the call out.
	hs.clk.Step(2 * time.Second)
	r := wait(t, slow)
	if r.resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(r.body, `"upstream_timeout"`) {
		t.Fatalf("status %d body %s, want 504 upstream_timeout", r.resp.StatusCode, r.body)
	}
}

func TestShutdownAnswersQueuedAndFinishesAdmitted(t *testing.T) {
	var calls atomic.Int32
	reached, release := make(chan struct{}), make(chan struct{})
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // a short body shows as a failed request on the client side
		if calls.Add(1) == 1 {
			close(reached)
			<-release
		}
		_, _ = io.WriteString(w, `{"ok":true}`) // a failed write shows as a failed request on the client side
	})
	hs := newHarness(t, upstream, perUserQueueing)
	// Serve through Run instead of the harness's listener.
	trafficLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs.front.URL = "http://" + trafficLn.Addr().String()
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var runErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		runErr = hs.srv.Run(ctx, trafficLn, opsLn)
	}()

	admitted := hs.start(context.Background(), `{"model":"m"}`, alice)
	recvSignal(t, reached)
	queued := hs.start(context.Background(), `{"model":"m"}`, alice)
	hs.queued(1)

	stop()
	r := wait(t, queued)
	if r.resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(r.body, `"shutting_down"`) {
		t.Errorf("queued request at shutdown: status %d body %s, want 503 shutting_down", r.resp.StatusCode, r.body)
	}
	close(release)
	if r := wait(t, admitted); r.resp.StatusCode != 200 {
		t.Errorf("admitted request during shutdown: status %d, want 200", r.resp.StatusCode)
	}
	wg.Wait()
	if runErr != nil {
		t.Errorf("Run() = %v, want nil after a clean shutdown", runErr)
	}
}

func TestRefusedAfterWaitingCarriesQueueHeaders(t *testing.T) {
	hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), func(c *config.Config) {
		c.Identity.TrustHeaders = true
		c.RateLimits.PerModel = &config.ModelLimits{Default: limit(1, 1, time.Second)}
		c.FairQueuing.Enabled = true
		c.Timeouts.RequestTotal = dur(time.Minute)
		c.FairQueuing.Weights = []config.Weight{{TenantHash: h("bob"), Weight: 2}}
	})
	wait(t, hs.start(context.Background(), `{"model":"m"}`, alice))
	// Alice's request fits its 1.5s budget when queued (Retry-After 1s, no
	// one else waiting). Bob, of weight 2, arrives next and is expected at
	// 1.5s, within his 10s. The one token in time goes to bob, ahead in the
	// fair order, and alice's request is refused after waiting.
	first := hs.start(context.Background(), `{"model":"m"}`, map[string]string{"X-User": "alice", "X-Stainless-Timeout": "1.75"})
	hs.queued(1)
	second := hs.start(context.Background(), `{"model":"m"}`, map[string]string{"X-User": "bob", "X-Stainless-Timeout": "10"})
	hs.queued(2)
	hs.clk.Step(time.Second)
	var admitted, refused int
	for _, c := range []<-chan result{first, second} {
		r := wait(t, c)
		switch r.resp.StatusCode {
		case 200:
			admitted++
		case 429:
			refused++
			if got := r.resp.Header.Get("X-Fair-Queue-Wait-Ms"); got != "1000" {
				t.Errorf("x-fair-queue-wait-ms = %q, want 1000 for a request refused after waiting", got)
			}
			if r.resp.Header.Get("X-Fair-Queue-Position") == "" {
				t.Error("refused-after-waiting response lacks x-fair-queue-position")
			}
			// At 1s the loser is attempted at once behind the winner and
			// refused with a Retry-After of 1s, which ends after its 1.5s
			// budget: wait_exceeds_budget, not deadline_exceeded at 1.5s.
			if !strings.Contains(r.body, `"waited_ms":1000`) || !strings.Contains(r.body, `"reason":"wait_exceeds_budget"`) {
				t.Errorf("body %s, want fair_queue with waited_ms 1000 and reason wait_exceeds_budget", r.body)
			}
		default:
			t.Errorf("status %d, want 200 or 429: %s", r.resp.StatusCode, r.body)
		}
	}
	if admitted != 1 || refused != 1 {
		t.Errorf("admitted %d, refused %d; want one of each", admitted, refused)
	}
}
