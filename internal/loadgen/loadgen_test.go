package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// safety bounds how long a test waits, in real time, for something that
// should happen promptly; it only turns a hang into a failure.
const safety = 20 * time.Second

// blockingServer answers every request only once release is closed, and
// reports each arrival on arrived.
type blockingServer struct {
	*httptest.Server
	arrived chan struct{}
	release chan struct{}
}

func newBlockingServer(t *testing.T, capacity int) *blockingServer {
	t.Helper()
	b := &blockingServer{arrived: make(chan struct{}, capacity), release: make(chan struct{})}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the body lets the server notice a client that hangs up.
		_, _ = io.Copy(io.Discard, r.Body)
		b.arrived <- struct{}{}
		select {
		case <-b.release:
			w.WriteHeader(http.StatusOK)
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(b.Close)
	return b
}

// driveUntilScheduled steps fc by step whenever the scheduler waits on it,
// until the generator reports that its schedule is exhausted.
func driveUntilScheduled(t *testing.T, fc *clocktesting.FakeClock, step time.Duration, done <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(safety)
	for {
		select {
		case <-done:
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("schedule not exhausted after %v of real time (fake time %v)", safety, fc.Now())
		}
		if fc.HasWaiters() {
			fc.Step(step)
		} else {
			runtime.Gosched()
		}
	}
}

// awaitWaiter returns once something (the scheduler) waits on fc.
func awaitWaiter(t *testing.T, fc *clocktesting.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(safety)
	for !fc.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatalf("nothing waits on the fake clock after %v of real time", safety)
		}
		runtime.Gosched()
	}
}

// expectArrivals reads exactly n arrivals from s, failing on fewer.
func expectArrivals(t *testing.T, s *blockingServer, n int) {
	t.Helper()
	timeout := time.After(safety)
	for i := range n {
		select {
		case <-s.arrived:
		case <-timeout:
			t.Fatalf("server saw %d requests, want %d", i, n)
		}
	}
}

// startRun runs g against fc in the background and returns a channel that
// is closed when the schedule is exhausted and one that delivers the summary.
func startRun(ctx context.Context, g *generator) (scheduled <-chan struct{}, result <-chan *Summary) {
	sched := make(chan struct{})
	g.scheduleDone = func() { close(sched) }
	res := make(chan *Summary, 1)
	go func() {
		defer g.close()
		g.run(ctx)
		res <- g.summary(ctx.Err() != nil)
	}()
	return sched, res
}

func awaitSummary(t *testing.T, result <-chan *Summary) *Summary {
	t.Helper()
	select {
	case s := <-result:
		return s
	case <-time.After(safety):
		t.Fatal("run did not finish")
		return nil
	}
}

func testConfig(fc *clocktesting.FakeClock, targets []string, tenants ...Tenant) Config {
	c := Config{
		Targets:        targets,
		Tenants:        tenants,
		Duration:       2 * time.Second,
		MaxOutstanding: 100,
		Timeout:        time.Minute,
		Clock:          fc,
	}
	c.Default()
	return c
}

// TestOpenLoopIgnoresSlowServer is the generator's defining property: a
// server that answers nothing while the schedule runs still receives
// rate*duration requests, on time.
func TestOpenLoopIgnoresSlowServer(t *testing.T) {
	srv := newBlockingServer(t, 100)
	fc := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	cfg := testConfig(fc, []string{srv.URL},
		Tenant{Name: "heavy", Rate: 10},
		Tenant{Name: "light", Rate: 2.5},
	)
	g := newGenerator(cfg)
	scheduled, result := startRun(context.Background(), g)

	driveUntilScheduled(t, fc, 10*time.Millisecond, scheduled)
	if elapsed := fc.Since(g.start); elapsed < 1900*time.Millisecond || elapsed > 2*time.Second {
		t.Errorf("schedule ended at fake offset %v, want just before the 2s duration", elapsed)
	}
	expectArrivals(t, srv, 25)
	close(srv.release)
	s := awaitSummary(t, result)

	want := map[string]uint64{"heavy": 20, "light": 5}
	for _, ts := range s.Tenants {
		if ts.Offered != want[ts.Name] || ts.Sent != want[ts.Name] || ts.Admitted != want[ts.Name] {
			t.Errorf("%s: offered %d, sent %d, admitted %d; want %d of each", ts.Name, ts.Offered, ts.Sent, ts.Admitted, want[ts.Name])
		}
		if ts.DroppedClientSide != 0 {
			t.Errorf("%s: %d dropped client side, want none below the outstanding bound", ts.Name, ts.DroppedClientSide)
		}
		if got := sum(ts.AdmittedPerSecond); got != ts.Admitted {
			t.Errorf("%s: admitted_per_second sums to %d, want %d", ts.Name, got, ts.Admitted)
		}
	}
	if s.Interrupted {
		t.Error("summary says interrupted, want a complete run")
	}
}

