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
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/fairqueue/fairqueue/internal/loadgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv, os.ReadFile)
	stop() // before os.Exit, which skips deferred calls
	os.Exit(code)
}

// run is main with its inputs and outputs injected; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string, readFile func(string) ([]byte, error)) int {
	cfg, err := parse(args, stderr, getenv, readFile)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fqload: %v\n", err)
		return 2
	}
	summary, err := loadgen.Run(ctx, cfg)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fqload: %v\n", err)
		return 2
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(summary); err != nil {
		_, _ = fmt.Fprintf(stderr, "fqload: writing the summary: %v\n", err)
		return 1
	}
	if summary.Interrupted {
		_, _ = fmt.Fprintln(stderr, "fqload: interrupted; the summary covers the run so far")
	}
	return 0
}
