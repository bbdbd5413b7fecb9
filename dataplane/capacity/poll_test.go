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

package capacity

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/config"

	"github.com/fairqueue/fairqueue/internal/testutil"
)

// vllmMetrics is a /metrics body shaped like vLLM's: HELP and TYPE lines,
// colons in names, a model_name label, histograms around the gauges.
func vllmMetrics(waiting, kvUsage float64) string {
	return fmt.Sprintf(`# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12345.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 256.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} %g
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} %g
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 10.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 10.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.5
`, waiting, kvUsage)
}

// metricsServer serves whatever its handler is set to.
type metricsServer struct {
	*httptest.Server
	mu sync.Mutex
	h  http.HandlerFunc
}

func newMetricsServer(t *testing.T, body string) *metricsServer {
	m := &metricsServer{}
	m.set(body)
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		h := m.h
		m.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *metricsServer) set(body string) {
	m.handle(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) })
}

func (m *metricsServer) handle(h http.HandlerFunc) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.h = h
}

// recorder is an Observer keeping what it is told.
type recorder struct {
	mu     sync.Mutex
	values map[string]float64
	errors map[string]int
	stale  []bool
}

func newRecorder() *recorder {
	return &recorder{values: map[string]float64{}, errors: map[string]int{}}
}

func (r *recorder) SignalValue(b, m string, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.values[b+"/"+m] = v
}

func (r *recorder) PollError(_, kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors[kind]++
}

func (r *recorder) Stale(_ string, s bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stale = append(r.stale, s)
}

func (r *recorder) value(key string) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.values[key]
}

func (r *recorder) errorCount(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errors[kind]
}

func (r *recorder) staleChanges() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.stale...)
}

const (
	interval   = time.Second
	timeout    = 500 * time.Millisecond
	staleAfter = 3 * time.Second
)

// saturation polls url every interval with the tests' timeout and
// staleAfter.
func saturation(url string, signals ...config.Signal) *config.Saturation {
	return &config.Saturation{
		MetricsURL: url,
		Interval:   config.Duration{Duration: interval},
		Timeout:    config.Duration{Duration: timeout},
		StaleAfter: config.Duration{Duration: staleAfter},
		Signals:    signals,
	}
}

// pollFixture is a tracker on a fake clock polling one backend "a".
type pollFixture struct {
	t   *testing.T
	clk *clocktesting.FakeClock
	srv *metricsServer
	tr  *Tracker
	obs *recorder
	rm  *rooms
}

func newPollFixture(t *testing.T, body string, o Options, signals ...config.Signal) *pollFixture {
	f := &pollFixture{t: t, clk: clocktesting.NewFakeClock(time.Unix(1_000_000, 0)), obs: newRecorder(), rm: &rooms{}}
	f.srv = newMetricsServer(t, body)
	o.Clock, o.Observer, o.OnRoom = f.clk, f.obs, f.rm.on
	if len(signals) == 0 {
		signals = []config.Signal{{Metric: "vllm:num_requests_waiting", Max: 4}, {Metric: "vllm:kv_cache_usage_perc", Max: 0.95}}
	}
	f.tr = newTracker(t, o, Backend{Name: "a", MaxInFlight: 8, Saturation: saturation(f.srv.URL+"/metrics", signals...)})
	f.waitPolls(1)
	return f
}

func (f *pollFixture) poller() *poller {
	return f.tr.current.Load().byName["a"].poller.Load()
}

// waitPolls waits until n polls are done and the poller sleeps until the
// next one.
func (f *pollFixture) waitPolls(n int64) {
	f.t.Helper()
	p := f.poller()
	testutil.Eventually(f.t, fmt.Sprintf("poll %d", n), func() bool { return p.polls.Load() >= n })
}

// tick steps the clock one interval and waits for the poll it starts.
func (f *pollFixture) tick() {
	f.t.Helper()
	n := f.poller().polls.Load()
	f.clk.Step(interval)
	f.waitPolls(n + 1)
}

func (f *pollFixture) saturated() bool {
	var s Slot
	r := f.tr.Acquire(&s, "a")
	s.Release()
	return r == Saturated
}

