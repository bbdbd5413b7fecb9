package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/capacity"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/internal/modelsim"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// capacityPage is a capacity-mode data plane's metrics page: backend vllm-a
// at maxInFlight 8 without signals, vllm-b with a waiting-queue signal of
// waiting (saturated over 4 unless stale), its poll errors so far, and 5
// requests queued.
func capacityPage(aInFlight, waiting, pollErrors float64, stale bool) []byte {
	sat, st := 0, 0
	if stale {
		st = 1
	} else if waiting > 4 {
		sat = 1
	}
	return fmt.Appendf(nil, `# TYPE %[1]s gauge
%[1]s{backend="vllm-a"} %[7]g
%[1]s{backend="vllm-b"} 3
# TYPE %[2]s gauge
%[2]s{backend="vllm-a"} 8
%[2]s{backend="vllm-b"} 64
# TYPE %[3]s gauge
%[3]s{backend="vllm-a"} 1
%[3]s{backend="vllm-b"} %[10]d
# TYPE %[4]s gauge
%[4]s{backend="vllm-a"} 0
%[4]s{backend="vllm-b"} %[11]d
# TYPE %[5]s gauge
%[5]s{backend="vllm-b",signal="vllm:num_requests_waiting"} %[8]g
%[5]s{backend="vllm-b",signal="vllm:kv_cache_usage_perc"} 0.5
# TYPE %[6]s counter
%[6]s{backend="vllm-b",kind="timeout"} %[9]g
# TYPE %[12]s gauge
%[12]s{band=""} 5
`, metrics.BackendInFlightName, metrics.BackendMaxInFlightName, metrics.BackendSaturatedName, metrics.BackendStaleName,
		metrics.BackendSignalName, metrics.BackendPollErrorsName, aInFlight, waiting, pollErrors, sat, st, metrics.QueueDepthName)
}

// rowsBy returns a table's rows by their first two columns.
func rowsBy(out string) map[string]string {
	rows := map[string]string{}
	for line := range strings.SplitSeq(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			rows[f[0]+" "+f[1]] = line
		}
	}
	return rows
}

