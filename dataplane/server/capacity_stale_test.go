package server

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/fairqueue/fairqueue/dataplane/capacity"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// metricsEndpoint is a backend's /metrics that answers as its mode says:
// "low" and "high" readings of vllm:num_requests_waiting, "hang" (never
// answers until the poll gives up), "error" (a 500), "garbage" (the
// metric's line unparsable), "html" (a 200 without the metric), "counter"
// (the metric as a counter), "huge" (a 50 MB body) or "gzip" (a gzip bomb
// of 50 MB).
type metricsEndpoint struct {
	mode    atomic.Value // string
	hits    atomic.Int64
	hanging atomic.Int64 // polls held by "hang" now
	srv     *httptest.Server
	close   chan struct{}
}

func newMetricsEndpoint(t *testing.T, mode string) *metricsEndpoint {
	m := &metricsEndpoint{close: make(chan struct{})}
	m.mode.Store(mode)
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.hits.Add(1)
		switch m.mode.Load().(string) {
		case "low":
			_, _ = io.WriteString(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 0\n")
		case "high":
			_, _ = io.WriteString(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 100\n")
		case "hang":
			m.hanging.Add(1)
			defer m.hanging.Add(-1)
			select {
			case <-r.Context().Done():
			case <-m.close:
			}
		case "error":
			http.Error(w, "engine dead", http.StatusInternalServerError)
		case "garbage":
			_, _ = io.WriteString(w, "vllm:num_requests_waiting{{{ not prometheus\n")
		case "html":
			_, _ = io.WriteString(w, "<html><body>vLLM</body></html>\n")
		case "counter": // the metric, of the wrong type
			_, _ = io.WriteString(w, "# TYPE vllm:num_requests_waiting counter\nvllm:num_requests_waiting{model_name=\"m\"} 0\n")
		case "huge": // 50 MB, the metric's line at the end
			line := strings.Repeat("#", 1023) + "\n"
			for range 50 << 10 {
				if _, err := io.WriteString(w, line); err != nil {
					return // the poll stopped reading
				}
			}
			_, _ = io.WriteString(w, "vllm:num_requests_waiting 0\n")
		case "gzip": // 50 MB of metric lines in 50 kB of gzip
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(gzipBomb())
		}
	}))
	t.Cleanup(func() {
		close(m.close)
		m.srv.CloseClientConnections()
		m.srv.Close()
	})
	return m
}

// lineLog collects a logger's lines.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) has(sub ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		all := true
		for _, s := range sub {
			all = all && strings.Contains(line, s)
		}
		if all {
			return true
		}
	}
	return false
}

// logTo makes the server log into l.
func logTo(l *lineLog) func(*Options) {
	return func(o *Options) {
		o.Logger = funcr.New(func(_, args string) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.lines = append(l.lines, args)
		}, funcr.Options{})
	}
}

// advanceUntil steps the harness's fake clock 250ms at a time until cond
// holds: the pollers' intervals and timeouts run on it, their HTTP on the
// real network.
func (hs *harness) advanceUntil(what string, cond func() bool) {
	hs.t.Helper()
	testutil.Eventually(hs.t, what, func() bool {
		if cond() {
			return true
		}
		hs.clk.Step(250 * time.Millisecond)
		return false
	})
}

// backendStats is the one backend's capacity state.
func (hs *harness) backendStats() capacity.BackendStats {
	return hs.srv.rt.Load().capacity.tracker.Stats()[0]
}

// signalRead reports whether the backend's one signal was read fresh with
// value v.
func (hs *harness) signalRead(v float64) func() bool {
	return func() bool {
		st := hs.backendStats()
		return len(st.Signals) == 1 && st.Signals[0].Fresh && st.Signals[0].Value == v && !st.Stale
	}
}

// saturationConfig polls metricsURL every second with a 200ms timeout,
// stale after 3s, saturated over 5 waiting requests, with maxInFlight 2
// and fair queuing off: a saturated backend refuses at once.
func saturationConfig(metricsURL string) func(*config.Config) {
	return withCapacity(2, func(c *config.Config) {
		c.Capacity.Backends[0].Saturation = &config.Saturation{
			MetricsURL: metricsURL, Interval: dur(time.Second), Timeout: dur(200 * time.Millisecond),
			StaleAfter: dur(3 * time.Second), Signals: []config.Signal{{Metric: "vllm:num_requests_waiting", Max: 5}},
		}
	})
}

// heldUpstream holds every request until release is sent a value.
func heldUpstream(arrived chan<- struct{}, release <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		case <-time.After(20 * time.Second):
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	}
}

// capacityRefused sends a request and reports whether it was refused for
// capacity (429 limit_type capacity).
func (hs *harness) capacityRefused() bool {
	hs.t.Helper()
	resp := hs.do(capBody, nil)
	body := readAll(hs.t, resp)
	switch {
	case resp.StatusCode == http.StatusTooManyRequests && strings.Contains(body, `"limit_type":"capacity"`):
		return true
	case resp.StatusCode == http.StatusOK:
		return false
	}
	hs.t.Fatalf("%d %s, want 200 or 429 capacity", resp.StatusCode, body)
	return false
}