// TestMaxOutstandingDropsClientSide checks the hard bound: arrivals beyond
// MaxOutstanding are counted as dropped and never sent or delayed.
func TestMaxOutstandingDropsClientSide(t *testing.T) {
	srv := newBlockingServer(t, 100)
	fc := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	cfg := testConfig(fc, []string{srv.URL}, Tenant{Name: "a", Rate: 10})
	cfg.MaxOutstanding = 5
	g := newGenerator(cfg)
	scheduled, result := startRun(context.Background(), g)

	driveUntilScheduled(t, fc, 10*time.Millisecond, scheduled)
	expectArrivals(t, srv, 5)
	close(srv.release)
	s := awaitSummary(t, result)
	if n := len(srv.arrived); n != 0 {
		t.Errorf("server saw %d requests beyond the bound of 5", n)
	}
	got := s.Tenants[0]
	if got.Offered != 20 || got.Sent != 5 || got.DroppedClientSide != 15 || got.Admitted != 5 {
		t.Errorf("offered %d sent %d dropped %d admitted %d; want 20, 5, 15, 5",
			got.Offered, got.Sent, got.DroppedClientSide, got.Admitted)
	}
}

// TestCancelStopsSchedulingAndRequests checks Ctrl-C behaviour: the run ends
// at once, requests in flight are cancelled, and the summary still comes back.
func TestCancelStopsSchedulingAndRequests(t *testing.T) {
	srv := newBlockingServer(t, 100)
	fc := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	cfg := testConfig(fc, []string{srv.URL}, Tenant{Name: "a", Rate: 10})
	g := newGenerator(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	_, result := startRun(ctx, g)

	// Let the first three arrivals (offsets 0, 100ms, 200ms) go out.
	expectArrivals(t, srv, 1)
	for range 2 {
		awaitWaiter(t, fc)
		fc.Step(100 * time.Millisecond)
		expectArrivals(t, srv, 1)
	}
	cancel()
	s := awaitSummary(t, result)
	got := s.Tenants[0]
	if !s.Interrupted {
		t.Error("summary not marked interrupted")
	}
	if got.Offered != 3 || got.Sent != 3 || got.Errors["canceled"] != 3 || got.Completed != 0 {
		t.Errorf("offered %d sent %d completed %d errors %v; want 3 sent and cancelled, none completed",
			got.Offered, got.Sent, got.Completed, got.Errors)
	}
}

// TestClassifiesAnswers checks what each kind of data-plane answer counts as.
func TestClassifiesAnswers(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		header     map[string]string
		body       string
		admitted   uint64
		refused    uint64
		reason     string
		limitType  string
		waitCount  uint64
		waitP50    float64
		wantStatus string
	}{{
		name:     "admitted without waiting",
		status:   200,
		body:     `{"choices":[]}`,
		admitted: 1, wantStatus: "200",
	}, {
		name:     "admitted after queueing",
		status:   200,
		header:   map[string]string{"x-fair-queue-wait-ms": "250", "x-fair-queue-position": "3"},
		admitted: 1, waitCount: 1, waitP50: 250, wantStatus: "200",
	}, {
		name:    "refused by the queue after waiting",
		status:  429,
		header:  map[string]string{"x-fair-queue-wait-ms": "5000"},
		body:    `{"error":{"type":"rate_limit_exceeded","details":{"limit_type":"user","retry_after_ms":1000,"fair_queue":{"tenant_dimension":"user","reason":"wait_exceeds_budget","position":4,"waited_ms":5000}}}}`,
		refused: 1, reason: "wait_exceeds_budget", limitType: "user", waitCount: 1, waitP50: 5000, wantStatus: "429",
	}, {
		name:    "refused without the queue",
		status:  429,
		body:    `{"error":{"type":"rate_limit_exceeded","details":{"limit_type":"global","retry_after_ms":10}}}`,
		refused: 1, reason: ReasonImmediate, limitType: "global", wantStatus: "429",
	}, {
		name:    "unavailable with a body that is not JSON",
		status:  503,
		body:    `upstream connect error`,
		refused: 1, reason: ReasonUnparsed, wantStatus: "503",
	}, {
		name:       "backend failure is neither admitted nor refused",
		status:     502,
		wantStatus: "502",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				_, _ = fmt.Fprint(w, tc.body) // a failed write shows in the outcome the test checks
			}))
			defer srv.Close()
			// A 1ms window at 1000 req/s holds exactly one arrival, at offset 0.
			s, err := Run(context.Background(), Config{
				Targets:  []string{srv.URL},
				Tenants:  []Tenant{{Name: "t", Rate: 1000}},
				Duration: time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			got := s.Tenants[0]
			if got.Sent != 1 || got.Completed != 1 {
				t.Fatalf("sent %d completed %d errors %v, want exactly one completed request", got.Sent, got.Completed, got.Errors)
			}
			if got.Admitted != tc.admitted || got.Refused != tc.refused {
				t.Errorf("admitted %d refused %d, want %d and %d", got.Admitted, got.Refused, tc.admitted, tc.refused)
			}
			if got.Status[tc.wantStatus] != 1 {
				t.Errorf("status counts %v, want one %s", got.Status, tc.wantStatus)
			}
			if tc.reason != "" && got.RefusedByReason[tc.reason] != 1 {
				t.Errorf("refused by reason %v, want one %q", got.RefusedByReason, tc.reason)
			}
			if tc.limitType != "" && got.RefusedByLimitType[tc.limitType] != 1 {
				t.Errorf("refused by limit type %v, want one %q", got.RefusedByLimitType, tc.limitType)
			}
			if got.WaitMS.Count != tc.waitCount || !within(got.WaitMS.P50, tc.waitP50, 0.01) {
				t.Errorf("wait %+v, want count %d p50 %v", got.WaitMS, tc.waitCount, tc.waitP50)
			}
			// The admitted-only summaries count exactly the admitted answers.
			if got.AdmittedLatencyMS.Count != tc.admitted {
				t.Errorf("admitted latency count %d, want %d", got.AdmittedLatencyMS.Count, tc.admitted)
			}
			if wantAdmittedWait := tc.admitted * tc.waitCount; got.AdmittedWaitMS.Count != wantAdmittedWait {
				t.Errorf("admitted wait count %d, want %d", got.AdmittedWaitMS.Count, wantAdmittedWait)
			}
		})
	}
}

