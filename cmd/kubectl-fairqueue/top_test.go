package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/dataplane/reload"
)

// replica is a data plane's real metrics registry that the test drives.
type replica struct {
	reg *prometheus.Registry
	m   *metrics.Metrics
}

func newReplica(t *testing.T) *replica {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	return &replica{reg: reg, m: m}
}

func (r *replica) page(t *testing.T) []byte {
	families, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, f := range families {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func TestTopComputesRatesPerReplica(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	lease := func(pod string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "llm-dataplane-" + pod,
			Labels: map[string]string{reload.LeasePolicyLabel: "llm", reload.LeaseComponentLabel: reload.LeaseComponentValue}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(pod)}}
	}
	g := &globals{namespace: "ns", client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(lease("dp-a"), lease("dp-b"), lease("dp-down")).Build()}
	reps := map[string]*replica{"dp-a": newReplica(t), "dp-b": newReplica(t)}
	var mu sync.Mutex
	scrapes := map[string]int{}
	scrape := func(_ context.Context, ns, pod, port string) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		if ns != "ns" || port != "9090" {
			t.Errorf("scraped %s/%s:%s, want namespace ns port 9090", ns, pod, port)
		}
		r, ok := reps[pod]
		if !ok {
			return nil, io.ErrUnexpectedEOF
		}
		// Between the two scrapes, dp-a grants 30 requests that waited 200ms
		// and refuses 10 tenant_queue_full; dp-b grants 10 without waiting.
		if scrapes[pod] == 1 {
			switch pod {
			case "dp-a":
				for range 30 {
					r.m.Granted("apiKey", "model", "", 200*time.Millisecond)
				}
				for range 10 {
					r.m.Refused("apiKey", "model", "", fairqueue.ReasonTenantQueueFull)
				}
				r.m.QueueChanged(7, 2)
			case "dp-b":
				for range 10 {
					r.m.Granted("user", "model", "", 0)
				}
			}
		}
		scrapes[pod]++
		return r.page(t), nil
	}
	for _, r := range reps {
		r.m.Granted("apiKey", "model", "", time.Second) // before the window: not counted
	}
	var out bytes.Buffer
	if err := runTop(context.Background(), g, "llm", topOptions{port: "9090", interval: 10 * time.Millisecond, count: 1}, scrape, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	rows := map[string]string{}
	for line := range strings.SplitSeq(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			rows[f[0]] = line
		}
	}
	// 10ms window: 30 grants are 3000/s.
	for pod, want := range map[string][]string{
		"dp-a":    {" 7 ", " 2 ", "3000.0 (apiKey=3000.0)", "75.0%", "tenant_queue_full=1000.0"},
		"dp-b":    {"1000.0 (user=1000.0)", "25.0%"},
		"dp-down": {"through the API server's pod proxy: unexpected EOF"},
	} {
		for _, w := range want {
			if !strings.Contains(rows[pod], w) {
				t.Errorf("row %s lacks %q: %q", pod, w, rows[pod])
			}
		}
	}
	// dp-a's waits in the window were all 200ms, in the 0.1–0.25 bucket:
	// interpolated p50 175ms; the 1s wait before the window does not count.
	if !strings.Contains(rows["dp-a"], " 175ms ") {
		t.Errorf("dp-a p50 wait not taken from the window's bucket deltas: %q", rows["dp-a"])
	}
}

func TestQuantileInterpolatesLikePromQL(t *testing.T) {
	before := map[float64]float64{0.1: 0, 0.25: 0, 1: 0}
	after := map[float64]float64{0.1: 50, 0.25: 100, 1: 100}
	if got, _ := quantile(0.5, before, after); got != 100*time.Millisecond {
		t.Errorf("p50 = %v, want 100ms (the top of the first bucket)", got)
	}
	if got, _ := quantile(0.75, before, after); got != 175*time.Millisecond {
		t.Errorf("p75 = %v, want 175ms (halfway through 0.1–0.25)", got)
	}
	if _, ok := quantile(0.5, after, after); ok {
		t.Error("a window without observations gave a quantile")
	}
}

