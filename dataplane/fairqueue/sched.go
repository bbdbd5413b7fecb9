package fairqueue

import (
	"math"
	"time"
)

// Times inside the scheduler are int64 nanoseconds on the Queue's clock,
// measured from an arbitrary base, so the core never touches a clock itself.
const noDeadline = math.MaxInt64

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

// minRetry is the shortest re-queue delay after a refused attempt, so a limiter
// that refuses with a zero Retry-After cannot make the scheduler spin.
const minRetry = int64(time.Millisecond)

// spacingWeight is the EWMA weight (1/8) of a new grant-spacing sample.
const spacingWeight = 0.125

// holdSlack is how many times the time a grant of its cost takes a refused
// waiter may hold its keys (see hold): slack for the noise of the measure.
const holdSlack = 2

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

// waiterState is where a waiter is in its life.
type waiterState uint8

const (
	// stateFree: in the free list, not in use.
	stateFree waiterState = iota
	// stateQueued: in its tenant list and the deadline heap.
	stateQueued
	// stateGranted: head of its tenant list, attempt running, not in the
	// deadline heap (the attempt's outcome decides).
	stateGranted
	// stateDone: left the scheduler; admitted, reason and err say how.
	stateDone
)

// waiter is one queued request. Nodes are recycled through the scheduler's
// free list so the grant path does not allocate.
type waiter struct {
	t          *tenant // nil once done: the tenant may be recycled
	tenant     string
	prev, next *waiter
	dlIdx      int     // index in the deadline heap, or inDeadlineList
	dlPrev     *waiter // neighbours in the deadline list
	dlNext     *waiter

	keys       []LimitKey
	ks         []*keyState // ks[i] counts keys[i]; the slice is reused with the node
	dim        string
	enqueuedAt int64
	readyAt    int64
	deadline   int64
	retryAfter int64
	position   int
	estimate   int64
	interval   int64
	cost       uint64 // within [1, MaxCost]
	size       uint64 // within [1, MaxCost]; holds its keys when above 1

	state    waiterState
	admitted bool
	reason   Reason
	doneAt   int64

	// Shell fields: the Queue signals the waiter's goroutine on signal when
	// the waiter is granted or done.
	signal  chan struct{}
	attempt Attempt
	err     error
}

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
	start      uint64 // virtual start tag of its next grant
	finish     uint64 // virtual finish tag of its last admitted grant
	head, tail *waiter
	depth      int
	queuedCost uint64 // sum of the costs of its waiters
	lastCost   uint64 // cost of its last admitted grant; 0 before any
	place      tenantPlace
	heapIdx    int
	seq        uint64
	// idlePrev and idleNext link the idle list while the queue is empty.
	idlePrev, idleNext *tenant
	idle               bool  // on the idle list
	idleSince          int64 // when the queue last emptied
	overflow           bool
	// promised is the latest grant time (slot) promised to a request of
	// this queue refused at arrival; 0 for none (see refusalRetry).
	promised int64

	// flightAdj is the sum of the corrections (in strides, within
	// +-MaxCost) made while its attempt runs, applied to the finish tag if
	// the attempt is admitted.
	flightAdj int64
}

// tag is the virtual finish tag of the tenant's next grant: its start tag
// plus its head waiter's cost in strides. Only meaningful with a head.
func (t *tenant) tag() uint64 { return t.start + t.stride*t.head.cost }

// keyState counts waiters and running attempts for one limit key, and holds
// the key for a waiter of size above 1 that was refused on it (see hold).
type keyState struct {
	waiters  int
	inFlight int

	holder    *waiter // nil: not held
	holdUntil int64
	holdTag   uint64 // the holder's finish tag when it was refused
}

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
	// idleHead and idleTail are the idle tenants, least recently active
	// first: the eviction order when a new tenant needs a slot.
	idleHead, idleTail *tenant
	// overflow holds the shared queues of tenants that found the table full
	// of active tenants (see overflowFor); allocated on first use.
	overflow  [overflowQueues]*tenant
	keys      map[LimitKey]*keyState
	active    int           // queues (tenant or overflow) holding waiters
	ready     tenantHeap    // by finish tag, then arrival
	pending   tenantHeap    // by head ready time, then arrival
	deadlines deadlineIndex // queued (not granted) waiters by deadline

	depth      int // waiters held, granted ones included
	inFlight   int // granted waiters whose attempt is running
	holds      int // keys with a holder
	sumWeights int // sum of the weights of tracked tenants
	vnow       uint64
	swept      uint64 // vnow at the last sweep
	seq        uint64

	// Grant spacing: EWMA of the time between admissions while backlogged,
	// and the statistics of the grant model (see grantModel).
	spacing      float64
	grants       grantStats
	lastGrant    int64
	lastGrantSet bool
	// promised is the latest room time promised to a request refused with
	// queue_full; 0 for none (see refusalRetry).
	promised int64

	freeW *waiter
	freeT []*tenant
	freeK []*keyState

	// onDone is called for every waiter the scheduler finishes on its own
	// (expiry, drain); the Queue uses it to wake the waiter's goroutine.
	onDone func(w *waiter)
}

