package fairqueue

// Wake makes every tenant whose head waiter needs key ready now, instead of at
// the Retry-After its last refusal gave it: the thing key stands for has room
// again (a backend slot freed, SPEC 6b), so the waiters need not poll for it.
// The scheduler then grants them one attempt at a time, by band and weight,
// exactly as for a waiter whose Retry-After passed. A Wake that comes while
// an attempt on key runs is not lost: if that attempt is refused (it may have
// looked before the room came), it is tried again at once instead of after
// its Retry-After. It does not allocate; it visits the tenants waiting for
// their Retry-After (at most MaxTenants plus the overflow queues).
func (q *Queue) Wake(key LimitKey) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.s.wake(q.now(), key) {
		q.kickLocked()
	}
}

// wake moves the pending tenants whose head needs key to the ready heap and
// reports whether any moved.
func (s *sched) wake(now int64, key LimitKey) bool {
	ks := s.keys[key]
	if ks == nil {
		return false
	}
	if ks.inFlight > 0 {
		// The running attempt may have looked before the room came: if it
		// is refused, it is tried again at once (see complete).
		ks.woken = true
	}
	moved := false
	for i := range s.nb {
		o := &s.orders[i]
		// Removing from the heap reorders it, so restart after each move;
		// the number of moves is bounded by the heap's length.
		for j := 0; j < o.pending.len(); {
			t := o.pending.at(j)
			h := t.head()
			if h.readyAt <= now || !needs(h, key) {
				j++
				continue
			}
			o.pending.remove(j)
			t.place = placeNone
			h.readyAt = now
			o.place(t, now)
			moved = true
			j = 0
		}
	}
	return moved
}

// needs reports whether w waits on key.
func needs(w *waiter, key LimitKey) bool {
	for _, k := range w.keys {
		if k == key {
			return true
		}
	}
	return false
}

// at returns the element at index i.
func (h *minHeap[P]) at(i int) P { return h.items[i].slot.elem }
