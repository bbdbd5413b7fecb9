package fairqueue

// keyState counts waiters and running attempts for one limit key, and holds
// the key for a waiter of size above 1 that was refused on it (see hold).
type keyState struct {
	waiters  int
	inFlight int

	holder    *waiter // nil: not held
	holdUntil int64
	holdTag   uint64 // the holder's finish tag when it was refused
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
	return ks
}

// hasWaiters reports whether any waiter needs key.
func (s *sched) hasWaiters(key LimitKey) bool {
	return s.keys[key] != nil
}