func newSched(b Bounds, w Weights) *sched {
	s := &sched{
		bounds:  b.withDefaults(),
		weights: w.clone(),
		tenants: make(map[string]*tenant),
		keys:    make(map[LimitKey]*keyState),
		onDone:  func(*waiter) {},
	}
	return s
}

// maxEstimate caps wait estimates so conversions never overflow.
const maxEstimate = int64(1 << 62)

// statsWeight is the EWMA weight (1/64) of a new sample of the grant model's
// statistics: slower than spacingWeight, because a mix of sizes needs a
// longer window to show its mean and spread.
const statsWeight = 1.0 / 64

// grantStats are EWMAs, over the grants measured while backlogged, of a
// grant's cost c, of c^2, of the time since the previous grant dt, and of
// c*dt: enough to fit dt = alpha + beta*c by least squares.
type grantStats struct {
	set            bool
	c, cc, dt, cdt float64
}

func (g *grantStats) add(c, dt float64) {
	if !g.set {
		*g = grantStats{set: true, c: c, cc: c * c, dt: dt, cdt: c * dt}
		return
	}
	g.c += statsWeight * (c - g.c)
	g.cc += statsWeight * (c*c - g.cc)
	g.dt += statsWeight * (dt - g.dt)
	g.cdt += statsWeight * (c*dt - g.cdt)
}

// grantModel returns the time a grant takes as alpha per grant plus beta per
// unit of its cost, and the mean cost of a grant, from the measured grants.
// A limit counting requests spaces grants evenly whatever their cost (beta
// 0); a limit charged by cost spaces them by cost (alpha 0). With equal
// costs the two cannot be told apart and need not be: alpha is the measured
// spacing. The statistics are kept from the first grant of a cost other than
// 1 on; until then every grant cost 1. ok is false before any measurement.
func (s *sched) grantModel() (alpha, beta, meanCost float64, ok bool) {
	g := &s.grants
	if s.spacing <= 0 {
		return 0, 0, 0, false
	}
	if !g.set {
		return s.spacing, 0, 1, true
	}
	if v := g.cc - g.c*g.c; v > 1e-6*g.c*g.c {
		beta = (g.cdt - g.c*g.dt) / v
		alpha = g.dt - beta*g.c
		switch {
		case beta < 0:
			return g.dt, 0, g.c, true
		case alpha < 0:
			return 0, g.dt / g.c, g.c, true
		}
		return alpha, beta, g.c, true
	}
	return s.spacing, 0, g.c, true
}

// positionOf returns the 1-based service position of the k-th waiter, of
// cost c, of a tenant of weight w whose queue holds upTo cost up to and
// including it, when the tracked tenants (counting this one) weigh sumW in
// total and a grant costs meanCost on average, with the grants and the cost
// expected to be served before it. The tenant receives w/sumW of the
// service, so while its k grants (upTo) are served the others receive
// upTo*(sumW-w)/w, in grants of their own mean cost: the share of the grants
// that are not the tenant's, whose mean cost is upTo/k, at the overall mean.
// With unit costs the position is ceil(k*sumW/w).
func positionOf(k int, upTo, c uint64, w, sumW int, meanCost float64) (pos int, grantsAhead, costAhead float64) {
	others := float64(upTo) * float64(sumW-w) / float64(w)
	grantsAhead = float64(k - 1)
	if sumW > w {
		// Grants per unit of the others' cost.
		perUnit := (float64(sumW)/meanCost - float64(w)*float64(k)/float64(upTo)) / float64(sumW-w)
		if !(perUnit > 0) {
			perUnit = 1 / meanCost
		}
		grantsAhead += others * min(perUnit, 1)
	}
	costAhead = float64(upTo-c) + others
	p := math.Ceil(grantsAhead + 1 - 1e-9)
	return int(min(max(p, 1), math.MaxInt32)), grantsAhead, costAhead
}

