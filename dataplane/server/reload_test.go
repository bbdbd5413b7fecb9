package server

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/fakeupstream"
)

func TestReloadKeepsQueuedRequests(t *testing.T) {
	oldUp := fakeupstream.New(fakeupstream.Options{})
	hs := newHarness(t, oldUp, perUserQueueing)
	newUp := fakeupstream.New(fakeupstream.Options{})
	newSrv := httptest.NewServer(newUp)
	defer newSrv.Close()

	wait(t, hs.start(context.Background(), `{"model":"m"}`, alice))
	queued := hs.start(context.Background(), `{"model":"m"}`, alice)
	hs.queued(1)

	// A refused config leaves the running one in force.
	bad := baseConfig(newSrv.URL)
	bad.HashKeySecret.Fingerprint = "0000000000000000"
	if err := hs.srv.Load(bad, "bad"); err == nil || !strings.Contains(err.Error(), "hashKeySecret.fingerprint") {
		t.Fatalf("Load(bad) error = %v, want one naming hashKeySecret.fingerprint", err)
	}
	if got := hs.srv.ConfigHash(); got != "testhash" {
		t.Fatalf("ConfigHash() after a refused reload = %q, want the old testhash", got)
	}

	next := baseConfig(newSrv.URL)
	perUserQueueing(next)
	next.Timeouts.RequestTotal = dur(time.Minute)
	if err := hs.srv.Load(next, "next"); err != nil {
		t.Fatal(err)
	}
	hs.queued(1) // the waiter is still there
	hs.clk.Step(time.Second)
	r := wait(t, queued)
	if r.resp.StatusCode != 200 || r.resp.Header.Get("X-Fair-Queue-Wait-Ms") != "1000" {
		t.Fatalf("queued request after reload: status %d, wait %q; want 200 after 1000ms", r.resp.StatusCode, r.resp.Header.Get("X-Fair-Queue-Wait-Ms"))
	}
	if oldUp.Count() != 1 || newUp.Count() != 1 {
		t.Errorf("old backend saw %d, new backend %d requests; want 1 each (the waiter goes to the backend in force)", oldUp.Count(), newUp.Count())
	}
	// Bucket state survived the reload: alice's token was spent at
	// admission, so her next request queues until the bucket refills.
	later := hs.start(context.Background(), `{"model":"m"}`, alice)
	hs.queued(1)
	hs.clk.Step(time.Second)
	if r := wait(t, later); r.resp.StatusCode != 200 || r.resp.Header.Get("X-Fair-Queue-Position") == "" {
		t.Errorf("request after reload: status %d, queue position %q; want 200 after queueing", r.resp.StatusCode, r.resp.Header.Get("X-Fair-Queue-Position"))
	}
}

// badMaxWait is a config change the data plane refuses at the last value it
// checks: a negative deferred-admission maxWait.
func badMaxWait(c *config.Config) {
	tokenBudget(1000, time.Second)(c)
	c.DeferredAdmission.Bounds.MaxWait = dur(-time.Second)
}

// TestRefusedFirstLoadStartsNothing: a first config refused at its last
// check leaves the server unready and starts no queue goroutine.
func TestRefusedFirstLoadStartsNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv, err := New(Options{Logger: logr.Discard(), HashKey: testKey, Clock: testingclock.NewFakeClock(time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig("http://127.0.0.1:1")
	badMaxWait(cfg)
	if err := srv.Load(cfg, "bad"); err == nil || !strings.Contains(err.Error(), "deferredAdmission.bounds.maxWait") {
		t.Fatalf("Load() error = %v, want one naming deferredAdmission.bounds.maxWait", err)
	}
	if srv.Ready() || srv.admit != nil {
		t.Fatal("a refused first config left the server ready or an admission controller built")
	}
}

// TestRefusedReloadLeavesPreviousConfigInForce: a reload refused at its last
// check changes nothing of the config in force, not even the parts checked
// before the refusal (limits, fair queuing), and starts no goroutine.
func TestRefusedReloadLeavesPreviousConfigInForce(t *testing.T) {
	hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), func(c *config.Config) {
		c.Identity.TrustHeaders = true
		c.RateLimits.PerUser = limit(100, 100, time.Second)
	})
	before := goleak.IgnoreCurrent()
	bad := hs.srv.rt.Load().cfg.DeepCopy()
	bad.RateLimits.PerUser = limit(1, 1, time.Hour)
	bad.FairQueuing.Enabled = true
	bad.FairQueuing.Bounds.MaxWait = dur(time.Hour)
	badMaxWait(bad)
	if err := hs.srv.Load(bad, "bad"); err == nil || !strings.Contains(err.Error(), "deferredAdmission.bounds.maxWait") {
		t.Fatalf("Load() error = %v, want one naming deferredAdmission.bounds.maxWait", err)
	}
	goleak.VerifyNone(t, before)
	if got := hs.srv.ConfigHash(); got != "testhash" {
		t.Fatalf("ConfigHash() = %q after a refused reload, want testhash", got)
	}
	// Under the refused limit (1 per hour, queued) the second request would
	// wait; under the one in force both pass at once.
	for i := range 2 {
		resp := hs.do(`{"model":"m"}`, alice)
		if body := readAll(t, resp); resp.StatusCode != 200 || resp.Header.Get("X-Fair-Queue-Position") != "" {
			t.Fatalf("request %d: status %d, queue position %q: %s; want 200 at once under the config in force",
				i, resp.StatusCode, resp.Header.Get("X-Fair-Queue-Position"), body)
		}
	}
}
