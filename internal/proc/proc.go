// Package proc runs a command as a child process the way the repository's
// tests and tools need it: started, awaited until it is ready (an HTTP probe
// answers, a line is printed), and stopped gracefully with SIGTERM, killed
// only if it outlives a grace period. It takes no testing.TB, so hack tools
// use it directly; internal/testbin adds the test plumbing on top.
package proc

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

const (
	// DefaultReadyWithin bounds WaitReady when it is given no bound.
	DefaultReadyWithin = 30 * time.Second
	// StopGrace is how long a process may take to exit after SIGTERM
	// before Stop kills it.
	StopGrace = 15 * time.Second
	// pollEvery is how often WaitReady asks whether the process is ready.
	pollEvery = 20 * time.Millisecond
)

// Process is a started child process.
type Process struct {
	// Cmd is the started command.
	Cmd *exec.Cmd

	done chan struct{}
	err  error // set before done is closed
}

// Start starts cmd and returns it as a Process, whose exit is collected in
// the background. cmd's output goes where its Stdout and Stderr say.
func Start(cmd *exec.Cmd) (*Process, error) {
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	p := &Process{Cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// StartReady starts cmd and waits, within the given time (0 means
// DefaultReadyWithin), until ready holds. A process that exits first or is
// not ready in time is stopped, and the error says which.
func StartReady(cmd *exec.Cmd, ready func() bool, within time.Duration) (*Process, error) {
	p, err := Start(cmd)
	if err != nil {
		return nil, err
	}
	if err := p.WaitReady(ready, within); err != nil {
		return nil, errors.Join(err, p.Stop())
	}
	return p, nil
}

// WaitReady waits until ready holds (nil means at once), within the given
// time (0 means DefaultReadyWithin). It fails as soon as the process exits.
func (p *Process) WaitReady(ready func() bool, within time.Duration) error {
	if within == 0 {
		within = DefaultReadyWithin
	}
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		if p.Exited() {
			err := p.err
			if err == nil {
				err = errors.New("exit status 0")
			}
			return fmt.Errorf("%s exited before it was ready (%w)", p.name(), err)
		}
		if ready == nil || ready() {
			return nil
		}
		select {
		case <-p.done:
		case <-tick.C:
		case <-deadline.C:
			return fmt.Errorf("%s was not ready within %v", p.name(), within)
		}
	}
}

func (p *Process) name() string { return filepath.Base(p.Cmd.Path) }

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

// Err waits for the process to exit and returns its exit error.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Stop sends SIGTERM and waits for the process to exit, killing it after
// StopGrace. It returns how the process ended when it was not by that
// SIGTERM's clean exit; stopping a process that already exited returns its
// exit error.
func (p *Process) Stop() error {
	if p.Exited() {
		return p.err
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM) // an exit since is seen below
	select {
	case <-p.done:
		return p.err
	case <-time.After(StopGrace):
		_ = p.Cmd.Process.Kill()
		<-p.done
		return p.err
	}
}

// HTTPReady is a readiness check that holds once GET url answers 200.
func HTTPReady(url string) func() bool {
	// No keep-alive: a probe must not leave a connection (and its
	// goroutines) behind.
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	return func() bool {
		resp, err := c.Get(url)
		if err != nil {
			return false
		}
		_ = resp.Body.Close() // only the status matters
		return resp.StatusCode == http.StatusOK
	}
}

// FreeAddr returns a loopback address ("127.0.0.1:port") whose port was
// free just now, for a server in a child process (which cannot be handed a
// listener). The port is only reserved while FreeAddr runs, so another
// process may take it before the child binds it; tests and tools accept
// that small race.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free loopback port: %w", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return "", fmt.Errorf("freeing %s: %w", addr, err)
	}
	return addr, nil
}
