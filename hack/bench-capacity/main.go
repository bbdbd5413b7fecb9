// Command bench-capacity measures what a gateway in front of a
// continuous-batching model server does to its tenants' time to first token
// (issue #22, docs/capacity.md). Three tenants share one simulated vLLM
// server (internal/modelsim): a heavy one offering three times the server's
// capacity with long prompts and two light ones offering a steady tenth of
// it each. For each heavy prompt length it measures, side by side in one
// run:
//
//	(a) no gateway: the tenants straight to the simulator;
//	(b) the data plane with a static per-model request limit set to the
//	    simulator's measured capacity, and fair queuing;
//	(c) capacity mode (spec.capacity: maxInFlight and the simulator's
//	    saturation signals) with fair queuing;
//	(d) capacity mode with fairQueuing.cost: Tokens;
//	(e) capacity mode with an interactive band (the light tenants) and a
//	    batch band (the heavy one);
//	(o) the oracle: the light tenants straight to the simulator, the heavy
//	    one through capacity mode; what any admission gateway could at best
//	    give the light tenants without taking throughput from the heavy one;
//
// and prints per tenant TTFT p50/p99 (and its ratio to the light tenants'
// TTFT with no heavy tenant), split into the part spent in the data plane's
// fair queue and the rest, completions/s and output tokens/s, and the
// simulator's own waiting queue; then a lower bound on the light tenants'
// TTFT from the simulator's step model (see bound.go). Every mode gets a
// fresh simulator and data plane; the capacity and the unloaded TTFT are
// measured first in the same run, on the same machine.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/internal/cli"
	"github.com/fairqueue/fairqueue/internal/loadgen"
	"github.com/fairqueue/fairqueue/internal/modelsim"
	"github.com/fairqueue/fairqueue/internal/proc"
)

// options are the command's flags.
type options struct {
	dataplane    string
	duration     time.Duration
	calibrate    time.Duration
	heavyPrompts []int
	modes        []string
	lightPrompt  int
	lightOutput  int
	heavyOutput  int
	jsonOut      string
	// interval and kvMax are capacity mode's poll interval and the
	// vllm:kv_cache_usage_perc signal's max; waitingMax the
	// vllm:num_requests_waiting signal's.
	interval   time.Duration
	kvMax      float64
	waitingMax float64
}

// allModes are the modes in the order they are printed.
var allModes = []string{"a", "b", "c", "d", "e", "o"}

// modeNames describe each mode in the table.
var modeNames = map[string]string{
	"a": "(a) no gateway",
	"b": "(b) static model limit + fair queuing",
	"c": "(c) capacity + fair queuing",
	"d": "(d) capacity + cost: Tokens",
	"e": "(e) capacity + interactive/batch bands",
	"o": "(o) oracle: light straight to the sim, heavy via (c)",
}

func main() {
	cli.Main("bench-capacity", func(ctx context.Context) error {
		o, err := parseOptions()
		if err != nil {
			return err
		}
		report, err := run(ctx, o, os.Stdout)
		if err != nil {
			return err
		}
		if o.jsonOut != "" {
			data, _ := json.MarshalIndent(report, "", "  ")
			return os.WriteFile(o.jsonOut, append(data, '\n'), 0o644)
		}
		return nil
	})
}