// unitPositionOf is positionOf for unit costs (the common case, kept small
// enough to inline): the k-th waiter's position ceil(k*sumW/w) and the
// grants ahead of it, k*sumW/w - 1.
func unitPositionOf(k, w, sumW int) (int, float64) {
	grants := float64(k) * float64(sumW) / float64(w)
	return int(math.Ceil(grants - 1e-9)), grants - 1
}

// placeOf returns the service position of the k-th waiter, of cost c, of a
// tenant of the given weight whose queue holds upTo cost up to and including
// it, when the tracked tenants (counting this one) weigh sumW: its position,
// the time the grants expected before it take by the grant model (the
// grants times alpha plus their cost times beta), and step, the time one
// more grant of the tenant's (cost c, at its weighted share) takes. Until
// grants have been measured every grant is taken to be like this one and to
// take interval.
func (s *sched) placeOf(k int, upTo, c uint64, weight, sumW int, interval int64) (pos int, wait, step float64) {
	alpha, beta, meanCost, ok := s.grantModel()
	if !ok {
		// Nothing measured yet: take every grant to be like this one.
		alpha, beta, meanCost = float64(max(interval, 0)), 0, float64(c)
	}
	var grantsAhead, costAhead float64
	if upTo == uint64(k) && meanCost == 1 {
		pos, grantsAhead = unitPositionOf(k, weight, sumW)
		costAhead = grantsAhead
	} else {
		pos, grantsAhead, costAhead = positionOf(k, upTo, c, weight, sumW, meanCost)
	}
	wait = min(alpha*grantsAhead+beta*costAhead, float64(maxEstimate))
	// While the tenant is granted c, the others are granted c*(share-1) in
	// grants of the mean cost.
	share := float64(sumW) / float64(weight)
	fc := float64(c)
	step = min(alpha*(1+fc*(share-1)/meanCost)+beta*fc*share, float64(maxEstimate))
	return pos, wait, step
}

// enqueue adds a request arriving at now, or refuses it with the reason and
// the position it would have had. deadline is absolute (noDeadline for none);
// MaxWait from now is applied on top. cost and size are the request's Cost
// and Size (normalized by costOf; size 0 means cost). interval is the time
// the contended bucket needs to refill what the request takes (see
// placeOf). The estimate is the request's Retry-After plus the time the
// grants expected before it take. A request whose estimate does not fit its
// budget is refused at once (ReasonWaitExceedsBudget) rather than held until
// the budget runs out.
func (s *sched) enqueue(now int64, tenantKey, dim string, keys []LimitKey, deadline, retryAfter, interval, cost, size int64) (*waiter, Reason, int, int64) {
	if mw := now + int64(s.bounds.MaxWait); mw < deadline {
		deadline = mw
	}
	retryAfter = max(retryAfter, 0)
	c := costOf(cost)
	t, overflow := s.queueFor(now, tenantKey)
	var weight int
	k, upTo, sumW := 1, c, s.sumWeights
	if t != nil {
		weight, k, upTo = t.weight, t.depth+1, t.queuedCost+c
		if t.depth == 0 {
			sumW += weight
		}
	} else {
		weight = s.weights.weightOf(tenantKey)
		sumW += weight
	}
	pos, wait, _ := s.placeOf(k, upTo, c, weight, sumW, interval)
	// A request that waits is never estimated at 0: even the first in line
	// waits for the scheduler to grant it.
	raw := min(retryAfter+int64(wait), maxEstimate)
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
		t = s.newTenant(now, tenantKey, weight)
	}
	if t.depth == 0 {
		s.activate(t, now)
	}
	w := s.newWaiter()
	w.t, w.tenant, w.keys, w.dim = t, tenantKey, keys, dim
	w.enqueuedAt, w.readyAt, w.deadline = now, now+retryAfter, deadline
	w.retryAfter, w.position, w.estimate, w.cost = retryAfter, pos, est, c
	w.interval = max(interval, 0)
	w.size = c
	if size > 0 {
		w.size = costOf(size)
	}
	w.state = stateQueued

	if t.tail == nil {
		t.head, t.tail = w, w
	} else {
		w.prev, t.tail.next, t.tail = t.tail, w, w
	}
	t.depth++
	t.queuedCost += c
	s.depth++
	w.ks = w.ks[:0]
	for _, key := range keys {
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

// spacingOr returns the measured grant spacing, or interval (the contended
// bucket's refill interval) before any grant has been measured.
func (s *sched) spacingOr(interval int64) float64 {
	if s.spacing > 0 {
		return s.spacing
	}
	return float64(max(interval, 0))
}

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
	return s.idleHead != nil && now-s.idleHead.idleSince >= int64(s.bounds.MaxWait)
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
	weight := s.weights.weightOf("")
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
	t.idle, t.idleSince, t.idlePrev, t.idleNext = true, now, s.idleTail, nil
	if s.idleTail == nil {
		s.idleHead = t
	} else {
		s.idleTail.idleNext = t
	}
	s.idleTail = t
}

