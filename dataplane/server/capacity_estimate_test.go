package server

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/capacity"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// headerMs returns the integer milliseconds of header name of resp.
func headerMs(t *testing.T, resp *http.Response, name string) time.Duration {
	t.Helper()
	v, err := strconv.ParseInt(resp.Header.Get(name), 10, 64)
	if err != nil {
		t.Fatalf("header %s = %q: %v", name, resp.Header.Get(name), err)
	}
	return time.Duration(v) * time.Millisecond
}

// TestCapacityEstimatedWaitIsTheWait: through the real server, a request
// that waited for a backend slot is told an estimated wait close to the wait
// it had (x-fair-queue-wait-ms), not ~1 ms: on the harness's fake clock,
// two waiters of two tenants wait one and two slot spacings. The wait
// histogram labelled capacity sums those waits, and the tenants' wait time
// counts them.
func TestCapacityEstimatedWaitIsTheWait(t *testing.T) {
	hs, arrived, release := capacityWaitHarness(t)
	type answer struct {
		user             string
		code             int
		waited, estimate time.Duration
	}
	answers := make(chan answer, 3)
	send := func(user string) {
		resp := hs.do(capBody, map[string]string{"X-User": user})
		readAll(t, resp)
		a := answer{user: user, code: resp.StatusCode}
		if user != "alice" {
			a.waited, a.estimate = headerMs(t, resp, headerQueueWaitMS), headerMs(t, resp, headerQueueEstimatedWait)
		}
		answers <- a
	}
	fq, _ := hs.srv.admit.Queues()
	queued := func(n int) func() bool { return func() bool { d, _ := fq.Stats(); return d == n } }
	go send("alice")
	recvWithin(t, "alice at the backend", arrived)
	go send("bob")
	testutil.Eventually(t, "bob waits for the slot", queued(1))
	go send("carol")
	testutil.Eventually(t, "carol waits for the slot", queued(2))
	// No release measured yet: slots are expected every
	// capacity.DefaultReleaseSpacing. Each one frees that long after the last.
	for range 2 {
		testutil.Eventually(t, "the queue settles", fq.Settled)
		hs.clk.Step(capacity.DefaultReleaseSpacing)
		testutil.Eventually(t, "the queue settles", fq.Settled)
		release <- struct{}{}
		recvWithin(t, "the next waiter at the backend", arrived)
	}
	release <- struct{}{}
	var total time.Duration
	for range 3 {
		a := recvWithin(t, "an answer", answers)
		if a.code != http.StatusOK {
			t.Fatalf("%s: status %d, want 200", a.user, a.code)
		}
		if a.user == "alice" {
			continue
		}
		total += a.waited
		if a.waited <= 0 || a.estimate < a.waited/2 || a.estimate > 2*a.waited {
			t.Errorf("%s waited %v and was told an estimate of %v: want it within a factor of 2", a.user, a.waited, a.estimate)
		}
	}
	if total != 3*capacity.DefaultReleaseSpacing {
		t.Errorf("the waiters waited %v in all, want one and two spacings, %v", total, 3*capacity.DefaultReleaseSpacing)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if got := histogramSum(t, hs, metrics.QueueWaitName, "capacity"); !near(got, total.Seconds()) {
		t.Errorf("%s{limit_type=capacity} sums %vs, want the %vs waited", metrics.QueueWaitName, got, total.Seconds())
	}
	if got := counterSum(t, hs, metrics.TenantWaitName); !near(got, total.Seconds()) {
		t.Errorf("%s sums %vs, want the %vs waited for capacity", metrics.TenantWaitName, got, total.Seconds())
	}
}

// TestCapacityRefusalsAtOnceAreCountedAndSpread: with fair queuing off,
// requests refused at once because the one slot is taken carry
// limit_type capacity, are told successive slot times in retry-after-ms, and
// are counted in rate_limit_fair_queue_refused_total{limit_type="capacity"}.
func TestCapacityRefusalsAtOnceAreCountedAndSpread(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	hs := newHarness(t, holdingUpstream(arrived, release), withCapacity(1, func(c *config.Config) { c.Identity.TrustHeaders = true })) // fair queuing off
	first := make(chan int, 1)
	go func() {
		resp := hs.do(capBody, map[string]string{"X-User": "alice"})
		readAll(t, resp)
		first <- resp.StatusCode
	}()
	recvWithin(t, "alice at the backend", arrived)
	for i := range 3 {
		resp := hs.do(capBody, map[string]string{"X-User": "bob"})
		body := readAll(t, resp)
		want := time.Duration(i+1) * capacity.DefaultReleaseSpacing
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, `"limit_type":"capacity"`) ||
			headerMs(t, resp, headerRetryAfterMS) != want {
			t.Errorf("refusal %d: %d %s retry-after-ms %s; want 429 limit_type capacity told %v", i+1, resp.StatusCode, body,
				resp.Header.Get(headerRetryAfterMS), want)
		}
	}
	close(release)
	if code := recvWithin(t, "alice's answer", first); code != http.StatusOK {
		t.Errorf("alice: %d, want 200", code)
	}
	if got := sumSeries(t, hs, metrics.QueueRefusedName, "capacity"); got != 3 {
		t.Errorf("%s{limit_type=capacity} = %v, want the 3 refusals", metrics.QueueRefusedName, got)
	}
}

// histogramSum returns the sum of the observations of the named histogram
// with the given limit_type.
func histogramSum(t *testing.T, hs *harness, name, limitType string) float64 {
	t.Helper()
	var sum float64
	for _, m := range series(t, hs, name) {
		if labelOf(m, "limit_type") == limitType {
			sum += m.GetHistogram().GetSampleSum()
		}
	}
	return sum
}

// counterSum returns the sum of every series of the named counter.
func counterSum(t *testing.T, hs *harness, name string) float64 {
	t.Helper()
	var sum float64
	for _, m := range series(t, hs, name) {
		sum += m.GetCounter().GetValue()
	}
	return sum
}