func TestSignalCrossingItsMaxSaturatesAndClears(t *testing.T) {
	f := newPollFixture(t, vllmMetrics(0, 0.5), Options{})
	if f.saturated() {
		t.Fatal("saturated with 0 waiting and the KV cache half full")
	}
	f.srv.set(vllmMetrics(5, 0.5)) // waiting over 4
	f.tick()
	if !f.saturated() || !f.tr.Saturated("a") {
		t.Fatal("5 waiting, max 4: not saturated")
	}
	st := f.tr.Stats()[0]
	if !st.Saturated || st.Stale || len(st.Signals) != 2 || st.Signals[0].Value != 5 || !st.Signals[0].Fresh {
		t.Fatalf("stats: %+v", st)
	}
	wakes := f.rm.count()
	f.srv.set(vllmMetrics(4, 0.5)) // at max: not over it
	f.tick()
	if f.saturated() {
		t.Fatal("4 waiting, max 4: still saturated")
	}
	if f.rm.count() != wakes+1 {
		t.Fatal("a signal falling back under its max did not wake the queue")
	}
	f.srv.set(vllmMetrics(0, 0.97)) // the KV cache over 0.95
	f.tick()
	if !f.saturated() {
		t.Fatal("KV cache 0.97, max 0.95: not saturated")
	}
	if v := f.obs.value("a/vllm:kv_cache_usage_perc"); v != 0.97 {
		t.Fatalf("observed kv value %v", v)
	}
}

func TestSignalIsTheLargestOverItsSeries(t *testing.T) {
	body := `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="a"} 1
vllm:num_requests_waiting{engine="1",model_name="a"} 9
vllm:num_requests_waiting{engine="2",model_name="a"} NaN
`
	f := newPollFixture(t, body, Options{}, config.Signal{Metric: "vllm:num_requests_waiting", Max: 4})
	if !f.saturated() {
		t.Fatal("one engine with 9 waiting (max 4) did not saturate the backend")
	}
	if v := f.tr.Stats()[0].Signals[0].Value; v != 9 {
		t.Fatalf("value %v, want 9", v)
	}
}

func TestStaleSignalsLeaveMaxInFlightToDecide(t *testing.T) {
	f := newPollFixture(t, vllmMetrics(10, 0.5), Options{})
	if !f.saturated() {
		t.Fatal("not saturated by a fresh signal")
	}
	f.srv.handle(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	for range 3 { // staleAfter is 3 intervals: still fresh
		f.tick()
	}
	if !f.saturated() {
		t.Fatal("a signal read within staleAfter was dropped")
	}
	f.tick()
	if f.saturated() {
		t.Fatal("a signal older than staleAfter still saturates the backend")
	}
	st := f.tr.Stats()[0]
	if !st.Stale || st.Signals[0].Fresh {
		t.Fatalf("stats not stale: %+v", st)
	}
	if got := f.obs.staleChanges(); len(got) != 1 || !got[0] {
		t.Fatalf("stale transitions %v, want [true]", got)
	}
	if n := f.obs.errorCount(ErrorStatus); n != 4 {
		t.Fatalf("%d status errors counted, want 4", n)
	}
	// maxInFlight alone decides now.
	slots := make([]Slot, 9)
	for i := range 8 {
		if r := f.tr.Acquire(&slots[i], "a"); r != Acquired {
			t.Fatalf("slot %d: %v", i, r)
		}
	}
	if f.tr.Acquire(&slots[8], "a") != Saturated {
		t.Fatal("stale signals and maxInFlight 8 admitted a ninth")
	}
	for i := range slots {
		slots[i].Release()
	}
	f.srv.set(vllmMetrics(10, 0.5))
	f.tick()
	if !f.saturated() || f.tr.Stats()[0].Stale {
		t.Fatal("fresh again but not saturated")
	}
	if got := f.obs.staleChanges(); len(got) != 2 || got[1] {
		t.Fatalf("stale transitions %v, want [true false]", got)
	}
}

func TestAHungMetricsEndpointTimesOutAndGoesStale(t *testing.T) {
	f := newPollFixture(t, vllmMetrics(10, 0.5), Options{})
	hung := make(chan struct{}, 16)
	f.srv.handle(func(w http.ResponseWriter, r *http.Request) {
		hung <- struct{}{}
		<-r.Context().Done() // never answers
	})
	for i := range 4 {
		n := f.poller().polls.Load()
		f.clk.Step(interval)
		select {
		case <-hung:
		case <-time.After(10 * time.Second):
			t.Fatal("the poll did not reach the endpoint")
		}
		testutil.Eventually(t, "the timeout timer", f.clk.HasWaiters)
		f.clk.Step(timeout)
		f.waitPolls(n + 1)
		if n := f.obs.errorCount(ErrorTimeout); n != i+1 {
			t.Fatalf("poll %d: %d timeouts counted", i, n)
		}
	}
	// 4 x (interval + timeout) past the last reading: stale.
	if f.saturated() || !f.tr.Stats()[0].Stale {
		t.Fatal("a hung endpoint's last reading still saturates the backend")
	}
}

func TestGarbageBodiesAreCountedNotBelieved(t *testing.T) {
	tests := []struct {
		name string
		h    http.HandlerFunc
		max  int64
		kind string
	}{
		{"html", text("<html><body>Not Found</body></html>"), 0, ErrorMissing},
		{"broken sample", text("vllm:num_requests_waiting{model_name=\"a\n"), 0, ErrorParse},
		{"not a number", text("vllm:num_requests_waiting seven\n"), 0, ErrorParse},
		{"a histogram of that name", text("# TYPE vllm:num_requests_waiting histogram\nvllm:num_requests_waiting_count 3\n"), 0, ErrorMissing},
		{"too large", text(strings.Repeat("# filler line of no interest\n", 1000) + vllmMetrics(0, 0)), 4096, ErrorTooLarge},
		{"one huge line", text(strings.Repeat("x", 200<<10) + "\nvllm:num_requests_waiting 9\n"), 0, ""},
		{"status", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusNotFound) }, 0, ErrorStatus},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newPollFixture(t, "vllm:num_requests_waiting 9\n", Options{MaxBodyBytes: tc.max},
				config.Signal{Metric: "vllm:num_requests_waiting", Max: 4})
			if !f.saturated() {
				t.Fatal("not saturated before the garbage")
			}
			f.srv.handle(tc.h)
			for range 4 {
				f.tick()
			}
			if tc.kind == "" { // the huge line is skipped, the gauge read
				if !f.saturated() {
					t.Fatal("the gauge after a huge line was not read")
				}
				return
			}
			if n := f.obs.errorCount(tc.kind); n != 4 {
				t.Fatalf("%d %s errors, want 4 ", n, tc.kind)
			}
			if f.saturated() {
				t.Fatal("garbage kept the last reading fresh")
			}
		})
	}
}