// unlinkIdle removes t from the idle list; it must be on it.
func (s *sched) unlinkIdle(t *tenant) {
	if t.idlePrev != nil {
		t.idlePrev.idleNext = t.idleNext
	} else {
		s.idleHead = t.idleNext
	}
	if t.idleNext != nil {
		t.idleNext.idlePrev = t.idlePrev
	} else {
		s.idleTail = t.idlePrev
	}
	t.idle, t.idlePrev, t.idleNext = false, nil, nil
}

// room returns the expected time from now until a request refused at enqueue
// with reason could join. For tenant_queue_full it is when its tenant's head
// is expected to be admitted: the head's own estimate, made at its enqueue
// from its position and the grant spacing, or one grant from now when the
// head is overdue, never before the head's Retry-After. For
// tenant_table_full the same holds for the shorter overflow queue of its
// hand. For queue_full it is the next grant or expiry anywhere. It is at
// least minRetry; the caller applies the limiter's next token and the
// request's budget.
func (s *sched) room(now int64, tenantKey string, reason Reason, interval int64) int64 {
	sp := int64(s.spacingOr(interval))
	var d int64
	switch reason {
	case ReasonTenantQueueFull, ReasonTenantTableFull:
		t, _ := s.queueFor(now, tenantKey)
		if t == nil || t.head == nil {
			return minRetry
		}
		h := t.head
		at := h.enqueuedAt + h.estimate
		if at <= now {
			at = now + sp
		}
		d = max(at, h.readyAt) - now
	case ReasonQueueFull:
		d = sp
		if s.lastGrantSet {
			d = s.lastGrant + sp - now
		}
		if w := s.deadlines.earliest(); w != nil {
			d = min(d, w.deadline-now)
		}
	}
	return max(d, minRetry)
}

