package fairqueue

// fairOrder is one priority band's weighted-fair order of tenants: a virtual
// time, the heaps of the tenants competing in it, and the band's counts. Tags
// are compared only within one order. Without bands the scheduler has one.
type fairOrder struct {
	// vnow is the virtual time: the largest start tag of an admitted grant.
	vnow    uint64
	swept   uint64           // vnow at the last sweep
	ready   minHeap[*tenant] // by finish tag, then arrival
	pending minHeap[*tenant] // by head ready time, then arrival

	sumWeights int    // sum of the weights of the band's active queues
	depth      int    // waiters held in the band, granted ones included
	queuedCost uint64 // the sum of their costs
	inFlight   int    // the band's granted waiters whose attempt runs

	// share is the band's minShare in parts of shareOne; credit is what the
	// band is owed, in cost units times shareOne (see grant and accrue).
	share  int64
	credit int64
}

// shareOne is minShare 1 in the fixed point of fairOrder.share: credits are
// integers, so the scheduler stays deterministic and exact.
const shareOne = 1 << 16

// place puts a tenant that has a head waiter and no running attempt into the
// ready or pending heap. Entering the ready heap, its start tag is its last
// finish tag, but never more than its head's grant (cost strides) behind the
// scheduler's virtual time, so its finish tag is at most the virtual time: a
// tenant that lost a race for a shared token keeps its turn, while one held
// back for long (by its own limit) cannot bank credit for a burst later. A
// new tenant starts at the virtual time.
func (o *fairOrder) place(t *tenant, now int64) {
	h := t.head()
	if h.readyAt <= now {
		t.start = vmax(t.finish, o.vnow-t.stride*h.cost)
		t.place = placeReady
		o.ready.push(t, t.tag(), t.seq, &t.inHeap)
		return
	}
	t.place = placePending
	o.pending.push(t, uint64(h.readyAt), t.seq, &t.inHeap)
}

// unplace takes a tenant out of whichever heap holds it.
func (o *fairOrder) unplace(t *tenant) {
	switch t.place {
	case placeReady:
		o.ready.remove(t.inHeap.idx)
	case placePending:
		o.pending.remove(t.inHeap.idx)
	}
	t.place = placeNone
}

// order returns the order of t's band.
func (s *sched) order(t *tenant) *fairOrder { return &s.orders[t.band] }

// place puts t into its band's ready or pending heap (see fairOrder.place).
func (s *sched) place(t *tenant, now int64) { s.orders[t.band].place(t, now) }

// unplace takes t out of its band's heaps.
func (s *sched) unplace(t *tenant) { s.orders[t.band].unplace(t) }
