package demo

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/util/yaml"
	testingclock "k8s.io/utils/clock/testing"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/internal/proc"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// roundTripFunc adapts a function to http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// answer returns a response with status, headers and body.
func answer(status int, body string, header ...string) *http.Response {
	h := http.Header{}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body))}
}

func TestObserverCountsPerTenantAndTick(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Unix(1000, 0))
	var next *http.Response
	var nextErr error
	obs := NewObserver(roundTripFunc(func(*http.Request) (*http.Response, error) { return next, nextErr }), clk, []string{"key-a", "key-b"})
	send := func(key string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/v1/chat/completions", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, _ := obs.RoundTrip(req)
		return resp
	}
	queueFull := `{"error":{"details":{"limit_type":"model","fair_queue":{"reason":"tenant_queue_full"}}}}`

	next = answer(200, "ok", "x-fair-queue-wait-ms", "40")
	send("key-a")
	next = answer(200, "ok") // admitted without waiting: no wait sample
	send("key-a")
	next = answer(429, queueFull)
	resp := send("key-b")
	if got, _ := io.ReadAll(resp.Body); string(got) != queueFull {
		t.Errorf("the caller read body %q after the observer, want the whole body %q", got, queueFull)
	}
	next = answer(429, `{"error":{"details":{"limit_type":"global"}}}`)
	send("key-b")
	next = answer(503, `not json`)
	send("key-b")
	next, nextErr = nil, errors.New("connection refused")
	send("key-b")
	nextErr = nil
	next = answer(200, "ok")
	send("unknown-key") // not a tenant of the run: not counted
	send("")

	clk.SetTime(clk.Now().Add(Tick))
	next = answer(200, "ok", "x-fair-queue-wait-ms", "80")
	send("key-a")

	first := obs.Window(0, Tick)
	if first[0].Admitted != 2 || len(first[0].Waits) != 1 || first[0].Waits[0] != 40 {
		t.Errorf("tenant a in tick 0: admitted %d, waits %v; want 2 admitted and one wait of 40ms", first[0].Admitted, first[0].Waits)
	}
	wantRefused := map[string]uint64{"tenant_queue_full": 1, ReasonImmediate: 1, ReasonOther: 1, ReasonTransport: 1}
	for i, r := range Reasons() {
		if first[1].Refused[i] != wantRefused[r] {
			t.Errorf("tenant b refusals for %s = %d, want %d", r, first[1].Refused[i], wantRefused[r])
		}
	}
	if all := obs.Window(0, 2*Tick); all[0].Admitted != 3 || len(all[0].Waits) != 2 {
		t.Errorf("tenant a over both ticks: admitted %d with %d waits, want 3 with 2", all[0].Admitted, len(all[0].Waits))
	}
	if got := obs.Admitted(); len(got[0]) != 2 || got[0][0] != 2 || got[0][1] != 1 {
		t.Errorf("Admitted() = %v, want tenant a [2 1]", got)
	}
	obs.Restart()
	if got := obs.Window(0, time.Hour); got[0].Admitted != 0 || got[1].Refused[0] != 0 {
		t.Errorf("after Restart the window still holds %+v", got)
	}
}