// TestCapacityStaleMetricsLeaveMaxInFlightToDecide: a backend whose
// metrics said saturated stops answering them (hangs past the timeout,
// answers 500, answers garbage or a page without the metric). Once staleAfter passes the reading is
// not believed: requests are admitted up to maxInFlight, the staleness
// gauge and a log line say so. When the metrics answer again, the signal
// decides again.
func TestCapacityStaleMetricsLeaveMaxInFlightToDecide(t *testing.T) {
	for _, failure := range []string{"hang", "error", "garbage", "html", "counter", "huge", "gzip"} {
		t.Run(failure, func(t *testing.T) {
			m := newMetricsEndpoint(t, "high")
			arrived, release := make(chan struct{}, 4), make(chan struct{}, 4)
			var logs lineLog
			hs := newHarness(t, heldUpstream(arrived, release), saturationConfig(m.srv.URL+"/metrics"), logTo(&logs))

			hs.advanceUntil("a saturated reading", hs.signalRead(100))
			if !hs.capacityRefused() {
				t.Fatal("admitted while a fresh signal is over its max, nothing in flight")
			}

			m.mode.Store(failure)
			kinds := map[string]string{"hang": capacity.ErrorTimeout, "error": capacity.ErrorStatus,
				"garbage": capacity.ErrorParse, "html": capacity.ErrorMissing, "counter": capacity.ErrorMissing,
				"huge": capacity.ErrorTooLarge, "gzip": capacity.ErrorTooLarge}
			hs.advanceUntil("the signal goes stale", func() bool { return hs.backendStats().Stale })
			n := max(0, metricValue(t, hs.reg, metrics.BackendPollErrorsName, map[string]string{"kind": kinds[failure]}))
			if kinds[failure] == capacity.ErrorTooLarge {
				// Reading 4 MiB may outlast the 200ms timeout on the fake
				// clock, which advanceUntil steps by 250ms: a timeout then.
				n += max(0, metricValue(t, hs.reg, metrics.BackendPollErrorsName, map[string]string{"kind": capacity.ErrorTimeout}))
			}
			if n < 1 {
				t.Errorf("%s poll errors = %v, want counted", kinds[failure], n)
			}
			if got := metricValue(t, hs.reg, metrics.BackendStaleName, nil); got != 1 {
				t.Errorf("%s = %v while stale, want 1", metrics.BackendStaleName, got)
			}
			if !logs.has("backend saturation signals are stale", `"backend"="`+hs.backendStats().Backend+`"`) {
				t.Errorf("no log line says the signals went stale: %q", logs.lines)
			}

			if failure == "hang" {
				// The checks below run while a poll hangs at the
				// endpoint: a poll never holds up admission.
				hs.advanceUntil("a poll hangs at the endpoint", func() bool { return m.hanging.Load() > 0 })
			}
			// Stale: maxInFlight (2) alone decides, whatever the last reading said.
			results := []<-chan result{hs.start(t.Context(), capBody, nil), hs.start(t.Context(), capBody, nil)}
			recvWithin(t, "the first request at the upstream", arrived)
			recvWithin(t, "the second request at the upstream", arrived)
			if !hs.capacityRefused() {
				t.Fatal("a third request admitted over maxInFlight 2")
			}
			release <- struct{}{}
			release <- struct{}{}
			for _, c := range results {
				if r := recvResult(t, c); r.err != nil || r.resp.StatusCode != http.StatusOK {
					t.Fatalf("a request admitted on a stale signal: %+v", r)
				}
			}
			if failure == "hang" && m.hanging.Load() == 0 {
				t.Fatal("the hung poll ended during the checks; they did not run beside it")
			}

			// Fresh again and over its max: the signal decides, nothing in flight.
			m.mode.Store("high")
			hs.advanceUntil("a fresh saturated reading", hs.signalRead(100))
			if got := metricValue(t, hs.reg, metrics.BackendStaleName, nil); got != 0 {
				t.Errorf("%s = %v once fresh, want 0", metrics.BackendStaleName, got)
			}
			if !logs.has("backend saturation signals are fresh again") {
				t.Errorf("no log line says the signals are fresh again")
			}
			hs.exactlyIdle("fresh again")
			if !hs.capacityRefused() {
				t.Fatal("admitted while a fresh signal is over its max again")
			}
			m.mode.Store("low")
			hs.advanceUntil("a fresh reading under the max", hs.signalRead(0))
			go func() { <-arrived; release <- struct{}{} }()
			if hs.capacityRefused() {
				t.Fatal("refused with a fresh signal under its max and nothing in flight")
			}
		})
	}
}

// TestCapacityStaleSignalsWakeTheWaiters: a request that waits in the fair
// queue because a fresh signal says saturated (nothing in flight) is
// granted when the signal goes stale, without a release to wake it.
func TestCapacityStaleSignalsWakeTheWaiters(t *testing.T) {
	m := newMetricsEndpoint(t, "high")
	hs := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"ok":true}`))
	}), func(c *config.Config) {
		saturationConfig(m.srv.URL + "/metrics")(c)
		c.Identity.TrustHeaders = true
		c.FairQueuing.Enabled = true
		c.FairQueuing.Bounds.MaxWait = dur(time.Hour)
	})
	hs.advanceUntil("a saturated reading", hs.signalRead(100))
	waiter := hs.start(t.Context(), capBody, map[string]string{"X-User": "alice"})
	hs.queued(1)
	m.mode.Store("error")
	hs.advanceUntil("the waiter granted once the signal is stale", func() bool {
		select {
		case r := <-waiter:
			if r.err != nil || r.resp.StatusCode != http.StatusOK {
				t.Fatalf("the waiter: %+v, want 200", r)
			}
			return true
		default:
			return false
		}
	})
	if !hs.backendStats().Stale {
		t.Error("the waiter was granted before the signal went stale")
	}
	hs.exactlyIdle("after the waiter")
}

// gzipBomb is 50 MB of metric lines, gzipped, made once when first asked.
var gzipBomb = sync.OnceValue(func() []byte {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	line := []byte("vllm:num_requests_waiting 0\n")
	for n := 0; n < 50<<20; n += len(line) {
		_, _ = zw.Write(line)
	}
	_ = zw.Close()
	return b.Bytes()
})