// TestTopShowsBackendSaturation checks the backend table from scraped
// text: per backend and replica in-flight against maxInFlight, whether it
// is saturated and by what (maxInFlight, or the signal over the policy's
// max), each signal's value against its max, staleness and poll errors/s
// over the window; "?" for a max when the policy is not known.
func TestTopShowsBackendSaturation(t *testing.T) {
	before := []replicaSample{parseSample(capacityPage(8, 2, 10, false)), parseSample(capacityPage(4, 0, 0, true))}
	after := []replicaSample{parseSample(capacityPage(8, 7, 30, false)), parseSample(capacityPage(8, 0, 0, true))}
	maxes := signalMaxes(&config.Capacity{Backends: []config.BackendCapacity{{Name: "vllm-b", MaxInFlight: 64,
		Saturation: &config.Saturation{Signals: []config.Signal{{Metric: "vllm:num_requests_waiting", Max: 4}, {Metric: "vllm:kv_cache_usage_perc", Max: 0.9}}}}}})
	var out bytes.Buffer
	if err := printCapacity(&out, []string{"dp-0", "dp-1"}, before, after, 10*time.Second, maxes); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	rows := rowsBy(out.String())
	for key, want := range map[string][]string{
		"vllm-a dp-0": {" 8/8 (100%) ", " yes: at maxInFlight ", " - "},
		"vllm-b dp-0": {" 3/64 (5%) ", " yes: vllm:num_requests_waiting ", " vllm:kv_cache_usage_perc=0.5/0.9 vllm:num_requests_waiting=7/4 ", " no ", " 2.0"},
		"vllm-b dp-1": {" no ", "vllm:num_requests_waiting=0/4", " yes (maxInFlight alone decides) ", " 0.0"},
	} {
		for _, w := range want {
			if !strings.Contains(rows[key]+" ", w) {
				t.Errorf("row %s lacks %q: %q", key, w, rows[key])
			}
		}
	}
	if !strings.Contains(out.String(), "Queued for any limit, capacity included: 10 (these data planes do not export capacity waiters apart)") {
		t.Errorf("no queued line:\n%s", out.String())
	}
	out.Reset()
	if err := printCapacity(&out, []string{"dp-0", "dp-1"}, before, after, 10*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if r := rowsBy(out.String())["vllm-b dp-0"]; !strings.Contains(r, "vllm:num_requests_waiting=7/? ") || !strings.Contains(r, "yes: a signal (max unknown)") {
		t.Errorf("without the policy, a max is not shown as unknown: %q", r)
	}
	// A data plane without capacity mode prints no backend table.
	plain := []replicaSample{parseSample(bandPage(1, 1, 0, 0))}
	out.Reset()
	if err := printCapacity(&out, []string{"dp-0"}, plain, plain, time.Second, nil); err != nil || out.Len() != 0 {
		t.Errorf("without capacity printCapacity printed %q, %v; want nothing", out.String(), err)
	}
	// Capacity waiters, when a data plane exports them apart.
	page := append(capacityPage(8, 0, 0, false), fmt.Sprintf("%s{band=\"\",limit_type=\"capacity\"} 3\n", metrics.QueueDepthName)...)
	withWaiters := []replicaSample{parseSample(page)}
	if withWaiters[0].err != nil {
		t.Fatal(withWaiters[0].err)
	}
	out.Reset()
	if err := printCapacity(&out, []string{"dp-0"}, withWaiters, withWaiters, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Waiting for a backend (limit_type capacity): 3, of 8 queued") {
		t.Errorf("capacity waiters not shown:\n%s", out.String())
	}
}

// TestTopScrapesARealCapacityTracker runs top --metrics-url against the
// data plane's real metrics registry with a real capacity tracker that
// polls a model-server simulator's /metrics: one backend saturated by its
// waiting queue, one at maxInFlight, one whose metrics endpoint is down and
// has gone stale.
func TestTopScrapesARealCapacityTracker(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	sim, err := modelsim.New(clk, modelsim.Config{MaxNumSeqs: 1})
	if err != nil {
		t.Fatal(err)
	}
	simSrv := httptest.NewServer(sim)
	// The simulated server runs one request of 4000 tokens and queues the
	// others, which stay queued for the 1.2s its clock moves below.
	calls := make(chan struct{}, 3)
	ctx, cancel := context.WithCancel(context.Background())
	for range 3 {
		go func() {
			defer func() { calls <- struct{}{} }()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, simSrv.URL+"/v1/chat/completions",
				strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4000}`))
			if res, err := http.DefaultClient.Do(req); err == nil {
				_ = res.Body.Close()
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		for range 3 {
			<-calls
		}
		simSrv.Close()
		sim.Close()
	})
	testutil.Eventually(t, "two requests wait in the simulator", func() bool { return sim.Stats().Waiting == 2 })

	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg); err != nil {
		t.Fatal(err)
	}
	var tracker *capacity.Tracker
	capMetrics, err := metrics.NewCapacity(reg, func() []capacity.BackendStats { return tracker.Stats() })
	if err != nil {
		t.Fatal(err)
	}
	tracker = capacity.New(capacity.Options{Clock: clk, Observer: capMetrics})
	t.Cleanup(tracker.Close)
	sat := func(url string) *config.Saturation {
		return &config.Saturation{MetricsURL: url, Interval: config.Duration{Duration: 100 * time.Millisecond},
			StaleAfter: config.Duration{Duration: time.Second}, Timeout: config.Duration{Duration: 50 * time.Millisecond},
			Signals: []config.Signal{{Metric: "vllm:num_requests_waiting", Max: 0}, {Metric: "vllm:kv_cache_usage_perc", Max: 0.9}}}
	}
	backends := []capacity.Backend{
		{Name: "sim", MaxInFlight: 8, Saturation: sat(simSrv.URL + "/metrics")},
		{Name: "static", MaxInFlight: 2},
		{Name: "dark", MaxInFlight: 4, Saturation: sat(down.URL + "/metrics")},
	}
	if err := tracker.Apply(backends, 0); err != nil {
		t.Fatal(err)
	}
	var slots [2]capacity.Slot
	for i := range slots {
		if r := tracker.Acquire(&slots[i], "static"); !r.OK() {
			t.Fatalf("acquire %d on static: %v", i, r)
		}
	}
	testutil.Eventually(t, "the simulator's waiting queue is read", func() bool {
		for _, b := range tracker.Stats() {
			if b.Backend == "sim" && b.Saturated {
				return true
			}
		}
		return false
	})
	// Past staleAfter the dark backend's signals are stale; the simulator's
	// are read again on the way.
	for range 12 {
		clk.Step(100 * time.Millisecond)
		testutil.Eventually(t, "a poll after the step", func() bool { return clk.HasWaiters() })
	}
	testutil.Eventually(t, "the dark backend goes stale", func() bool {
		for _, b := range tracker.Stats() {
			if b.Backend == "dark" && b.Stale {
				return true
			}
		}
		return false
	})

	srv := metricsServer(t, &replica{reg: reg}, nil)
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"top", "--metrics-url", srv.URL, "--interval", "10ms"}, &out, &errOut); err != nil {
		t.Fatalf("top --metrics-url: %v\n%s", err, errOut.String())
	}
	t.Logf("\n%s", out.String())
	rows := rowsBy(out.String())
	url := srv.URL + "/metrics"
	for key, want := range map[string][]string{
		"sim " + url:    {" 0/8 (0%) ", " yes: a signal (max unknown) ", "vllm:num_requests_waiting=2/?", " no "},
		"static " + url: {" 2/2 (100%) ", " yes: at maxInFlight ", " - "},
		"dark " + url:   {" 0/4 (0%) ", " no ", " yes (maxInFlight alone decides) "},
	} {
		for _, w := range want {
			if !strings.Contains(rows[key]+" ", w) {
				t.Errorf("row %s lacks %q: %q", key, w, rows[key])
			}
		}
	}
	for i := range slots {
		slots[i].Release()
	}
}