// TestPodProxyPath checks the request top sends to the API server.
func TestPodProxyPath(t *testing.T) {
	var got string
	rc := &rest.Config{Host: "http://api.invalid", Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = r.URL.Path
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("# empty\n")), Header: http.Header{}}, nil
	})}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	g := &globals{kube: kube}
	if _, err := g.podProxy(context.Background(), "team-a", "dp-0", "9090"); err != nil {
		t.Fatal(err)
	}
	if want := "/api/v1/namespaces/team-a/pods/http:dp-0:9090/proxy/metrics"; got != want {
		t.Errorf("pod proxy path %q, want %q", got, want)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// tenantReplica is a data plane's real registry with per-tenant metrics.
type tenantReplica struct {
	*replica
	tm *metrics.Tenants
}

func newTenantReplica(t *testing.T, w fairqueue.Weights) *tenantReplica {
	r := newReplica(t)
	tm, err := metrics.NewTenants(r.reg, 0)
	if err != nil {
		t.Fatal(err)
	}
	tm.SetWeights(w, identity.DimensionUser)
	return &tenantReplica{replica: r, tm: tm}
}

func leaseClient(t *testing.T, ns, policy string, pods ...string) *globals {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(scheme)
	for _, pod := range pods {
		b = b.WithObjects(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: policy + "-dataplane-" + pod,
			Labels: map[string]string{reload.LeasePolicyLabel: policy, reload.LeaseComponentLabel: reload.LeaseComponentValue}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(pod)}})
	}
	return &globals{namespace: ns, client: b.Build()}
}

// tenantTable returns top's tenant rows by their first column.
func tenantTable(out string) map[string]string {
	rows := map[string]string{}
	_, table, _ := strings.Cut(out, "TENANT")
	for line := range strings.SplitSeq(table, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			rows[f[0]] = line
		}
	}
	return rows
}

func TestTopShowsTenantsAcrossReplicas(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	alice, bob := identity.Hash(key, "alice"), identity.Hash(key, "bob")
	w := fairqueue.Weights{Default: 1, ByTenant: map[string]int{alice: 3}}
	reps := map[string]*tenantReplica{"dp-a": newTenantReplica(t, w), "dp-b": newTenantReplica(t, w)}
	g := leaseClient(t, "ns", "llm", "dp-a", "dp-b")
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	scrapes := map[string]int{}
	scrape := func(_ context.Context, _, pod, _ string) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		r := reps[pod]
		// Between the scrapes each replica grants alice 30 and bob 10; on
		// dp-a alice waited 100ms each; dp-b refuses bob 5 times and holds
		// 2 of his requests.
		if scrapes[pod] == 1 {
			for range 30 {
				waited := time.Duration(0)
				if pod == "dp-a" {
					waited = 100 * time.Millisecond
				}
				r.tm.TenantAdmitted(now, alice, identity.DimensionUser, waited)
			}
			for range 10 {
				r.tm.TenantAdmitted(now, bob, identity.DimensionUser, 0)
			}
			if pod == "dp-b" {
				for range 5 {
					r.tm.TenantRefused(now, bob, identity.DimensionUser, "tenant_queue_full")
				}
				r.tm.TenantWaiting(bob, identity.DimensionUser, "user", 2)
			}
		}
		scrapes[pod]++
		return r.page(t), nil
	}
	for _, r := range reps {
		r.tm.TenantAdmitted(now, bob, identity.DimensionUser, time.Hour) // before the window: not counted
	}
	var out bytes.Buffer
	if err := runTop(context.Background(), g, "llm", topOptions{port: "9090", interval: 10 * time.Millisecond, count: 1}, scrape, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	rows := tenantTable(out.String())
	// 10ms window: 60 grants are 6000/s. alice has 75% of the grants and,
	// weight 3 against bob's 1, a weighted share of 75%.
	for label, want := range map[string][]string{
		identity.Short(alice): {" user ", " 6000.0 ", " 75.0% ", " 3 ", " 75.0% ", " 50ms ", " 0 ", " -"},
		identity.Short(bob):   {" user ", " 2000.0 ", " 25.0% ", " 1 ", " 25.0% ", " 0s ", " 2 ", "tenant_queue_full=500.0"},
	} {
		for _, w := range want {
			if !strings.Contains(rows[label]+" ", w) {
				t.Errorf("tenant row %s lacks %q: %q", label, w, rows[label])
			}
		}
	}
	if strings.Contains(out.String(), alice) || strings.Contains(out.String(), "alice") {
		t.Errorf("top shows a full hash or a name without --resolve:\n%s", out.String())
	}
}

