package server

import (
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// TestCapacityWaitIsLabelledCapacity drives a wait for a backend slot
// through the real admission path and reads the queue series an operator
// reads: the waiter is counted under limit_type "capacity" while it waits
// (per tenant) and when it is granted (wait histogram, grants), and nothing
// is counted as a wait for a rate limit.
func TestCapacityWaitIsLabelledCapacity(t *testing.T) {
	hs, arrived, release := capacityWaitHarness(t)
	codes := make(chan int, 2)
	send := func(user string) {
		resp := hs.do(capBody, map[string]string{"X-User": user})
		readAll(t, resp)
		codes <- resp.StatusCode
	}
	go send("alice")
	recvWithin(t, "alice at the backend", arrived)
	go send("bob")
	testutil.Eventually(t, "bob counted as waiting for capacity", func() bool {
		return sumSeries(t, hs, metrics.TenantQueuedName, "capacity") == 1
	})
	if got := sumSeries(t, hs, metrics.QueueGrantsName, "capacity"); got != 0 {
		t.Fatalf("capacity grants before a slot freed = %v, want 0", got)
	}
	release <- struct{}{} // alice's slot frees: bob is granted
	recvWithin(t, "bob at the backend", arrived)
	release <- struct{}{}
	for range 2 {
		if code := recvWithin(t, "an answer", codes); code != http.StatusOK {
			t.Errorf("status %d, want 200", code)
		}
	}
	for _, tc := range []struct {
		name, limitType string
		want            float64
	}{
		{metrics.QueueGrantsName, "capacity", 1},
		{metrics.QueueWaitName, "capacity", 1}, // one observation
		{metrics.TenantQueuedName, "capacity", 0},
		{metrics.QueueGrantsName, "user", 0},
		{metrics.QueueGrantsName, "model", 0},
	} {
		if got := sumSeries(t, hs, tc.name, tc.limitType); got != tc.want {
			t.Errorf("%s{limit_type=%q} = %v, want %v", tc.name, tc.limitType, got, tc.want)
		}
	}
}

// capacityWaitHarness serves one backend with one slot, with fair queuing
// on and an hour's maxWait, so a second request waits for the slot. The
// upstream sends on arrived as each request reaches it and answers once
// release is sent to (or after 20 s).
func capacityWaitHarness(t *testing.T) (hs *harness, arrived, release chan struct{}) {
	t.Helper()
	release = make(chan struct{}, 4)
	arrived = make(chan struct{}, 4)
	hs = newHarness(t, holdingUpstream(arrived, release), withCapacity(1, func(c *config.Config) {
		c.Identity.TrustHeaders = true
		c.FairQueuing.Enabled = true
		c.FairQueuing.Bounds.MaxWait = dur(time.Hour)
	}))
	return hs, arrived, release
}

// recvWithin receives from ch, failing the test after 10 seconds.
func recvWithin[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// holdingUpstream is an upstream that sends on arrived as each request
// reaches it and answers once release is sent to or closed (or after 20 s).
func holdingUpstream(arrived chan<- struct{}, release <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	})
}

// sumSeries sums the series of the named metric with the given limit_type:
// counter and gauge values, and a histogram's observation count.
func sumSeries(t *testing.T, hs *harness, name, limitType string) float64 {
	t.Helper()
	var sum float64
	for _, m := range series(t, hs, name) {
		if labelOf(m, "limit_type") == limitType {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// series returns the series of the named metric.
func series(t *testing.T, hs *harness, name string) []*dto.Metric {
	t.Helper()
	mfs, err := hs.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