// refusalRetry returns the Retry-After of a request refused at arrival at now
// with reason, est being the estimate enqueue made for the place it would
// have had, retryAfter the limiter's time to its next token, deadline its
// absolute budget end (MaxWait applied here) and interval and cost as for
// enqueue.
//
// Requests refused close together are told successive times, so clients
// that obey Retry-After come back one place at a time instead of all at
// once to find room for one. Each queue keeps the latest grant time it
// promised (its slot); a refused request's slot is one grant of its
// tenant's share (step) after that, or the grant its place would have had
// now, whichever is later.
//
//   - wait_exceeds_budget: its place cannot be granted within its budget;
//     it is told its slot, when its own place would be granted.
//   - tenant_queue_full, tenant_table_full: it is told when its slot's place
//     in the queue frees, depth grants before the slot (the first refused:
//     when the head is expected to be admitted, see room). Never more than
//     its budget, never less than its next token; a time cut to the budget
//     promises no slot (the client comes back before it).
//   - queue_full: successive grants anywhere, from the next grant or expiry.
func (s *sched) refusalRetry(now int64, tenantKey string, reason Reason, est, retryAfter, interval, deadline, cost int64) int64 {
	retryAfter = max(retryAfter, 0)
	budget := min(deadline, now+int64(s.bounds.MaxWait)) - now
	fit := func(d int64) int64 { return max(min(d, budget), retryAfter, minRetry) }
	switch reason {
	case ReasonWaitExceedsBudget:
		slot := now + est
		t, _ := s.queueFor(now, tenantKey)
		if t == nil {
			// A tenant without a queue yet keeps its promise in the
			// table like an idle tenant (evicted first when a slot is
			// needed), so its next refusals are told the places after.
			t = s.newTenant(now, tenantKey, s.weights.weightOf(tenantKey))
			s.linkIdle(t, now)
		}
		if t.promised != 0 {
			slot = max(slot, t.promised+s.stepOf(t, cost, interval))
		}
		t.promised = slot
		return max(slot-now, retryAfter, minRetry)
	case ReasonTenantQueueFull, ReasonTenantTableFull:
		t, _ := s.queueFor(now, tenantKey)
		base := s.room(now, tenantKey, reason, interval)
		if t == nil {
			return fit(base)
		}
		step := s.stepOf(t, cost, interval)
		ahead := int64(min(float64(t.depth)*float64(step), float64(maxEstimate)))
		slot := now + base + ahead
		if t.promised != 0 {
			slot = max(slot, t.promised+step)
		}
		d := slot - ahead - now
		if d <= budget {
			t.promised = slot
		}
		return fit(d)
	case ReasonQueueFull:
		step := int64(s.spacingOr(interval))
		at := now + s.room(now, tenantKey, reason, interval)
		if s.promised != 0 {
			at = max(at, s.promised+step)
		}
		d := at - now
		if d <= budget {
			s.promised = at
		}
		return fit(d)
	}
	return fit(retryAfter)
}

// stepOf returns the time one more grant of cost to queue t takes at its
// weighted share (see placeOf), at least minRetry.
func (s *sched) stepOf(t *tenant, cost, interval int64) int64 {
	sumW := s.sumWeights
	if t.depth == 0 {
		sumW += t.weight
	}
	_, _, step := s.placeOf(1, costOf(cost), costOf(cost), t.weight, sumW, interval)
	return max(int64(step), minRetry)
}

// place puts a tenant that has a head waiter and no running attempt into the
// ready or pending heap. Entering the ready heap, its start tag is its last
// finish tag, but never more than its head's grant (cost strides) behind the
// scheduler's virtual time, so its finish tag is at most the virtual time: a
// tenant that lost a race for a shared token keeps its turn, while one held
// back for long (by its own limit) cannot bank credit for a burst later. A
// new tenant starts at the virtual time.
func (s *sched) place(t *tenant, now int64) {
	if t.head.readyAt <= now {
		t.start = vmax(t.finish, s.vnow-t.stride*t.head.cost)
		t.place = placeReady
		s.ready.push(t, t.tag())
		return
	}
	t.place = placePending
	s.pending.push(t, uint64(t.head.readyAt))
}

// unplace takes a tenant out of whichever heap holds it.
func (s *sched) unplace(t *tenant) {
	switch t.place {
	case placeReady:
		s.ready.remove(t.heapIdx)
	case placePending:
		s.pending.remove(t.heapIdx)
	}
	t.place = placeNone
}

// next expires overdue waiters and grants an attempt to the head waiter of the
// ready tenant with the smallest finish tag. It returns nil when MaxInFlight
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
	for s.pending.len() > 0 && int64(s.pending.topKey()) <= now {
		t := s.pending.pop()
		t.place = placeNone
		s.place(t, now)
	}
	if s.holds > 0 {
		s.parkHeld(now)
	}
	if s.ready.len() == 0 {
		return nil
	}
	t := s.ready.top()
	w := t.head
	for _, ks := range w.ks {
		if ks.inFlight > 0 {
			return nil
		}
	}
	s.ready.pop()
	t.place = placeInFlight
	s.deadlines.remove(w)
	w.state = stateGranted
	s.inFlight++
	for _, ks := range w.ks {
		ks.inFlight++
	}
	return w
}

