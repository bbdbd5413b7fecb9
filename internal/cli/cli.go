// Package cli holds how every fairqueue binary starts and ends: its work runs
// under a context that ends on SIGTERM or Ctrl-C, and an error ends it the
// same way everywhere: "<binary>: error: <message>" on stderr, exit status 1.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// signals end the context of Main and WithSignals: SIGTERM (Kubernetes
// stopping a Pod, a supervisor) and SIGINT (Ctrl-C).
var signals = []os.Signal{syscall.SIGTERM, syscall.SIGINT}

// Main is a binary's main: it runs run with a context that ends at the
// first SIGTERM or SIGINT, then ends the process as Exit does for run's
// error. Later signals are caught too, so run can finish cleaning up
// (SecondSignalKills says otherwise).
func Main(binary string, run func(ctx context.Context) error) {
	Exit(binary, WithSignals(run))
}

// WithSignals runs run with a context that ends at the first SIGTERM or
// SIGINT, and returns run's error once those signals are no longer caught,
// so that the caller may os.Exit (which skips deferred calls). It is Main for
// a binary with exit statuses of its own.
func WithSignals(run func(ctx context.Context) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), signals...)
	defer stop()
	return run(ctx)
}

// SecondSignalKills makes a signal after the one that ended ctx (Main's or
// WithSignals's) end the process at once, by the signal's default action,
// skipping whatever run still does: for a server whose drain an operator
// may cut short.
func SecondSignalKills(ctx context.Context) {
	context.AfterFunc(ctx, func() { signal.Reset(signals...) })
}

// Exit ends the process for err: nothing when err is nil, status 0 after
// -h/--help (flag.ErrHelp: the usage was printed), else the error as
// PrintError writes it and status 1.
func Exit(binary string, err error) {
	switch {
	case err == nil:
		return
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	}
	PrintError(os.Stderr, binary, err)
	os.Exit(1)
}

// PrintError writes err as every fairqueue binary reports a failure.
func PrintError(w io.Writer, binary string, err error) {
	_, _ = fmt.Fprintf(w, "%s: error: %v\n", binary, err)
}