func TestBalancerSpreadsEachClientOverTheReplicas(t *testing.T) {
	var mu sync.Mutex
	hosts := map[string]map[string]int{} // client -> host -> requests
	b, err := newBalancer(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		defer mu.Unlock()
		c := r.Header.Get("Authorization")
		if hosts[c] == nil {
			hosts[c] = map[string]int{}
		}
		hosts[c][r.URL.Host]++
		return answer(200, ""), nil
	}), []string{"http://127.0.0.1:1", "http://127.0.0.1:2"})
	if err != nil {
		t.Fatal(err)
	}
	// An arrival pattern where a shared round-robin would send every request
	// of client a to one replica and every request of b to the other.
	for range 10 {
		for _, c := range []string{"a", "b"} {
			req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/x", nil)
			req.Header.Set("Authorization", c)
			if _, err := b.RoundTrip(req); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []string{"a", "b"} {
		if hosts[c]["127.0.0.1:1"] != 5 || hosts[c]["127.0.0.1:2"] != 5 {
			t.Errorf("client %s reached %v, want 5 requests on each replica", c, hosts[c])
		}
	}
	if _, err := newBalancer(http.DefaultTransport, []string{"not a url"}); err == nil {
		t.Error("newBalancer accepted a target without a host")
	}
}

// series builds per-tick admitted counts from a per-tick share pattern.
func series(ticks int, shares func(tick int) []uint64) [][]uint64 {
	out := make([][]uint64, len(Tenants))
	for k := range ticks {
		for i, n := range shares(k) {
			out[i] = append(out[i], n)
		}
	}
	return out
}

func TestSharesAndMovedAfter(t *testing.T) {
	before := func(int) []uint64 { return []uint64{2, 2, 6} }
	after := func(int) []uint64 { return []uint64{6, 2, 2} }
	tests := []struct {
		name      string
		admitted  [][]uint64
		from      time.Duration
		wantMoved time.Duration
	}{
		{
			name: "moves 1s after the patch",
			admitted: series(60, func(k int) []uint64 {
				if k < 40 {
					return before(k)
				}
				return after(k)
			}),
			// The first window mostly after the change ends 3 ticks into it.
			from: 3 * time.Second, wantMoved: 4*time.Second + 3*Tick,
		},
		{name: "never moves", admitted: series(60, before), from: 3 * time.Second, wantMoved: -1},
		{name: "moves only after the load ended", admitted: series(60, func(k int) []uint64 {
			if k < 55 {
				return before(k)
			}
			return after(k)
		}), from: 3 * time.Second, wantMoved: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MovedAfter(tt.admitted, tt.from, 5*time.Second); got != tt.wantMoved {
				t.Errorf("MovedAfter = %v, want %v", got, tt.wantMoved)
			}
		})
	}

	r := Result{Admitted: series(20, before)}
	got := r.Shares(0, 2*time.Second)
	for i, want := range testutil.WeightedShares(WeightsBefore) {
		if math.Abs(got[i]-want) > 1e-9 {
			t.Errorf("share of %s = %v, want %v", Tenants[i].Name, got[i], want)
		}
	}
	if got := r.Shares(5*time.Second, 6*time.Second); !math.IsNaN(got[0]) {
		t.Errorf("share of a window with nothing admitted = %v, want NaN", got[0])
	}
	if e := MaxRelativeError([]float64{0.22, 0.2, 0.58}, []float64{0.2, 0.2, 0.6}); math.Abs(e-0.1) > 1e-9 {
		t.Errorf("MaxRelativeError = %v, want 0.1", e)
	}
	if e := MaxRelativeError([]float64{math.NaN(), 0.2, 0.6}, []float64{0.2, 0.2, 0.6}); e != 1 {
		t.Errorf("MaxRelativeError with a NaN share = %v, want 1", e)
	}
}

// TestManifestsAreAValidPolicy decodes the demo's manifests into the API
// types, so a typo in a field name fails here rather than at kubectl apply.
func TestManifestsAreAValidPolicy(t *testing.T) {
	docs := bytes.Split(manifests("sk-key", "http://127.0.0.1:8000", 50), []byte("\n---\n"))
	if len(docs) != 2 {
		t.Fatalf("got %d YAML documents, want the Secret and the policy", len(docs))
	}
	var p fqv1alpha1.FairQueuePolicy
	if err := yaml.UnmarshalStrict(docs[1], &p); err != nil {
		t.Fatalf("the policy does not decode strictly: %v", err)
	}
	fq := p.Spec.FairQueuing
	if !fq.Enabled || fq.TenantDimension != "apiKey" || len(fq.Weights) != 1 || fq.Weights[0].Identity != "${"+PriorityVar+"}" || fq.Weights[0].Weight != 3 {
		t.Errorf("fair queuing = %+v, want enabled on apiKey with ${%s} at weight 3", fq, PriorityVar)
	}
	if !strings.Contains(string(docs[0]), PriorityVar+": sk-key") {
		t.Errorf("the Secret does not set %s to the priority key:\n%s", PriorityVar, docs[0])
	}
}