// complete records the outcome of a granted waiter's attempt at now. An
// admitted waiter leaves and its tenant is charged its cost; a refused one is
// re-queued at the head of its tenant queue with ready time now+retryAfter, or
// refused with ReasonWaitExceedsBudget when that is not before its deadline;
// an error removes it.
func (s *sched) complete(now int64, w *waiter, ok bool, retryAfter int64, err error) outcome {
	t := w.t
	s.inFlight--
	for _, ks := range w.ks {
		ks.inFlight--
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
		s.vnow = vmax(s.vnow, t.start)
		if t.flightAdj != 0 {
			// Corrections made during the attempt move its finish tag,
			// not the virtual time.
			t.finish = s.moveTag(t, t.finish, t.flightAdj)
			t.flightAdj = 0
		}
		if s.vnow-s.swept >= sweepEvery {
			s.sweep()
		}
		if s.lastGrantSet {
			dt := float64(now - s.lastGrant)
			if s.spacing == 0 {
				s.spacing = dt
			} else {
				s.spacing += spacingWeight * (dt - s.spacing)
			}
			if w.cost != 1 || s.grants.set {
				s.grants.add(float64(w.cost), dt)
			}
		}
		s.finish(w, now, true, "")
		s.lastGrant, s.lastGrantSet = now, s.depth > 0
		return outcomeAdmitted
	}
	t.flightAdj = 0 // already applied to the finish tag it re-enters from
	retryAfter = max(retryAfter, minRetry)
	w.retryAfter = retryAfter
	if now+retryAfter >= w.deadline {
		w.retryAfter = s.ownPlace(now, w, retryAfter)
		s.finish(w, now, false, ReasonWaitExceedsBudget)
		return outcomeRefused
	}
	w.readyAt = now + retryAfter
	w.state = stateQueued
	s.deadlines.push(w)
	if w.size > 1 {
		s.hold(w, now)
	}
	t.place = placeNone
	s.place(t, now)
	return outcomeRequeued
}

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
	if alpha, beta, meanCost, ok := s.grantModel(); ok {
		meanDt := s.spacing
		if s.grants.set {
			meanDt = s.grants.dt
		}
		budget = max(budget, alpha+beta*c, meanDt/meanCost*c)
	}
	budget = max(min(holdSlack*budget, float64(maxEstimate)), float64(minRetry))
	until := min(w.readyAt, now+int64(budget))
	if until <= now {
		return
	}
	tag := w.t.tag() // the tag it was granted under
	for _, ks := range w.ks {
		switch {
		case ks.holder == nil:
			s.holds++
		case ks.holder != w && ks.holdUntil > now && !vless(tag, ks.holdTag):
			continue
		}
		ks.holder, ks.holdUntil, ks.holdTag = w, until, tag
	}
}

// parkHeld moves ready tenants whose head needs a key held for a waiter
// ahead of it in the fair order from the top of the ready heap to the
// pending heap, keyed by the end of the hold and keeping their tags, until
// the top tenant's head is not held (or is blocked by a running attempt,
// which next handles).
func (s *sched) parkHeld(now int64) {
	for s.ready.len() > 0 {
		t := s.ready.top()
		for _, ks := range t.head.ks {
			if ks.inFlight > 0 {
				return
			}
		}
		until := s.heldFor(t.head, now)
		if until <= now {
			return
		}
		s.ready.pop()
		t.place = placePending
		s.pending.push(t, uint64(until))
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
		if !vless(tag, ks.holdTag) {
			until = max(until, ks.holdUntil)
		}
	}
	return until
}

// cancel removes a queued or granted waiter at once, freeing its attempt slot.
func (s *sched) cancel(now int64, w *waiter) {
	switch w.state {
	case stateQueued:
		s.deadlines.remove(w)
	case stateGranted:
		s.inFlight--
		for _, ks := range w.ks {
			ks.inFlight--
		}
		w.t.flightAdj = 0
	default:
		return
	}
	s.finish(w, now, false, "")
}

// ownPlace returns the time from now until queued (or just refused) waiter
// w's own place is expected to be granted: ready, the time until its
// tenant's head may be tried again, plus the grants expected before w by its
// place in its tenant queue and its tenant's weighted share. A request
// refused after waiting is told it, not the time to the bucket's next token,
// which a client ahead of it in the fair order is due to take.
func (s *sched) ownPlace(now int64, w *waiter, ready int64) int64 {
	t := w.t
	k, upTo := placeIn(t, w)
	_, wait, _ := s.placeOf(k, upTo, w.cost, t.weight, max(s.sumWeights, t.weight), w.interval)
	return max(min(ready+int64(wait), maxEstimate), minRetry)
}