// parseOptions reads the command line.
func parseOptions() (options, error) {
	var o options
	var prompts, modes string
	flag.StringVar(&o.dataplane, "dataplane", "", "the dataplane binary (make bench-capacity builds it)")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "how long each mode's load runs")
	flag.DurationVar(&o.calibrate, "calibrate", 30*time.Second, "how long the heavy tenant alone is run to measure the simulator's capacity")
	flag.StringVar(&prompts, "heavy-prompts", "1500,3000", "comma-separated prompt lengths, in tokens, of the heavy tenant's requests; each is one table")
	flag.StringVar(&modes, "modes", strings.Join(allModes, ","), "comma-separated modes to run (a, b, c, d, e, o)")
	flag.IntVar(&o.lightPrompt, "light-prompt", 100, "prompt tokens of a light tenant's request")
	flag.IntVar(&o.lightOutput, "light-output", 64, "output tokens of a light tenant's request")
	flag.IntVar(&o.heavyOutput, "heavy-output", 128, "output tokens of a heavy tenant's request")
	flag.StringVar(&o.jsonOut, "json", "", "also write every figure as JSON to this file")
	flag.DurationVar(&o.interval, "interval", 100*time.Millisecond, "capacity mode's saturation poll interval")
	flag.Float64Var(&o.waitingMax, "waiting-max", 0, "capacity mode's max for vllm:num_requests_waiting")
	flag.Float64Var(&o.kvMax, "kv-max", 0.9, "capacity mode's max for vllm:kv_cache_usage_perc: 0.9 leaves a light request KV room at once")
	flag.Parse()
	var err error
	if o.heavyPrompts, err = parseInts(prompts); err != nil {
		return o, fmt.Errorf("--heavy-prompts: %w", err)
	}
	for _, m := range strings.Split(modes, ",") {
		m = strings.TrimSpace(m)
		if _, ok := modeNames[m]; !ok {
			return o, fmt.Errorf("--modes: unknown mode %q: use a, b, c, d, e or o", m)
		}
		o.modes = append(o.modes, m)
	}
	if o.dataplane == "" && slices.ContainsFunc(o.modes, func(m string) bool { return m != "a" }) {
		return o, errors.New("--dataplane is required for modes b to e and o: run `make bench-capacity`, which builds it")
	}
	return o, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// Report is every figure of one run.
type Report struct {
	Tables []Table `json:"tables"`
}

// Table is one heavy prompt length.
type Table struct {
	HeavyPromptTokens int `json:"heavy_prompt_tokens"`
	// Capacity is the heavy tenant's completions per second alone on the
	// simulator, driven closed-loop past saturation.
	Capacity float64 `json:"capacity_per_second"`
	// LightCapacity is the light tenants' requests' completions per second
	// alone on the simulator, measured the same way.
	LightCapacity float64 `json:"light_capacity_per_second"`
	// Alone is each light tenant's TTFT with no heavy tenant, straight to
	// the simulator.
	Alone map[string]loadgen.Percentiles `json:"light_alone_ttft_ms"`
	Modes []ModeResult                   `json:"modes"`
	// Bound is the step model's lower bound on a light request's TTFT at
	// the heavy tenant's completions per second in the oracle mode (or,
	// without it, the best of the capacity modes); Estimate the same model
	// with the batch that mode's server ran (see bound.go).
	Bound    *Bound `json:"bound,omitempty"`
	Estimate *Bound `json:"estimate,omitempty"`
}

// ModeResult is one mode's figures.
type ModeResult struct {
	Mode    string         `json:"mode"`
	Tenants []TenantResult `json:"tenants"`
	// OutputTokensPerSecond is the simulator's generated tokens per second
	// over the run, from its own counters.
	OutputTokensPerSecond float64 `json:"output_tokens_per_second"`
	// ScheduleOutputTokensPerSecond is the same over the schedule alone
	// (--duration from the start), without the drain: a mode that refuses
	// less of the flood at arrival drains its queued requests for longer
	// after the schedule, at the end of which a few long requests run
	// alone, which lowers the rate over the run without idling the server
	// while the tenants offer load.
	ScheduleOutputTokensPerSecond float64 `json:"output_tokens_per_second_schedule"`
	// Waiting is the simulator's waiting queue, sampled every 100 ms.
	WaitingMean float64 `json:"sim_waiting_mean"`
	WaitingMax  int     `json:"sim_waiting_max"`
	// RunningMean and KVTokensMean are the simulator's running batch and
	// KV-cache tokens in use, sampled likewise.
	RunningMean  float64 `json:"sim_running_mean"`
	KVTokensMean float64 `json:"sim_kv_tokens_mean"`
	Error        string  `json:"error,omitempty"`
}

// TenantResult is one tenant's figures in one mode.
type TenantResult struct {
	Name string              `json:"name"`
	TTFT loadgen.Percentiles `json:"ttft_ms"`
	// Queued is the part of the TTFT spent in the data plane's fair queue
	// (0 for a request that did not queue); AfterQueue the rest: the proxy
	// and the simulator, its queue and its steps.
	Queued                loadgen.Percentiles `json:"ttft_queued_ms"`
	AfterQueue            loadgen.Percentiles `json:"ttft_after_queue_ms"`
	CompletionsPerSecond  float64             `json:"completions_per_second"`
	OutputTokensPerSecond float64             `json:"output_tokens_per_second"`
	Refused               uint64              `json:"refused"`
	Errors                uint64              `json:"errors"`
}

