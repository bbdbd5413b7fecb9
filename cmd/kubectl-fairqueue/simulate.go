package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/reload"
)

func simulateVerb() *verb {
	var loadFile, policyFile, secrets string
	return &verb{
		name: "simulate", args: "POLICY -f LOAD.yaml",
		short: "what-if: expected shares, waits and refusals of a policy under an offered load",
		long: "Run the real data-plane server (limiter, fair queue, admission) in process on a fake clock, loaded with\n" +
			"the policy's rendered config, against the offered load of LOAD.yaml, and print each tenant's expected\n" +
			"admitted rate, share against its weighted share, queue waits and refusals by reason. Nothing is sent to\n" +
			"the cluster's data planes. POLICY is read from the cluster; --policy-file simulates a manifest instead.\n\n" +
			"LOAD.yaml:\n" +
			"  duration: 30s            # how long arrivals are offered\n" +
			"  serviceTime: 200ms       # the backend's time per request (default 50ms)\n" +
			"  model: my-model          # the request body's model\n" +
			"  tenants:\n" +
			"  - {name: acme, rate: 30, apiKey: sk-acme}   # or user:/team: (sent as x-user-id / x-team-id), headers:, start:, stop:",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&loadFile, "f", "", "the offered load (YAML, see above)")
			fs.StringVar(&policyFile, "policy-file", "", "simulate this FairQueuePolicy manifest instead of POLICY from the cluster")
			fs.StringVar(&secrets, "secrets", "", "with --policy-file, a file or directory of the Secret manifests it references")
		},
		run: func(ctx context.Context, g *globals, args []string, out io.Writer) error {
			if loadFile == "" {
				return errNoLoad
			}
			load, err := ReadLoad(loadFile)
			if err != nil {
				return err
			}
			var cfg *config.Config
			var key []byte
			switch {
			case policyFile != "":
				if len(args) > 0 {
					return fmt.Errorf("give POLICY or --policy-file, not both (got %q)", args)
				}
				key = make([]byte, 32)
				if _, err := rand.Read(key); err != nil {
					return err
				}
				r, err := reload.NewPolicySource(policyFile, reload.PolicyOptions{SecretsPath: secrets, HashKey: key}).Render()
				if err != nil {
					return fmt.Errorf("--policy-file: %w", err)
				}
				if cfg, err = config.Parse(r.Data); err != nil {
					return err
				}
			default:
				name, err := onePolicy("simulate", args)
				if err != nil {
					return err
				}
				if err := g.connect(); err != nil {
					return err
				}
				rctx, cancel := context.WithTimeout(ctx, requestTimeout)
				_, r, k, err := g.renderPolicy(rctx, name)
				cancel()
				if err != nil {
					return err
				}
				key = k
				if cfg, err = config.Parse(r.Data); err != nil {
					return err
				}
			}
			results, err := Simulate(ctx, cfg, key, load)
			if err != nil {
				return err
			}
			return printSimulation(out, cfg, load, results)
		},
	}
}

// printSimulation writes the per-tenant table of a simulation.
func printSimulation(out io.Writer, cfg *config.Config, load *Load, results []TenantResult) error {
	secs := load.Duration.Seconds()
	var admitted int
	var weights int32
	for _, r := range results {
		admitted += r.Admitted
		// Weighted shares are among the tenants the limits refused: those
		// that wanted more than they got compete by weight.
		if r.Weight > 0 && r.Admitted < r.Offered {
			weights += r.Weight
		}
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	w := &printer{w: tw}
	w.printf("Simulated %s of offered load, backend service time %s, fair queuing %v (tenant dimension %s).\n\n",
		load.Duration.Duration, load.serviceTime(), cfg.FairQueuing.Enabled, cfg.FairQueuing.TenantDimension)
	w.printf("TENANT\tWEIGHT\tOFFERED/S\tADMITTED/S\tSHARE\tWEIGHTED SHARE\tWAIT P50\tWAIT P99\tREFUSED BY REASON\n")
	for i := range results {
		r := &results[i]
		share, wshare := "-", "-"
		if admitted > 0 {
			share = fmt.Sprintf("%.1f%%", 100*float64(r.Admitted)/float64(admitted))
		}
		if weights > 0 && r.Weight > 0 && r.Admitted < r.Offered {
			wshare = fmt.Sprintf("%.1f%%", 100*float64(r.Weight)/float64(weights))
		}
		w.printf("%s\t%s\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\n", r.Name, weightString(r.Weight), float64(r.Offered)/secs, float64(r.Admitted)/secs,
			share, wshare, r.WaitQuantile(0.5).Round(time.Millisecond), r.WaitQuantile(0.99).Round(time.Millisecond), reasons(r.Refused))
	}
	w.printf("\nWEIGHTED SHARE is the tenant's share of the admitted requests by weight among the tenants that were refused\n" +
		"some requests (the ones competing for a limit); tenants that got all they asked for show '-'.\n")
	if w.err != nil {
		return w.err
	}
	return tw.Flush()
}

func weightString(w int32) string {
	if w == 0 {
		return "-"
	}
	return fmt.Sprint(w)
}

func reasons(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
