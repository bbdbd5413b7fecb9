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
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// When the store is marked down. One failed call fails only itself (Closed:
// that request is refused 503 store_unavailable; Open: it is decided by the
// in-memory fallback); the store is marked down, so that calls stop waiting
// for Redis and the probe takes over, only after a run of failed calls with
// no success between them that is both long enough and lasts long enough.
const (
	// DefaultDownAfterFailures is how many consecutive failed calls mark the
	// store down.
	DefaultDownAfterFailures = 3
	// DefaultDownAfterSpan is how long a run of failures must last, from the
	// first failed call to the latest, before it marks the store down. A
	// store marked down stays so for at least one probe interval, so a
	// shorter run (a CPU stall, a slow fork) is cheaper to fail call by
	// call: it defaults to DefaultProbeInterval.
	DefaultDownAfterSpan = DefaultProbeInterval
)

// CheckTimeout bounds Check, which a data plane runs when it puts a store
// in force: longer than a probe, as the first call dials, authenticates and
// loads the script, on a machine that may be busy starting up.
const CheckTimeout = 2 * time.Second

// failureRun is the store's one record of consecutive failures, and the one
// place that decides when they mark the store down (see
// DefaultDownAfterFailures). Every call reports its outcome; a success costs
// one atomic load while nothing is failing.
type failureRun struct {
	count int           // failures that mark down
	span  time.Duration // the shortest run that marks down

	failing atomic.Bool // a run is under way: n > 0
	mu      sync.Mutex
	n       int
	first   time.Time // the run's first failure
	last    error     // the run's latest failure
}

// succeeded ends the run of failures, if any.
func (r *failureRun) succeeded() {
	if !r.failing.Load() {
		return
	}
	r.mu.Lock()
	r.reset()
	r.mu.Unlock()
}

// failed records a call that failed at now with err and reports whether the
// run now marks the store down, which ends the run.
func (r *failureRun) failed(now time.Time, err error) (down bool, n int, lasted time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == 0 {
		r.first = now
		r.failing.Store(true)
	}
	r.n++
	r.last = err
	n, lasted = r.n, now.Sub(r.first)
	if n < r.count || lasted < r.span {
		return false, n, lasted
	}
	r.reset()
	return true, n, lasted
}

// reset ends the run; r.mu is held.
func (r *failureRun) reset() {
	r.n, r.last = 0, nil
	r.failing.Store(false)
}

// check runs the bucket script as a real charge, the call every request
// makes, on a one-nanosecond bucket that expires a millisecond later: it
// succeeds only when Redis would apply a request's charge, so it fails on a
// server that is out of memory (noeviction), a read-only replica, a cluster
// node that does not own the policy's slot, a server of another mode than
// the configured one, or refused credentials, where a PING succeeds.
func (s *Store) check(ctx context.Context, c redis.UniversalClient) error {
	a := callArgsPool.Get().(*callArgs)
	defer callArgsPool.Put(a)
	k := &a.keys[0]
	k.b = append(k.b[:0], s.probeKey...)
	a.cmd[3] = k
	args := a.cmd[4:]
	args[0], args[1], args[2] = opCode(OpTake), "", ""
	const ns = "1" // the probe bucket's interval and window, in nanoseconds
	args[3], args[4], args[5] = ns, ns, ns+" "+ns
	res, err := s.runScriptOn(ctx, c, a, 1, 6)
	if err == nil && len(res) != 2 {
		err = badReplyError(fmt.Sprintf("bucket script answered %d values for 1 bucket", len(res)))
	}
	if err != nil {
		return fmt.Errorf("the bucket script on %s: %w", s.probeKey, err)
	}
	return nil
}

// Check runs the health check now and, if Redis would not apply a charge,
// marks the store down at once (logging why, with a hint when the reply
// names a likely misconfiguration) and returns the reason. A data plane
// checks each Redis store it puts in force, at start and on reload, so a
// store that refuses every call is reported before the first request.
func (s *Store) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, max(s.probeTO, CheckTimeout))
	defer cancel()
	err := s.check(ctx, s.Client())
	if err != nil {
		err = s.explain(ctx, err)
		s.markDown(err)
	}
	return err
}

// Health returns nil while the store uses Redis, else why it does not: the
// failure that marked it down, with a hint, and since when.
func (s *Store) Health() error {
	if !s.down.Load() {
		return nil
	}
	if p := s.downCause.Load(); p != nil {
		return fmt.Errorf("redis rate-limit store down since %s (%s): %w",
			p.since.UTC().Format(time.RFC3339), s.behaviour(), p.err)
	}
	return errors.New("redis rate-limit store down")
}

// downCause is why and since when the store is down.
type downCause struct {
	err   error
	since time.Time
}

// explain adds to err a hint naming the misconfiguration its reply points
// to, asking the server its mode when the reply alone does not say.
func (s *Store) explain(ctx context.Context, err error) error {
	msg := err.Error()
	var hint string
	switch {
	case strings.Contains(msg, "OOM "):
		hint = "Redis is out of memory (maxmemory with a noeviction policy) and refuses the charge; free memory or raise maxmemory"
	case strings.Contains(msg, "READONLY "):
		hint = "the address is a read-only replica; point the store at the primary, or use mode Sentinel or Cluster to follow it"
	case strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "NOPERM"):
		hint = "Redis refuses the credentials or their permissions; check the username and password in the store's Secret and the ACL user's rights (evalsha, eval)"
	case strings.Contains(msg, "cluster support disabled"):
		hint = "mode is Cluster but the addresses are a Redis without cluster support; use mode Standalone (or Sentinel)"
	case strings.Contains(msg, "MOVED ") || strings.Contains(msg, "ASK "):
		hint = "mode is " + string(s.mode) + " but the address is a Redis Cluster node that does not own the policy's slot; use mode Cluster with the nodes as seeds"
	case s.mode == ModeSentinel:
		hint = "no sentinel at " + strings.Join(s.addrs, ", ") + " names a reachable primary " + fmt.Sprintf("%q", s.masterName) +
			"; check sentinelMasterName (SENTINEL MASTERS lists the names) and that the addresses are sentinels"
	case s.mode == ModeStandalone && strings.Contains(msg, "unknown command"):
		hint = "the address does not run scripts"
		if m := s.serverMode(ctx); m != "" {
			hint = "mode is Standalone but the address is a Redis " + m
			if m == "sentinel" {
				hint += "; use mode Sentinel with sentinelMasterName"
			}
		}
	}
	if hint == "" {
		return err
	}
	return fmt.Errorf("%w (%s)", err, hint)
}

// serverMode asks the configured address its redis_mode (standalone,
// cluster or sentinel), or returns "" when it does not say.
func (s *Store) serverMode(ctx context.Context) string {
	info, err := s.Client().Info(ctx, "server").Result()
	if err != nil {
		var re redis.Error
		if !errors.As(err, &re) {
			return ""
		}
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_mode:"); ok {
			return v
		}
	}
	return ""
}
