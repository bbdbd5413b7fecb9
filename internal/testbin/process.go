package testbin

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/internal/testutil"
)

// DefaultReadyWithin bounds the readiness wait when Options.ReadyWithin is 0.
const DefaultReadyWithin = 30 * time.Second

// stopGrace is how long a process may take to exit after SIGTERM before it
// is killed.
const stopGrace = 15 * time.Second

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

// Process is a running binary started by Start.
type Process struct {
	// Cmd is the started command.
	Cmd *exec.Cmd
	// Output receives its stdout and stderr.
	Output *testutil.SyncBuffer

	done chan struct{}
	err  error // set before done is closed
}

// Start runs bin with opts, waits until opts.Ready holds and returns the
// process. The test fails, with the process's output, when it exits or is not
// ready in time. The process gets SIGTERM (then SIGKILL after 15s) in
// t.Cleanup, and its output is logged there if the test failed.
func Start(t testing.TB, bin string, opts Options) *Process {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, opts.Args...)
	cmd.Env, cmd.Dir = opts.Env, opts.Dir
	p := &Process{Cmd: cmd, Output: &testutil.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.Output, p.Output
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting %s: %v", bin, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		defer cancel()
		if err := p.Stop(); err != nil {
			t.Logf("%s: %v", bin, err)
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", bin, p.Output.String())
		}
	})
	if opts.Ready == nil {
		return p
	}
	within := opts.ReadyWithin
	if within == 0 {
		within = DefaultReadyWithin
	}
	testutil.EventuallyWithin(t, within, bin+" to be ready", func() bool { return p.Exited() || opts.Ready(p) })
	if p.Exited() {
		t.Fatalf("%s exited before it was ready (%v):\n%s", bin, p.err, p.Output.String())
	}
	return p
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Done is closed once the process has exited; Err then says how.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit error, once Done is closed.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Stop sends SIGTERM and waits for the process to exit, killing it after
// 15s. It returns how the process ended when it was not by that SIGTERM's
// clean exit; stopping a process that already exited returns its exit error.
func (p *Process) Stop() error {
	if p.Exited() {
		return p.err
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM) // an exit since is seen below
	select {
	case <-p.done:
		return p.err
	case <-time.After(stopGrace):
		_ = p.Cmd.Process.Kill()
		<-p.done
		return p.err
	}
}

// HTTPReady is ready once GET url answers 200.
func HTTPReady(url string) func(*Process) bool {
	// No keep-alive: a probe must not leave a connection (and its
	// goroutines) behind.
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	return func(*Process) bool {
		resp, err := c.Get(url)
		if err != nil {
			return false
		}
		_ = resp.Body.Close() // only the status matters
		return resp.StatusCode == http.StatusOK
	}
}

// LineReady is ready once the process printed line on a line by itself.
func LineReady(line string) func(*Process) bool {
	return func(p *Process) bool {
		return strings.Contains("\n"+p.Output.String(), "\n"+line+"\n")
	}
}