// TestSendsIdentitiesRoundRobin checks that each tenant's identity headers
// and body reach the server, spread evenly over the targets.
func TestSendsIdentitiesRoundRobin(t *testing.T) {
	var (
		mu   sync.Mutex
		seen = map[string][]string{}
	)
	handler := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			buf := new(strings.Builder)
			_, _ = fmt.Fprint(buf, r.Method, " ", r.URL.Path, " ", r.Header.Get("Authorization"), " ",
				r.Header.Get("x-user-id"), " ", r.Header.Get("x-team-id"), " ", r.Header.Get("x-extra"))
			mu.Lock()
			seen[name] = append(seen[name], buf.String())
			mu.Unlock()
		})
	}
	a := httptest.NewServer(handler("a"))
	defer a.Close()
	b := httptest.NewServer(handler("b"))
	defer b.Close()

	// 4 arrivals at offsets 0, 1, 2, 3 ms within a 4ms window.
	// The second target carries credentials, which the summary must mask.
	bURL := strings.Replace(b.URL, "http://", "http://fq:s3cret@", 1)
	s, err := Run(context.Background(), Config{
		Targets:  []string{a.URL, bURL + "/"},
		Tenants:  []Tenant{{Name: "acme", Rate: 1000, APIKey: "sk-acme", User: "alice", Team: "research", Headers: map[string]string{"x-extra": "1"}}},
		Duration: 4 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Tenants[0].Admitted != 4 {
		t.Fatalf("admitted %d, want 4", s.Tenants[0].Admitted)
	}
	if got := strings.Join(s.Targets, " "); strings.Contains(got, "s3cret") {
		t.Errorf("summary targets %q show the password", got)
	}
	want := "POST /v1/chat/completions Bearer sk-acme alice research 1"
	for _, name := range []string{"a", "b"} {
		if len(seen[name]) != 2 {
			t.Errorf("target %s got %d requests, want 2 of 4 (round-robin)", name, len(seen[name]))
		}
		for _, got := range seen[name] {
			if got != want {
				t.Errorf("target %s got %q, want %q", name, got, want)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	ok := func() Config {
		c := Config{Targets: []string{"http://127.0.0.1:8080"}, Tenants: []Tenant{{Name: "a", Rate: 1}}, Duration: time.Second}
		c.Default()
		return c
	}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"valid", func(*Config) {}, ""},
		{"no target", func(c *Config) { c.Targets = nil }, "no target"},
		{"relative target", func(c *Config) { c.Targets = []string{"127.0.0.1:8080"} }, "not an absolute http(s) URL"},
		{"zero duration", func(c *Config) { c.Duration = 0 }, "duration 0s must be positive"},
		{"too long", func(c *Config) { c.Duration = 2 * time.Hour }, "at most 1h0m0s"},
		{"no tenants", func(c *Config) { c.Tenants = nil }, "0 tenants configured"},
		{"zero rate", func(c *Config) { c.Tenants[0].Rate = 0 }, "rate 0 must be above 0"},
		{"duplicate name", func(c *Config) { c.Tenants = append(c.Tenants, Tenant{Name: "a", Rate: 1}) }, `name "a" is used twice`},
		{"unnamed", func(c *Config) { c.Tenants[0].Name = "" }, "has no name"},
		{"start after end", func(c *Config) { c.Tenants[0].Start = time.Second }, "before the duration"},
		{"stop before start", func(c *Config) { c.Tenants[0].Start, c.Tenants[0].Stop = 500*time.Millisecond, 100*time.Millisecond }, "after start"},
		{"no outstanding", func(c *Config) { c.MaxOutstanding = -1 }, "max outstanding -1"},
		{"bad path", func(c *Config) { c.Path = "v1" }, `path "v1" must start with /`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok()
			tc.mutate(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestArrivals checks the arrival count and order of a schedule.
func TestArrivals(t *testing.T) {
	tests := []struct {
		rate        float64
		from, until time.Duration
		want        int64
	}{
		{rate: 10, until: 2 * time.Second, want: 20},
		{rate: 2.5, until: 2 * time.Second, want: 5},
		{rate: 3, until: time.Second, want: 3},
		{rate: 7, until: 3 * time.Second, want: 21},
		{rate: 0.5, until: 3 * time.Second, want: 2},
		{rate: 10, from: 500 * time.Millisecond, until: time.Second, want: 5},
		{rate: 10, from: time.Second, until: time.Second, want: 0},
		{rate: 1000, until: time.Millisecond, want: 1},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%v/s from %v until %v", tc.rate, tc.from, tc.until), func(t *testing.T) {
			a := newArrivals(tc.rate, tc.from, tc.until)
			var n int64
			prev := time.Duration(-1)
			for at, ok := a.due(); ok; at, ok = a.due() {
				if at < tc.from || at <= prev {
					t.Fatalf("arrival %d at %v, after %v: not increasing from %v", n, at, prev, tc.from)
				}
				prev = at
				a.next++
				n++
			}
			if n != tc.want {
				t.Errorf("schedule fired %d arrivals, want %d", n, tc.want)
			}
		})
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	// 1..1000 ms: p50 is 500ms and p99 is 990ms by nearest rank.
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Millisecond)
	}
	tests := []struct {
		q    float64
		want float64
	}{{0.5, 500}, {0.99, 990}, {1, 1000}, {0.001, 1}}
	for _, tc := range tests {
		got := millis(h.quantile(tc.q))
		if !within(got, tc.want, 0.01) {
			t.Errorf("quantile(%v) = %vms, want %vms within 1%%", tc.q, got, tc.want)
		}
	}
	if s := h.summary(); s.Count != 1000 || s.Max != 1000 {
		t.Errorf("summary %+v, want count 1000 and max 1000", s)
	}
	var empty histogram
	if s := empty.summary(); s != (Percentiles{}) {
		t.Errorf("empty summary %+v, want zero", s)
	}
	var huge histogram
	huge.record(10 * histogramMax)
	if got := huge.quantile(0.5); got != 10*histogramMax {
		t.Errorf("value beyond the last bucket reported as %v, want the exact max", got)
	}
}

func TestCountMapsAreBounded(t *testing.T) {
	var m map[string]uint64
	for i := range 100 {
		m = addCount(m, fmt.Sprintf("reason-%d", i))
	}
	if len(m) > maxKeys {
		t.Errorf("map grew to %d keys, want at most %d", len(m), maxKeys)
	}
	if m[OtherKey] != 100-(maxKeys-1) {
		t.Errorf("%q counts %d, want the %d overflowing keys", OtherKey, m[OtherKey], 100-(maxKeys-1))
	}
}

func sum(xs []uint64) uint64 {
	var n uint64
	for _, x := range xs {
		n += x
	}
	return n
}

func within(got, want, rel float64) bool {
	if want == 0 {
		return got == 0
	}
	d := (got - want) / want
	return d <= rel && d >= -rel
}