func run(ctx context.Context, o options, out io.Writer) (*Report, error) {
	rep := &Report{}
	lightCap, err := calibrate(ctx, o, o.lightPrompt, o.lightOutput)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "the simulator completes %.1f light requests/s\n", lightCap)
	for _, prompt := range o.heavyPrompts {
		t := Table{HeavyPromptTokens: prompt, Alone: map[string]loadgen.Percentiles{}, LightCapacity: lightCap}
		c, err := calibrate(ctx, o, prompt, o.heavyOutput)
		if err != nil {
			return nil, err
		}
		t.Capacity = c
		fmt.Fprintf(os.Stderr, "heavy prompt %d tokens: the simulator completes %.1f heavy requests/s\n", prompt, c)
		rates := rates{heavy: 3 * c, light: lightCap / 10, lightCap: lightCap}
		alone, err := runMode(ctx, o, "a", prompt, c, rates, false)
		if err != nil {
			return nil, err
		}
		for _, tr := range alone.Tenants {
			t.Alone[tr.Name] = tr.TTFT
		}
		for _, m := range o.modes {
			fmt.Fprintf(os.Stderr, "heavy prompt %d tokens: running %s\n", prompt, modeNames[m])
			r, err := runMode(ctx, o, m, prompt, c, rates, true)
			if err != nil {
				if ctx.Err() != nil {
					return nil, err
				}
				r = &ModeResult{Mode: m, Error: err.Error()}
			}
			t.Modes = append(t.Modes, *r)
		}
		t.Bound, t.Estimate = boundFor(&t, prompt, o.lightPrompt)
		rep.Tables = append(rep.Tables, t)
		if err := printTable(out, &t); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// sim is a simulator serving on a loopback port.
type sim struct {
	*modelsim.Server
	srv *http.Server
	url string
}

func startSim() (*sim, error) {
	s, err := modelsim.New(clock.RealClock{}, modelsim.Config{})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		return nil, err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return &sim{Server: s, srv: srv, url: "http://" + ln.Addr().String()}, nil
}

func (s *sim) stop() {
	_ = s.srv.Close()
	s.Close()
}

// calibrate returns the completions per second of requests of prompt and
// output tokens alone on a fresh simulator: as many clients as the batch
// bound send one request after another (the server is saturated whether
// the KV cache or the batch binds first), and the output tokens the
// simulator generates in the second half of the run, over output, are the
// completions. Tokens, not completed requests, are counted: the clients
// start together, so their requests finish in waves, and a window catches
// a varying number of waves (on a loaded machine the same server measured
// from 2 to 6 heavy requests/s by completions).
func calibrate(ctx context.Context, o options, prompt, output int) (float64, error) {
	s, err := startSim()
	if err != nil {
		return 0, err
	}
	defer s.stop()
	body := loadgen.RequestBody(modelsim.DefaultModelName, loadgen.Tenant{PromptBytes: prompt * 4, MaxTokens: output})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}
	defer client.CloseIdleConnections()
	// The first half fills the batch and the KV cache (prefilling a full
	// batch of long prompts alone takes seconds); the second half counts.
	ctx, cancel := context.WithTimeout(ctx, o.calibrate)
	defer cancel()
	var wg sync.WaitGroup
	for range modelsim.DefaultMaxNumSeqs {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+loadgen.DefaultPath, strings.NewReader(string(body)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(modelsim.PromptTokensHeader, strconv.Itoa(prompt))
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
	var from modelsim.Stats
	select {
	case <-ctx.Done():
	case <-time.After(o.calibrate / 2):
		from = s.Stats()
	}
	start := time.Now()
	<-ctx.Done()
	to, window := s.Stats(), time.Since(start)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return 0, err
	}
	tokens := to.GenerationTokens - from.GenerationTokens
	if tokens <= 0 || window <= 0 {
		return 0, fmt.Errorf("calibrating: no token of a request of %d prompt and %d output tokens generated in %v", prompt, output, window)
	}
	return float64(tokens) / float64(output) / window.Seconds(), nil
}

// runMode runs the three tenants (only the light ones when withHeavy is
// false) through mode m against a fresh simulator.
// rates are the tenants' offered requests per second: the heavy one three
// times the simulator's capacity for its requests, each light one a tenth of
// the capacity for light requests (a tenth of the GPU each).
type rates struct{ heavy, light, lightCap float64 }

// modelLimit is mode (b)'s per-model request limit, what an oracle that
// knows the offered mix would set: the light tenants' requests plus as many
// heavy ones as fill the rest of the simulator. Requests are the wrong unit
// (a heavy request costs the server several light ones), so any other mix
// needs another limit; that is the point of capacity mode.
func (r rates) modelLimit(heavyCap float64) float64 {
	lightShare := 2 * r.light / r.lightCap
	return 2*r.light + max(1-lightShare, 0)*heavyCap
}

func runMode(ctx context.Context, o options, m string, prompt int, capacity float64, r rates, withHeavy bool) (*ModeResult, error) {
	s, err := startSim()
	if err != nil {
		return nil, err
	}
	defer s.stop()
	lightTarget, heavyTarget := s.url, s.url
	if m != "a" {
		dp, err := startDataPlane(ctx, o, m, s.url, r.modelLimit(capacity))
		if err != nil {
			return nil, err
		}
		defer dp.stop()
		heavyTarget = dp.url
		if m != "o" {
			lightTarget = dp.url
		}
	}
	light := func(name string) loadgen.Tenant {
		return loadgen.Tenant{
			Name: name, User: name, Rate: r.light, Stream: true,
			PromptBytes: o.lightPrompt * 4, MaxTokens: o.lightOutput,
			Headers: map[string]string{modelsim.PromptTokensHeader: strconv.Itoa(o.lightPrompt)},
		}
	}
	// One load generator per target: in the oracle mode the light tenants
	// bypass the data plane the heavy one goes through.
	groups := []loadgen.Config{{Targets: []string{lightTarget}, Tenants: []loadgen.Tenant{light("light-1"), light("light-2")}}}
	if withHeavy {
		heavy := loadgen.Tenant{
			Name: "heavy", User: "heavy", Rate: r.heavy, Stream: true,
			PromptBytes: prompt * 4, MaxTokens: o.heavyOutput,
			Headers: map[string]string{modelsim.PromptTokensHeader: strconv.Itoa(prompt)},
		}
		if heavyTarget == lightTarget {
			groups[0].Tenants = append(groups[0].Tenants, heavy)
		} else {
			groups = append(groups, loadgen.Config{Targets: []string{heavyTarget}, Tenants: []loadgen.Tenant{heavy}})
		}
	}
	for i := range groups {
		cfg := &groups[i]
		cfg.Duration, cfg.Model, cfg.Timeout = o.duration, modelsim.DefaultModelName, 2*time.Minute
		cfg.MaxOutstanding, cfg.UserHeader = 16384, "x-user"
		cfg.Default()
	}

	before, start := s.Stats(), time.Now()
	sampleCtx, stopSampling := context.WithCancel(ctx)
	samples := make(chan []modelsim.Stats, 1)
	var scheduleRate float64 // written before samples is sent
	go func() {
		var w []modelsim.Stats
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sampleCtx.Done():
				samples <- w
				return
			case <-tick.C:
				st := s.Stats()
				w = append(w, st)
				if el := time.Since(start); scheduleRate == 0 && el >= o.duration {
					scheduleRate = float64(st.GenerationTokens-before.GenerationTokens) / el.Seconds()
				}
			}
		}
	}()
	// Requests still queued in the simulator when the schedule ends are cut
	// after a grace, so that a mode whose queue grew without bound ends;
	// they count as errors, not in the TTFT.
	runCtx, cancel := context.WithTimeout(ctx, o.duration+30*time.Second)
	defer cancel()
	sum, err := runGroups(runCtx, groups)
	stopSampling()
	waiting := <-samples
	if err != nil {
		return nil, err
	}
	after := s.Stats()
	res := &ModeResult{Mode: m, ScheduleOutputTokensPerSecond: scheduleRate}
	// Answers that end after the schedule still count: rates are over the
	// whole run, schedule and drain.
	elapsed := max(sum.ElapsedSeconds, sum.DurationSeconds)
	res.OutputTokensPerSecond = float64(after.GenerationTokens-before.GenerationTokens) / elapsed
	for _, ts := range sum.Tenants {
		var errs uint64
		for _, n := range ts.Errors {
			errs += n
		}
		res.Tenants = append(res.Tenants, TenantResult{
			Name: ts.Name, TTFT: ts.TTFTMS, Queued: ts.TTFTQueuedMS, AfterQueue: ts.TTFTAfterQueueMS,
			CompletionsPerSecond:  float64(ts.Admitted) / elapsed,
			OutputTokensPerSecond: float64(ts.CompletionTokens) / elapsed,
			Refused:               ts.Refused, Errors: errs,
		})
	}
	for _, st := range waiting {
		res.WaitingMean += float64(st.Waiting)
		res.WaitingMax = max(res.WaitingMax, st.Waiting)
		res.RunningMean += float64(st.Running)
		res.KVTokensMean += st.KVCacheUsage * modelsim.DefaultKVCacheTokens
	}
	if n := float64(len(waiting)); n > 0 {
		res.WaitingMean /= n
		res.RunningMean /= n
		res.KVTokensMean /= n
	}
	return res, nil
}

