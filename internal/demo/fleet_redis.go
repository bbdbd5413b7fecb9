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

package demo

import (
	"context"
	"fmt"
	"os/exec"

	"github.com/alicebob/miniredis/v2"

	"github.com/fairqueue/fairqueue/internal/redistest"
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
			bin = redistest.DefaultBinary
		}
		path, err := exec.LookPath(bin)
		if err == nil {
			s, err := redistest.Launch(ctx, path, "")
			if err != nil {
				return nil, "", err
			}
			return realRedis{s}, "", nil
		}
		note := fmt.Sprintf("%s not found on PATH (install the redis-server package for a real one): serving an embedded miniredis instead", bin)
		m, err := startMini()
		return m, note, err
	}
	m, err := startMini()
	return m, "embedded miniredis requested", err
}

// realRedis is a redis-server child process without persistence.
type realRedis struct{ *redistest.Server }

func (s realRedis) Describe() string { return "redis-server (" + s.Binary() + ") on " + s.Addr() }
func (s realRedis) Close() error     { return s.Kill() }

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
