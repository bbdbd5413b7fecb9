package main

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

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
	sim, err := Simulate(ctx, cfg, key, load)
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
	for i, s := range sim {
		got := measured.Tenants[i]
		t.Logf("%s: admitted simulated %d, real %d; refused simulated %v, real %v; wait p50 simulated %v, real %.0fms",
			s.Name, s.Admitted, got.Admitted, s.Refused, got.RefusedByReason, s.WaitQuantile(0.5), got.AdmittedWaitMS.P50)
		if diff := math.Abs(float64(s.Admitted)-float64(got.Admitted)) / float64(got.Admitted); diff > 0.05 {
			t.Errorf("%s: simulated %d admitted, the real run %d: %.1f%% apart, more than 5%%", s.Name, s.Admitted, got.Admitted, 100*diff)
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
