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

package redisstore

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	SetClientLogger(logr.Discard()) // failed dials during outages are expected here
	code := m.Run()
	// go-redis retries a failed dial every second in a goroutine that exits
	// at its next attempt once its client is closed: give it that long.
	deadline := time.Now().Add(3 * time.Second)
	for code == 0 {
		err := goleak.Find()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "goroutines left running after the tests:", err)
			code = 1
		}
		time.Sleep(100 * time.Millisecond)
	}
	os.Exit(code)
}

// redisServer is a redis-server process started by a test on a free
// loopback port, without persistence.
type redisServer struct {
	t    testing.TB
	addr string
	args []string
	cmd  *exec.Cmd
	dir  string
}

// needRedisServer returns the path of redis-server, skipping the test when
// it is absent outside CI and failing it under CI, which must install it.
func needRedisServer(t testing.TB) string {
	t.Helper()
	path, err := lookRedisServer()
	if err == nil {
		return path
	}
	if inCI() {
		t.Fatalf("redis-server is not on PATH but CI is set: install it (Debian: apt-get install -y redis-server)")
	}
	t.Skip("redis-server is not on PATH; install it (Debian: apt-get install -y redis-server) to run the real-Redis tests")
	return ""
}

func lookRedisServer() (string, error) { return exec.LookPath("redis-server") }

// inCI reports whether the tests run under CI, where every real part must
// be present.
func inCI() bool { return os.Getenv("CI") != "" }

// startRedis starts a redis-server on a free loopback port and stops it
// when the test ends. extra are additional server arguments.
func startRedis(t testing.TB, extra ...string) *redisServer {
	t.Helper()
	needRedisServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	s := &redisServer{t: t, addr: "127.0.0.1:" + strconv.Itoa(port), dir: t.TempDir()}
	s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--protected-mode", "no"}, extra...)
	s.start()
	t.Cleanup(s.stop)
	return s
}

// start runs the server and waits, at most 10s, until it answers PING.
func (s *redisServer) start() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", s.args...)
	s.cmd.Stdout, s.cmd.Stderr = nil, nil
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.stop()
			s.t.Fatalf("redis-server on %s did not answer PING within 10s: %v", s.addr, err)
		}
		time.Sleep(10 * time.Millisecond) // polling an external process, not test timing
	}
}

// stop kills the server and waits for it to exit.
func (s *redisServer) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// testObserver records what a Store reports.
type testObserver struct {
	mu     sync.Mutex
	errors map[string]int
	ops    map[string]int
	states chan bool // up, buffered; the latest transitions
}

func newTestObserver() *testObserver {
	return &testObserver{errors: map[string]int{}, ops: map[string]int{}, states: make(chan bool, 64)}
}

func (o *testObserver) StoreLatency(op string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ops[op]++
}

func (o *testObserver) StoreError(kind string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.errors[kind]++
}

func (o *testObserver) StoreState(up, _ bool) {
	select {
	case o.states <- up:
	default:
	}
}

func (o *testObserver) errorCount(kind string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.errors[kind]
}

func policyName(t testing.TB) string {
	return fmt.Sprintf("p%d", time.Now().UnixNano())
}
