package testbin

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/internal/proc"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// DefaultReadyWithin bounds the readiness wait when Options.ReadyWithin is 0.
const DefaultReadyWithin = proc.DefaultReadyWithin

// Options say how to run a binary and how to tell it is ready.
type Options struct {
	// Args are the command-line arguments.
	Args []string
	// Env, if set, is the process's environment (see exec.Cmd.Env).
	Env []string
	// Dir is the working directory; default the test's.
	Dir string
	// Ready reports whether the process is ready; nil means as soon as it
	// started. HTTPReady and LineReady cover the common cases.
	Ready func(*Process) bool
	// ReadyWithin bounds the wait for Ready; default DefaultReadyWithin.
	ReadyWithin time.Duration
}

// Process is a running binary started by Start: a proc.Process (Exited,
// Done, Err, Stop) with its output kept for the test.
type Process struct {
	*proc.Process
	// Output receives its stdout and stderr.
	Output *testutil.SyncBuffer
}

// Start runs bin with opts, waits until opts.Ready holds and returns the
// process. The test fails, with the process's output, when it exits or is not
// ready in time. The process gets SIGTERM (then SIGKILL after proc.StopGrace)
// in t.Cleanup, and its output is logged there if the test failed.
func Start(t testing.TB, bin string, opts Options) *Process {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, opts.Args...)
	cmd.Env, cmd.Dir = opts.Env, opts.Dir
	p := &Process{Output: &testutil.SyncBuffer{}}
	cmd.Stdout, cmd.Stderr = p.Output, p.Output
	var err error
	if p.Process, err = proc.Start(cmd); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer cancel()
		if err := p.Stop(); err != nil {
			t.Logf("%s: %v", bin, err)
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", bin, p.Output.String())
		}
	})
	var ready func() bool
	if opts.Ready != nil {
		ready = func() bool { return opts.Ready(p) }
	}
	if err := p.WaitReady(ready, opts.ReadyWithin); err != nil {
		t.Fatalf("%v:\n%s", err, p.Output.String())
	}
	return p
}

// HTTPReady is ready once GET url answers 200.
func HTTPReady(url string) func(*Process) bool {
	ready := proc.HTTPReady(url)
	return func(*Process) bool { return ready() }
}

// LineReady is ready once the process printed line on a line by itself.
func LineReady(line string) func(*Process) bool {
	return func(p *Process) bool {
		return strings.Contains("\n"+p.Output.String(), "\n"+line+"\n")
	}
}
