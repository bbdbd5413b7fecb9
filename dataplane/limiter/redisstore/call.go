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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// The bucket script is called with a hand-built command rather than
// redis.Script.Run so that an admission allocates little: the argument
// slice and the keys' bytes come from a pool, the shape arguments are
// formatted once per limit, and the reply is read straight into integers.
// The bytes on the wire are the same.

// numKeysArg[n] is the script's key count n as a command argument.
var numKeysArg = func() (a [limiter.MaxBatch + 1]any) {
	for n := range a {
		a[n] = strconv.Itoa(n)
	}
	return a
}()

// keyArg is one bucket key written into a pooled buffer. go-redis writes a
// BinaryMarshaler's bytes as the argument, and a pointer in an interface
// costs no allocation, unlike a string.
type keyArg struct{ b []byte }

// MarshalBinary returns the key's bytes.
func (k *keyArg) MarshalBinary() ([]byte, error) { return k.b, nil }

// String returns the key, as a Redis Cluster client reads it to route the
// call.
func (k *keyArg) String() string { return string(k.b) }

// callArgs is one script call's command: EVALSHA, the hash, the key count,
// the keys, then the operation, the time, every bucket's shape and, unless
// the call takes or peeks one token per bucket, every bucket's amount. It
// carries the call's context too, so that a call allocates none.
type callArgs struct {
	cmd     [3 + limiter.MaxBatch + 3 + 4*limiter.MaxBatch]any
	keys    [limiter.MaxBatch]keyArg
	amounts [limiter.MaxBatch]keyArg
	ctx     *callContext // nil until first use and after it expired
}

var callArgsPool = sync.Pool{New: func() any { return new(callArgs) }}

// shapeArg is a bucket shape's script arguments: its interval, its window
// and both joined by a space. It is kept per dimension because a policy's
// limits rarely change.
type shapeArg struct {
	interval, window int64
	args             [3]any
}

// shapeArgs returns the script arguments for a bucket of dimension d with
// the given shape, formatting them only when the dimension's last shape
// differs.
func (s *Store) shapeArgs(d limiter.Dimension, interval, window int64) *[3]any {
	c := &s.shapes[d]
	if p := c.Load(); p != nil && p.interval == interval && p.window == window {
		return &p.args
	}
	iv, w := strconv.FormatInt(interval, 10), strconv.FormatInt(window, 10)
	p := &shapeArg{interval: interval, window: window, args: [3]any{iv, w, iv + " " + w}}
	c.Store(p)
	return &p.args
}

// shapeCache holds the last shape argument of each dimension.
type shapeCache = [limiter.NumDimensions]atomic.Pointer[shapeArg]

// runScript runs the bucket script with the command a built for n buckets
// and nargs script arguments, loading the script if Redis does not know it
// (a restarted or new server), and returns its integer reply.
func (s *Store) runScript(ctx context.Context, a *callArgs, n, nargs int) ([]int64, error) {
	return s.runScriptOn(ctx, s.Client(), a, n, nargs)
}

// runScriptOn is runScript through client c.
func (s *Store) runScriptOn(ctx context.Context, c redis.UniversalClient, a *callArgs, n, nargs int) ([]int64, error) {
	argv := a.cmd[:3+n+nargs]
	argv[0], argv[1], argv[2] = "evalsha", s.scriptHash, numKeysArg[n]
	cmd := redis.NewIntSliceCmd(ctx, argv...)
	err := c.Process(ctx, cmd)
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT ") {
		argv[0], argv[1] = "eval", bucketScript
		cmd = redis.NewIntSliceCmd(ctx, argv...)
		err = c.Process(ctx, cmd)
	}
	if err != nil {
		return nil, err
	}
	return cmd.Val(), nil
}

// callContext is the context.Context of one store call: a deadline, and a
// Done channel that a timer closes when the deadline passes, as
// context.WithTimeout gives. Unlike that, it is kept with the pooled call
// arguments and used again by the next call, so a call allocates no
// context, timer or channel (five allocations and a few hundred
// nanoseconds of the client's share of a round trip). Only one call uses it
// at a time: arm starts it, disarm stops it, and a context whose deadline
// passed is never used again, since its channel stays closed.
type callContext struct {
	deadline time.Time
	done     chan struct{}
	expired  atomic.Bool
	timer    clock.Timer
}

var _ context.Context = (*callContext)(nil)

// newCallContext returns an unarmed callContext whose timer afterFunc
// makes (clock.RealClock's AfterFunc, or a fake clock's in a test).
func newCallContext(afterFunc func(time.Duration, func()) clock.Timer) *callContext {
	c := &callContext{done: make(chan struct{})}
	c.timer = afterFunc(time.Hour, c.expire)
	c.timer.Stop()
	return c
}

// expire is the timer's function: the deadline has passed.
func (c *callContext) expire() {
	c.expired.Store(true) // before close, so a closed Done always finds Err set
	close(c.done)
}

// arm starts a call at now that must end within timeout.
func (c *callContext) arm(now time.Time, timeout time.Duration) {
	c.deadline = now.Add(timeout)
	c.timer.Reset(timeout)
}

// disarm ends the call and reports whether c can be armed again: false
// when the deadline passed (or is passing) first.
func (c *callContext) disarm() bool { return c.timer.Stop() }

// Deadline implements context.Context: the armed call's deadline.
func (c *callContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Done implements context.Context: closed once the deadline has passed.
func (c *callContext) Done() <-chan struct{} { return c.done }

// Err implements context.Context: context.DeadlineExceeded once Done is
// closed, nil before.
func (c *callContext) Err() error {
	if c.expired.Load() {
		return context.DeadlineExceeded
	}
	return nil
}

// Value implements context.Context; a call carries no values.
func (*callContext) Value(any) any { return nil }

// realAfterFunc makes the real timers of the store's call contexts.
func realAfterFunc(d time.Duration, f func()) clock.Timer { return clock.RealClock{}.AfterFunc(d, f) }
