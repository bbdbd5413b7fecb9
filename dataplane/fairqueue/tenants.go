package fairqueue

// tenantPlace is the scheduler structure a tenant is in.
type tenantPlace uint8

const (
	placeNone     tenantPlace = iota
	placeReady                // head ready, in the ready heap
	placePending              // head waiting out its Retry-After, in the pending heap
	placeInFlight             // head granted, attempt running
)

// tenant is one tenant's FIFO queue plus its fair-queuing tags. A tenant stays
// in the table after its queue empties (idle), keeping the finish tag it
// earned, until a new tenant needs its slot; idle tenants are evicted least
// recently used first. An overflow queue is a tenant shared by the tenants
// that found the table full; it is never in the table and never evicted.
type tenant struct {
	key        string
	weight     int
	stride     uint64
	start      uint64       // virtual start tag of its next grant
	finish     uint64       // virtual finish tag of its last admitted grant
	queue      list[waiter] // its waiters in arrival order, through waiter.inQueue
	depth      int
	queuedCost uint64 // sum of the costs of its waiters
	lastCost   uint64 // cost of its last admitted grant; 0 before any
	place      tenantPlace
	inHeap     heapSlot[*tenant] // in the ready or pending heap
	seq        uint64
	// inIdle links the idle list while the queue is empty.
	inIdle    link[tenant]
	idle      bool  // on the idle list
	idleSince int64 // when the queue last emptied
	overflow  bool
	// band is the band the queue competes in. lowerTo names the band of a
	// lowered queue (requests that lowered their band), "" for a tenant's
	// own queue.
	band    int
	slot    int // an overflow queue's index in sched.overflow
	lowered bool
	lowerTo string
	// promised is the latest grant time (slot) promised to a request of
	// this queue refused at arrival; 0 for none (see refusalRetry).
	promised int64

	// flightAdj is the sum of the corrections (in strides, within
	// +-MaxCost) made while its attempt runs, applied to the finish tag if
	// the attempt is admitted.
	flightAdj int64
}

// head returns the tenant's first waiter, the next to be granted, or nil.
func (t *tenant) head() *waiter { return t.queue.front() }

// loweredKey names the queue of a tenant's requests that lowered their band
// to the band named band.
type loweredKey struct {
	tenant, band string
}

// queueFor returns the queue a request of tenantKey scheduled in band
// arriving at now joins: its own tenant, or with lowered its lowered queue
// for band (nil when it has none and the table has room, or an idle tenant
// can be evicted to make room), or, when the table is full of tenants that
// are active or were active within MaxWait, the band's overflow queue,
// reported by the second result.
func (s *sched) queueFor(now int64, tenantKey string, band int, lowered bool) (*tenant, bool) {
	if !lowered {
		if t := s.tenants[tenantKey]; t != nil {
			return t, false
		}
	} else if t := s.lowered[loweredKey{tenantKey, s.weights.BandName(band)}]; t != nil {
		return t, false
	}
	if s.tracked() < s.bounds.MaxTenants || s.evictable(now) {
		return nil, false
	}
	return s.overflowFor(tenantKey, band), true
}

// tracked returns the queues in the table: tenants and lowered queues.
func (s *sched) tracked() int { return len(s.tenants) + len(s.lowered) }

// evictable reports whether the least recently active idle tenant has been
// idle for MaxWait, so a new tenant may take its slot. The grace keeps a
// tenant that pauses between requests (a client waiting for its previous
// answer) from losing its queue to a flood of fresh keys.
func (s *sched) evictable(now int64) bool {
	oldest := s.idle.front()
	return oldest != nil && now-oldest.idleSince >= int64(s.bounds.MaxWait)
}

// overflowQueues is the number of overflow queues; overflowHand is how many
// of them a tenant's hash deals it.
const (
	overflowQueues = 16
	overflowHand   = 2
)

// overflowFor picks the overflow queue of a tenant that found the table full
// of active tenants, shuffle-sharding style (as Kubernetes API Priority and
// Fairness does): the tenant's key deals it a hand of overflowHand of the
// overflowQueues queues and it joins the shorter one. A flood of distinct
// keys therefore shares a few queues scheduled at the default weight, and a
// tenant is refused (tenant_table_full) only when both queues of its hand are
// full.
func (s *sched) overflowFor(tenantKey string, band int) *tenant {
	h := fnv64(tenantKey)
	first := int(h % overflowQueues)
	second := int((h / overflowQueues) % (overflowQueues - 1))
	if second >= first {
		second++
	}
	a, b := s.overflowQueue(band, first), s.overflowQueue(band, second)
	if b.depth < a.depth {
		return b
	}
	return a
}

