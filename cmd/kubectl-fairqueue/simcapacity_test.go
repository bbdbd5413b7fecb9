package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// capacityPolicy is a policy in capacity mode: one backend whose
// saturation is its own waiting queue (max 0), fair queuing by user.
const capacityPolicy = `apiVersion: fairqueue.dev/v1alpha1
kind: FairQueuePolicy
metadata: {name: sim}
spec:
  identity: {userHeader: x-user-id, trustHeaders: true}
  fairQueuing:
    enabled: true
    tenantDimension: user
    bounds: {maxQueueDepthPerTenant: 256, maxTotalQueued: 4096, maxWait: 30s}
  timeouts:
    request:
      default: {total: 120s}
  backends:
  - {name: vllm, url: "http://vllm:8000"}
  capacity:
    backends:
    - name: vllm
      maxInFlight: 64
      saturation:
        interval: 100ms
        signals:
        - {metric: "vllm:num_requests_waiting", max: 0}
`

// floodLoad offers two light tenants' short requests and a heavy tenant's
// long ones at several times what a 32-sequence server takes.
const floodLoad = `duration: 6s
modelServer: {maxNumSeqs: 32}
tenants:
- {name: light-1, user: light-1, rate: 2, promptTokens: 128, outputTokens: 32}
- {name: light-2, user: light-2, rate: 2, promptTokens: 128, outputTokens: 32}
- {name: heavy, user: heavy, rate: 40, promptTokens: 1000, outputTokens: 64}
`

// TestSimulateCapacityMode runs capacity mode through the real admission
// path against the model-server simulator on the virtual clock: the
// backend's waiting-queue signal keeps the server's own queue short while
// the heavy tenant's flood waits in the fair queue, so the light tenants
// get all they offer with a first token in a fraction of the heavy one's;
// every stream ends with all its tokens at its client, and what the
// tenants received in the window is what the server generated in it.
func TestSimulateCapacityMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cfg, key, err := simulatedConfig(ctx, nil, nil, writeFile(t, "p.yaml", capacityPolicy), "")
	if err != nil {
		t.Fatal(err)
	}
	load, err := ReadLoad(writeFile(t, "load.yaml", floodLoad))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Simulate(ctx, cfg, key, load, SimOptions{Seed: 1, Warmup: -1})
	if err != nil {
		t.Fatal(err)
	}
	// Every stream ran to its end in the drain, and every token of it
	// reached its client.
	for i, r := range res.Tenants {
		_, output := load.tokens(i)
		if r.Total.Completed != r.Total.Admitted || r.Total.OutputTokens != r.Total.Completed*output {
			t.Errorf("%s: %d admitted, %d completed, %d tokens received; want every admission completed with %d tokens each",
				r.Name, r.Total.Admitted, r.Total.Completed, r.Total.OutputTokens, output)
		}
	}
	o := simulationOutput(cfg, load, res)
	raw, _ := json.MarshalIndent(o, "", "  ")
	t.Logf("%s", raw)
	if len(o.ModelServers) != 1 || o.ModelServers[0].Backend != "vllm" || o.ModelServers[0].MaxInFlight != 64 {
		t.Fatalf("model servers %+v, want vllm with maxInFlight 64", o.ModelServers)
	}
	ms := o.ModelServers[0]
	// The flood offers 40 x 1000 prompt tokens a second, more than twice
	// what the server prefills: without the gateway its queue would grow
	// by tens of requests a second.
	if ms.WaitingMax > 16 || ms.OutputTokensPerSecond <= 0 {
		t.Errorf("the server's own queue reached %d (mean %.1f), output %.0f tok/s: the saturation signal did not hold the flood at the gateway",
			ms.WaitingMax, ms.WaitingMean, ms.OutputTokensPerSecond)
	}
	byName := map[string]SimTenant{}
	for _, tn := range o.Tenants {
		if tn.Capacity == nil {
			t.Fatalf("tenant %s has no capacity figures", tn.Name)
		}
		byName[tn.Name] = tn
	}
	heavy := byName["heavy"]
	if heavy.Capacity.PromptTokens != 1000 || heavy.Capacity.OutputTokens != 64 {
		t.Errorf("heavy's lengths %d/%d, want the load file's 1000/64", heavy.Capacity.PromptTokens, heavy.Capacity.OutputTokens)
	}
	if heavy.AdmittedPerSecond >= heavy.OfferedPerSecond*0.9 {
		t.Errorf("heavy was admitted %.1f/s of %.1f/s offered: the server could not have taken it", heavy.AdmittedPerSecond, heavy.OfferedPerSecond)
	}
	var served float64
	for _, name := range []string{"light-1", "light-2"} {
		l := byName[name]
		if l.AdmittedPerSecond < l.OfferedPerSecond*0.9 {
			t.Errorf("%s admitted %.1f/s of %.1f/s offered: fair queuing did not protect it", name, l.AdmittedPerSecond, l.OfferedPerSecond)
		}
		if l.Capacity.TTFTP50Seconds <= 0 || l.Capacity.TTFTP50Seconds >= heavy.Capacity.TTFTP50Seconds {
			t.Errorf("%s TTFT p50 %.3fs, heavy's %.3fs: want a positive TTFT below the flood's", name, l.Capacity.TTFTP50Seconds, heavy.Capacity.TTFTP50Seconds)
		}
		served += l.Capacity.OutputTokensPerSecond
	}
	served += heavy.Capacity.OutputTokensPerSecond
	if served < ms.OutputTokensPerSecond*0.8 || served > ms.OutputTokensPerSecond*1.25 {
		t.Errorf("the tenants received %.0f tok/s, the server generated %.0f tok/s", served, ms.OutputTokensPerSecond)
	}
}

// TestSimulateCapacityTable checks the table: the tenant columns of
// capacity mode, --tenant-tokens over the load file, and the model-server
// table.
func TestSimulateCapacityTable(t *testing.T) {
	load := "duration: 2s\ntenants:\n- {name: a, user: a, rate: 5}\n"
	var out, errOut bytes.Buffer
	args := []string{"simulate", "--policy-file", writeFile(t, "p.yaml", capacityPolicy), "-f", writeFile(t, "load.yaml", load),
		"--tenant-tokens", "a=300:20", "--warmup", "0s"}
	if err := run(context.Background(), args, &out, &errOut); err != nil {
		t.Fatalf("simulate: %v\n%s", err, errOut.String())
	}
	t.Logf("\n%s", out.String())
	for _, want := range []string{
		"backends simulated as model servers (capacity mode)",
		"TENANT  WEIGHT  PROMPT/OUTPUT  OFFERED/S  ADMITTED/S  COMPLETIONS/S  OUTPUT TOK/S  TTFT P50  TTFT P99",
		"a       1       300/20         5.0        5.0 ",
		"MODEL SERVER  MAX IN FLIGHT  WAITING MEAN  WAITING MAX",
		"vllm          64 ",
		"serviceTime is not used",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("simulate lacks %q", want)
		}
	}
	for _, tc := range []struct{ flag, want string }{
		{"b=1:1", `the load file has no tenant "b"; its tenants are a`},
		{"a=300", "give NAME=PROMPT:OUTPUT"},
		{"a=0:5", "give NAME=PROMPT:OUTPUT"},
	} {
		args := []string{"simulate", "--policy-file", writeFile(t, "p.yaml", capacityPolicy), "-f", writeFile(t, "load.yaml", load), "--tenant-tokens", tc.flag}
		if err := run(context.Background(), args, &out, &errOut); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--tenant-tokens %s: %v, want an error containing %q", tc.flag, err, tc.want)
		}
	}
}