func TestTopTenantRowsAreBounded(t *testing.T) {
	rows := make([]replicaSample, 1)
	before := []replicaSample{{byTenant: map[string]*tenantSample{}}}
	rows[0].byTenant = map[string]*tenantSample{}
	for i := range 30 {
		rows[0].byTenant[fmt.Sprintf("%012d", i)] = &tenantSample{dim: "user", grants: float64(i), refused: map[string]float64{}}
	}
	var out bytes.Buffer
	if err := printTenants(&out, before, rows, time.Second, 5, nil); err != nil {
		t.Fatal(err)
	}
	got := tenantTable(out.String())
	if _, ok := got["000000000029"]; !ok || len(got) != 7 { // header rest, 5 rows, the "more" line
		t.Errorf("--tenants 5 printed %d lines, want the 5 busiest and a note:\n%s", len(got), out.String())
	}
	if !strings.Contains(out.String(), "(25 more tenants; --tenants 0 shows all)") {
		t.Errorf("no note of the hidden tenants:\n%s", out.String())
	}
}

// metricsServer serves r's metrics page as a data plane's metrics port does;
// before each page after the first it runs between.
func metricsServer(t *testing.T, r *replica, between func()) *httptest.Server {
	var mu sync.Mutex
	served := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/metrics" {
			http.NotFound(w, req)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if served > 0 && between != nil {
			between()
		}
		served++
		w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
		_, _ = w.Write(r.page(t))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestTopScrapesMetricsURLsDirectly runs top against real HTTP metrics
// endpoints, without a cluster: a standalone fleet of two replicas (one
// given without a path) and one address where nothing listens.
func TestTopScrapesMetricsURLsDirectly(t *testing.T) {
	a, b := newReplica(t), newReplica(t)
	srvA := metricsServer(t, a, func() {
		for range 30 {
			a.m.Granted("apiKey", "model", "", 0)
		}
	})
	srvB := metricsServer(t, b, func() {
		for range 10 {
			b.m.Granted("apiKey", "model", "", 0)
		}
		for range 5 {
			b.m.Refused("apiKey", "model", "", fairqueue.ReasonTenantQueueFull)
		}
	})
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"top", "--metrics-url", srvA.URL + "/metrics", "--metrics-url", srvB.URL,
		"--metrics-url", down.URL, "--interval", "10ms"}, &out, &errOut)
	if err != nil {
		t.Fatalf("top --metrics-url: %v\n%s", err, errOut.String())
	}
	t.Logf("\n%s", out.String())
	rows := map[string]string{}
	for line := range strings.SplitSeq(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			rows[f[0]] = line
		}
	}
	for name, want := range map[string][]string{
		srvA.URL + "/metrics": {"3000.0 (apiKey=3000.0)", "75.0%"},
		srvB.URL + "/metrics": {"1000.0 (apiKey=1000.0)", "25.0%", "tenant_queue_full=500.0"},
		down.URL + "/metrics": {"is the data plane running, and is this its metrics port?", "connection refused"},
	} {
		for _, w := range want {
			if !strings.Contains(rows[name], w) {
				t.Errorf("row %s lacks %q: %q", name, w, rows[name])
			}
		}
	}
}

