package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/reload"
	"github.com/fairqueue/fairqueue/internal/loadgen"
)

func newSimulateCommand(g *globals) *cobra.Command {
	var loadFile, policyFile, secrets, warmup string
	var moveFlags, tokenFlags []string
	opts := SimOptions{Seed: 1, Warmup: -1}
	out := &outputFlag{}
	cmd := &cobra.Command{
		Use:   "simulate POLICY -f LOAD.yaml",
		Short: "What-if: expected shares, waits and refusals of a policy under an offered load",
		Long: "Run the real data-plane server (limiter, fair queue, admission) in process on a fake clock, loaded with\n" +
			"the policy's rendered config, against the offered load of LOAD.yaml, and print each tenant's expected\n" +
			"admitted rate, share against its weighted share, queue waits and refusals by reason. Nothing is sent to\n" +
			"the cluster's data planes. POLICY is read from the cluster; --policy-file simulates a manifest instead.\n\n" +
			"Rates, shares and waits are steady-state: measured from the end of a warm-up (--warmup; by default a tenth\n" +
			"of the duration, at least 1s, at most half) to the last arrival, so neither the bursts spent at the start\n" +
			"nor the queue draining after the arrivals stop count. Each tenant's requests come at its rate, each at a\n" +
			"random point of its 1/rate slot (--seed), so tenants reach a first-come-first-served limit in no fixed\n" +
			"order. global, perClient and perBackend limits are never queued: weights do nothing for them.\n\n" +
			"With priority bands, a table per band comes first, and each tenant shows its band and its share of it.\n" +
			"--move-tenant NAME=BAND (repeatable) answers \"what if this tenant were in band BAND\": the policy is\n" +
			"simulated as it is and with the tenant of the load named NAME moved, on the same arrivals, and the two\n" +
			"are printed side by side.\n\n" +
			"With spec.capacity, every backend is a simulated continuous-batching model server (internal/modelsim, vLLM's\n" +
			"scheduler calibrated to an 8B model on one A100) on the same virtual clock, polled for its saturation signals\n" +
			"as the data plane polls a real one. Each tenant sends streamed requests of its promptTokens and outputTokens\n" +
			"(--tenant-tokens NAME=PROMPT:OUTPUT), and each shows its completions/s, output tokens/s and time to first\n" +
			"token p50/p99; each model server, its own waiting queue, batch, KV cache and output tokens/s.\n\n" +
			"-o json|yaml prints the figures as an object (apiVersion kubectl-fairqueue/v1, kind Simulation, or\n" +
			"SimulationComparison with --move-tenant; its fields are listed in docs/kubectl-fairqueue.md#simulate).\n\n" +
			"LOAD.yaml:\n" +
			"  duration: 30s            # how long arrivals are offered\n" +
			"  serviceTime: 200ms       # the backend's time per request (default 50ms)\n" +
			"  model: my-model          # the request body's model\n" +
			"  tenants:\n" +
			"  - {name: acme, rate: 30, apiKey: sk-acme}   # or user:/team: (sent as x-user-id / x-team-id), headers:, start:, stop:\n" +
			"    # capacity mode: promptTokens: 256, outputTokens: 128 (the defaults)\n" +
			"  modelServer: {maxNumSeqs: 256, kvCacheTokens: 150000}   # capacity mode's simulated servers (the defaults)",
		Example: "  kubectl fairqueue simulate llm -n team-a -f load.yaml\n" +
			"  kubectl fairqueue simulate --policy-file policy.yaml --secrets secrets/ -f load.yaml -o json\n" +
			"  kubectl fairqueue simulate llm -f load.yaml --move-tenant acme=batch\n" +
			"  kubectl fairqueue simulate llm -f load.yaml --tenant-tokens heavy=3000:256",
		RunE: func(cmd *cobra.Command, args []string) error {
			if loadFile == "" {
				return errNoLoad
			}
			if warmup != "" {
				d, err := time.ParseDuration(warmup)
				if err != nil || d < 0 {
					return fmt.Errorf("--warmup %q is not a non-negative duration such as 2s", warmup)
				}
				opts.Warmup = d
			}
			moves, err := parseMoves(moveFlags)
			if err != nil {
				return err
			}
			load, err := ReadLoad(loadFile)
			if err != nil {
				return err
			}
			if err := parseTenantTokens(load, tokenFlags); err != nil {
				return err
			}
			cfg, key, err := simulatedConfig(cmd.Context(), g, args, policyFile, secrets)
			if err != nil {
				return err
			}
			if len(moves) > 0 {
				return runWhatIf(cmd.Context(), g.streams.Out, out, cfg, key, load, opts, moves)
			}
			res, err := Simulate(cmd.Context(), cfg, key, load, opts)
			if err != nil {
				return err
			}
			if !out.table() {
				return out.print(g.streams.Out, simulationOutput(cfg, load, res))
			}
			return printSimulation(g.streams.Out, cfg, load, res)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&loadFile, "filename", "f", "", "the offered load (YAML, see above)")
	f.StringVar(&policyFile, "policy-file", "", "simulate this FairQueuePolicy manifest instead of POLICY from the cluster")
	f.StringVar(&secrets, "secrets", "", "with --policy-file, a file or directory of the Secret manifests it references")
	f.Uint64Var(&opts.Seed, "seed", 1, "seed of the arrival jitter; the same seed gives the same figures")
	f.StringVar(&warmup, "warmup", "", "how much of the start of the arrivals to leave out of the steady-state figures "+
		"(default: a tenth of the duration, at least 1s, at most half)")
	f.StringArrayVar(&moveFlags, "move-tenant", nil, "NAME=BAND: also simulate the load's tenant NAME in the policy's band BAND, "+
		"and print before and after side by side (repeatable)")
	f.StringArrayVar(&tokenFlags, "tenant-tokens", nil, "NAME=PROMPT:OUTPUT: in capacity mode, the prompt and output tokens of the load's tenant NAME's "+
		"requests, over the load file's promptTokens and outputTokens (repeatable)")
	out.add(cmd, "table")
	return cmd
}

// simulatedConfig is the config and hash key to simulate: --policy-file
// rendered with a random key, or POLICY rendered from the cluster.
func simulatedConfig(ctx context.Context, g *globals, args []string, policyFile, secrets string) (*config.Config, []byte, error) {
	if policyFile != "" {
		if len(args) > 0 {
			return nil, nil, fmt.Errorf("give POLICY or --policy-file, not both (got %q)", args)
		}
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, nil, err
		}
		r, err := reload.NewPolicySource(policyFile, reload.PolicyOptions{SecretsPath: secrets, HashKey: key}).Render()
		if err != nil {
			return nil, nil, fmt.Errorf("--policy-file: %w", err)
		}
		cfg, err := config.Parse(r.Data)
		return cfg, key, err
	}
	name, err := onePolicy("simulate", args)
	if err != nil {
		return nil, nil, err
	}
	if err := g.connect(); err != nil {
		return nil, nil, err
	}
	rctx, cancel := g.bounded(ctx)
	_, r, key, err := g.renderPolicy(rctx, name)
	cancel()
	if err != nil {
		return nil, nil, err
	}
	cfg, err := config.Parse(r.Data)
	return cfg, key, err
}