func text(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) }
}

func TestReloadRestartsOnlyChangedPollersAndCloseStopsThem(t *testing.T) {
	f := newPollFixture(t, vllmMetrics(10, 0.5), Options{})
	p := f.poller()
	cfg := f.tr.current.Load().byName["a"].sat
	same := Backend{Name: "a", MaxInFlight: 4, Saturation: saturation(cfg.MetricsURL, cfg.Signals...)}
	if err := f.tr.Apply([]Backend{same}, 0); err != nil {
		t.Fatal(err)
	}
	if f.poller() != p {
		t.Fatal("an unchanged saturation restarted the poller")
	}
	changed := same
	changed.Saturation = saturation(cfg.MetricsURL, config.Signal{Metric: "vllm:num_requests_waiting", Max: 100})
	if err := f.tr.Apply([]Backend{changed}, 0); err != nil {
		t.Fatal(err)
	}
	if f.poller() == p {
		t.Fatal("a changed saturation kept the old poller")
	}
	select {
	case <-p.done:
	default:
		t.Fatal("the old poller still runs")
	}
	f.waitPolls(1)
	if f.saturated() {
		t.Fatal("10 waiting under the new max 100: saturated")
	}
	if err := f.tr.Apply([]Backend{{Name: "a", MaxInFlight: 4}}, 0); err != nil {
		t.Fatal(err)
	}
	if f.tr.current.Load().byName["a"].poller.Load() != nil {
		t.Fatal("saturation removed but a poller remains")
	}
	f.tr.Close() // goleak in TestMain checks that nothing is left
}

// held is a test's slots on backend "a" of a poll fixture.
type held struct {
	t     *testing.T
	f     *pollFixture
	slots []*Slot
}

func (h *held) n() int {
	n := 0
	for i := range h.slots {
		if h.slots[i].Backend() != "" {
			n++
		}
	}
	return n
}

// take acquires one more slot and checks the result.
func (h *held) take(want Result) {
	h.t.Helper()
	h.slots = append(h.slots, new(Slot))
	if r := h.f.tr.Acquire(h.slots[len(h.slots)-1], "a"); r != want {
		h.t.Fatalf("acquire with %d held: %v, want %v", h.n(), r, want)
	}
}

// fill takes slots until a refusal and returns how many it took.
func (h *held) fill() int {
	h.t.Helper()
	for took := 0; ; took++ {
		h.slots = append(h.slots, new(Slot))
		if r := h.f.tr.Acquire(h.slots[len(h.slots)-1], "a"); r != Acquired {
			if r != Saturated {
				h.t.Fatalf("acquire: %v", r)
			}
			return took
		}
		if took > 1000 {
			h.t.Fatal("no refusal after 1000 slots")
		}
	}
}

