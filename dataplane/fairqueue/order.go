package fairqueue

// fairOrder is one weighted-fair order of tenants: a virtual time and the
// heaps of the tenants competing in it. Tags are compared only within one
// order. The scheduler has one, embedded; priority bands would each own one
// (a tenant competing in its band's), and next would serve the highest band
// with a grantable tenant.
type fairOrder struct {
	// vnow is the virtual time: the largest start tag of an admitted grant.
	vnow    uint64
	swept   uint64           // vnow at the last sweep
	ready   minHeap[*tenant] // by finish tag, then arrival
	pending minHeap[*tenant] // by head ready time, then arrival
}

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
		o.ready.push(t, t.tag(), t.seq, &t.heapIdx)
		return
	}
	t.place = placePending
	o.pending.push(t, uint64(h.readyAt), t.seq, &t.heapIdx)
}

// unplace takes a tenant out of whichever heap holds it.
func (o *fairOrder) unplace(t *tenant) {
	switch t.place {
	case placeReady:
		o.ready.remove(t.heapIdx)
	case placePending:
		o.pending.remove(t.heapIdx)
	}
	t.place = placeNone
}