// SimulationOutput is `kubectl fairqueue simulate -o json|yaml`: its field names
// and meanings are stable (fields may be added, never renamed or removed
// within apiVersion kubectl-fairqueue/v1). Rates are per second over the
// steady-state window; shares are fractions of 1.
type SimulationOutput struct {
	// APIVersion is "kubectl-fairqueue/v1"; Kind is "Simulation".
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// DurationSeconds is how long arrivals were offered; ServiceTimeSeconds,
	// the simulated backend's time per request; Seed, the arrival jitter's.
	DurationSeconds    float64 `json:"durationSeconds"`
	ServiceTimeSeconds float64 `json:"serviceTimeSeconds"`
	Seed               uint64  `json:"seed"`
	// FairQueuing is whether the policy queues, and by which identity.
	FairQueuing FairQueuingOutput `json:"fairQueuing"`
	// Window is the steady-state window every rate and share is measured over.
	Window SimWindow `json:"window"`
	// Notes are the caveats the table prints under it.
	Notes   []string    `json:"notes"`
	Tenants []SimTenant `json:"tenants"`
	// Bands are the policy's priority bands, highest first, with what
	// their tenants got; absent when the policy has none.
	Bands []SimBand `json:"bands,omitempty"`
	// ModelServers are the simulated model servers of a policy with
	// spec.capacity, one per backend; absent without capacity.
	ModelServers []SimModelServer `json:"modelServers,omitempty"`
}