// overflowQueue returns band's overflow queue i, creating it on first use.
func (s *sched) overflowQueue(band, i int) *tenant {
	if t := s.overflow[band][i]; t != nil {
		return t
	}
	weight := s.weights.Of("")
	s.seq++
	t := &tenant{key: "", weight: weight, stride: strideScale / uint64(weight), finish: s.orders[band].vnow, inHeap: heapSlot[*tenant]{idx: -1}, seq: s.seq, overflow: true, band: band, slot: band}
	s.overflow[band][i] = t
	return t
}

// fnv64 is FNV-1a over key: tenant keys are already keyed hashes, so this only
// needs to spread them, not to resist an adversary.
func fnv64(key string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return h
}

// activate counts a tenant whose queue was empty as active again: it leaves
// the idle list and its weight joins the sum. A tenant that went idle behind
// the virtual time restarts at it.
func (s *sched) activate(t *tenant, now int64) {
	if t.idle {
		s.unlinkIdle(t)
	}
	o := s.order(t)
	t.finish = vmax(t.finish, o.vnow)
	o.sumWeights += t.weight
	s.active++
}

// deactivate takes a tenant whose queue emptied at now out of the weight sum
// and appends it to the idle list (overflow queues stay where they are).
func (s *sched) deactivate(t *tenant, now int64) {
	s.order(t).sumWeights -= t.weight
	s.active--
	if t.overflow {
		if t.band != t.slot {
			// Moved by a reload while it held waiters: back to serving
			// its slot's band.
			t.band, t.finish = t.slot, s.orders[t.slot].vnow
		}
		return
	}
	s.linkIdle(t, now)
	s.trimIdle() // the bound may have been lowered while t was active
}

// linkIdle appends t, a tenant without waiters, to the idle list at now.
func (s *sched) linkIdle(t *tenant, now int64) {
	t.idle, t.idleSince = true, now
	s.idle.pushBack(&t.inIdle, t)
}

// unlinkIdle removes t from the idle list; it must be on it.
func (s *sched) unlinkIdle(t *tenant) {
	s.idle.remove(&t.inIdle)
	t.idle = false
}

// newTenant adds a queue for tenant key in band to the table at now (its
// lowered queue for band when lowered), first evicting the least recently
// active idle queue when the table is at MaxTenants (queueFor has checked
// that it may).
func (s *sched) newTenant(now int64, key string, band int, lowered bool, weight int) *tenant {
	if s.tracked() >= s.bounds.MaxTenants && s.evictable(now) {
		s.evictIdle()
	}
	t := s.freeT.get()
	s.seq++
	*t = tenant{key: key, weight: weight, stride: strideScale / uint64(weight), finish: s.orders[band].vnow, inHeap: heapSlot[*tenant]{idx: -1}, seq: s.seq, band: band}
	if lowered {
		t.lowered, t.lowerTo = true, s.weights.BandName(band)
		if s.lowered == nil {
			s.lowered = make(map[loweredKey]*tenant)
		}
		s.lowered[loweredKey{key, t.lowerTo}] = t
		return t
	}
	s.tenants[key] = t
	return t
}

// evictIdle drops the least recently active idle tenant from the table. It
// forgets that tenant's finish tag, which costs it at most one stride of its
// share should it come back.
func (s *sched) evictIdle() {
	t := s.idle.front()
	s.unlinkIdle(t)
	if t.lowered {
		delete(s.lowered, loweredKey{t.key, t.lowerTo})
	} else {
		delete(s.tenants, t.key)
	}
	*t = tenant{}
	s.freeT.put(t)
}

// trimIdle evicts idle tenants until the table is within MaxTenants, after
// the bound was lowered.
func (s *sched) trimIdle() {
	for s.tracked() > s.bounds.MaxTenants && s.idle.head != nil {
		s.evictIdle()
	}
}

