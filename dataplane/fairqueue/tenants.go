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
	heapIdx    int
	seq        uint64
	// inIdle links the idle list while the queue is empty.
	inIdle    link[tenant]
	idle      bool  // on the idle list
	idleSince int64 // when the queue last emptied
	overflow  bool
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

// queueFor returns the queue a request of tenantKey arriving at now joins: its
// own tenant (nil when it has none and the table has room, or an idle tenant
// can be evicted to make room), or, when the table is full of tenants that
// are active or were active within MaxWait, an overflow queue, reported by
// the second result.
func (s *sched) queueFor(now int64, tenantKey string) (*tenant, bool) {
	if t := s.tenants[tenantKey]; t != nil {
		return t, false
	}
	if len(s.tenants) < s.bounds.MaxTenants || s.evictable(now) {
		return nil, false
	}
	return s.overflowFor(tenantKey), true
}

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
func (s *sched) overflowFor(tenantKey string) *tenant {
	h := fnv64(tenantKey)
	first := int(h % overflowQueues)
	second := int((h / overflowQueues) % (overflowQueues - 1))
	if second >= first {
		second++
	}
	a, b := s.overflowQueue(first), s.overflowQueue(second)
	if b.depth < a.depth {
		return b
	}
	return a
}

// overflowQueue returns overflow queue i, creating it on first use.
func (s *sched) overflowQueue(i int) *tenant {
	if t := s.overflow[i]; t != nil {
		return t
	}
	weight := s.weights.Of("")
	s.seq++
	t := &tenant{key: "", weight: weight, stride: strideScale / uint64(weight), finish: s.vnow, heapIdx: -1, seq: s.seq, overflow: true}
	s.overflow[i] = t
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
	t.finish = vmax(t.finish, s.vnow)
	s.sumWeights += t.weight
	s.active++
}

// deactivate takes a tenant whose queue emptied at now out of the weight sum
// and appends it to the idle list (overflow queues stay where they are).
func (s *sched) deactivate(t *tenant, now int64) {
	s.sumWeights -= t.weight
	s.active--
	if t.overflow {
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

// newTenant adds a tenant to the table at now, first evicting the least
// recently active idle tenant when the table is at MaxTenants (queueFor has
// checked that it may).
func (s *sched) newTenant(now int64, key string, weight int) *tenant {
	if len(s.tenants) >= s.bounds.MaxTenants && s.evictable(now) {
		s.evictIdle()
	}
	t := s.freeT.get()
	s.seq++
	*t = tenant{key: key, weight: weight, stride: strideScale / uint64(weight), finish: s.vnow, heapIdx: -1, seq: s.seq}
	s.tenants[key] = t
	return t
}

// evictIdle drops the least recently active idle tenant from the table. It
// forgets that tenant's finish tag, which costs it at most one stride of its
// share should it come back.
func (s *sched) evictIdle() {
	t := s.idle.front()
	s.unlinkIdle(t)
	delete(s.tenants, t.key)
	*t = tenant{}
	s.freeT.put(t)
}

// trimIdle evicts idle tenants until the table is within MaxTenants, after
// the bound was lowered.
func (s *sched) trimIdle() {
	for len(s.tenants) > s.bounds.MaxTenants && s.idle.head != nil {
		s.evictIdle()
	}
}

// setWeights applies new weights to every tracked tenant without moving any
// waiter; the ready heap is re-ordered by the new finish tags.
func (s *sched) setWeights(w Weights) {
	s.weights = w.Clone()
	reweight := func(t *tenant, nw int) {
		if t.depth > 0 {
			s.sumWeights += nw - t.weight
		}
		t.weight, t.stride = nw, strideScale/uint64(nw)
	}
	for _, t := range s.tenants {
		reweight(t, s.weights.Of(t.key))
	}
	for _, t := range s.overflow {
		if t != nil {
			reweight(t, s.weights.Of(""))
		}
	}
	s.ready.rekey((*tenant).tag)
}
