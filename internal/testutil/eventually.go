package testutil

import (
	"sync"
	"testing"
	"time"
)

// DefaultWait bounds Eventually. It is long because CI machines are shared
// and slow; a condition that holds returns as soon as it is seen.
const DefaultWait = 20 * time.Second

// Eventually polls cond every few milliseconds until it holds, and fails the
// test naming what was awaited if it still does not after DefaultWait. It is
// a synchronisation point in real time (a process started, a file followed,
// a goroutine parked), never timing logic: code under a fake clock is
// stepped, not awaited.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, DefaultWait, what, cond)
}

// EventuallyWithin is Eventually with its own bound.
func EventuallyWithin(t testing.TB, wait time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	poll := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", wait, what)
		}
		time.Sleep(poll)
		// Back off to 50 ms so a long wait does not spin on a busy machine.
		poll = min(2*poll, 50*time.Millisecond)
	}
}

// WaitGroupWithin waits for wg, failing the test naming what was awaited if
// it has not finished after wait.
func WaitGroupWithin(t testing.TB, wait time.Duration, what string, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatalf("%s did not finish within %v", what, wait)
	}
}
