package fairqueue

import "time"

// waiterState is where a waiter is in its life.
type waiterState uint8

const (
	// stateFree: in the free list, not in use.
	stateFree waiterState = iota
	// stateQueued: in its tenant list and the deadline heap.
	stateQueued
	// stateGranted: head of its tenant list, attempt running, not in the
	// deadline heap (the attempt's outcome decides).
	stateGranted
	// stateDone: left the scheduler; admitted, reason and err say how.
	stateDone
)

// waiter is one queued request. Nodes are recycled through the scheduler's
// free list so the grant path does not allocate.
type waiter struct {
	t       *tenant // nil once done: the tenant may be recycled
	tenant  string
	inQueue link[waiter] // in its tenant's queue
	// inDeadlineHeap is its place in the deadline heap; its index is
	// inDeadlineList while it is in the deadline list instead.
	inDeadlineHeap heapSlot[*waiter]
	inDeadlines    link[waiter] // in the deadline list

	keys       []LimitKey
	ks         []*keyState // ks[i] counts keys[i]; the slice is reused with the node
	dim        string
	limitType  string
	enqueuedAt int64
	readyAt    int64
	deadline   int64
	retryAfter int64
	// firstGrant is the expected time until its limit has room when a Wake
	// announces it (Request.FirstGrant), 0 for a limit timed by Retry-After.
	firstGrant int64
	position   int
	estimate   int64
	interval   time.Duration
	cost       uint64 // within [1, MaxCost]
	// band is the band the waiter was scheduled in, set when it is done.
	band int
	// debit is the band credit reserved for its running attempt (see next).
	debit int64
	size  uint64 // within [1, MaxCost]; holds its keys when above 1

	state    waiterState
	admitted bool
	reason   Reason
	doneAt   int64

	// Shell fields: the Queue signals the waiter's goroutine on signal when
	// the waiter is granted or done.
	signal  chan struct{}
	attempt Attempt
	err     error
}

// release returns a done waiter's node to the free list.
func (s *sched) release(w *waiter) {
	sig := w.signal
	if sig != nil {
		// Drop a grant signal that a cancellation overtook.
		select {
		case <-sig:
		default:
		}
	}
	clear(w.ks)
	*w = waiter{signal: sig, ks: w.ks[:0], state: stateFree}
	s.freeW.put(w)
}

// newWaiter returns a waiter node, recycled by release when one is free.
func (s *sched) newWaiter() *waiter { return s.freeW.get() }
