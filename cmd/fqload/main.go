// Command fqload offers open-loop HTTP load to one or more fairqueue data-plane
// replicas, as several tenants at once, and prints a JSON summary per tenant:
// requests offered, sent and dropped client side, answers by status, admitted,
// refused by fair-queue reason and limit type, latency and queue-wait
// percentiles, admitted requests per second, and the tokens the admitted
// answers reported in their usage, per second and in all.
//
// Each tenant sends at a constant rate that does not depend on how fast the
// server answers. Tenants come from --tenant flags, a --spec file, or both:
//
//	fqload --target http://127.0.0.1:8080 --duration 30s \
//	  --tenant name=heavy,rate=50,api-key-env=HEAVY_KEY \
//	  --tenant name=light,rate=5,user=alice
//
// Run with --help for every flag and the spec file format.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/fairqueue/fairqueue/internal/cli"
	"github.com/fairqueue/fairqueue/internal/loadgen"
	"github.com/fairqueue/fairqueue/internal/version"
)

func main() {
	if version.PrintIfRequested(os.Stdout, "fqload", os.Args[1:]) {
		return
	}
	cli.Main("fqload", func(ctx context.Context) error {
		return run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv, os.ReadFile)
	})
}

// run is main with its inputs and outputs injected. It returns flag.ErrHelp
// after printing the usage for --help.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string, readFile func(string) ([]byte, error)) error {
	cfg, err := parse(args, stderr, getenv, readFile)
	if err != nil {
		return err
	}
	summary, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(summary); err != nil {
		return fmt.Errorf("writing the summary: %w", err)
	}
	if summary.Interrupted {
		_, _ = fmt.Fprintln(stderr, "fqload: interrupted; the summary covers the run so far")
	}
	return nil
}
