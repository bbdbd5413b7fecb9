package fairqueue

import (
	"math"
	"time"
)

// maxEstimate caps wait estimates so conversions never overflow.
const maxEstimate = int64(1 << 62)

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

// above is the demand of the bands above a request's, which strict priority
// serves before it: the grants and the cost queued there now, and the
// request's band's minShare in parts of shareOne. Arrivals to those bands
// while the request waits are not foreseen; with a minShare m the request's
// band is served at least m of the cost, so at most (1-m)/m of its own
// band's cost ahead of it is counted from above.
type above struct {
	grants, cost float64
	share        int64
}

// higher returns the demand of the bands above o.
func (s *sched) higher(o *fairOrder) above {
	a := above{share: o.share}
	for i := range s.nb {
		p := &s.orders[i]
		if p == o {
			break
		}
		a.grants += float64(p.depth)
		a.cost += float64(p.queuedCost)
	}
	return a
}

// placeOf returns the service position of the k-th waiter, of cost c, of a
// tenant of the given weight whose queue holds upTo cost up to and including
// it, when the tracked tenants of its band (counting this one) weigh sumW
// and hi is the demand of the bands above (see above): its position,
// the time the grants expected before it take by the grant model (the
// grants times alpha plus their cost times beta), and step, the time one
// more grant of the tenant's (cost c, at its weighted share) takes. Until
// grants have been measured every grant is taken to be like this one and to
// take interval.
func (s *sched) placeOf(k int, upTo, c uint64, weight, sumW int, interval time.Duration, hi above) (pos int, wait, step float64) {
	alpha, beta, meanCost, ok := s.spacing.model()
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
	if hi.grants > 0 {
		f := 1.0
		if hi.share > 0 {
			f = min(1, (costAhead+float64(c))*float64(shareOne-hi.share)/float64(hi.share)/hi.cost)
		}
		grantsAhead += hi.grants * f
		costAhead += hi.cost * f
		pos = int(min(max(math.Ceil(grantsAhead+1-1e-9), 1), math.MaxInt32))
	}
	wait = min(alpha*grantsAhead+beta*costAhead, float64(maxEstimate))
	// While the tenant is granted c, the others are granted c*(share-1) in
	// grants of the mean cost.
	share := float64(sumW) / float64(weight)
	fc := float64(c)
	step = min(alpha*(1+fc*(share-1)/meanCost)+beta*fc*share, float64(maxEstimate))
	return pos, wait, step
}

// stepOf returns the time one more grant of cost to queue t takes at its
// weighted share (see placeOf), at least minRetry.
func (s *sched) stepOf(t *tenant, cost int64, interval time.Duration) int64 {
	sumW := s.order(t).sumWeights
	if t.depth == 0 {
		sumW += t.weight
	}
	_, _, step := s.placeOf(1, costOf(cost), costOf(cost), t.weight, sumW, interval, above{})
	return max(int64(step), minRetry)
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
	o := s.order(t)
	_, wait, _ := s.placeOf(k, upTo, w.cost, t.weight, max(o.sumWeights, t.weight), w.interval, s.higher(o))
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
	for x := t.head(); x != nil && k < maxPlaceWalk; x = x.inQueue.nextElem() {
		k++
		upTo += x.cost
		if x == w {
			return k, upTo
		}
	}
	after := uint64(0)
	j := 0
	for x := t.queue.back(); x != nil && j < maxPlaceWalk; x = x.inQueue.prevElem() {
		if x == w {
			return t.depth - j, t.queuedCost - after
		}
		j++
		after += x.cost
	}
	return t.depth, t.queuedCost
}
