/*
Copyright 2026 The fairqueue Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package redistest runs a real redis-server child process on a free
// loopback port, without persistence, for tests and demos: Launch starts one
// and waits until it answers PING, Kill stops it and Restart brings it back,
// empty, on the same port; Pause and Resume freeze and thaw it. Start is
// Launch for a test, skipping it when redis-server is not installed (failing
// it under CI); StartSentinel and LaunchSentinel start a Redis Sentinel. Run
// is a TestMain body that checks for goroutine leaks with go-redis's grace.
package redistest

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
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairqueue/fairqueue/internal/proc"
)

// DefaultBinary is the redis-server run when none is named.
const DefaultBinary = "redis-server"

// StartTimeout bounds how long Launch and Restart wait for the server to
// answer PING.
const StartTimeout = 10 * time.Second

// pingTimeout bounds each PING while waiting, so a server that accepted the
// connection but hangs does not use up the whole StartTimeout.
const pingTimeout = 200 * time.Millisecond

// Look returns the path of redis-server on PATH.
func Look() (string, error) { return exec.LookPath(DefaultBinary) }

// InCI reports whether the tests run under CI (CI is set), where every real
// part must be present.
func InCI() bool { return os.Getenv("CI") != "" }

// Need returns the path of redis-server, skipping the test when it is absent
// outside CI and failing it under CI, which must install it.
func Need(t testing.TB) string {
	t.Helper()
	return need(t, DefaultBinary, "redis-server", "real-Redis")
}

// need returns the path of bin on PATH. When bin is absent it skips the
// test, or fails it under CI, naming the Debian package to install and the
// tests that need it.
func need(t testing.TB, bin, pkg, tests string) string {
	t.Helper()
	path, err := exec.LookPath(bin)
	if err == nil {
		return path
	}
	if InCI() {
		t.Fatalf("%s is not on PATH but CI is set: install it (Debian: apt-get install -y %s)", bin, pkg)
	}
	t.Skipf("%s is not on PATH; install it (Debian: apt-get install -y %s) to run the %s tests", bin, pkg, tests)
	return ""
}

// Start starts a redis-server on a free loopback port, with its working
// directory (--dir) in a temporary directory of the test, and kills it when
// the test ends. extra are additional server arguments. It skips the test
// when redis-server is not installed, and fails it under CI.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin := Need(t)
	s, err := Launch(context.Background(), bin, t.TempDir(), extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Kill() })
	return s
}

// Server is a redis-server child process on a loopback port, without
// persistence. Its methods are safe for concurrent use.
type Server struct {
	bin  string
	addr string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd // nil while stopped
}

// Launch starts bin (DefaultBinary when empty) on a free loopback port and
// waits until it answers PING, at most StartTimeout or until ctx ends. dir,
// when not empty, is its working directory (--dir), where it would write
// files such as a cluster's nodes.conf. extra are additional server
// arguments.
func Launch(ctx context.Context, bin, dir string, extra ...string) (*Server, error) {
	if bin == "" {
		bin = DefaultBinary
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, addr: net.JoinHostPort("127.0.0.1", port)}
	s.args = []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no"}
	if dir != "" {
		s.args = append(s.args, "--dir", dir)
	}
	s.args = append(s.args, extra...)
	if err := s.Restart(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// freePort returns a loopback port that was free a moment ago, for a
// redis-server flag.
func freePort() (string, error) {
	addr, err := proc.FreeAddr()
	if err != nil {
		return "", err
	}
	_, port, err := net.SplitHostPort(addr)
	return port, err
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

// Running reports whether the server process is running (not killed).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Binary is the redis-server run.
func (s *Server) Binary() string { return s.bin }

// Restart starts the stopped server again, empty, on the same address and
// waits until it answers PING, at most StartTimeout or until ctx ends; on
// failure the server is left stopped. Launch starts it the first time.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("redis-server on %s is already running", s.addr)
	}
	cmd := exec.Command(s.bin, s.args...) // its output is discarded
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	s.cmd = cmd
	if err := s.waitPing(ctx); err != nil {
		return errors.Join(err, s.killLocked())
	}
	return nil
}

// waitPing polls the server with PING until it answers.
func (s *Server) waitPing(ctx context.Context) error {
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	return poll(ctx, 10*time.Millisecond, fmt.Sprintf("redis-server on %s did not answer PING within %s", s.addr, StartTimeout), func() error {
		pctx, pcancel := context.WithTimeout(ctx, pingTimeout)
		defer pcancel()
		return c.Ping(pctx).Err()
	})
}

// poll calls check every interval until it returns nil. When ctx ends
// first, it fails with what, ctx's error and check's last error. It polls
// external processes, which no fake clock can drive.
func poll(ctx context.Context, every time.Duration, what string, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, errors.Join(ctx.Err(), err))
		case <-time.After(every):
		}
	}
}

// Kill stops the server at once and waits for it to exit. Killing a stopped
// server does nothing.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killLocked()
}

func (s *Server) killLocked() error {
	if s.cmd == nil {
		return nil
	}
	err := s.cmd.Process.Kill()
	_ = s.cmd.Wait() // killed: the exit status is expected
	s.cmd = nil
	if errors.Is(err, os.ErrProcessDone) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("kill redis-server on %s: %w", s.addr, err)
	}
	return nil
}

// StartSentinel starts a Redis Sentinel (redis-server --sentinel) on a free
// loopback port that monitors the primary at masterAddr under the name
// master, with a quorum of 1, and kills it when the test ends. It skips the
// test when redis-server is not installed, and fails it under CI.
func StartSentinel(t testing.TB, master, masterAddr string) *Server {
	t.Helper()
	bin := Need(t)
	s, err := LaunchSentinel(context.Background(), bin, t.TempDir(), master, masterAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Kill() })
	return s
}

// LaunchSentinel starts bin (DefaultBinary when empty) as a Redis Sentinel
// on a free loopback port, with its configuration file (which a sentinel
// rewrites) in dir, monitoring the primary at masterAddr as master with a
// quorum of 1, and waits until it answers PING.
func LaunchSentinel(ctx context.Context, bin, dir, master, masterAddr string) (*Server, error) {
	if bin == "" {
		bin = DefaultBinary
	}
	host, mport, err := net.SplitHostPort(masterAddr)
	if err != nil {
		return nil, fmt.Errorf("sentinel: the primary's address %q is not host:port: %w", masterAddr, err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "sentinel monitor %s %s %s 1\n", master, host, mport), 0o600); err != nil {
		return nil, fmt.Errorf("sentinel: write its configuration: %w", err)
	}
	s := &Server{bin: bin, addr: net.JoinHostPort("127.0.0.1", port)}
	s.args = []string{conf, "--sentinel", "--port", port, "--bind", "127.0.0.1", "--protected-mode", "no"}
	if err := s.Restart(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Pause freezes the running server (SIGSTOP): it keeps its connections and
// answers nothing until Resume, as a server stalled by its host does.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume lets a paused server run again (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("redis-server on %s is not running", s.addr)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s to redis-server on %s: %w", sig, s.addr, err)
	}
	return nil
}
