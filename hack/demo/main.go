// Command demo shows fairqueue at work on one machine, with nothing but Go
// installed. The default scenario builds the binaries, starts a local control
// plane, the operator, a fake OpenAI-compatible upstream and two data-plane
// replicas, applies a FairQueuePolicy with kubectl, offers load from three
// tenants (one flooding, weights 1:1:3) and prints a live per-tenant table.
// Midway it patches the tenants Secret so the weights become 3:1:1, and at
// the end it writes a PNG chart of the shares over time.
//
// --standalone runs the same scenario without a control plane: one data
// plane reads the policy and the Secret from files (dataplane --policy) and
// follows the Secret's rewrite. It needs no envtest binaries and answers in
// about a minute.
//
// The token scenario (--scenario tokens, or SCENARIO=tokens in the
// environment) limits the model in tokens per 10s with deferred admission
// and fairQueuing.cost Tokens; three tenants at equal weight, one sending
// prompts ten times larger, get equal tokens per second (--cost Requests
// shows the contrary).
//
// The bands scenario (--scenario bands, or SCENARIO=bands) puts chat in the
// priority band interactive and batch in the band batch below it: chat
// offers two thirds of the capacity from the start, batch floods with three
// times the capacity from a quarter of the run on. chat keeps its rate and
// latency, and batch takes the spare third (--bands=false is the negative
// control: one band, equal weights, and chat is cut to half).
//
// The fleet scenario (--scenario fleet) runs three replicas sharing one
// model limit in Redis (a real redis-server when one is on PATH, else an
// embedded miniredis) with skewed routing, prints the fleet and per-replica
// shares every second and kills Redis for a few seconds midway.
//
// This command is a module of its own (hack/demo/go.mod) so that the chart's
// plotting library stays out of the product's go.mod; run it from the
// repository root:
//
//	make demo                     # or: make demo-standalone, demo-fleet
//	make demo SCENARIO=bands      # or: make demo-standalone SCENARIO=bands
//	go -C hack/demo build -o ../../bin/demo . && bin/demo --standalone
//	bin/demo --duration 30s --chart /tmp/shares.png
//
// Ctrl-C stops everything it started.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/limiter/redisstore"
	"github.com/fairqueue/fairqueue/internal/cli"
	"github.com/fairqueue/fairqueue/internal/demo"
)

// errInterrupted ends a run stopped by Ctrl-C or SIGTERM.
var errInterrupted = errors.New("interrupted")

func main() {
	err := cli.WithSignals(func(ctx context.Context) error { return run(ctx, os.Args[1:]) })
	if err != nil {
		switch {
		case errors.Is(err, flag.ErrHelp):
			return
		case errors.Is(err, errInterrupted):
			os.Exit(130)
		}
		cli.PrintError(os.Stderr, "demo", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var (
		o       demo.Options
		chart   string
		noBuild bool
		mode    string
	)
	fs.DurationVar(&o.Duration, "duration", 0, "how long load is offered (10s to 30m; default 60s, 30s for the fleet scenario)")
	fs.DurationVar(&o.ChangeAt, "change-at", 0, "when, after the load starts, the weights change (default half of --duration)")
	fs.IntVar(&o.PerModel, "per-model", 0, "each replica's model limit in requests per second (default 45); in the fleet scenario the limit the fleet shares (default 90)")
	scenario := demo.ScenarioShares
	if env := os.Getenv("SCENARIO"); env != "" {
		scenario = env
	}
	fs.StringVar(&o.Scenario, "scenario", scenario, "`name` of the scenario: shares (request limit, weights 1:1:3 changed midway), tokens (token limit with deferred admission), bands (an interactive tenant in a priority band above a flooding batch tenant) or fleet (three replicas sharing a limit in Redis); the SCENARIO environment variable sets the default")
	fs.BoolVar(&o.Standalone, "standalone", false, "run the shares, tokens or bands scenario on one data plane reading files (dataplane --policy), without a control plane or the envtest binaries")
	bands := fs.Bool("bands", true, "bands scenario: give the policy its priority bands; false runs the negative control, one band at equal weights")
	fs.IntVar(&o.TokensPerPeriod, "tokens-per-period", 20000, "each replica's model limit in tokens per 10s (tokens scenario)")
	fs.StringVar(&o.Cost, "cost", demo.CostTokens, "fairQueuing.cost of the tokens scenario: Tokens, or Requests for the negative control")
	fs.DurationVar(&o.OutageAt, "outage-at", 0, "when Redis is killed, after the load starts (fleet scenario; default 60% of --duration)")
	fs.DurationVar(&o.Outage, "outage", 3*time.Second, "how long Redis stays down (fleet scenario); 0 for no outage")
	fs.StringVar(&mode, "failure-mode", string(redisstore.FailClosed), "the store's behaviour while Redis is down (fleet scenario): Closed (503) or Open (local buckets)")
	fs.StringVar(&o.RedisServer, "redis-server", "", "redis-server `binary` (fleet scenario); empty looks it up on PATH, - uses the embedded miniredis")
	fs.StringVar(&o.BinDir, "bin-dir", "bin", "`directory` of the binaries; bin-dir/k8s must hold etcd and kube-apiserver (make envtest) unless --standalone")
	fs.BoolVar(&noBuild, "no-build", false, "use the binaries already in --bin-dir instead of building them")
	fs.BoolVar(&o.KeepWorkDir, "keep", false, "keep the temporary directory with the logs, kubeconfig and config after a successful run")
	fs.StringVar(&chart, "chart", "", "`file` to write the PNG chart of shares over time to (default bin/demo-SCENARIO.png); - for none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: see --help", fs.Arg(0))
	}
	o.FailureMode = redisstore.FailureMode(mode)
	o.NoBands = !*bands
	if o.Scenario == demo.ScenarioFleet {
		if o.Duration == 0 {
			o.Duration = 30 * time.Second
		}
		if o.OutageAt == 0 {
			o.OutageAt = o.Duration * 6 / 10
		}
	}
	switch chart {
	case "":
		chart = filepath.Join("bin", "demo-"+o.Scenario+".png")
	case "-":
		chart = ""
	}
	var err error
	if o.BinDir, err = filepath.Abs(o.BinDir); err != nil {
		return err
	}
	o.Build, o.Out, o.Live = !noBuild, os.Stdout, true

	start := time.Now()
	res, err := demo.Run(ctx, o)
	if ctx.Err() != nil {
		fmt.Println("==> Interrupted: every process the demo started has been stopped")
		return errInterrupted
	}
	if res != nil && (res.Summary != nil || len(res.Unavailable) > 0) {
		res.WriteReport(os.Stdout)
		if chart != "" {
			if werr := writePNG(res.Chart(), chart); werr != nil {
				err = errors.Join(err, werr)
			} else {
				fmt.Printf("==> Chart of the shares over time: %s\n", chart)
			}
		}
	}
	if res != nil && res.ShutdownErr != nil {
		err = errors.Join(err, res.ShutdownErr)
	}
	if res != nil && len(res.OpenPorts) > 0 {
		err = errors.Join(err, fmt.Errorf("ports still open after shutdown: %v", res.OpenPorts))
	}
	if err != nil {
		return err
	}
	fmt.Printf("==> Demo finished in %s; every process stopped cleanly\n", time.Since(start).Round(time.Second))
	return nil
}
