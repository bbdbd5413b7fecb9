package server

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/reload"
	"github.com/fairqueue/fairqueue/internal/fakeupstream"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// TestReloadUnderLoad reloads three times (weights, tightened bounds, and a
// bad config) while 1,000 requests are queued and more keep arriving, then
// lets the queue drain: every request gets exactly one answer, none is lost
// or answered 5xx, and the bad config never replaces the good one.
func TestReloadUnderLoad(t *testing.T) {
	const (
		users     = 50
		perUser   = 20
		toQueue   = users * perUser // 1,000
		burst     = 10
		perSecond = 200
	)
	shared := func(c *config.Config) {
		c.Identity.TrustHeaders = true
		// One shared, queueable bucket: every request past the burst queues
		// under its user.
		c.RateLimits.PerModel = &config.ModelLimits{Default: limit(perSecond, burst, time.Second)}
		c.FairQueuing.Enabled = true
		c.FairQueuing.Bounds.MaxWait = dur(10 * time.Minute)
	}
	up := fakeupstream.New(fakeupstream.Options{})
	hs := newHarness(t, up, shared)
	rl, err := reload.New(hs.srv.Load, reload.Options{Logger: testr.New(t), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := hs.srv.rt.Load().cfg.DeepCopy()
	load := func(what string, mutate func(*config.Config)) {
		t.Helper()
		next := cfg.DeepCopy()
		next.Policy.Generation++
		mutate(next)
		data, err := config.Marshal(next)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := rl.Update("test", data); err != nil {
			t.Fatalf("%s refused: %v", what, err)
		}
		cfg = next
	}
	depth := func() int { d, _ := hs.srv.rt.Load().fairQueue().Stats(); return d }

	var results []<-chan result
	send := func(user int) {
		results = append(results, hs.start(context.Background(), `{"model":"m"}`, map[string]string{"X-User": fmt.Sprintf("user-%d", user)}))
	}
	for i := range burst + toQueue {
		send(i % users)
	}
	testutil.Eventually(t, "1,000 requests are queued", func() bool { return depth() == toQueue })

	// 1. New weights: every waiter stays.
	load("weights change", func(c *config.Config) {
		c.FairQueuing.Weights = []config.Weight{{TenantHash: h("user-1"), Weight: 5}, {TenantHash: h("user-2"), Weight: 3}}
	})
	if d := depth(); d != toQueue {
		t.Fatalf("after a weights change %d requests are queued, want all %d", d, toQueue)
	}

	// 2. Tightened bounds: no waiter is evicted, but a new arrival for a
	// full tenant is refused at once with a 429.
	load("bounds change", func(c *config.Config) {
		c.FairQueuing.Bounds.MaxQueueDepthPerTenant = 4
		c.FairQueuing.Bounds.MaxTotalQueued = 100
	})
	if d := depth(); d != toQueue {
		t.Fatalf("after tightening bounds %d requests are queued, want all %d: waiters were evicted", d, toQueue)
	}
	refused := wait(t, hs.start(context.Background(), `{"model":"m"}`, map[string]string{"X-User": "user-0"}))
	if refused.resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(refused.body, "queue_full") {
		t.Errorf("arrival over the tightened bounds: status %d body %s, want 429 queue_full", refused.resp.StatusCode, refused.body)
	}

	// 3. A bad config is refused; the one in force stays.
	good := hs.srv.ConfigHash()
	bad, _ := config.Marshal(cfg)
	bad = bytes.Replace(bad, []byte(`"maxInFlight": 8`), []byte(`"maxInFlight": 0`), 1)
	if err := rl.Update("test", bad); err == nil || !strings.Contains(err.Error(), "fairQueuing.bounds.maxInFlight") {
		t.Fatalf("bad config: Update() = %v, want a refusal naming fairQueuing.bounds.maxInFlight", err)
	}
	if got := hs.srv.ConfigHash(); got != good {
		t.Fatalf("after a bad config the server runs %q, want the good %q", got, good)
	}
	if d := depth(); d != toQueue {
		t.Fatalf("after a bad config %d requests are queued, want all %d", d, toQueue)
	}

	// Let traffic flow: time passes, the bucket refills, waiters are
	// admitted; meanwhile bounds are loosened again and new requests arrive.
	answered := make([]result, 0, len(results)+users)
	pending := results
	for step := 0; len(pending) > 0; step++ {
		if step > 10_000 {
			t.Fatalf("%d requests still unanswered after %d steps", len(pending), step)
		}
		switch step {
		case 20:
			load("bounds loosened", func(c *config.Config) {
				c.FairQueuing.Bounds = config.DefaultBounds()
				c.FairQueuing.Bounds.MaxWait = dur(10 * time.Minute)
			})
		case 40:
			for u := range users {
				send(u)
				pending = append(pending, results[len(results)-1])
			}
		}
		hs.clk.Step(10 * time.Millisecond)
		still := pending[:0]
		for _, c := range pending {
			select {
			case r := <-c:
				answered = append(answered, r)
			default:
				still = append(still, c)
			}
		}
		pending = still
		time.Sleep(time.Millisecond) // let admitted requests reach the upstream
	}

	var ok, tooMany int
	for _, r := range answered {
		switch {
		case r.err != nil:
			t.Errorf("a request was lost: %v", r.err)
		case r.resp.StatusCode == http.StatusOK:
			ok++
		case r.resp.StatusCode == http.StatusTooManyRequests:
			tooMany++
		default:
			t.Errorf("a request was answered %d: %s", r.resp.StatusCode, r.body)
		}
	}
	if want := burst + toQueue + users; len(answered) != want {
		t.Errorf("%d answers for %d requests", len(answered), want)
	}
	// Every queued request was admitted (the budget was ample); only
	// arrivals over the tightened bounds may have been refused.
	if ok < burst+toQueue || up.Count() != ok {
		t.Errorf("%d admitted (%d reached the upstream) and %d refused; want all %d queued ones admitted, each forwarded once", ok, up.Count(), tooMany, burst+toQueue)
	}
	if d := depth(); d != 0 {
		t.Errorf("%d requests still queued after every answer", d)
	}
	t.Logf("%d answered: %d admitted, %d refused with 429", len(answered), ok, tooMany)
}

// TestReloadDisablingFairQueuingAnswersEveryWaiter turns fair queuing off
// while requests wait: each is answered at once with a 429, nothing hangs
// and no time has to pass.
func TestReloadDisablingFairQueuingAnswersEveryWaiter(t *testing.T) {
	const waiters = 100
	hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), func(c *config.Config) {
		c.Identity.TrustHeaders = true
		// Each of the 100 waiters is expected within maxWait: no time
		// passes in this test.
		c.RateLimits.PerModel = &config.ModelLimits{Default: limit(1, 1, time.Second)}
		c.FairQueuing.Enabled = true
		c.FairQueuing.Bounds.MaxWait = dur(10 * time.Minute)
	})
	wait(t, hs.start(context.Background(), `{"model":"m"}`, alice))
	var results []<-chan result
	for i := range waiters {
		results = append(results, hs.start(context.Background(), `{"model":"m"}`, map[string]string{"X-User": fmt.Sprintf("user-%d", i%10)}))
	}
	hs.queued(waiters)
	off := hs.srv.rt.Load().cfg.DeepCopy()
	off.FairQueuing.Enabled = false
	if err := hs.srv.Load(off, "off"); err != nil {
		t.Fatal(err)
	}
	for i, c := range results {
		r := wait(t, c)
		if r.resp.StatusCode != http.StatusTooManyRequests || r.resp.Header.Get("Retry-After") == "" {
			t.Errorf("waiter %d: status %d Retry-After %q, want 429 with Retry-After", i, r.resp.StatusCode, r.resp.Header.Get("Retry-After"))
		}
	}
}