// setWeights applies new weights at now to every tracked queue without
// moving any waiter within its queue; the ready heaps are re-ordered by the
// new finish tags. When the bands change (see rebands), queues move to
// their new band.
func (s *sched) setWeights(w Weights, now int64) {
	old := s.weights
	s.weights = w.Clone()
	s.setShares()
	s.forQueues(func(t *tenant) {
		nw := s.weights.Of(t.key)
		if t.depth > 0 {
			s.order(t).sumWeights += nw - t.weight
		}
		t.weight, t.stride = nw, strideScale/uint64(nw)
	})
	if len(old.Bands) == 0 && len(s.weights.Bands) == 0 {
		s.orders[0].ready.rekey((*tenant).tag)
		return
	}
	s.rebands(old, now)
}

// forQueues calls f for every queue: tenants, lowered queues and overflow
// queues.
func (s *sched) forQueues(f func(t *tenant)) {
	for _, t := range s.tenants {
		f(t)
	}
	for _, t := range s.lowered {
		f(t)
	}
	for i := range s.overflow {
		for _, t := range s.overflow[i] {
			if t != nil {
				f(t)
			}
		}
	}
}

// setShares sets the band count and each band's minShare from the weights.
// A band keeps no credit across a change of bands.
func (s *sched) setShares() {
	s.nb, s.shares = max(len(s.weights.Bands), 1), 0
	for i := range s.orders {
		o := &s.orders[i]
		o.share, o.credit = 0, 0
		if i < len(s.weights.Bands) {
			o.share = int64(min(max(s.weights.Bands[i].MinShare, 0), 1) * shareOne)
		}
		if o.share > 0 {
			s.shares++
		}
	}
}

// bandNow returns the band t competes in under the current weights: its
// tenant's band, or for a lowered queue the lower of that and the band it
// lowered to (DefaultBand when that band is gone).
func (s *sched) bandNow(t *tenant) int {
	b := s.weights.BandOf(t.key)
	if t.overflow {
		b = t.band
	}
	if t.lowered {
		to, ok := s.weights.BandIndex(t.lowerTo)
		if !ok {
			to = s.defaultBand()
		}
		b = max(b, to)
	}
	return min(max(b, 0), s.nb-1)
}

// defaultBand returns the index of DefaultBand within the bands, 0 without.
func (s *sched) defaultBand() int {
	return min(max(s.weights.DefaultBand, 0), s.nb-1)
}

// rebands moves every queue to its band under the new weights, whose bands
// differ from old's (a reload). A band keeps its virtual time when a band of
// the same name existed, and each queue keeps its finish tag's distance from
// its band's virtual time, so queues that stay in their band keep their
// order. A queue's waiters never move within it. A band that is gone sends
// its tenants to their new band (DefaultBand unless their entry names
// another); an overflow queue goes to the band of its old band's name, or
// DefaultBand, and serves arrivals of its slot's band once it drains.
func (s *sched) rebands(old Weights, now int64) {
	prev := s.orders
	for i := range s.nb {
		o := &s.orders[i]
		*o = fairOrder{share: o.share}
		if j, ok := old.BandIndex(s.weights.BandName(i)); ok && len(s.weights.Bands) > 0 {
			o.vnow, o.swept = prev[j].vnow, prev[j].swept
		} else if len(old.Bands) == 0 && i == 0 {
			o.vnow, o.swept = prev[0].vnow, prev[0].swept
		}
	}
	for i := s.nb; i < MaxBands; i++ {
		s.orders[i] = fairOrder{}
	}
	s.forQueues(func(t *tenant) {
		from := &prev[t.band]
		if t.overflow {
			// Follow the old band by name; its slot stays where it is.
			b, ok := s.weights.BandIndex(old.BandName(t.band))
			if !ok {
				b = s.defaultBand()
			}
			t.band = b
			if t.depth == 0 {
				t.band = t.slot
			}
		} else {
			t.band = s.bandNow(t)
		}
		to := &s.orders[t.band]
		t.finish = to.vnow + (t.finish - from.vnow)
		t.start = to.vnow + (t.start - from.vnow)
		if t.depth == 0 {
			return
		}
		to.sumWeights += t.weight
		to.depth += t.depth
		to.queuedCost += t.queuedCost
		if t.place == placeInFlight {
			to.inFlight++
			return
		}
		t.place = placeNone
		to.place(t, now)
	})
}
