package fairqueue

// strideScale is the virtual-time charge of one unit of cost at weight 1; a
// tenant of weight w is charged Cost*strideScale/w per grant. Virtual times
// are uint64 compared with wrap-around arithmetic (vless), which is exact as
// long as the values compared are within 2^63 of each other. With B =
// MaxCost*strideScale = 2^60, the largest charge of one grant or one Adjust:
//   - a grant's charge Cost*stride <= B never wraps;
//   - a tenant's finish tag is at most maxLead = 2B ahead of the virtual time
//     (one grant from a start at the virtual time, plus one Adjust; Adjust
//     clamps), so a ready tag is at most vnow+3B; it is at least vnow when
//     placed, and the virtual time then moves to the start tag of a grant
//     that was either made later (so its tag was no larger) or made before
//     (so its start was at most 2B ahead): a ready tag is at least vnow-2B;
//   - tags of tenants outside the ready heap (idle, pending, in flight) are
//     raised to at least vnow-B each time the virtual time has advanced
//     sweepEvery = B since the last sweep; a grant advances it by at most
//     2B, so such a tag is never more than 4B behind.
//
// Every comparison therefore spans less than 2^63. At MaxWeight the stride is
// 2^16, so truncating strideScale/weight errs by less than 2^-16.
const strideScale = 1 << 36

// maxLead bounds how far a tenant's finish tag may be ahead of the virtual
// time after an Adjust (see strideScale).
const maxLead = 2 * MaxCost * strideScale

// sweepEvery is the virtual-time advance after which tags of tenants outside
// the ready heap are raised to within MaxCost strides of the virtual time,
// before they could fall so far behind that wrap-around arithmetic would see
// them ahead.
const sweepEvery = MaxCost * strideScale

func vless(a, b uint64) bool { return int64(a-b) < 0 }

func vmax(a, b uint64) uint64 {
	if vless(a, b) {
		return b
	}
	return a
}

func vmin(a, b uint64) uint64 {
	if vless(a, b) {
		return a
	}
	return b
}

// costOf normalizes a Request.Cost: 0 or less means 1, above MaxCost means
// MaxCost.
func costOf(c int64) uint64 {
	return uint64(min(max(c, 1), MaxCost))
}

// tag is the virtual finish tag of the tenant's next grant: its start tag
// plus its head waiter's cost in strides. Only meaningful with a head.
func (t *tenant) tag() uint64 { return t.start + t.stride*t.head().cost }

// adjust moves tenantKey's virtual tags by delta of its strides: the settle
// correction (actual - reserved cost) of a grant. delta is clamped to
// [-MaxCost, MaxCost]. A negative correction never takes a tag below the
// lower of where it was and one grant of the tenant's last admitted cost
// behind the virtual time (one stride before any grant), the allowance place
// gives a tenant that lost a race: a refund cannot bank credit for a burst
// later, yet a tenant whose reservations always exceed its usage is charged
// its usage. A positive one never takes a tag beyond maxLead ahead of the
// virtual time. A ready tenant moves in the ready heap; for one whose
// attempt runs, the correction is also kept aside and applied to the finish
// tag of that attempt if it is admitted, so it survives the attempt's
// outcome without moving the virtual time. An untracked tenant (never seen,
// evicted, or queued in an overflow queue) is left alone. It reports
// whether the ready heap changed.
func (s *sched) adjust(tenantKey string, delta int64) bool {
	return s.adjustQueue(s.tenants[tenantKey], delta)
}

// adjustIn is adjust for the queue a request of tenantKey scheduled in band
// was in: the tenant's own queue, or its lowered queue for band.
func (s *sched) adjustIn(tenantKey string, band int, delta int64) bool {
	if band == s.weights.BandOf(tenantKey) || band < 0 || band >= len(s.weights.Bands) {
		return s.adjust(tenantKey, delta)
	}
	return s.adjustQueue(s.lowered[loweredKey{tenantKey, s.weights.BandName(band)}], delta)
}

// adjustQueue is adjust for queue t (nil: untracked).
func (s *sched) adjustQueue(t *tenant, delta int64) bool {
	if t == nil || delta == 0 {
		return false
	}
	o := s.order(t)
	delta = min(max(delta, -MaxCost), MaxCost)
	t.finish = o.moveTag(t, t.finish, delta)
	switch t.place {
	case placeReady:
		t.start = o.moveTag(t, t.start, delta)
		o.ready.fix(t.inHeap.idx, t.tag())
		return true
	case placeInFlight:
		t.flightAdj = min(max(t.flightAdj+delta, -MaxCost), MaxCost)
	}
	return false
}

// moveTag returns tag v of t moved by delta (within +-MaxCost) of t's
// strides, bounded as adjust describes.
func (o *fairOrder) moveTag(t *tenant, v uint64, delta int64) uint64 {
	// uint64(delta)*stride is the two's complement of |delta|*stride for a
	// negative delta, so the sum moves v back; |delta|*stride <= 2^60.
	nv := v + uint64(delta)*t.stride
	if delta < 0 {
		return vmax(nv, vmin(v, o.vnow-max(t.lastCost, 1)*t.stride))
	}
	return vmin(nv, vmax(v, o.vnow+maxLead))
}

// sweep raises the tags of every tenant of band o outside the ready heap to
// at least MaxCost of its strides behind o's virtual time, and records when
// it ran.
// Ready tags stay within wrap-around range of the virtual time on their own;
// idle, pending and in-flight tenants would otherwise fall arbitrarily far
// behind it while it advances (see strideScale). Raising a tag that far
// behind costs no tenant anything: place and activate raise it further on
// their own.
func (s *sched) sweep(o *fairOrder) {
	o.swept = o.vnow
	s.forQueues(func(t *tenant) {
		if s.order(t) != o || t.place == placeReady {
			return
		}
		floor := o.vnow - MaxCost*t.stride
		t.finish = vmax(t.finish, floor)
		if t.place == placeInFlight {
			t.start = vmax(t.start, floor)
		}
	})
}
