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

package admission

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// testTimeout bounds every blocking wait in this package's tests, so a bug
// that leaves a request unanswered fails in seconds instead of hanging.
const testTimeout = 10 * time.Second

// recv receives one value from ch, failing the test after testTimeout.
func recv[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("no %s within %v", what, testTimeout)
	}
	var zero T
	return zero
}

// reload puts in force a copy of c's policy that edit changed, as Load
// would.
func reload(c *Controller, edit func(p *policy)) {
	p := *c.pol.Load()
	edit(&p)
	c.apply(&p)
}

func t0Clock() *testingclock.FakeClock { return testingclock.NewFakeClock(t0) }

// newLimiter returns a limiter without limits.
func newLimiter(t testing.TB) *limiter.Limiter {
	t.Helper()
	l, err := limiter.New(limiter.Config{}, limiter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// newQueue returns a fair queue on a fake clock, closed when t ends.
func newQueue(t testing.TB) *fairqueue.Queue {
	q := fairqueue.New(t0Clock(), fairqueue.Bounds{}, fairqueue.Weights{Default: 1}, nil)
	t.Cleanup(q.Close)
	return q
}

// reserverFunc is a Reserver made of a function.
type reserverFunc func() int64

func (f reserverFunc) Reservation() int64 { return f() }
