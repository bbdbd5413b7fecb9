package fairqueue

// keyState counts waiters and running attempts for one limit key, and holds
// the key for a waiter of size above 1 that was refused on it (see hold).
type keyState struct {
	waiters  int
	inFlight int
	// woken says a Wake came for the key while its attempt ran: the room it
	// announced may have come after the attempt looked, so a refused
	// attempt is tried again at once instead of after its Retry-After.
	woken bool

	holder    *waiter // nil: not held
	holdUntil int64
	holdTag   uint64 // the holder's finish tag when it was refused
	holdBand  int    // the holder's band then
}

// keyRef returns the state of key, creating it (from the free list) for the
// first waiter that needs it.
func (s *sched) keyRef(key LimitKey) *keyState {
	if ks := s.keys[key]; ks != nil {
		return ks
	}
	ks := s.freeK.get()
	*ks = keyState{}
	s.keys[key] = ks
	s.keyed.Store(int64(len(s.keys)))
	return ks
}

// hasWaiters reports whether any waiter needs key.
func (s *sched) hasWaiters(key LimitKey) bool {
	return s.keys[key] != nil
}

// keysBusy reports whether an attempt needing one of w's keys runs: attempts
// on one key run one at a time, in the fair order.
func (w *waiter) keysBusy() bool {
	for _, ks := range w.ks {
		if ks.inFlight > 0 {
			return true
		}
	}
	return false
}

// countAttempt counts w's attempt in the scheduler and on each of its keys:
// d is 1 when the attempt starts, -1 when it ends.
func (s *sched) countAttempt(w *waiter, d int) {
	s.inFlight += d
	s.order(w.t).inFlight += d
	for _, ks := range w.ks {
		ks.inFlight += d
		ks.woken = false
	}
}

// wokenDuring reports whether a Wake came for one of w's keys while its
// attempt ran. Call it before the attempt is uncounted.
func (w *waiter) wokenDuring() bool {
	for _, ks := range w.ks {
		if ks.woken {
			return true
		}
	}
	return false
}