func TestWaitForLine(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	sup := proc.NewSupervisor(t.TempDir(), 5*time.Second)
	defer func() { _ = sup.StopAll() }() // the processes' ends are not under test
	ctx := context.Background()
	for _, tc := range []struct {
		name, script string
		within       time.Duration
		want         string
	}{
		{"ready", `echo starting; echo ready; while :; do sleep 0.05; done`, 30 * time.Second, ""},
		{"exits", `echo not-ready; exit 2`, 30 * time.Second, `exits exited before printing "ready" (exit status 2): see `},
		{"silent", `while :; do sleep 0.05; done`, 500 * time.Millisecond, `silent did not print "ready" within 500ms: see `},
	} {
		p, err := sup.Start(ctx, tc.name, sh, "-c", tc.script)
		if err != nil {
			t.Fatal(err)
		}
		err = waitForLine(ctx, p, "ready", tc.within)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)) {
			t.Errorf("%s: waitForLine = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestWaitHTTPAndPortClosed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	addr := srv.Listener.Addr().String()
	ctx := context.Background()
	if err := waitHTTP(ctx, srv.URL+"/readyz", 2*time.Second); err != nil {
		t.Errorf("waitHTTP on a ready server: %v", err)
	}
	if err := waitHTTP(ctx, srv.URL+"/other", 2*time.Second); err == nil || !strings.Contains(err.Error(), "HTTP 503") {
		t.Errorf("waitHTTP on a 503 = %v, want an error naming the status", err)
	}
	if portClosed(addr) {
		t.Errorf("portClosed(%s) while the server listens", addr)
	}
	srv.Close()
	if !portClosed(addr) {
		t.Errorf("portClosed(%s) = false after the server closed", addr)
	}
}

func TestPrintSecond(t *testing.T) {
	counts := make([]Counts, len(Tenants))
	for i := range counts {
		counts[i].Refused = make([]uint64, len(reasons))
	}
	counts[0].Admitted, counts[0].Waits = 1, []float64{30}
	counts[0].Refused[reasonIndex("tenant_queue_full")] = 7
	counts[2].Admitted = 3
	counts[0].Tokens, counts[2].Tokens = 1050, 450
	counts[1].Held = []float64{900}
	counts[1].Refused[reasonIndex("model_tokens")] = 2
	names := []string{"acme", "globex", "initech"}
	tests := []struct {
		name     string
		byTokens bool
		weighted []float64
		header   []string
		rows     [][]string
	}{{
		name: "shares of requests", weighted: testutil.WeightedShares(WeightsBefore),
		header: []string{"admitted/s", "tokens/s", "share", "wait p50"},
		rows: [][]string{
			{"11s", "acme", " 1 ", " 1050 ", "25.0%", "20.0%", "30ms", "tenant_queue_full=7"},
			{"globex", " 0 ", "0.0%", "20.0%", " - ", "model_tokens=2"},
			{"initech", " 3 ", " 450 ", "75.0%", "60.0%"},
		},
	}, {
		name: "shares of tokens", byTokens: true, weighted: testutil.WeightedShares([]float64{1, 1, 2}),
		header: []string{"admitted/s", "tokens/s", "tok share", "held p50"},
		rows: [][]string{
			{"11s", "acme", " 1 ", " 1050 ", "70.0%", "25.0%", "tenant_queue_full=7"},
			{"globex", " 0 ", "0.0%", "25.0%", "900ms"},
			{"initech", " 3 ", " 450 ", "30.0%", "50.0%"},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			p := &progress{out: &out}
			printSecond(p, 11, names, counts, tc.weighted, tc.byTokens, "weighted")
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 1+len(names) {
				t.Fatalf("want a header and one row per tenant, got:\n%s", out.String())
			}
			for _, part := range tc.header {
				if !strings.Contains(lines[0], part) {
					t.Errorf("header %q lacks %q", lines[0], part)
				}
			}
			for i, parts := range tc.rows {
				for _, part := range parts {
					if !strings.Contains(lines[i+1], part) {
						t.Errorf("row %q lacks %q", lines[i+1], part)
					}
				}
			}
		})
	}
}
