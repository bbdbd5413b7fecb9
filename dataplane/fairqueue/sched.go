package fairqueue

import (
	"math"
	"sync/atomic"
	"time"
)

// Times inside the scheduler are int64 nanoseconds on the Queue's clock,
// measured from an arbitrary base, so the core never touches a clock itself;
// durations are int64 nanoseconds too. noDeadline is the deadline of a
// request without one.
const noDeadline = math.MaxInt64

// minRetry is the shortest re-queue delay after a refused attempt, so a limiter
// that refuses with a zero Retry-After cannot make the scheduler spin.
const minRetry = int64(time.Millisecond)

// outcome is what complete did with a granted waiter.
type outcome uint8

const (
	outcomeAdmitted outcome = iota
	outcomeRequeued
	outcomeRefused
	outcomeError
)

// sched is the single-threaded, clock-free scheduling core. It is not safe for
// concurrent use; the Queue serializes access with its lock.
type sched struct {
	bounds  Bounds
	weights Weights

	// tenants is the tenant table: at most MaxTenants tenants, active or
	// idle. An idle tenant keeps its finish tag, so a tenant that drains its
	// queue after every grant comes back where it left off instead of at vnow
	// (which would let it win every token while vnow stands still).
	tenants map[string]*tenant
	// lowered holds the queues of requests that lowered their band below
	// their tenant's (Request.Band), one per tenant and band, so they never
	// delay the tenant's own-band requests; allocated on first use. They
	// count against MaxTenants and are evicted like tenants.
	lowered map[loweredKey]*tenant
	// idle holds the idle tenants, least recently active first: the
	// eviction order when a new tenant needs a slot.
	idle list[tenant]
	// overflow holds, per band, the shared queues of tenants that found the
	// table full of active tenants (see overflowFor); allocated on first use.
	overflow  [MaxBands][overflowQueues]*tenant
	keys      map[LimitKey]*keyState
	active    int           // queues (tenant or overflow) holding waiters
	deadlines deadlineIndex // queued (not granted) waiters by deadline

	// orders holds each band's virtual time and the tenants competing in
	// it; nb bands are in use (1 without bands).
	orders [MaxBands]fairOrder
	nb     int
	// shares counts the bands with a minShare; maxCost is the largest cost
	// of an admitted grant, which caps a band's credit (see accrue).
	shares  int64
	maxCost uint64

	// keyed is len(keys), so that Queue.HasWaiters answers the common
	// case (no key has a waiter) without the queue's lock.
	keyed atomic.Int64

	depth    int // waiters held, granted ones included
	inFlight int // granted waiters whose attempt is running
	holds    int // keys with a holder
	seq      uint64

	// spacing turns grants into time (see grantSpacing).
	spacing grantSpacing
	// promised is the latest room time promised to a request refused with
	// queue_full; 0 for none (see refusalRetry). outside is the same for
	// the requests refused without queuing (see refusedOutside).
	promised, outside int64

	freeW freeList[waiter]
	freeT freeList[tenant]
	freeK freeList[keyState]

	// onDone is called for every waiter the scheduler finishes on its own
	// (expiry, drain); the Queue uses it to wake the waiter's goroutine.
	onDone func(w *waiter)
}

// newSched returns an empty scheduler applying b (zero fields mean defaults)
// and w.
func newSched(b Bounds, w Weights) *sched {
	s := &sched{
		bounds:  b.withDefaults(),
		weights: w.Clone(),
		tenants: make(map[string]*tenant),
		keys:    make(map[LimitKey]*keyState),
		onDone:  func(*waiter) {},
	}
	s.setShares()
	return s
}

// arrival is a request as the scheduler sees it when it arrives: what
// Request says, with the deadline on the scheduler's clock. Times are
// scheduler time, durations time.Duration, costs cost units.
type arrival struct {
	tenant    string // the tenant key: selects the queue and the weight
	dim       string // the tenant_dimension label, for the Observer
	limitType string // the limit_type label, for the Observer
	keys      []LimitKey
	// deadline is the absolute end of the request's budget in scheduler
	// time, noDeadline for none; enqueue applies MaxWait from now on top.
	deadline int64
	// retryAfter is the limiter's time to the request's next token (the
	// Retry-After of the refusal that sent it here); negative means 0.
	retryAfter time.Duration
	// firstGrant is Request.FirstGrant: the expected time until the limit
	// has room, when a Wake rather than retryAfter announces it.
	firstGrant time.Duration
	// interval is the time the contended bucket needs to refill what the
	// request takes (see placeOf); 0 or negative means unknown.
	interval time.Duration
	// cost and size are Request.Cost and Request.Size in cost units,
	// normalized by costOf; a size of 0 or less means cost.
	cost, size int64
	// band is Request.Band: the band the request asks for (see bandFor).
	band int
}

