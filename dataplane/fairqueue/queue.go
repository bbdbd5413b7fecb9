package fairqueue

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Queue is the concurrency shell around the scheduler: it owns one scheduling
// goroutine and blocks callers in Wait. The goroutine sleeps on the clock until
// the earliest ready time or deadline, or until an event (arrival, attempt
// outcome, cancellation, reconfiguration) kicks it. All methods are safe for
// concurrent use.
type Queue struct {
	clk  clock.Clock
	obs  Observer
	base time.Time

	mu       sync.RWMutex
	idle     *sync.Cond // broadcast when the scheduler goes to sleep; tests only
	s        *sched
	reported [MaxBands]int // band depths last told the Observer
	disabled bool
	closed   bool

	// Scheduler goroutine state, guarded by mu.
	dirty    bool  // an event arrived since the scheduler's last pass
	sleeping bool  // the scheduler finished a pass and waits
	hasWake  bool  // the scheduler waits for wakeAt
	wakeAt   int64 // scheduler time of the next timed wake-up

	kick      chan struct{}
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// New returns a Queue using clk for all timing, applying b (zero fields mean
// defaults) and w, and starts its scheduling goroutine. A nil obs means
// NopObserver. Call Close to stop the goroutine.
func New(clk clock.Clock, b Bounds, w Weights, obs Observer) *Queue {
	if obs == nil {
		obs = NopObserver{}
	}
	q := &Queue{
		clk:  clk,
		obs:  obs,
		base: clk.Now(),
		s:    newSched(b, w),
		kick: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	q.idle = sync.NewCond(&q.mu)
	q.forgetReported()
	q.s.onDone = q.signal
	go q.run()
	return q
}

// now returns the scheduler time: nanoseconds since the Queue was created.
func (q *Queue) now() int64 { return int64(q.clk.Since(q.base)) }

// toSched converts an absolute deadline to scheduler time. A deadline too far
// ahead to represent saturates to noDeadline, because time.Time.Sub clamps to
// the largest Duration, which equals noDeadline.
func (q *Queue) toSched(t time.Time) int64 {
	if t.IsZero() {
		return noDeadline
	}
	return int64(t.Sub(q.base))
}

// signal wakes w's goroutine; it never blocks because each waiter has at most
// one undelivered signal.
func (q *Queue) signal(w *waiter) {
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// kickLocked wakes the scheduler for a new pass. Callers hold mu.
func (q *Queue) kickLocked() {
	q.dirty = true
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// Wait queues r and blocks until it is admitted, refused, or ctx ends. A
// refusal is reported in Result.Reason with a nil error. When ctx ends the
// request leaves the queue at once and Wait returns ctx.Err(); when Attempt
// returns an error the request leaves the queue and Wait returns that error.
func (q *Queue) Wait(ctx context.Context, r Request) (Result, error) {
	if r.Attempt == nil {
		return Result{}, errors.New("fairqueue: Request.Attempt is nil; pass the function that re-checks the limiter")
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	q.mu.Lock()
	now := q.now()
	if q.closed || q.disabled {
		reason := ReasonDisabled
		if q.closed {
			reason = ReasonShutdown
		}
		band := q.refused(&r, reason)
		q.mu.Unlock()
		return Result{Reason: reason, RetryAfter: max(r.RetryAfter, r.FirstGrant), Band: band}, nil
	}
	deadline := q.toSched(r.Deadline)
	if d, ok := ctx.Deadline(); ok {
		deadline = min(deadline, q.toSched(d))
	}
	a := arrival{
		tenant: r.Tenant, dim: r.Dimension, limitType: r.LimitType, keys: r.LimitKeys, deadline: deadline,
		retryAfter: r.RetryAfter, firstGrant: r.FirstGrant, interval: r.Interval, cost: r.Cost, size: r.Size, band: r.Band,
	}
	w, reason, pos, est := q.s.enqueue(now, &a)
	if w == nil {
		retryAfter := time.Duration(q.s.refusalRetry(now, &a, reason, est))
		band := q.refused(&r, reason)
		q.mu.Unlock()
		return Result{Reason: reason, Position: pos, Estimate: time.Duration(est), RetryAfter: retryAfter, Band: band}, nil
	}
	if w.signal == nil {
		w.signal = make(chan struct{}, 1)
	}
	w.attempt = r.Attempt
	q.changedLocked()
	q.kickLocked()
	q.mu.Unlock()

	for {
		select {
		case <-w.signal:
		case <-ctx.Done():
			q.mu.Lock()
			if w.state != stateDone {
				q.s.cancel(q.now(), w)
				q.changedLocked()
				q.kickLocked()
				res := q.resultLocked(w)
				q.s.release(w)
				q.mu.Unlock()
				return res, ctx.Err()
			}
			q.mu.Unlock()
		}

		q.mu.Lock()
		if w.state == stateGranted {
			q.mu.Unlock()
			ok, retryAfter, err := q.runAttempt(w)
			q.mu.Lock()
			now := q.now()
			if !ok && err == nil && (q.disabled || q.closed) {
				// Fair queuing was turned off during the attempt: answer
				// now instead of re-queuing.
				q.s.cancel(now, w)
				w.reason = ReasonDisabled
				if q.closed {
					w.reason = ReasonShutdown
				}
				w.retryAfter = int64(retryAfter)
			} else {
				q.s.complete(now, w, ok, int64(retryAfter), err)
			}
			q.kickLocked()
			if w.state != stateDone {
				q.mu.Unlock()
				continue
			}
		}
		if w.state != stateDone {
			// A stale signal from an earlier grant; keep waiting.
			q.mu.Unlock()
			continue
		}
		res, err := q.resultLocked(w), w.err
		switch {
		case res.Admitted:
			q.obs.Granted(w.dim, w.limitType, q.s.weights.BandName(res.Band), res.Waited)
		case res.Reason != "":
			q.obs.Refused(w.dim, w.limitType, q.s.weights.BandName(res.Band), res.Reason)
		}
		q.changedLocked()
		q.s.release(w)
		q.mu.Unlock()
		return res, err
	}
}

// Refuse reports to the Observer request r, refused at once for a limit the
// queue would have held it for had it a tenant or fair queuing been on (an
// immediate 429 of capacity mode, SPEC 6b), with reason, and returns its
// Retry-After. The larger of r.FirstGrant and r.RetryAfter is the expected
// time until the limit has room, and r.Interval, when set, the time between
// rooms after (else the first again); refusals close together are told
// successive times, that far apart, so clients that obey them do not all
// come back at once to find room for one. A time beyond the request's budget
// (r.Deadline, and MaxWait from now) is cut to it, unless the time to room
// itself is. r.Attempt is not used.
func (q *Queue) Refuse(r Request, reason Reason) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	q.refused(&r, reason)
	first := max(int64(r.RetryAfter), int64(r.FirstGrant))
	step := first
	if r.Interval > 0 {
		step = int64(r.Interval)
	}
	return time.Duration(q.s.refusedOutside(now, first, step, q.s.budget(now, q.toSched(r.Deadline))))
}

// refused reports r, refused with reason without waiting, to the Observer
// and returns the band it would have been scheduled in.
func (q *Queue) refused(r *Request, reason Reason) int {
	band, _ := q.s.bandFor(r.Tenant, r.Band)
	q.obs.Refused(r.Dimension, r.LimitType, q.s.weights.BandName(band), reason)
	return band
}

// runAttempt runs w's attempt. If the attempt panics, w leaves the queue and
// frees its attempt slot before the panic continues, so one bad attempt
// cannot stall the requests sharing its limit keys.
func (q *Queue) runAttempt(w *waiter) (ok bool, retryAfter time.Duration, err error) {
	done := false
	defer func() {
		if done {
			return
		}
		q.mu.Lock()
		q.s.cancel(q.now(), w)
		q.s.release(w)
		q.kickLocked()
		q.mu.Unlock()
	}()
	ok, retryAfter, err = w.attempt()
	done = true
	return ok, retryAfter, err
}

// resultLocked builds the Result of a waiter that is done or being cancelled.
func (q *Queue) resultLocked(w *waiter) Result {
	end, band := w.doneAt, w.band
	if w.state != stateDone {
		end, band = q.now(), w.t.band
	}
	return Result{
		Admitted:   w.admitted,
		Reason:     w.reason,
		Position:   w.position,
		Waited:     time.Duration(end - w.enqueuedAt),
		Estimate:   time.Duration(w.estimate),
		RetryAfter: time.Duration(w.retryAfter),
		Band:       band,
	}
}

// forgetReported makes the next changedLocked report every band's depth,
// even 0.
func (q *Queue) forgetReported() {
	for i := range q.reported {
		q.reported[i] = -1
	}
}

// changedLocked reports the queue's depth, and each band's depth that
// changed, to the Observer. Callers hold mu.
func (q *Queue) changedLocked() {
	q.obs.QueueChanged(q.s.depth, q.s.active)
	if len(q.s.weights.Bands) == 0 {
		return
	}
	for i := range q.s.nb {
		if d := q.s.orders[i].depth; d != q.reported[i] {
			q.reported[i] = d
			q.obs.BandQueueChanged(q.s.weights.Bands[i].Name, d)
		}
	}
}

// run is the scheduling goroutine.
func (q *Queue) run() {
	defer close(q.done)
	timer := q.clk.NewTimer(time.Hour)
	timer.Stop()
	for {
		q.mu.Lock()
		q.dirty, q.sleeping = false, false
		now := q.now()
		for {
			w := q.s.next(now)
			if w == nil {
				break
			}
			q.signal(w)
		}
		wake, ok := q.s.nextWake()
		q.changedLocked()
		var d time.Duration
		if ok {
			d = time.Duration(wake - q.now())
			if d <= 0 {
				// Already due (the clock moved during the pass): go again.
				q.mu.Unlock()
				continue
			}
		}
		var tc <-chan time.Time
		if ok {
			// Arm the timer before anyone can see the scheduler asleep, so
			// a clock step right after cannot slip past it.
			timer.Reset(d)
			tc = timer.C()
		}
		q.sleeping, q.hasWake, q.wakeAt = true, ok, wake
		q.idle.Broadcast()
		q.mu.Unlock()

		select {
		case <-q.kick:
		case <-tc:
		case <-q.stop:
			timer.Stop()
			return
		}
		if ok && !timer.Stop() {
			select {
			case <-timer.C():
			default:
			}
		}
	}
}

// Settled reports whether the scheduler has handled every event, no attempt
// is running and nothing is due before its next wake-up. Tests that drive the
// Queue with a fake clock poll it before stepping the clock again.
func (q *Queue) Settled() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.settled()
}

func (q *Queue) settled() bool {
	return q.sleeping && !q.dirty && q.s.inFlight == 0 && (!q.hasWake || q.now() < q.wakeAt)
}

// HasWaiters reports whether any request needing limitKey is queued or in an
// attempt. A fresh request needing such a key must queue behind them (no
// barging). It does not allocate.
func (q *Queue) HasWaiters(limitKey LimitKey) bool {
	if q.s.keyed.Load() == 0 {
		return false
	}
	q.mu.RLock()
	defer q.mu.RUnlock()
	return q.s.hasWaiters(limitKey)
}

// HasWaitersAny reports whether HasWaiters is true for any of keys.
func (q *Queue) HasWaitersAny(keys []LimitKey) bool {
	if q.s.keyed.Load() == 0 {
		return false
	}
	q.mu.RLock()
	defer q.mu.RUnlock()
	for _, k := range keys {
		if q.s.hasWaiters(k) {
			return true
		}
	}
	return false
}

// Adjust applies the settle correction of a granted request's cost to
// tenant: delta (actual minus reserved cost, clamped to +-MaxCost) moves the
// tenant's virtual finish tag by delta of its strides (delta/weight grants of
// cost 1), so an under-reservation delays its next grants and a refund brings
// them forward, but never to more than the tenant's last grant (one stride
// before any grant) behind the virtual time: a refund cannot bank credit.
// A tenant the Queue does not track (never queued, evicted from the table, or
// queued in a shared overflow queue) is left alone. It does not allocate.
func (q *Queue) Adjust(tenant string, delta int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.s.adjust(tenant, delta) {
		// A new head of the ready heap may be grantable now.
		q.kickLocked()
	}
}

// AdjustIn is Adjust for a request that was scheduled in band (its
// Result.Band): a request that lowered its band waited in a queue of its own
// for its tenant and that band, which the correction moves; for the
// tenant's own band it is Adjust.
func (q *Queue) AdjustIn(tenant string, band int, delta int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.s.adjustIn(tenant, band, delta) {
		q.kickLocked()
	}
}

// SetBounds applies b (zero fields mean defaults) to the next decision.
// Tightened bounds refuse new arrivals but never evict a waiter.
func (q *Queue) SetBounds(b Bounds) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.s.setBounds(b)
	q.kickLocked()
}

// SetWeights applies w to the next scheduling decision without losing or
// re-ordering waiters. When w's bands differ, every queue moves to its new
// band with its waiters in order (a tenant whose band is gone to
// DefaultBand, unless its entry names another), and the Observer is told
// every band's depth, and 0 for each band that is gone.
func (q *Queue) SetWeights(w Weights) {
	q.mu.Lock()
	defer q.mu.Unlock()
	old := q.s.weights.Bands
	q.s.setWeights(w, q.now())
	if !slices.Equal(old, q.s.weights.Bands) {
		for _, b := range old {
			if _, ok := q.s.weights.BandIndex(b.Name); !ok {
				q.obs.BandQueueChanged(b.Name, 0)
			}
		}
		q.forgetReported()
		q.changedLocked()
	}
	q.kickLocked()
}

// Disable turns fair queuing off: every queued request is answered at once
// with ReasonDisabled, and so are new ones until Enable. A request whose
// attempt is running is admitted if the attempt passes and answered with
// ReasonDisabled otherwise.
func (q *Queue) Disable() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.disabled = true
	q.s.drain(q.now(), ReasonDisabled)
	q.kickLocked()
}

// Enable turns fair queuing back on after Disable.
func (q *Queue) Enable() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.disabled = false
}

// Close answers every queued request with ReasonShutdown, refuses new ones,
// and stops the scheduling goroutine, waiting for it to exit. A request whose
// attempt is running gets its attempt's outcome. It is safe to call more than
// once.
func (q *Queue) Close() {
	q.closeOnce.Do(func() {
		q.mu.Lock()
		q.closed = true
		q.s.drain(q.now(), ReasonShutdown)
		q.idle.Broadcast()
		q.mu.Unlock()
		close(q.stop)
		<-q.done
	})
}

// Stats returns the requests queued and the queues holding them now (tenant
// queues and overflow queues); idle tenants remembered in the table are not
// counted.
func (q *Queue) Stats() (depth, tenants int) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return q.s.depth, q.s.active
}