// maxPlaceWalk bounds the waiters placeIn visits from each end of a tenant
// queue, so that expiring a long queue's waiters stays linear.
const maxPlaceWalk = 64

// placeIn returns w's 1-based place in its tenant queue t and the cost
// queued up to and including it, counted from whichever end of the queue is
// within maxPlaceWalk waiters of it; further from both, it is taken to be
// last (its place is then expected no earlier than it is).
func placeIn(t *tenant, w *waiter) (int, uint64) {
	k, upTo := 0, uint64(0)
	for x := t.head; x != nil && k < maxPlaceWalk; x = x.next {
		k++
		upTo += x.cost
		if x == w {
			return k, upTo
		}
	}
	after := uint64(0)
	j := 0
	for x := t.tail; x != nil && j < maxPlaceWalk; x = x.prev {
		if x == w {
			return t.depth - j, t.queuedCost - after
		}
		j++
		after += x.cost
	}
	return t.depth, t.queuedCost
}

// expire finishes every queued waiter whose deadline is not after now with
// ReasonDeadlineExceeded.
func (s *sched) expire(now int64) {
	for w := s.deadlines.earliest(); w != nil && w.deadline <= now; w = s.deadlines.earliest() {
		s.deadlines.remove(w)
		w.retryAfter = s.ownPlace(now, w, max(w.t.head.readyAt-now, 0))
		s.finish(w, now, false, ReasonDeadlineExceeded)
		s.onDone(w)
	}
}

// drain finishes every queued waiter with reason. Granted waiters keep
// running; their attempt's outcome decides.
func (s *sched) drain(now int64, reason Reason) {
	for w := s.deadlines.earliest(); w != nil; w = s.deadlines.earliest() {
		s.deadlines.remove(w)
		s.finish(w, now, false, reason)
		s.onDone(w)
	}
}

// finish takes w out of its tenant queue and the key counts and marks it done.
// w must already be out of the deadline heap and not count as in flight.
func (s *sched) finish(w *waiter, now int64, admitted bool, reason Reason) {
	t := w.t
	wasHead, granted := t.head == w, w.state == stateGranted
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		t.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		t.tail = w.prev
	}
	w.prev, w.next, w.t = nil, nil, nil
	t.depth--
	t.queuedCost -= w.cost
	s.depth--
	for i, ks := range w.ks {
		if ks.holder == w {
			s.unhold(ks)
		}
		ks.waiters--
		if ks.waiters == 0 {
			delete(s.keys, w.keys[i])
			s.freeK = append(s.freeK, ks)
		}
	}
	w.state, w.admitted, w.reason, w.doneAt = stateDone, admitted, reason, now
	if s.depth == 0 {
		s.lastGrantSet = false
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

// release returns a done waiter's node to the free list.
func (s *sched) release(w *waiter) {
	sig := w.signal
	if sig != nil {
		// Drop a grant signal that a cancellation overtook.
		select {
		case <-sig:
		default:
		}
	}
	clear(w.ks)
	*w = waiter{signal: sig, ks: w.ks[:0], state: stateFree, next: s.freeW}
	s.freeW = w
}

func (s *sched) newWaiter() *waiter {
	if w := s.freeW; w != nil {
		s.freeW = w.next
		w.next = nil
		return w
	}
	return &waiter{}
}

// newTenant adds a tenant to the table at now, first evicting the least
// recently active idle tenant when the table is at MaxTenants (queueFor has
// checked that it may).
func (s *sched) newTenant(now int64, key string, weight int) *tenant {
	if len(s.tenants) >= s.bounds.MaxTenants && s.evictable(now) {
		s.evictIdle()
	}
	var t *tenant
	if n := len(s.freeT); n > 0 {
		t = s.freeT[n-1]
		s.freeT = s.freeT[:n-1]
	} else {
		t = &tenant{}
	}
	s.seq++
	*t = tenant{key: key, weight: weight, stride: strideScale / uint64(weight), finish: s.vnow, heapIdx: -1, seq: s.seq}
	s.tenants[key] = t
	return t
}

// evictIdle drops the least recently active idle tenant from the table. It
// forgets that tenant's finish tag, which costs it at most one stride of its
// share should it come back.
func (s *sched) evictIdle() {
	t := s.idleHead
	s.unlinkIdle(t)
	delete(s.tenants, t.key)
	*t = tenant{}
	s.freeT = append(s.freeT, t)
}

// trimIdle evicts idle tenants until the table is within MaxTenants, after
// the bound was lowered.
func (s *sched) trimIdle() {
	for len(s.tenants) > s.bounds.MaxTenants && s.idleHead != nil {
		s.evictIdle()
	}
}

func (s *sched) keyRef(key LimitKey) *keyState {
	if ks := s.keys[key]; ks != nil {
		return ks
	}
	var ks *keyState
	if n := len(s.freeK); n > 0 {
		ks = s.freeK[n-1]
		s.freeK = s.freeK[:n-1]
		*ks = keyState{}
	} else {
		ks = &keyState{}
	}
	s.keys[key] = ks
	return ks
}

// hasWaiters reports whether any waiter needs key.
func (s *sched) hasWaiters(key LimitKey) bool {
	return s.keys[key] != nil
}

// setWeights applies new weights to every tracked tenant without moving any
// waiter; the ready heap is re-ordered by the new finish tags.
func (s *sched) setWeights(w Weights) {
	s.weights = w.clone()
	reweight := func(t *tenant, nw int) {
		if t.depth > 0 {
			s.sumWeights += nw - t.weight
		}
		t.weight, t.stride = nw, strideScale/uint64(nw)
	}
	for _, t := range s.tenants {
		reweight(t, s.weights.weightOf(t.key))
	}
	for _, t := range s.overflow {
		if t != nil {
			reweight(t, s.weights.weightOf(""))
		}
	}
	s.ready.rekey((*tenant).tag)
}

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
	t := s.tenants[tenantKey]
	if t == nil || delta == 0 {
		return false
	}
	delta = min(max(delta, -MaxCost), MaxCost)
	t.finish = s.moveTag(t, t.finish, delta)
	switch t.place {
	case placeReady:
		t.start = s.moveTag(t, t.start, delta)
		s.ready.fix(t.heapIdx, t.tag())
		return true
	case placeInFlight:
		t.flightAdj = min(max(t.flightAdj+delta, -MaxCost), MaxCost)
	}
	return false
}