// enqueue adds request a arriving at now, or refuses it with the reason and
// the position it would have had. The estimate is the request's Retry-After
// (or its expected first grant, when larger: see arrival.first) plus the time
// the grants expected before it take. A request whose estimate does not fit
// its budget is refused at once (ReasonWaitExceedsBudget) rather than held
// until the budget runs out.
func (s *sched) enqueue(now int64, a *arrival) (*waiter, Reason, int, int64) {
	deadline := a.deadline
	if mw := now + int64(s.bounds.MaxWait); mw < deadline {
		deadline = mw
	}
	retryAfter := max(int64(a.retryAfter), 0)
	first := a.first()
	c := costOf(a.cost)
	// The tenant's own queue, when it has one, knows its band: one map
	// lookup on the common path.
	own := s.tenants[a.tenant]
	band, lowered := s.bandWith(own, a.tenant, a.band)
	t, overflow := own, false
	if own == nil || lowered {
		t, overflow = s.queueFor(now, a.tenant, band, lowered)
	}
	o := &s.orders[band]
	if t != nil {
		o = s.order(t) // after a reload, until it drains
	}
	var weight int
	k, upTo, sumW := 1, c, o.sumWeights
	if t != nil {
		weight, k, upTo = t.weight, t.depth+1, t.queuedCost+c
		if t.depth == 0 {
			sumW += weight
		}
	} else {
		weight = s.weights.Of(a.tenant)
		sumW += weight
	}
	pos, wait, _ := s.placeOf(k, upTo, c, weight, sumW, a.interval, s.higher(o))
	// A request that waits is never estimated at 0: even the first in line
	// waits for the scheduler to grant it.
	raw := min(first+int64(wait), maxEstimate)
	est := max(raw, minRetry)

	switch {
	case raw >= deadline-now:
		// Its place would be granted only after its budget: refuse now
		// rather than hold it until then.
		return nil, ReasonWaitExceedsBudget, pos, est
	case overflow && t.depth >= s.bounds.MaxQueueDepthPerTenant:
		return nil, ReasonTenantTableFull, pos, est
	case t != nil && t.depth >= s.bounds.MaxQueueDepthPerTenant:
		return nil, ReasonTenantQueueFull, pos, est
	case s.depth >= s.bounds.MaxTotalQueued:
		return nil, ReasonQueueFull, pos, est
	}

	if t == nil {
		t = s.newTenant(now, a.tenant, band, lowered, weight)
	}
	if t.depth == 0 {
		s.activate(t, now)
	}
	w := s.newWaiter()
	w.t, w.tenant, w.keys, w.dim, w.limitType = t, a.tenant, a.keys, a.dim, a.limitType
	w.enqueuedAt, w.readyAt, w.deadline = now, now+retryAfter, deadline
	w.retryAfter, w.position, w.estimate, w.cost = retryAfter, pos, est, c
	w.firstGrant = max(int64(a.firstGrant), 0)
	w.interval = max(a.interval, 0)
	w.size = c
	if a.size > 0 {
		w.size = costOf(a.size)
	}
	w.state = stateQueued

	t.queue.pushBack(&w.inQueue, w)
	t.depth++
	t.queuedCost += c
	o.depth++
	o.queuedCost += c
	s.depth++
	w.ks = w.ks[:0]
	for _, key := range a.keys {
		ks := s.keyRef(key)
		ks.waiters++
		w.ks = append(w.ks, ks)
	}
	s.deadlines.push(w)
	if t.place == placeNone {
		s.place(t, now)
	}
	return w, "", pos, est
}

// first returns the expected time from arrival until the limit has room
// for one request: the Retry-After, or firstGrant when that is larger.
func (a *arrival) first() int64 {
	return max(int64(a.retryAfter), int64(a.firstGrant), 0)
}

// queueOf is queueFor for arrival a in the band it asks for.
func (s *sched) queueOf(now int64, a *arrival) (*tenant, bool) {
	band, lowered := s.bandFor(a.tenant, a.band)
	return s.queueFor(now, a.tenant, band, lowered)
}

