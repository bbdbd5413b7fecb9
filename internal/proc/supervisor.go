package proc

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// maxSupervised bounds the processes one Supervisor starts.
const maxSupervised = 16

// Supervisor starts processes that must all be gone when a program ends, on
// success, failure or Ctrl-C alike (the demo's control plane, operator and
// data planes): each in a process group of its own, with its output in a
// log file, stopped when asked or when the context it was started with ends.
type Supervisor struct {
	logDir string
	grace  time.Duration

	mu    sync.Mutex
	procs []*Process
}

// NewSupervisor returns a Supervisor writing each process's log to
// logDir/NAME.log. A process gets grace to exit after SIGTERM before it is
// killed.
func NewSupervisor(logDir string, grace time.Duration) *Supervisor {
	if grace <= 0 {
		// As Stop's default, so that a cancelled context's SIGKILL
		// (exec's WaitDelay) comes too.
		grace = StopGrace
	}
	return &Supervisor{logDir: logDir, grace: grace}
}

// Start runs path with args as the process called name. Cancelling ctx sends
// SIGTERM to its process group, then SIGKILL after the grace period.
func (s *Supervisor) Start(ctx context.Context, name, path string, args ...string) (*Process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.procs) >= maxSupervised {
		return nil, fmt.Errorf("starting %s: already supervising %d processes, the most allowed", name, maxSupervised)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Cancel = func() error { return signalGroup(cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = s.grace
	p, err := StartWith(cmd, Options{Name: name, LogPath: filepath.Join(s.logDir, name+".log"), Group: true, Grace: s.grace})
	if err != nil {
		return nil, err
	}
	s.procs = append(s.procs, p)
	return p, nil
}

// StopAll stops every process still running, the last started first, and
// returns every failure to exit cleanly (see Process.Stop).
func (s *Supervisor) StopAll() error {
	s.mu.Lock()
	procs := append([]*Process(nil), s.procs...)
	s.mu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		errs = append(errs, procs[i].Stop())
	}
	return errors.Join(errs...)
}