// SimBand is one priority band's figures: the sums of its tenants'.
type SimBand struct {
	Name     string  `json:"name"`
	MinShare float64 `json:"minShare"`
	// Default is whether tenants without a band are in this one.
	Default bool `json:"default"`
	// Tenants counts the load's tenants scheduled in the band.
	Tenants           int     `json:"tenants"`
	OfferedPerSecond  float64 `json:"offeredPerSecond"`
	AdmittedPerSecond float64 `json:"admittedPerSecond"`
	// Share is the band's fraction of the window's admissions.
	Share float64 `json:"share"`
	// WaitP50Seconds and WaitP99Seconds are the queue waits of the band's
	// admissions in the window.
	WaitP50Seconds   float64 `json:"waitP50Seconds"`
	WaitP99Seconds   float64 `json:"waitP99Seconds"`
	RefusedPerSecond float64 `json:"refusedPerSecond"`
}

// FairQueuingOutput is a policy's fair queuing, in -o json|yaml.
type FairQueuingOutput struct {
	Enabled         bool   `json:"enabled"`
	TenantDimension string `json:"tenantDimension"`
}

// SimWindow bounds the steady-state window, in seconds from the first arrival.
type SimWindow struct {
	FromSeconds float64 `json:"fromSeconds"`
	ToSeconds   float64 `json:"toSeconds"`
}

// SimTenant is one tenant's figures.
type SimTenant struct {
	Name string `json:"name"`
	// Weight is the tenant's weight; 0 when fair queuing is off or the
	// tenant sends no identity of the tenant dimension.
	Weight int32 `json:"weight"`
	// Band is the priority band the tenant's requests are scheduled in
	// (its own, or a lower one its request band header names); absent
	// without bands.
	Band string `json:"band,omitempty"`
	// BandShare is, with bands, the tenant's fraction of its band's
	// admissions in the window, to compare with WeightedShare.
	BandShare *float64 `json:"bandShare,omitempty"`
	// OfferedPerSecond and AdmittedPerSecond are arrivals and admissions
	// (dispatches to the backend) in the window, per second.
	OfferedPerSecond  float64 `json:"offeredPerSecond"`
	AdmittedPerSecond float64 `json:"admittedPerSecond"`
	// Share is the tenant's fraction of the window's admissions.
	Share float64 `json:"share"`
	// WeightedShare is its weight over the weights of the tenants that
	// competed in the queue (refused by a queued limit in the window), with
	// bands of the competing tenants of its band; null for a tenant that
	// did not compete.
	WeightedShare *float64 `json:"weightedShare"`
	// WaitP50Seconds and WaitP99Seconds are the queue waits of the window's
	// admissions.
	WaitP50Seconds float64 `json:"waitP50Seconds"`
	WaitP99Seconds float64 `json:"waitP99Seconds"`
	// RefusedPerSecond is the window's refusals per second by reason.
	RefusedPerSecond map[string]float64 `json:"refusedPerSecond"`
	// Total counts the whole run, the queue's drain after the last arrival
	// included.
	Total SimTotal `json:"total"`
	// Capacity holds, for a policy with spec.capacity, what the tenant's
	// streamed requests got from the simulated model servers.
	Capacity *SimTenantCapacity `json:"capacity,omitempty"`
}

// SimTotal counts a tenant's requests over the whole run.
type SimTotal struct {
	Offered  int            `json:"offered"`
	Admitted int            `json:"admitted"`
	Refused  map[string]int `json:"refused"`
}

// nonQueuedLimits names the limits of cfg that refuse at once, never queued.
func nonQueuedLimits(cfg *config.Config) []string {
	var names []string
	for _, l := range []struct {
		name  string
		limit *config.Limit
	}{{"global", cfg.RateLimits.Global}, {"perClient", cfg.RateLimits.PerClient}, {"perBackend", cfg.RateLimits.PerBackend}} {
		if l.limit != nil {
			names = append(names, l.name)
		}
	}
	return names
}

// competes reports whether a tenant was refused by a queued limit in the
// window: only those compete for admissions by weight.
func competes(c Counts) bool {
	for reason, n := range c.Refused {
		if n > 0 && !strings.HasPrefix(reason, loadgen.ReasonImmediate) && !strings.HasPrefix(reason, "status ") {
			return true
		}
	}
	return false
}

