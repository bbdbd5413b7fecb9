package fairqueue

import (
	"context"
	"errors"
	"sync"

	"k8s.io/utils/clock"
)

// Queue is the concurrency shell around the scheduler: it owns the scheduling
// goroutine and blocks callers in Wait. All methods are safe for concurrent
// use.
type Queue struct {
	clk clock.Clock
	obs Observer

	mu       sync.RWMutex
	disabled bool
	closed   bool
	bounds   Bounds
	weights  Weights
}

// New returns a Queue using clk for all timing, starts its scheduling
// goroutine, and applies the given bounds and weights. A nil obs means
// NopObserver. Call Close to stop the goroutine.
func New(clk clock.Clock, b Bounds, w Weights, obs Observer) *Queue {
	if obs == nil {
		obs = NopObserver{}
	}
	return &Queue{clk: clk, obs: obs, bounds: b.withDefaults(), weights: w.clone()}
}

// Wait queues r and blocks until it is admitted, refused, or ctx ends. A
// refusal is reported in Result.Reason with a nil error. When ctx ends the
// request leaves the queue at once and Wait returns ctx.Err(); when Attempt
// returns an error the request leaves the queue and Wait returns that error.
func (q *Queue) Wait(ctx context.Context, r Request) (Result, error) {
	return Result{}, errors.New("fairqueue: not implemented")
}

// HasWaiters reports whether any request needing limitKey is queued or in an
// attempt. A fresh request needing such a key must queue behind them (no
// barging). It does not allocate.
func (q *Queue) HasWaiters(limitKey string) bool { return false }

// HasWaitersAny reports whether HasWaiters is true for any of keys.
func (q *Queue) HasWaitersAny(keys []string) bool { return false }

// SetBounds applies b (zero fields mean defaults) to the next decision.
// Tightened bounds refuse new arrivals but never evict a waiter.
func (q *Queue) SetBounds(b Bounds) {}

// SetWeights applies w to the next scheduling decision without losing or
// re-ordering waiters.
func (q *Queue) SetWeights(w Weights) {}

// Disable turns fair queuing off: every queued request is answered at once
// with ReasonDisabled, and so are new ones until Enable. A request whose
// attempt is running gets its attempt's outcome.
func (q *Queue) Disable() {}

// Enable turns fair queuing back on after Disable.
func (q *Queue) Enable() {}

// Close answers every queued request with ReasonShutdown, refuses new ones,
// and stops the scheduling goroutine, waiting for it to exit. It is safe to
// call more than once.
func (q *Queue) Close() {}

// Stats returns the requests queued and the tenant queues tracked now.
func (q *Queue) Stats() (depth, tenants int) { return 0, 0 }
