package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/reload"
	"github.com/fairqueue/fairqueue/dataplane/server"
	"github.com/fairqueue/fairqueue/internal/loadgen"
)

// A shared per-model limit of 20/s that two weighted tenants overrun, and a
// light tenant that never waits.
const simPolicy = `apiVersion: fairqueue.dev/v1alpha1
kind: FairQueuePolicy
metadata: {name: sim}
spec:
  rateLimits:
    perModel: {requests: 20, period: 1s}
  fairQueuing:
    enabled: true
    tenantDimension: apiKey
    weights:
    - {identity: sk-acme, weight: 3}
    - {identity: sk-globex, weight: 1}
  backends:
  - {name: b, url: "http://127.0.0.1:1"}
`

const simLoad = `duration: 8s
serviceTime: 100ms
model: m
tenants:
- {name: acme, rate: 30, apiKey: sk-acme}
- {name: globex, rate: 30, apiKey: sk-globex}
- {name: solo, rate: 2, apiKey: sk-solo}
`

func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSimulateAgreesWithARealRun offers the same load to the simulator and
// to the real data-plane server on the real clock, behind a real listener in
// front of a backend that takes the service time, and compares each tenant's
// admitted requests: they must agree within 5%.
func TestSimulateAgreesWithARealRun(t *testing.T) {
	if testing.Short() {
		t.Skip("offers 8s of real load")
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	r, err := reload.NewPolicySource(writeFile(t, "p.yaml", simPolicy), reload.PolicyOptions{HashKey: key}).Render()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(r.Data)
	if err != nil {
		t.Fatal(err)
	}
	load, err := ReadLoad(writeFile(t, "load.yaml", simLoad))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sim, err := Simulate(ctx, cfg, key, load, SimOptions{Seed: 1, Warmup: -1})
	if err != nil {
		t.Fatal(err)
	}

	// The real run.
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(load.serviceTime())
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"chat.completion","choices":[]}`))
	}))
	defer backend.Close()
	cfg.Backends[0].URL = backend.URL
	reg := prometheus.NewRegistry()
	srv, err := server.New(server.Options{Logger: logr.Discard(), HashKey: key, Registerer: reg, Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Load(cfg, "real"); err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(srv)
	defer front.Close()
	measured, err := loadgen.Run(ctx, load.LoadgenConfig(front.URL))
	if err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	if err := printSimulation(&out, cfg, load, sim); err != nil {
		t.Fatal(err)
	}
	t.Logf("simulation:\n%s", out.String())
	for i, s := range sim.Tenants {
		got := measured.Tenants[i]
		t.Logf("%s: admitted simulated %d, real %d; refused simulated %v, real %v; wait p50 simulated %v, real %.0fms",
			s.Name, s.Total.Admitted, got.Admitted, s.Total.Refused, got.RefusedByReason, s.WaitQuantile(0.5), got.AdmittedWaitMS.P50)
		if diff := math.Abs(float64(s.Total.Admitted)-float64(got.Admitted)) / float64(got.Admitted); diff > 0.05 {
			t.Errorf("%s: simulated %d admitted, the real run %d: %.1f%% apart, more than 5%%", s.Name, s.Total.Admitted, got.Admitted, 100*diff)
		}
	}
}

func TestSimulateErrorsSayWhatToDo(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"simulate", "llm"}, "needs -f LOAD.yaml"},
		{[]string{"simulate", "-f", "/nonexistent.yaml"}, "reading the load file (-f)"},
		{[]string{"simulate", "-f", "LOAD"}, "give between 1 and"},
		{[]string{"simulate", "llm", "--policy-file", "p.yaml", "-f", "LOAD"}, "give POLICY or --policy-file, not both"},
	} {
		args := make([]string, len(tc.args))
		for i, a := range tc.args {
			if a == "LOAD" {
				a = writeFile(t, "l.yaml", "duration: 1s\ntenants: []\n")
				if strings.Contains(tc.want, "not both") {
					a = writeFile(t, "l.yaml", simLoad)
				}
			}
			args[i] = a
		}
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// simPolicyWith is a policy with the given rateLimits (YAML lines indented by
// four spaces) and weights 3:1:1 for acme, globex and initech.
func simPolicyWith(limits string) string {
	return `apiVersion: fairqueue.dev/v1alpha1
kind: FairQueuePolicy
metadata: {name: sim}
spec:
  rateLimits:
` + limits + `
  fairQueuing:
    enabled: true
    tenantDimension: apiKey
    weights:
    - {identity: sk-acme, weight: 3}
    - {identity: sk-globex, weight: 1}
    - {identity: sk-initech, weight: 1}
  backends:
  - {name: b, url: "http://127.0.0.1:1"}
`
}

// threeTenants offers 30/s from each of three tenants for 10s.
const threeTenants = `duration: 10s
model: m
tenants:
- {name: acme, rate: 30, apiKey: sk-acme}
- {name: globex, rate: 30, apiKey: sk-globex}
- {name: initech, rate: 30, apiKey: sk-initech}
`

// simulateJSON runs `kubectl fairqueue simulate --policy-file -o json` and
// decodes its output.
func simulateJSON(t *testing.T, policy, load string, extra ...string) (SimulationOutput, []byte) {
	t.Helper()
	args := append([]string{"simulate", "--policy-file", writeFile(t, "p.yaml", policy), "-f", writeFile(t, "load.yaml", load), "-o", "json"}, extra...)
	var out, errOut bytes.Buffer
	// A 10s simulation takes seconds; the bound leaves room for -race on a
	// busy machine (over 2 minutes on 2 loaded cores).
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if err := run(ctx, args, &out, &errOut); err != nil {
		t.Fatalf("simulate: %v\n%s", err, errOut.String())
	}
	var o SimulationOutput
	dec := json.NewDecoder(bytes.NewReader(out.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		t.Fatalf("simulate -o json printed what does not decode: %v\n%s", err, out.String())
	}
	return o, out.Bytes()
}

// TestSimulateReportsSteadyStateRates checks that the admitted rate and the
// shares are those of the limit and the weights while the load lasts: neither
// the burst spent at the start nor the queue draining after the last arrival
// inflate them (they gave 39.6/s against a 30/s limit, shares 54/23/23).
// Limits that are never queued are first come first served: equal offered
// loads get equal shares whatever the weights, and the output says weights do
// nothing there (a fixed same-instant arrival order gave 7.8/1.6/90.6%).
func TestSimulateReportsSteadyStateRates(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits string
		shares []float64
		// tolerance of each share, in fractions of 1
		tolerance float64
		queued    bool
	}{
		{"perModel queues by weight", "    perModel: {requests: 30, period: 1s}", []float64{0.6, 0.2, 0.2}, 0.02, true},
		{"global is first come first served", "    global: {requests: 30, period: 1s}", []float64{1. / 3, 1. / 3, 1. / 3}, 0.05, false},
		{"perClient is first come first served", "    perClient: {requests: 30, period: 1s}", []float64{1. / 3, 1. / 3, 1. / 3}, 0.05, false},
		{"perBackend is first come first served", "    perBackend: {requests: 30, period: 1s}", []float64{1. / 3, 1. / 3, 1. / 3}, 0.05, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, raw := simulateJSON(t, simPolicyWith(tc.limits), threeTenants)
			t.Logf("%s", raw)
			var admitted float64
			for _, ten := range o.Tenants {
				admitted += ten.AdmittedPerSecond
			}
			if math.Abs(admitted-30)/30 > 0.02 {
				t.Errorf("admitted %.1f/s in all against a 30/s limit: more than 2%% off", admitted)
			}
			for i, ten := range o.Tenants {
				if math.Abs(ten.Share-tc.shares[i]) > tc.tolerance {
					t.Errorf("%s: share %.3f, want %.3f ± %.2f", ten.Name, ten.Share, tc.shares[i], tc.tolerance)
				}
				if math.Abs(ten.OfferedPerSecond-30) > 0.5 {
					t.Errorf("%s: offered %.1f/s, want 30/s", ten.Name, ten.OfferedPerSecond)
				}
				switch {
				case tc.queued && (ten.WeightedShare == nil || math.Abs(*ten.WeightedShare-tc.shares[i]) > 1e-9):
					t.Errorf("%s: weighted share %v, want %.3f", ten.Name, ten.WeightedShare, tc.shares[i])
				case !tc.queued && ten.WeightedShare != nil:
					t.Errorf("%s: a weighted share %.3f under a limit weights do nothing for", ten.Name, *ten.WeightedShare)
				}
			}
			notes := strings.Join(o.Notes, "\n")
			if says := strings.Contains(notes, "weights do nothing"); says == tc.queued {
				t.Errorf("notes say weights do nothing: %v, want %v:\n%s", says, !tc.queued, notes)
			}
			if o.Window.FromSeconds != 1 || o.Window.ToSeconds != 10 {
				t.Errorf("window %v, want the default 1s warm-up to the 10s of arrivals", o.Window)
			}
		})
	}
}

// TestSimulateJSONSchema pins the documented field names of -o json.
func TestSimulateJSONSchema(t *testing.T) {
	load := `duration: 4s
model: m
tenants:
- {name: acme, rate: 30, apiKey: sk-acme}
- {name: solo, rate: 2, apiKey: sk-solo}
`
	o, raw := simulateJSON(t, simPolicyWith("    perModel: {requests: 10, period: 1s}"), load, "--warmup", "2s", "--seed", "7")
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) string {
		var k []string
		for name := range m {
			k = append(k, name)
		}
		sort.Strings(k)
		return strings.Join(k, " ")
	}
	if got, want := keys(doc), "apiVersion durationSeconds fairQueuing kind notes seed serviceTimeSeconds tenants window"; got != want {
		t.Errorf("top-level fields %q, want %q", got, want)
	}
	tenant := doc["tenants"].([]any)[0].(map[string]any)
	if got, want := keys(tenant), "admittedPerSecond name offeredPerSecond refusedPerSecond share total waitP50Seconds waitP99Seconds weight weightedShare"; got != want {
		t.Errorf("tenant fields %q, want %q", got, want)
	}
	if got, want := keys(tenant["total"].(map[string]any)), "admitted offered refused"; got != want {
		t.Errorf("total fields %q, want %q", got, want)
	}
	if o.APIVersion != "kubectl-fairqueue/v1" || o.Kind != "Simulation" || o.Seed != 7 || o.DurationSeconds != 4 || o.ServiceTimeSeconds != 0.05 ||
		o.Window != (SimWindow{FromSeconds: 2, ToSeconds: 4}) || !o.FairQueuing.Enabled || o.FairQueuing.TenantDimension != "apiKey" {
		t.Errorf("header fields: %+v", o)
	}
	acme, solo := o.Tenants[0], o.Tenants[1]
	if acme.Name != "acme" || acme.Weight != 3 || solo.Weight != 1 {
		t.Errorf("names and weights: %+v %+v", acme, solo)
	}
	// 10/s shared: solo gets about its 2/s (a 2s window counts whole
	// requests), acme the rest and is refused what it offers beyond.
	if math.Abs(acme.AdmittedPerSecond+solo.AdmittedPerSecond-10) > 0.5 || math.Abs(solo.AdmittedPerSecond-2) > 0.5 ||
		acme.WeightedShare == nil || solo.WeightedShare != nil {
		t.Errorf("acme %+v, solo %+v: want 10/s between them, solo about 2/s and without a weighted share", acme, solo)
	}
	var refused float64
	for _, v := range acme.RefusedPerSecond {
		refused += v
	}
	if math.Abs(acme.AdmittedPerSecond+refused-30) > 1 || acme.Total.Offered != 120 || acme.Total.Admitted+sum(acme.Total.Refused) != 120 {
		t.Errorf("acme's refusals %v/s and totals %+v do not add up to its 30/s and 120 requests", acme.RefusedPerSecond, acme.Total)
	}
	if _, _, err := runSimulateTable(t, "-o", "xml"); err == nil || !strings.Contains(err.Error(), "table, json, yaml") {
		t.Errorf("-o xml: %v, want an error naming the formats", err)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// runSimulateTable runs simulate on simPolicy and simLoad with extra flags.
func runSimulateTable(t *testing.T, extra ...string) (string, string, error) {
	t.Helper()
	args := append([]string{"simulate", "--policy-file", writeFile(t, "p.yaml", simPolicy), "-f", writeFile(t, "load.yaml", simLoad)}, extra...)
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// TestSimulateYAML checks that -o yaml prints the same object as -o json.
func TestSimulateYAML(t *testing.T) {
	load := writeFile(t, "load.yaml", "duration: 2s\nmodel: m\ntenants:\n- {name: acme, rate: 30, apiKey: sk-acme}\n- {name: solo, rate: 2, apiKey: sk-solo}\n")
	policy := writeFile(t, "p.yaml", simPolicyWith("    perModel: {requests: 10, period: 1s}"))
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"simulate", "--policy-file", policy, "-f", load, "-o", "yaml", "--seed", "3"}, &out, &errOut); err != nil {
		t.Fatalf("simulate -o yaml: %v\n%s", err, errOut.String())
	}
	var o SimulationOutput
	if err := yaml.UnmarshalStrict(out.Bytes(), &o); err != nil {
		t.Fatalf("simulate -o yaml printed what does not decode strictly: %v\n%s", err, out.String())
	}
	if o.APIVersion != "kubectl-fairqueue/v1" || o.Kind != "Simulation" || o.Seed != 3 || o.DurationSeconds != 2 ||
		len(o.Tenants) != 2 || o.Tenants[0].Name != "acme" || o.Tenants[0].Total.Offered == 0 || len(o.Notes) == 0 {
		t.Errorf("simulate -o yaml = %+v", o)
	}
}