// simulationOutput summarises a simulation.
func simulationOutput(cfg *config.Config, load *Load, res *SimResult) SimulationOutput {
	secs := res.Seconds()
	o := SimulationOutput{
		APIVersion: outputAPIVersion, Kind: "Simulation",
		DurationSeconds: load.Duration.Seconds(), ServiceTimeSeconds: load.serviceTime().Seconds(), Seed: res.Seed,
		FairQueuing: FairQueuingOutput{Enabled: cfg.FairQueuing.Enabled, TenantDimension: string(cfg.FairQueuing.TenantDimension)},
		Window:      SimWindow{FromSeconds: res.From.Seconds(), ToSeconds: res.To.Seconds()},
		Tenants:     make([]SimTenant, len(res.Tenants)),
	}
	var admitted int
	// weights and bandAdmitted are by band ("" without bands).
	weights, bandAdmitted := map[string]int32{}, map[string]int{}
	for _, r := range res.Tenants {
		admitted += r.Steady.Admitted
		bandAdmitted[r.Band] += r.Steady.Admitted
		if r.Weight > 0 && competes(r.Steady) {
			weights[r.Band] += r.Weight
		}
	}
	for i := range res.Tenants {
		r := &res.Tenants[i]
		t := SimTenant{Name: r.Name, Weight: r.Weight, Band: r.Band,
			OfferedPerSecond: float64(r.Steady.Offered) / secs, AdmittedPerSecond: float64(r.Steady.Admitted) / secs,
			WaitP50Seconds: r.WaitQuantile(0.5).Seconds(), WaitP99Seconds: r.WaitQuantile(0.99).Seconds(),
			RefusedPerSecond: map[string]float64{},
			Total:            SimTotal{Offered: r.Total.Offered, Admitted: r.Total.Admitted, Refused: r.Total.Refused}}
		if admitted > 0 {
			t.Share = float64(r.Steady.Admitted) / float64(admitted)
		}
		if w := weights[r.Band]; w > 0 && r.Weight > 0 && competes(r.Steady) {
			ws := float64(r.Weight) / float64(w)
			t.WeightedShare = &ws
		}
		if n := bandAdmitted[r.Band]; r.Band != "" && n > 0 {
			bs := float64(r.Steady.Admitted) / float64(n)
			t.BandShare = &bs
		}
		for reason, n := range r.Steady.Refused {
			t.RefusedPerSecond[reason] = float64(n) / secs
		}
		o.Tenants[i] = t
	}
	o.Notes = append(o.Notes, fmt.Sprintf("Rates, shares and waits are steady-state: measured from %v to %v of the %v of arrivals, "+
		"leaving out the warm-up (bursts spent, queues forming; --warmup) and the queue draining after the last arrival. "+
		"Arrivals are jittered within their slots (--seed %d).", res.From, res.To, load.Duration.Duration, res.Seed))
	if nq := nonQueuedLimits(cfg); len(nq) > 0 {
		o.Notes = append(o.Notes, fmt.Sprintf("The %s limit(s) refuse at once, first come first served, and are never queued: "+
			"weights do nothing for them, and tenants refused only by them (immediate/...) have no weighted share.", strings.Join(nq, ", ")))
	}
	simCapacityOutput(&o, load, res)
	if len(cfg.FairQueuing.Bands) == 0 {
		o.Notes = append(o.Notes, "WEIGHTED SHARE is the tenant's weight over the weights of the tenants a queued limit refused in the window "+
			"(the ones competing by weight); tenants that got all they asked for show '-'.")
		return o
	}
	o.Bands = simBands(cfg, res, secs, admitted)
	o.Notes = append(o.Notes, "Bands are strict priority: a band is granted only what the bands above it leave, "+
		"or its minShare while it is backlogged. BAND SHARE is the tenant's fraction of its band's admissions; WEIGHTED SHARE "+
		"is its weight over the weights of its band's tenants a queued limit refused in the window; tenants that got all they asked for show '-'.")
	return o
}

// simBands sums the tenants' figures by band, in the policy's band order.
func simBands(cfg *config.Config, res *SimResult, secs float64, admitted int) []SimBand {
	bands := make([]SimBand, len(cfg.FairQueuing.Bands))
	waits := make([][]time.Duration, len(bands))
	for i, b := range cfg.FairQueuing.Bands {
		bands[i] = SimBand{Name: b.Name, MinShare: b.MinShare, Default: b.Name == cfg.FairQueuing.DefaultBand}
	}
	for i := range res.Tenants {
		r := &res.Tenants[i]
		bi := bandIndex(cfg, r.Band)
		if bi < 0 {
			continue // not queued
		}
		b := &bands[bi]
		b.Tenants++
		b.OfferedPerSecond += float64(r.Steady.Offered) / secs
		b.AdmittedPerSecond += float64(r.Steady.Admitted) / secs
		if admitted > 0 {
			b.Share += float64(r.Steady.Admitted) / float64(admitted)
		}
		for _, n := range r.Steady.Refused {
			b.RefusedPerSecond += float64(n) / secs
		}
		waits[bi] = append(waits[bi], r.Waits...)
	}
	for i := range bands {
		all := TenantResult{Waits: waits[i]}
		bands[i].WaitP50Seconds, bands[i].WaitP99Seconds = all.WaitQuantile(0.5).Seconds(), all.WaitQuantile(0.99).Seconds()
	}
	return bands
}