// release gives back k held slots.
func (h *held) release(k int) {
	for i := range h.slots {
		if k > 0 && h.slots[i].Backend() != "" {
			h.slots[i].Release()
			k--
		}
	}
}

func (h *held) releaseAll() { h.release(len(h.slots)) }

// TestWindowAfterSaturation: once a reading has said saturated, the
// backend keeps a window of in-flight requests and admits on every release
// up to it, without waiting for the next reading. A reading over a max cuts
// the window to what was in flight at the last reading under every max (at
// least one below what is in flight now), so the server's own queue
// drains; each reading under every max grows it by one; it is dropped at
// maxInFlight or when the signals go stale.
func TestWindowAfterSaturation(t *testing.T) {
	f := newPollFixture(t, vllmMetrics(0, 0.5), Options{})
	signals := []config.Signal{{Metric: "vllm:num_requests_waiting", Max: 4}, {Metric: "vllm:kv_cache_usage_perc", Max: 0.95}}
	if err := f.tr.Apply([]Backend{{Name: "a", MaxInFlight: 64, Saturation: saturation(f.srv.URL+"/metrics", signals...)}}, 0); err != nil {
		t.Fatal(err)
	}
	h := &held{t: t, f: f}
	defer h.releaseAll()
	for range 10 { // never saturated: maxInFlight alone decides
		h.take(Acquired)
	}
	f.tick() // under every max with 10 in flight
	h.take(Acquired)
	h.take(Acquired)

	f.srv.set(vllmMetrics(5, 0.5))
	f.tick() // over: back to the 10 the last reading under every max saw
	h.take(Saturated)
	if st := f.tr.Stats()[0]; !st.Saturated || !f.tr.Saturated("a") {
		t.Fatalf("12 in flight over a window of 10 not reported saturated: %+v", st)
	}
	h.release(2)
	h.take(Saturated) // 10 in flight: at the window
	wakes := f.rm.count()
	h.release(1)
	if f.rm.count() != wakes+1 {
		t.Fatal("a release under the window did not wake the waiters")
	}
	h.take(Acquired) // no reading needed: a release makes room
	h.take(Saturated)

	f.srv.set(vllmMetrics(0, 0.5))
	wakes = f.rm.count()
	f.tick() // under: one more
	if f.rm.count() != wakes+1 {
		t.Fatal("a window that grew did not wake the waiters")
	}
	if got := h.fill(); got != 1 {
		t.Fatalf("first reading under every max: %d more admitted, want 1", got)
	}
	for i := range 2 {
		f.tick() // one more per reading
		if got := h.fill(); got != 1 {
			t.Fatalf("reading %d under every max in a row: %d more admitted, want 1", i+2, got)
		}
	}
	f.srv.set(vllmMetrics(5, 0.5))
	f.tick() // over, 13 in flight, 12 at the last reading under every max
	h.release(1)
	h.take(Saturated)
	h.release(1)
	h.take(Acquired)

	f.srv.set(vllmMetrics(0, 0.5))
	for range 64 { // grows to maxInFlight, where the window is dropped
		f.tick()
	}
	if got := h.fill(); h.n() != 64 {
		t.Fatalf("window not dropped at maxInFlight: %d more admitted, %d held", got, h.n())
	}
}

// TestSaturatedWithNothingInFlightRefusesUntilClear: a reading over a max
// with no request of this replica's in flight has nothing to hold back, so
// the backend refuses outright until a reading clears it; it then starts
// from a small window, and stale signals hand the decision back to
// maxInFlight.
func TestSaturatedWithNothingInFlightRefusesUntilClear(t *testing.T) {
	f := newPollFixture(t, vllmMetrics(5, 0.5), Options{})
	h := &held{t: t, f: f}
	defer h.releaseAll()
	h.take(Saturated)
	if !f.tr.Saturated("a") || !f.tr.Stats()[0].Saturated {
		t.Fatal("not reported saturated")
	}
	f.srv.set(vllmMetrics(0, 0.5))
	f.tick()
	if got := h.fill(); got != 2 {
		t.Fatalf("cleared with nothing in flight: %d admitted, want 2 (a window of one, one more)", got)
	}
	f.srv.handle(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	f.tick()
	if got := h.fill(); got != 0 {
		t.Fatalf("a failed poll within staleAfter changed the window: %d more admitted", got)
	}
	for range 4 { // past staleAfter: maxInFlight (8) alone decides
		f.tick()
	}
	if got := h.fill(); h.n() != 8 {
		t.Fatalf("stale signals: %d more admitted, %d held, want maxInFlight 8", got, h.n())
	}
}