// TestTopFailsWhenNothingWasScraped checks that top exits non-zero, naming
// why, when no replica could be scraped, in both modes.
func TestTopFailsWhenNothingWasScraped(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	notMetrics := httptest.NewServer(http.NotFoundHandler())
	defer notMetrics.Close()
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"top", "--metrics-url", down.URL, "--metrics-url", notMetrics.URL + "/other",
		"--interval", "1ms"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "no replica could be scraped (2 tried") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("top with every --metrics-url failing: %v, want an error", err)
	}
	if !strings.Contains(out.String(), "HTTP 404 Not Found; give the data plane's metrics endpoint") {
		t.Errorf("the table does not say the other URL is not a metrics endpoint:\n%s", out.String())
	}

	g := leaseClient(t, "ns", "llm", "dp-a", "dp-b")
	fail := func(context.Context, string, string, string) ([]byte, error) { return nil, io.ErrUnexpectedEOF }
	err = runTop(context.Background(), g, "llm", topOptions{port: "9090", interval: time.Millisecond, count: 1}, fail, &out)
	if err == nil || !strings.Contains(err.Error(), "no replica could be scraped (2 tried") {
		t.Errorf("top with every pod-proxy scrape failing: %v, want an error", err)
	}

	for _, args := range [][]string{
		{"top", "llm", "--metrics-url", "http://127.0.0.1:9090"},
		{"top", "--resolve", "--metrics-url", "http://127.0.0.1:9090"},
		{"top", "--metrics-url", "127.0.0.1:9090"},
	} {
		if err := run(context.Background(), args, &out, &errOut); err == nil {
			t.Errorf("%q: no error", args)
		} else {
			t.Logf("%q: %v", args, err)
		}
	}
}