// next expires overdue waiters and grants an attempt to the head waiter of the
// ready tenant with the smallest finish tag in the band chosen by pick. It
// returns nil when MaxInFlight
// attempts run, when no head is ready, or when the chosen head shares a limit
// key with a running attempt (attempts on one key run in fair order, one at a
// time). A head needing a key held for a waiter ahead of it in the fair order
// is parked in the pending heap until the hold ends. A granted waiter's
// deadline is always after now.
func (s *sched) next(now int64) *waiter {
	s.expire(now)
	if s.inFlight >= s.bounds.MaxInFlight {
		return nil
	}
	for i := range s.nb {
		o := &s.orders[i]
		for o.pending.len() > 0 && int64(o.pending.topKey()) <= now {
			t := o.pending.pop()
			t.place = placeNone
			o.place(t, now)
		}
		if s.holds > 0 {
			s.parkHeld(o, now)
		}
	}
	o := s.pick()
	if o == nil {
		return nil
	}
	t := o.ready.top()
	w := t.head()
	if w.keysBusy() {
		return nil
	}
	o.ready.pop()
	t.place = placeInFlight
	s.deadlines.remove(w)
	w.state = stateGranted
	s.countAttempt(w, 1)
	if s.shares > 0 {
		// Reserve the grant's cost from the band's credit so concurrent
		// attempts cannot spend it twice; refunded unless admitted.
		w.debit = min(o.credit, int64(w.cost)*shareOne)
		o.credit -= w.debit
	}
	return w
}

// pick returns the band the next grant goes to: the highest band whose
// minShare credit covers its next head's cost, else the highest band with a
// ready tenant; nil when no band has one. A band without waiters loses its
// credit (no banking).
func (s *sched) pick() *fairOrder {
	if s.shares > 0 {
		for i := range s.nb {
			o := &s.orders[i]
			switch {
			case o.share == 0:
			case o.depth == 0:
				o.credit = 0
			case o.credit >= shareOne && o.ready.len() > 0 && o.credit >= int64(o.ready.top().head().cost)*shareOne:
				return o
			}
		}
	}
	for i := range s.nb {
		if o := &s.orders[i]; o.ready.len() > 0 {
			return o
		}
	}
	return nil
}

// accrue credits every band with a minShare that holds waiters (queued,
// waiting out a Retry-After or in an attempt) its share of an admitted grant
// of cost c, up to creditLimit; a band without waiters loses its credit.
// See the package doc for the bound this gives and why the cap does not
// bind while the bands are saturated.
func (s *sched) accrue(c uint64) {
	s.maxCost = max(s.maxCost, c)
	limit := s.creditLimit()
	for i := range s.nb {
		o := &s.orders[i]
		switch {
		case o.share == 0:
		case o.depth > 0:
			o.credit = min(o.credit+o.share*int64(c), limit)
		default:
			o.credit = 0
		}
	}
}

// creditLimit is the most credit a band may hold: (bands with a share +
// MaxInFlight) grants of the largest cost admitted. It bounds the grants a
// band held back by its own limit can take ahead of its share later.
func (s *sched) creditLimit() int64 {
	return (s.shares + int64(s.bounds.MaxInFlight)) * int64(max(s.maxCost, 1)) * shareOne
}

// refund returns the credit a granted waiter reserved when its attempt was
// not admitted.
func (s *sched) refund(w *waiter) {
	if o := s.order(w.t); w.debit != 0 && o.share > 0 {
		// A reload may have moved the waiter or reset the credits since.
		o.credit = min(o.credit+w.debit, s.creditLimit())
	}
	w.debit = 0
}

// complete records the outcome of a granted waiter's attempt at now. An
// admitted waiter leaves and its tenant is charged its cost; a refused one is
// re-queued at the head of its tenant queue with ready time now+retryAfter
// (now, when a Wake for one of its keys came while the attempt ran), or
// refused with ReasonWaitExceedsBudget when that is not before its deadline;
// an error removes it.
func (s *sched) complete(now int64, w *waiter, ok bool, retryAfter int64, err error) outcome {
	t := w.t
	o := s.order(t)
	woken := w.wokenDuring()
	s.countAttempt(w, -1)
	if !ok || err != nil {
		s.refund(w)
	}
	switch {
	case err != nil:
		t.flightAdj = 0
		w.err = err
		s.finish(w, now, false, "")
		return outcomeError
	case ok:
		t.finish = t.tag()
		t.lastCost = w.cost
		o.vnow = vmax(o.vnow, t.start)
		if t.flightAdj != 0 {
			// Corrections made during the attempt move its finish tag,
			// not the virtual time.
			t.finish = o.moveTag(t, t.finish, t.flightAdj)
			t.flightAdj = 0
		}
		if o.vnow-o.swept >= sweepEvery {
			s.sweep(o)
		}
		if s.shares > 0 {
			w.debit = 0
			s.accrue(w.cost)
		}
		s.spacing.admitted(now, w.cost, s.depth > 1) // w still counts
		s.finish(w, now, true, "")
		return outcomeAdmitted
	}
	t.flightAdj = 0 // already applied to the finish tag it re-enters from
	retryAfter = max(retryAfter, minRetry)
	w.retryAfter = retryAfter
	ready := now + retryAfter
	if woken {
		// Room was announced while the attempt ran: try again now rather
		// than leave it unused until the Retry-After.
		ready = now
	}
	if ready >= w.deadline {
		// Told no less than the time to the first grant, as every refusal of
		// a wait with a FirstGrant is.
		w.retryAfter = s.ownPlace(now, w, max(retryAfter, w.firstGrant))
		s.finish(w, now, false, ReasonWaitExceedsBudget)
		return outcomeRefused
	}
	w.readyAt = ready
	w.state = stateQueued
	s.deadlines.push(w)
	if w.size > 1 {
		s.hold(w, now)
	}
	t.place = placeNone
	s.place(t, now)
	return outcomeRequeued
}

