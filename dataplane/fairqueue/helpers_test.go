package fairqueue

import (
	"context"
	"testing"
	"time"
)

// testTimeout bounds every blocking wait in this package's tests, so a bug
// (a waiter never answered, a scheduler that never settles) fails in seconds
// instead of hanging the run.
const testTimeout = 10 * time.Second

// waitUntil blocks until pred, evaluated with mu held after each scheduler
// pass, returns true or the Queue is closed with no attempt running. It fails
// the test after testTimeout.
func (q *Queue) waitUntil(t testing.TB, pred func() bool) {
	t.Helper()
	expired := false
	timer := time.AfterFunc(testTimeout, func() {
		q.mu.Lock()
		expired = true
		q.idle.Broadcast()
		q.mu.Unlock()
	})
	defer timer.Stop()
	q.mu.Lock()
	defer q.mu.Unlock()
	for !pred() {
		if q.closed && q.s.inFlight == 0 {
			return
		}
		if expired {
			t.Fatalf("fair queue did not reach the expected state within %v", testTimeout)
		}
		q.idle.Wait()
	}
}

// waitIdle blocks until the scheduler has processed every event and no attempt
// is running, so tests driving a fake clock can assert a settled state.
func (q *Queue) waitIdle(t testing.TB) {
	t.Helper()
	q.waitUntil(t, q.settled)
}

// recv receives one result from ch, failing the test after testTimeout.
func recv[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("no result within %v", testTimeout)
	}
	var zero T
	return zero
}

// waitNow runs q.Wait for r and returns its outcome, failing the test when
// Wait blocks for longer than testTimeout (a request the test expects to be
// answered at once was queued).
func waitNow(t testing.TB, ctx context.Context, q *Queue, r Request) (Result, error) {
	t.Helper()
	ch := make(chan waitResult, 1)
	go func() {
		res, err := q.Wait(ctx, r)
		ch <- waitResult{res, err}
	}()
	wr := recv(t, ch)
	return wr.res, wr.err
}
