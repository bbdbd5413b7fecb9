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

package fleetdemo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// redisBackend is the Redis the demo's replicas share, which it can kill and
// bring back on the same address.
type redisBackend interface {
	// Addr is host:port.
	Addr() string
	// Describe names the server for the report.
	Describe() string
	// Kill stops the server at once.
	Kill() error
	// Restart brings it back, empty, on the same address.
	Restart(ctx context.Context) error
	// Close stops it for good.
	Close() error
}

// startRedis starts a real redis-server when bin is found on PATH (bin empty
// means "redis-server"; "-" forces the embedded server), else an embedded
// miniredis served on a loopback port. The string says which, and why.
func startRedis(ctx context.Context, bin string) (redisBackend, string, error) {
	if bin != "-" {
		if bin == "" {
			bin = "redis-server"
		}
		path, err := exec.LookPath(bin)
		if err == nil {
			port, err := freePort()
			if err != nil {
				return nil, "", err
			}
			s := &realRedis{bin: path, addr: fmt.Sprintf("127.0.0.1:%d", port)}
			if err := s.start(ctx); err != nil {
				return nil, "", err
			}
			return s, "", nil
		}
		note := fmt.Sprintf("%s not found on PATH (install the redis-server package for a real one): serving an embedded miniredis instead", bin)
		m, err := startMini()
		return m, note, err
	}
	m, err := startMini()
	return m, "embedded miniredis requested", err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port for redis-server: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// realRedis is a redis-server child process without persistence.
type realRedis struct {
	bin, addr string
	cmd       *exec.Cmd
}

func (s *realRedis) Addr() string     { return s.addr }
func (s *realRedis) Describe() string { return "redis-server (" + s.bin + ") on " + s.addr }

func (s *realRedis) start(ctx context.Context) error {
	_, port, _ := net.SplitHostPort(s.addr)
	s.cmd = exec.Command(s.bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for c.Ping(ctx).Err() != nil {
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("redis-server on %s did not answer PING within 10s", s.addr), s.Kill())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func (s *realRedis) Kill() error {
	if s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait() // killed: the exit status is expected
	s.cmd = nil
	return nil
}

func (s *realRedis) Restart(ctx context.Context) error { return s.start(ctx) }
func (s *realRedis) Close() error                      { return s.Kill() }

// miniRedis is the embedded fallback.
type miniRedis struct{ m *miniredis.Miniredis }

func startMini() (*miniRedis, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("start the embedded miniredis: %w", err)
	}
	return &miniRedis{m: m}, nil
}

func (s *miniRedis) Addr() string                  { return s.m.Addr() }
func (s *miniRedis) Describe() string              { return "embedded miniredis on " + s.m.Addr() }
func (s *miniRedis) Kill() error                   { s.m.Close(); return nil }
func (s *miniRedis) Restart(context.Context) error { s.m.FlushAll(); return s.m.Restart() }
func (s *miniRedis) Close() error                  { s.m.Close(); return nil }

// quietRedisLog drops go-redis's own log lines (a dial error per attempt
// while Redis is down would flood the live table); the store reports the
// outage itself.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}
