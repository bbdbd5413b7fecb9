package fairqueue

// holdSlack is how many times the time a grant of its cost takes a refused
// waiter may hold its keys (see hold): slack for the noise of the measure.
const holdSlack = 2

// hold reserves the keys of w, a waiter of size above 1 just refused at now,
// against tenants behind it in the fair order (or tied with it), until its
// ready time but for at most holdSlack times the time a grant of its cost
// takes, and at least minRetry. That time is the largest of its Interval,
// the grant model's, and its cost at the measured mean time per unit of
// cost: until grants of several sizes have been measured, the model cannot
// tell whether time grows with cost, and the large request may never have
// been granted. Without a hold, smaller requests would drain the tokens a
// larger one waits to accumulate and starve it; the cap keeps a waiter
// refused by its own, tighter limit from stalling the others for much longer
// than its own grant would take. A key keeps the hold of the waiter furthest
// ahead in the fair order.
func (s *sched) hold(w *waiter, now int64) {
	c := float64(w.cost)
	budget := float64(w.interval)
	if alpha, beta, meanCost, ok := s.spacing.model(); ok {
		budget = max(budget, alpha+beta*c, s.spacing.meanDt()/meanCost*c)
	}
	budget = max(min(holdSlack*budget, float64(maxEstimate)), float64(minRetry))
	until := min(w.readyAt, now+int64(budget))
	if until <= now {
		return
	}
	tag, band := w.t.tag(), w.t.band // the tag it was granted under
	for _, ks := range w.ks {
		switch {
		case ks.holder == nil:
			s.holds++
		case ks.holder != w && ks.holdUntil > now && behind(band, tag, ks.holdBand, ks.holdTag):
			continue
		}
		ks.holder, ks.holdUntil, ks.holdTag, ks.holdBand = w, until, tag, band
	}
}

// parkHeld moves ready tenants whose head needs a key held for a waiter
// ahead of it in the fair order from the top of the ready heap to the
// pending heap, keyed by the end of the hold and keeping their tags, until
// the top tenant's head is not held (or is blocked by a running attempt,
// which next handles).
func (s *sched) parkHeld(o *fairOrder, now int64) {
	for o.ready.len() > 0 {
		t := o.ready.top()
		if t.head().keysBusy() {
			return
		}
		until := s.heldFor(t.head(), now)
		if until <= now {
			return
		}
		o.ready.pop()
		t.place = placePending
		o.pending.push(t, uint64(until), t.seq, &t.inHeap)
	}
}

// unhold releases the hold on ks.
func (s *sched) unhold(ks *keyState) {
	ks.holder = nil
	s.holds--
}

// heldFor returns the latest end of a hold on w's keys by another waiter
// ahead of (or tied with) w's tenant in the fair order, or 0. Expired holds
// are released.
func (s *sched) heldFor(w *waiter, now int64) int64 {
	var until int64
	var tag uint64
	tagged := false
	for _, ks := range w.ks {
		h := ks.holder
		switch {
		case h == nil || h == w:
			continue
		case ks.holdUntil <= now:
			s.unhold(ks)
			continue
		}
		if !tagged {
			tag, tagged = w.t.tag(), true
		}
		if behind(w.t.band, tag, ks.holdBand, ks.holdTag) {
			until = max(until, ks.holdUntil)
		}
	}
	return until
}

// behind reports whether a tenant of band whose finish tag is tag is behind (or
// tied with) one of band hb with tag ht in the fair order: every band is
// behind the bands above it, and within a band the tags decide.
func behind(band int, tag uint64, hb int, ht uint64) bool {
	return band > hb || (band == hb && !vless(tag, ht))
}
