// Command demo shows fairqueue at work on one machine, with nothing but Go
// installed: it builds the binaries, starts a local control plane, the
// operator, a fake OpenAI-compatible upstream and two data-plane replicas,
// applies a FairQueuePolicy with kubectl, offers load from three tenants
// (one flooding, weights 1:1:3) and prints a live per-tenant table. Midway
// it patches the tenants Secret so the weights become 3:1:1, and at the end
// it writes a PNG chart of the shares over time.
//
// The token scenario (--scenario tokens, or SCENARIO=tokens in the
// environment) limits the model in tokens per 10s with deferred admission
// and fairQueuing.cost Tokens; three tenants at equal weight, one sending
// prompts ten times larger, get equal tokens per second (--cost Requests
// shows the contrary).
//
//	make demo                     # or: go run ./hack/demo
//	go run ./hack/demo --duration 30s --chart /tmp/shares.png
//	make demo SCENARIO=tokens     # or: go run ./hack/demo --scenario tokens
//
// Ctrl-C stops everything it started.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fairqueue/fairqueue/internal/demo"
)

// errInterrupted ends a run stopped by Ctrl-C or SIGTERM.
var errInterrupted = errors.New("interrupted")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop() // before os.Exit, which skips deferred calls
	if err != nil {
		switch {
		case errors.Is(err, flag.ErrHelp):
			return
		case errors.Is(err, errInterrupted):
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var (
		o       demo.Options
		chart   string
		noBuild bool
	)
	fs.DurationVar(&o.Duration, "duration", 60*time.Second, "how long load is offered (10s to 30m)")
	fs.DurationVar(&o.ChangeAt, "change-at", 0, "when, after the load starts, the weights change (default half of --duration)")
	fs.IntVar(&o.PerModel, "per-model", 45, "each replica's model limit in requests per second (shares scenario)")
	scenario := demo.ScenarioShares
	if env := os.Getenv("SCENARIO"); env != "" {
		scenario = env
	}
	fs.StringVar(&o.Scenario, "scenario", scenario, "`name` of the scenario: shares (request limit, weights 1:1:3 changed midway) or tokens (token limit with deferred admission); the SCENARIO environment variable sets the default")
	fs.IntVar(&o.TokensPerPeriod, "tokens-per-period", 20000, "each replica's model limit in tokens per 10s (tokens scenario)")
	fs.StringVar(&o.Cost, "cost", demo.CostTokens, "fairQueuing.cost of the tokens scenario: Tokens, or Requests for the negative control")
	fs.StringVar(&o.BinDir, "bin-dir", "bin", "`directory` of the binaries; bin-dir/k8s must hold etcd and kube-apiserver (make envtest)")
	fs.BoolVar(&noBuild, "no-build", false, "use the binaries already in --bin-dir instead of building them")
	fs.BoolVar(&o.KeepWorkDir, "keep", false, "keep the temporary directory with the logs, kubeconfig and config after a successful run")
	fs.StringVar(&chart, "chart", filepath.Join("bin", "demo-shares.png"), "`file` to write the PNG chart of shares over time to (bin/demo-tokens.png for the tokens scenario); empty for none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: see --help", fs.Arg(0))
	}
	chartSet := false
	fs.Visit(func(f *flag.Flag) { chartSet = chartSet || f.Name == "chart" })
	if o.Scenario == demo.ScenarioTokens && !chartSet {
		chart = filepath.Join("bin", "demo-tokens.png")
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
	if res != nil && res.Summary != nil {
		res.WriteReport(os.Stdout)
		if chart != "" {
			if werr := res.Chart().WritePNG(chart); werr != nil {
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