// cancel removes a queued or granted waiter at once, freeing its attempt slot.
func (s *sched) cancel(now int64, w *waiter) {
	switch w.state {
	case stateQueued:
		s.deadlines.remove(w)
	case stateGranted:
		s.countAttempt(w, -1)
		s.refund(w)
		w.t.flightAdj = 0
	default:
		return
	}
	s.finish(w, now, false, "")
}

// finish takes w out of its tenant queue and the key counts and marks it done.
// w must already be out of the deadline heap and not count as in flight.
func (s *sched) finish(w *waiter, now int64, admitted bool, reason Reason) {
	t := w.t
	wasHead, granted := t.head() == w, w.state == stateGranted
	t.queue.remove(&w.inQueue)
	w.t = nil
	t.depth--
	t.queuedCost -= w.cost
	o := s.order(t)
	o.depth--
	o.queuedCost -= w.cost
	w.band = t.band
	s.depth--
	for i, ks := range w.ks {
		if ks.holder == w {
			s.unhold(ks)
		}
		ks.waiters--
		if ks.waiters == 0 {
			delete(s.keys, w.keys[i])
			s.keyed.Store(int64(len(s.keys)))
			s.freeK.put(ks)
		}
	}
	w.state, w.admitted, w.reason, w.doneAt = stateDone, admitted, reason, now
	if s.depth == 0 {
		s.spacing.emptied()
	}

	switch {
	case t.depth == 0:
		s.unplace(t)
		s.deactivate(t, now)
	case granted:
		// The granted head left: the tenant competes again with its new head.
		t.place = placeNone
		s.place(t, now)
	case wasHead:
		// The head changed: re-place the tenant by its new head.
		s.unplace(t)
		s.place(t, now)
	}
}

// setBounds applies new bounds to future decisions. No waiter is evicted;
// idle tenants beyond a lowered MaxTenants are.
func (s *sched) setBounds(b Bounds) {
	s.bounds = b.withDefaults()
	s.trimIdle()
	for i := range s.orders {
		s.orders[i].credit = min(s.orders[i].credit, s.creditLimit())
	}
}

// nextWake returns the earliest time something becomes due without an event:
// a pending head turning ready or a queued waiter's deadline.
func (s *sched) nextWake() (int64, bool) {
	wake, ok := int64(noDeadline), false
	for i := range s.nb {
		if o := &s.orders[i]; o.pending.len() > 0 && int64(o.pending.topKey()) < wake {
			wake, ok = int64(o.pending.topKey()), true
		}
	}
	if w := s.deadlines.earliest(); w != nil && w.deadline < wake {
		wake, ok = w.deadline, true
	}
	return wake, ok
}

// bandFor returns the band a request of tenantKey asking for band req is
// scheduled in: the tenant's band, or req when that is a lower band (a
// larger index) that exists, reported by lowered. 0 without bands.
func (s *sched) bandFor(tenantKey string, req int) (band int, lowered bool) {
	return s.bandWith(s.tenants[tenantKey], tenantKey, req)
}

// bandWith is bandFor given the tenant's own queue, own (nil when it has
// none), whose band is its tenant's.
func (s *sched) bandWith(own *tenant, tenantKey string, req int) (band int, lowered bool) {
	if len(s.weights.Bands) == 0 {
		return 0, false
	}
	var b int
	if own != nil {
		b = own.band
	} else {
		b = s.weights.BandOf(tenantKey)
	}
	if req > b && req < len(s.weights.Bands) {
		return req, true
	}
	return b, false
}
