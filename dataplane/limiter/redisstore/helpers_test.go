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
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/fairqueue/fairqueue/internal/redistest"
)

func TestMain(m *testing.M) {
	SetClientLogger(logr.Discard()) // failed dials during outages are expected here
	os.Exit(redistest.Run(m))
}

// redisServer is a redis-server process started by a test on a free
// loopback port, without persistence (see package redistest).
type redisServer struct {
	t    testing.TB
	addr string
	srv  *redistest.Server
}

func lookRedisServer() (string, error) { return redistest.Look() }

// inCI reports whether the tests run under CI, where every real part must
// be present.
func inCI() bool { return redistest.InCI() }

// startRedis starts a redis-server on a free loopback port and stops it
// when the test ends; it skips the test when redis-server is absent outside
// CI and fails it under CI. extra are additional server arguments.
func startRedis(t testing.TB, extra ...string) *redisServer {
	t.Helper()
	srv := redistest.Start(t, extra...)
	return &redisServer{t: t, addr: srv.Addr(), srv: srv}
}

// start runs the stopped server again on the same port and waits, at most
// 10s, until it answers PING.
func (s *redisServer) start() {
	s.t.Helper()
	if err := s.srv.Restart(context.Background()); err != nil {
		s.t.Fatal(err)
	}
}

// stop kills the server and waits for it to exit.
func (s *redisServer) stop() {
	s.t.Helper()
	if err := s.srv.Kill(); err != nil {
		s.t.Fatal(err)
	}
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