// moveTag returns tag v of t moved by delta (within +-MaxCost) of t's
// strides, bounded as adjust describes.
func (s *sched) moveTag(t *tenant, v uint64, delta int64) uint64 {
	// uint64(delta)*stride is the two's complement of |delta|*stride for a
	// negative delta, so the sum moves v back; |delta|*stride <= 2^60.
	nv := v + uint64(delta)*t.stride
	if delta < 0 {
		return vmax(nv, vmin(v, s.vnow-max(t.lastCost, 1)*t.stride))
	}
	return vmin(nv, vmax(v, s.vnow+maxLead))
}

// sweep raises the tags of every tenant outside the ready heap to at least
// MaxCost of its strides behind the virtual time, and records when it ran.
// Ready tags stay within wrap-around range of the virtual time on their own;
// idle, pending and in-flight tenants would otherwise fall arbitrarily far
// behind it while it advances (see strideScale). Raising a tag that far
// behind costs no tenant anything: place and activate raise it further on
// their own.
func (s *sched) sweep() {
	s.swept = s.vnow
	raise := func(t *tenant) {
		if t == nil || t.place == placeReady {
			return
		}
		floor := s.vnow - MaxCost*t.stride
		t.finish = vmax(t.finish, floor)
		if t.place == placeInFlight {
			t.start = vmax(t.start, floor)
		}
	}
	for _, t := range s.tenants {
		raise(t)
	}
	for _, t := range s.overflow {
		raise(t)
	}
}

// setBounds applies new bounds to future decisions. No waiter is evicted;
// idle tenants beyond a lowered MaxTenants are.
func (s *sched) setBounds(b Bounds) {
	s.bounds = b.withDefaults()
	s.trimIdle()
}

// nextWake returns the earliest time something becomes due without an event:
// a pending head turning ready or a queued waiter's deadline.
func (s *sched) nextWake() (int64, bool) {
	wake, ok := int64(noDeadline), false
	if s.pending.len() > 0 {
		wake, ok = int64(s.pending.topKey()), true
	}
	if w := s.deadlines.earliest(); w != nil && w.deadline < wake {
		wake, ok = w.deadline, true
	}
	return wake, ok
}
