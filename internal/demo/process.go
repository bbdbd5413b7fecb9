package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// maxProcesses bounds the processes one Supervisor starts.
const maxProcesses = 16

// Process is one child process started by a Supervisor, in its own process
// group, with stdout and stderr written to LogPath.
type Process struct {
	// Name labels the process in progress lines and errors.
	Name string
	// LogPath is the file receiving the process's stdout and stderr.
	LogPath string

	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error // set before done is closed
}

// Supervisor starts child processes and stops every one of them, and every
// process they started, when asked or when its context ends.
type Supervisor struct {
	logDir string
	grace  time.Duration

	mu    sync.Mutex
	procs []*Process
}

// NewSupervisor returns a Supervisor writing logs under logDir. Stop gives a
// process grace after SIGTERM before it is killed.
func NewSupervisor(logDir string, grace time.Duration) *Supervisor {
	return &Supervisor{logDir: logDir, grace: grace}
}

// Start runs path with args as the process called name. Cancelling ctx sends
// SIGTERM to the process group, then SIGKILL after the grace period.
func (s *Supervisor) Start(ctx context.Context, name, path string, args ...string) (*Process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.procs) >= maxProcesses {
		return nil, fmt.Errorf("starting %s: already supervising %d processes, the most allowed", name, maxProcesses)
	}
	logPath := filepath.Join(s.logDir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating the log of %s: %w", name, err)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return signalGroup(cmd, syscall.SIGTERM) }
	cmd.WaitDelay = s.grace
	if err := cmd.Start(); err != nil {
		_ = logFile.Close() // still empty: the process never started
		return nil, fmt.Errorf("starting %s (%s): %w", name, path, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, log: logFile, done: make(chan struct{})}
	go p.wait()
	s.procs = append(s.procs, p)
	return p, nil
}

// wait reaps the process, then kills whatever is left of its group, so a
// child it started cannot outlive it.
func (p *Process) wait() {
	err := p.cmd.Wait()
	_ = signalGroup(p.cmd, syscall.SIGKILL)
	if cerr := p.log.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("closing the log %s: %w", p.LogPath, cerr)
	}
	p.err = err
	close(p.done)
}

// signalGroup sends sig to the process group of cmd.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Done is closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// exitError describes how a process that exited at an unexpected moment
// ended: err from Exited, or a clean exit status 0 when err is nil.
func exitError(err error) error {
	if err == nil {
		return errors.New("exit status 0")
	}
	return err
}

// Exited reports whether the process has exited, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the process group and waits for the process to
// exit; after grace it is killed. It returns an error unless the process
// exited by itself with status 0 within grace.
func (p *Process) Stop(grace time.Duration) error {
	if exited, err := p.Exited(); exited {
		if err != nil {
			return fmt.Errorf("%s had already exited: %w (see %s)", p.Name, err, p.LogPath)
		}
		return nil
	}
	if err := signalGroup(p.cmd, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping %s: %w", p.Name, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("%s exited with %w after SIGTERM (see %s)", p.Name, p.err, p.LogPath)
		}
		return nil
	case <-timer.C:
		_ = signalGroup(p.cmd, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s did not exit within %v of SIGTERM and was killed (see %s)", p.Name, grace, p.LogPath)
	}
}

// StopAll stops every process still running, the last started first, and
// returns every failure to exit cleanly.
func (s *Supervisor) StopAll() error {
	s.mu.Lock()
	procs := append([]*Process(nil), s.procs...)
	s.mu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		errs = append(errs, procs[i].Stop(s.grace))
	}
	return errors.Join(errs...)
}

// portClosed reports whether nothing accepts connections on addr any more.
func portClosed(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return true
	}
	_ = c.Close() // a probe: nothing was sent
	return false
}
