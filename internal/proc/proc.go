// Package proc runs a command as a child process the way the repository's
// tests and tools need it: started, awaited until it is ready (an HTTP probe
// answers, a line is printed), and stopped gracefully with SIGTERM, killed
// only if it outlives a grace period. A process may run in a process group
// of its own, so that stopping it stops whatever it started, with its output
// in a log file; a Supervisor stops every process it started (the demo). It
// takes no testing.TB, so hack tools use it directly; internal/testbin adds
// the test plumbing on top.
package proc

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

const (
	// DefaultReadyWithin bounds WaitReady when it is given no bound.
	DefaultReadyWithin = 30 * time.Second
	// StopGrace is how long a process may take to exit after SIGTERM
	// before Stop kills it, unless Options.Grace says otherwise.
	StopGrace = 15 * time.Second
	// pollEvery is how often WaitReady asks whether the process is ready.
	pollEvery = 20 * time.Millisecond
)

// Options say how StartWith runs a process. The zero value is Start's.
type Options struct {
	// Name labels the process in errors; default its binary's base name.
	Name string
	// LogPath, when set, is a file created to receive the process's stdout
	// and stderr; errors about the process point to it.
	LogPath string
	// Group runs the process in a process group of its own and sends Stop's
	// signals to the whole group. Once the process exits, whatever is left
	// of its group is killed: nothing it started outlives it.
	Group bool
	// Grace is how long Stop waits after SIGTERM before it kills; 0 means
	// StopGrace.
	Grace time.Duration
}

// Process is a started child process.
type Process struct {
	// Cmd is the started command.
	Cmd *exec.Cmd

	opts Options
	log  *os.File // nil without Options.LogPath
	done chan struct{}
	err  error // set before done is closed
}

// Start starts cmd and returns it as a Process, whose exit is collected in
// the background. cmd's output goes where its Stdout and Stderr say.
func Start(cmd *exec.Cmd) (*Process, error) { return StartWith(cmd, Options{}) }

// StartWith starts cmd as opts say and returns it as a Process, whose exit
// is collected in the background. With opts.LogPath cmd's output goes to
// that file, else where its Stdout and Stderr say.
func StartWith(cmd *exec.Cmd, opts Options) (*Process, error) {
	if opts.Name == "" {
		opts.Name = filepath.Base(cmd.Path)
	}
	if opts.Grace == 0 {
		opts.Grace = StopGrace
	}
	p := &Process{Cmd: cmd, opts: opts, done: make(chan struct{})}
	if opts.LogPath != "" {
		f, err := os.Create(opts.LogPath)
		if err != nil {
			return nil, fmt.Errorf("creating the log of %s: %w", opts.Name, err)
		}
		p.log = f
		cmd.Stdout, cmd.Stderr = f, f
	}
	if opts.Group {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Setpgid = true
	}
	if err := cmd.Start(); err != nil {
		if p.log != nil {
			_ = p.log.Close() // still empty: the process never started
		}
		return nil, fmt.Errorf("starting %s (%s): %w", opts.Name, cmd.Path, err)
	}
	go p.wait()
	return p, nil
}

// wait reaps the process, kills whatever is left of its group and closes
// its log.
func (p *Process) wait() {
	err := p.Cmd.Wait()
	if p.opts.Group {
		_ = signalGroup(p.Cmd.Process.Pid, syscall.SIGKILL) // nothing left is fine
	}
	if p.log != nil {
		if cerr := p.log.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing the log %s: %w", p.opts.LogPath, cerr)
		}
	}
	p.err = err
	close(p.done)
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
			return p.errorf("%s exited before it was ready (%w)", p.opts.Name, p.ExitReason())
		}
		if ready == nil || ready() {
			return nil
		}
		select {
		case <-p.done:
		case <-tick.C:
		case <-deadline.C:
			return p.errorf("%s was not ready within %v", p.opts.Name, within)
		}
	}
}

// errorf formats an error about the process, pointing to its log if it has
// one.
func (p *Process) errorf(format string, args ...any) error {
	if p.opts.LogPath != "" {
		format += " (see %s)"
		args = append(args, p.opts.LogPath)
	}
	return fmt.Errorf(format, args...)
}

// Name labels the process in errors (Options.Name).
func (p *Process) Name() string { return p.opts.Name }

// LogPath is the file receiving the process's output, or "" (Options.LogPath).
func (p *Process) LogPath() string { return p.opts.LogPath }

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

// ExitReason waits for the process to exit and says how, as an error even
// for a clean exit ("exit status 0"): for messages about an exit nobody
// asked for.
func (p *Process) ExitReason() error {
	if err := p.Err(); err != nil {
		return err
	}
	return errors.New("exit status 0")
}

// Stop sends SIGTERM (to the process group with Options.Group) and waits for
// the process to exit, killing it after the grace period. It returns nil
// when the process exited cleanly, by that SIGTERM or before it, else an
// error that says how it ended (wrapping its exit error).
func (p *Process) Stop() error {
	if p.Exited() {
		if p.err != nil {
			return p.errorf("%s had already exited: %w", p.opts.Name, p.err)
		}
		return nil
	}
	_ = p.signal(syscall.SIGTERM) // an exit since, or a process deaf to it, is seen below
	timer := time.NewTimer(p.opts.Grace)
	defer timer.Stop()
	select {
	case <-p.done:
		if p.err != nil {
			return p.errorf("%s exited with %w after SIGTERM", p.opts.Name, p.err)
		}
		return nil
	case <-timer.C:
		_ = p.signal(syscall.SIGKILL)
		<-p.done
		return p.errorf("%s did not exit within %v of SIGTERM and was killed", p.opts.Name, p.opts.Grace)
	}
}

// signal sends sig to the process, or to its group with Options.Group. A
// process already gone is no error.
func (p *Process) signal(sig syscall.Signal) error {
	if p.opts.Group {
		return signalGroup(p.Cmd.Process.Pid, sig)
	}
	if err := p.Cmd.Process.Signal(sig); !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// signalGroup sends sig to the process group led by pid. A group already
// gone is no error.
func signalGroup(pid int, sig syscall.Signal) error {
	if err := syscall.Kill(-pid, sig); !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
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