// TestTopSaysWhenAPodDoesNotExist answers top's pod-proxy requests as the
// API server does: a Lease naming a pod that is gone, a user without get on
// pods/proxy, and a pod that answers 404 itself.
func TestTopSaysWhenAPodDoesNotExist(t *testing.T) {
	status := func(w http.ResponseWriter, code int, reason, message, pod string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%q,"reason":%q,"details":{"name":%q,"kind":"pods"},"code":%d}`,
			message, reason, pod, code)
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/namespaces/ns/pods/http:dp-gone:9090/proxy/metrics":
			status(w, http.StatusNotFound, "NotFound", `pods "dp-gone" not found`, "dp-gone")
		case "/api/v1/namespaces/ns/pods/http:dp-secret:9090/proxy/metrics":
			status(w, http.StatusForbidden, "Forbidden", `pods "dp-secret" is forbidden: User "viewer" cannot get resource "pods/proxy" in API group "" in the namespace "ns"`, "dp-secret")
		case "/api/v1/namespaces/ns/pods/http:dp-other:9090/proxy/metrics":
			http.NotFound(w, r) // the pod's own 404, relayed
		default:
			t.Errorf("unexpected request %s", r.URL.Path)
			http.Error(w, "unexpected", http.StatusInternalServerError)
		}
	}))
	defer api.Close()
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	g := leaseClient(t, "ns", "llm", "dp-gone", "dp-secret", "dp-other")
	g.kube = kube
	var out bytes.Buffer
	err = runTop(context.Background(), g, "llm", topOptions{port: "9090", interval: time.Millisecond, count: 1}, g.podProxy, &out)
	if err == nil {
		t.Fatal("top with no replica scraped: no error")
	}
	t.Logf("%v\n%s", err, out.String())
	rows := map[string]string{}
	for line := range strings.SplitSeq(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			rows[f[0]] = line
		}
	}
	for pod, want := range map[string]string{
		"dp-gone":   "pod ns/dp-gone does not exist, but a report Lease names it",
		"dp-secret": "is forbidden: it needs get on pods/proxy in ns",
		"dp-other":  "scraping ns/dp-other:9090 through the API server's pod proxy: the pod answered 404; is --port 9090 its metrics port?",
	} {
		if !strings.Contains(rows[pod], want) {
			t.Errorf("row %s lacks %q: %q", pod, want, rows[pod])
		}
	}
	if strings.Contains(rows["dp-gone"], "pods/proxy") || strings.Contains(rows["dp-other"], "does not exist") {
		t.Errorf("a missing pod blamed on RBAC, or a pod's own 404 taken for a missing pod:\n%s", out.String())
	}
}

// bandPage is a metrics page of a data plane with bands interactive and
// batch: grants and refusals by band, depth by band, and the wait
// histogram by band with all of a band's waits in one bucket.
func bandPage(interactive, batch, batchRefused, batchDepth float64) []byte {
	return fmt.Appendf(nil, `# TYPE %[1]s counter
%[1]s{band="interactive",tenant_dimension="apiKey"} %[5]g
%[1]s{band="batch",tenant_dimension="apiKey"} %[6]g
# TYPE %[2]s counter
%[2]s{band="batch",reason="wait_exceeds_budget",tenant_dimension="apiKey"} %[7]g
# TYPE %[3]s gauge
%[3]s{band="interactive"} 0
%[3]s{band="batch"} %[8]g
# TYPE %[4]s histogram
%[4]s_bucket{band="interactive",tenant_dimension="apiKey",le="0.01"} %[5]g
%[4]s_bucket{band="interactive",tenant_dimension="apiKey",le="1"} %[5]g
%[4]s_bucket{band="interactive",tenant_dimension="apiKey",le="+Inf"} %[5]g
%[4]s_sum{band="interactive",tenant_dimension="apiKey"} 0
%[4]s_count{band="interactive",tenant_dimension="apiKey"} %[5]g
%[4]s_bucket{band="batch",tenant_dimension="apiKey",le="0.01"} 0
%[4]s_bucket{band="batch",tenant_dimension="apiKey",le="1"} %[6]g
%[4]s_bucket{band="batch",tenant_dimension="apiKey",le="+Inf"} %[6]g
%[4]s_sum{band="batch",tenant_dimension="apiKey"} 0
%[4]s_count{band="batch",tenant_dimension="apiKey"} %[6]g
`, metrics.QueueGrantsName, metrics.QueueRefusedName, metrics.QueueDepthName, metrics.QueueWaitName,
		interactive, batch, batchRefused, batchDepth)
}

// TestTopShowsBands checks the per-band table summed over two replicas:
// grants/s and share by band, depth, wait quantiles from the band's
// histogram and refusals, in the policy's band order; and that a data plane
// without bands prints no band table.
func TestTopShowsBands(t *testing.T) {
	before := []replicaSample{parseSample(bandPage(100, 50, 0, 3)), parseSample(bandPage(0, 0, 0, 0))}
	after := []replicaSample{parseSample(bandPage(300, 100, 20, 7)), parseSample(bandPage(100, 50, 10, 5))}
	for _, s := range append(before, after...) {
		if s.err != nil {
			t.Fatal(s.err)
		}
	}
	var out bytes.Buffer
	if err := printBands(&out, before, after, 10*time.Second, []string{"interactive", "batch"}); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	want := "BAND         GRANTS/S  SHARE  DEPTH  WAIT P50  WAIT P99  REFUSED/S\n" +
		"interactive  30.0      75.0%  0      5ms       10ms      0.0\n" +
		"batch        10.0      25.0%  12     505ms     990ms     3.0\n\n"
	if out.String() != want {
		t.Errorf("band table:\n%s\nwant:\n%s", out.String(), want)
	}
	// Without the policy's order, bands come by name.
	out.Reset()
	if err := printBands(&out, before, after, 10*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "BAND         GRANTS/S  SHARE  DEPTH  WAIT P50  WAIT P99  REFUSED/S\nbatch ") {
		t.Errorf("without an order, bands are not by name:\n%s", out.String())
	}
	// A data plane without bands: no band table.
	plain := newReplica(t)
	plain.m.Granted("apiKey", "model", "", 0)
	s := []replicaSample{parseSample(plain.page(t))}
	out.Reset()
	if err := printBands(&out, s, s, time.Second, nil); err != nil || out.Len() != 0 {
		t.Errorf("without bands printBands printed %q, %v; want nothing", out.String(), err)
	}
	// Depth sums the bands' series.
	if after[0].depth != 7 {
		t.Errorf("depth %v, want the bands' 0+7", after[0].depth)
	}
}