// runGroups runs the load generators at once and merges their summaries:
// the tenants of all, and the longest elapsed time.
func runGroups(ctx context.Context, groups []loadgen.Config) (*loadgen.Summary, error) {
	sums := make([]*loadgen.Summary, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i := range groups {
		wg.Go(func() { sums[i], errs[i] = loadgen.Run(ctx, groups[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := sums[0]
	for _, s := range sums[1:] {
		out.Tenants = append(out.Tenants, s.Tenants...)
		out.ElapsedSeconds = max(out.ElapsedSeconds, s.ElapsedSeconds)
	}
	return out, nil
}

// dataPlane is a started data-plane process.
type dataPlane struct {
	*proc.Process
	url string
	dir string
}

func startDataPlane(ctx context.Context, o options, m, upstream string, modelLimit float64) (*dataPlane, error) {
	dir, err := os.MkdirTemp("", "bench-capacity-")
	if err != nil {
		return nil, err
	}
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(policyFor(o, m, upstream, modelLimit)), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	listen, err1 := proc.FreeAddr()
	metrics, err2 := proc.FreeAddr()
	if err := errors.Join(err1, err2); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.CommandContext(ctx, o.dataplane, "--policy", policy, "--listen", listen, "--metrics-listen", metrics,
		"--log-level", "error", "--shutdown-delay", "0s", "--shutdown-grace", "1s")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	p, err := proc.StartReady(cmd, proc.HTTPReady("http://"+metrics+"/readyz"), 30*time.Second)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("mode %s: the data plane (its log is above): %w", m, err)
	}
	return &dataPlane{Process: p, url: "http://" + listen, dir: dir}, nil
}

func (d *dataPlane) stop() {
	_ = d.Stop() // how a benchmark's data plane ended does not matter
	_ = os.RemoveAll(d.dir)
}

// policyFor returns mode m's FairQueuePolicy: fair queuing by user for every
// mode, a bound and budget large enough that the heavy tenant's excess is
// what gets refused, and the mode's own admission. The oracle mode (o)
// runs mode c's policy for the heavy tenant.
func policyFor(o options, m, upstream string, modelLimit float64) string {
	if m == "o" {
		m = "c"
	}
	var b strings.Builder
	b.WriteString(`apiVersion: fairqueue.dev/v1alpha1
kind: FairQueuePolicy
metadata:
  name: bench-capacity
  namespace: default
spec:
  identity:
    userHeader: x-user
    trustHeaders: true
`)
	if m == "b" {
		// The limit the oracle found best (1.0x the capacity for the
		// offered mix), with a tenth of a second of burst.
		fmt.Fprintf(&b, `  rateLimits:
    perModel:
      requests: %d
      period: 1s
      burst: %d
`, max(int(modelLimit+0.5), 1), max(int(modelLimit/10+0.5), 1))
	}
	b.WriteString(`  fairQueuing:
    enabled: true
    tenantDimension: user
    bounds: {maxQueueDepthPerTenant: 256, maxTotalQueued: 4096, maxWait: 30s}
`)
	if m == "d" {
		b.WriteString("    cost: Tokens\n")
	}
	if m == "e" {
		b.WriteString(`    priorityBands: [{name: interactive}, {name: batch}]
    defaultBand: batch
    weights: [{identity: light-1, weight: 1, band: interactive}, {identity: light-2, weight: 1, band: interactive}]
`)
	}
	if m == "d" {
		b.WriteString(`  deferredAdmission:
    enabled: true
    estimation: {defaultMaxTokens: 256}
`)
	}
	fmt.Fprintf(&b, `  timeouts:
    request:
      default: {total: 120s}
  backends:
  - name: sim
    url: %s
`, upstream)
	if m == "c" || m == "d" || m == "e" {
		fmt.Fprintf(&b, `  capacity:
    backends:
    - name: sim
      maxInFlight: %d
      saturation:
        metricsPath: /metrics
        interval: %s
        signals:
        - {metric: "vllm:num_requests_waiting", max: %g}
        - {metric: "vllm:kv_cache_usage_perc", max: %g}
`, modelsim.DefaultMaxNumSeqs, o.interval, o.waitingMax, o.kvMax)
	}
	return b.String()
}

// printTable writes one heavy prompt length's figures.
func printTable(out io.Writer, t *Table) error {
	var buf bytes.Buffer // writes to it cannot fail
	_, _ = fmt.Fprintf(&buf, "\nheavy prompt %d tokens; simulator capacity %.1f heavy or %.1f light requests/s; heavy offers %.1f/s, each light tenant %.1f/s\n",
		t.HeavyPromptTokens, t.Capacity, t.LightCapacity, 3*t.Capacity, t.LightCapacity/10)
	names := make([]string, 0, len(t.Alone))
	for n := range t.Alone {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		_, _ = fmt.Fprintf(&buf, "  %s alone: TTFT p50 %.0f ms, p99 %.0f ms\n", n, t.Alone[n].P50, t.Alone[n].P99)
	}
	w := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "mode\ttenant\tTTFT p50 ms (x alone)\tTTFT p99 ms (x alone)\tof which queued p50/p99 ms\tafter queue p50/p99 ms\tcompletions/s\toutput tok/s\trefused\terrors\tsim waiting mean/max\tsim output tok/s (schedule)")
	for _, r := range t.Modes {
		if r.Error != "" {
			_, _ = fmt.Fprintf(w, "%s\t-\tfailed: %s\n", modeNames[r.Mode], r.Error)
			continue
		}
		for i, tr := range r.Tenants {
			name, sim := "", ""
			if i == 0 {
				name = modeNames[r.Mode]
				sim = fmt.Sprintf("%.1f/%d\t%.0f (%.0f)", r.WaitingMean, r.WaitingMax, r.OutputTokensPerSecond, r.ScheduleOutputTokensPerSecond)
			}
			_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%.0f/%.0f\t%.0f/%.0f\t%.1f\t%.0f\t%d\t%d\t%s\n", name, tr.Name,
				ratio(tr.TTFT.P50, t.Alone[tr.Name].P50), ratio(tr.TTFT.P99, t.Alone[tr.Name].P99),
				tr.Queued.P50, tr.Queued.P99, tr.AfterQueue.P50, tr.AfterQueue.P99,
				tr.CompletionsPerSecond, tr.OutputTokensPerSecond, tr.Refused, tr.Errors, sim)
		}
	}
	_ = w.Flush()
	var p50, p99 float64 // the light tenants' TTFT alone, averaged
	for _, a := range t.Alone {
		p50 += a.P50 / float64(len(t.Alone))
		p99 += a.P99 / float64(len(t.Alone))
	}
	if bd := t.Bound; bd != nil {
		_, _ = fmt.Fprintf(&buf, "step-model lower bound on a light TTFT at %.1f heavy completions/s (prefill steps %.0f ms, %.0f%% of the server's time; own step %.1f ms): mean %.0f ms, p50 %s, p99 %s\n",
			bd.HeavyPerSecond, bd.StepsMS, 100*bd.PrefillShare, bd.OwnStepMS, bd.MeanMS, ratio(bd.P50MS, p50), ratio(bd.P99MS, p99))
	}
	if bd := t.Estimate; bd != nil {
		_, _ = fmt.Fprintf(&buf, "step-model estimate with the observed batch (%.0f running, %.0fk KV tokens; prefill steps %.0f ms, %.0f%% of the time; own step %.1f ms): mean %.0f ms, p50 %s, p99 %s\n",
			bd.Running, bd.ContextTokens/1000, bd.StepsMS, 100*bd.PrefillShare, bd.OwnStepMS, bd.MeanMS, ratio(bd.P50MS, p50), ratio(bd.P99MS, p99))
	}
	_, err := out.Write(buf.Bytes())
	return err
}

// ratio formats v and, when there is a baseline, v over it.
func ratio(v, base float64) string {
	if base <= 0 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.0f (%.1fx)", v, v/base)
}
