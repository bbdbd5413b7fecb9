package server

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