// printSimulation writes the per-tenant table of a simulation.
func printSimulation(out io.Writer, cfg *config.Config, load *Load, res *SimResult) error {
	o := simulationOutput(cfg, load, res)
	w := newTable(out)
	backend := "backend service time " + load.serviceTime().String()
	if len(o.ModelServers) > 0 {
		backend = "backends simulated as model servers (capacity mode)"
	}
	w.printf("Simulated %s of offered load, %s, fair queuing %v (tenant dimension %s).\n\n",
		load.Duration.Duration, backend, cfg.FairQueuing.Enabled, cfg.FairQueuing.TenantDimension)
	if len(o.Bands) > 0 {
		w.printf("BAND\tMIN SHARE\tTENANTS\tOFFERED/S\tADMITTED/S\tSHARE\tWAIT P50\tWAIT P99\tREFUSED/S\n")
		for _, b := range o.Bands {
			w.printf("%s\t%s\t%d\t%.1f\t%.1f\t%s\t%s\t%s\t%.1f\n", bandLabel(b.Name, b.Default), fraction(b.MinShare), b.Tenants,
				b.OfferedPerSecond, b.AdmittedPerSecond, percentOf(b.Share, b.AdmittedPerSecond > 0),
				seconds(b.WaitP50Seconds), seconds(b.WaitP99Seconds), b.RefusedPerSecond)
		}
		w.printf("\n")
	}
	switch {
	case len(o.ModelServers) > 0:
		printCapacitySimulation(w, &o)
		o.Tenants = nil
	case len(o.Bands) > 0:
		w.printf("TENANT\tBAND\tWEIGHT\tOFFERED/S\tADMITTED/S\tSHARE\tBAND SHARE\tWEIGHTED SHARE\tWAIT P50\tWAIT P99\tREFUSED/S BY REASON\n")
	default:
		w.printf("TENANT\tWEIGHT\tOFFERED/S\tADMITTED/S\tSHARE\tWEIGHTED SHARE\tWAIT P50\tWAIT P99\tREFUSED/S BY REASON\n")
	}
	for _, t := range o.Tenants {
		share, wshare := percentOf(t.Share, t.AdmittedPerSecond > 0), "-"
		if t.WeightedShare != nil {
			wshare = fmt.Sprintf("%.1f%%", 100**t.WeightedShare)
		}
		band := ""
		if len(o.Bands) > 0 {
			bshare := "-"
			if t.BandShare != nil && t.AdmittedPerSecond > 0 {
				bshare = fmt.Sprintf("%.1f%%", 100**t.BandShare)
			}
			band = orDefault(t.Band, "-") + "\t"
			share += "\t" + bshare
		}
		w.printf("%s\t%s%s\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\n", t.Name, band, weightString(t.Weight), t.OfferedPerSecond, t.AdmittedPerSecond,
			share, wshare, seconds(t.WaitP50Seconds), seconds(t.WaitP99Seconds), rates(t.RefusedPerSecond))
	}
	w.printf("\n")
	for _, n := range o.Notes {
		w.printf("%s\n", wrap(n, 110))
	}
	return w.flush()
}

// wrap breaks s into lines of at most width bytes between words.
func wrap(s string, width int) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(s) {
		if i > 0 {
			if line+1+len(word) > width {
				b.WriteByte('\n')
				line = 0
			} else {
				b.WriteByte(' ')
				line++
			}
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String()
}

// seconds formats s seconds as a duration to the millisecond.
func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}

func weightString(w int32) string {
	if w == 0 {
		return "-"
	}
	return fmt.Sprint(w)
}

func rates(m map[string]float64) string {
	if len(m) == 0 {
		return "-"
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%.1f", k, m[k])
	}
	return strings.Join(parts, " ")
}
