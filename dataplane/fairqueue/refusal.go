package fairqueue

// room returns the expected time from now until request a, refused at
// enqueue with reason, could join. For tenant_queue_full it is when its tenant's head
// is expected to be admitted: the head's own estimate, made at its enqueue
// from its position and the grant spacing, or one grant from now when the
// head is overdue, never before the head's Retry-After. For
// tenant_table_full the same holds for the shorter overflow queue of its
// hand. For queue_full it is the next grant or expiry anywhere. It is at
// least minRetry; the caller applies the limiter's next token and the
// request's budget.
func (s *sched) room(now int64, a *arrival, reason Reason) int64 {
	sp := int64(s.spacing.or(a.interval))
	var d int64
	switch reason {
	case ReasonTenantQueueFull, ReasonTenantTableFull:
		t, _ := s.queueOf(now, a)
		if t == nil || t.head() == nil {
			return minRetry
		}
		h := t.head()
		at := h.enqueuedAt + h.estimate
		if at <= now {
			at = now + sp
		}
		d = max(at, h.readyAt) - now
	case ReasonQueueFull:
		d = s.spacing.untilNext(now, sp)
		if w := s.deadlines.earliest(); w != nil {
			d = min(d, w.deadline-now)
		}
	}
	return max(d, minRetry)
}

// refusalRetry returns the Retry-After of request a, refused by enqueue at
// now with reason, est being the estimate enqueue made for the place it
// would have had.
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
func (s *sched) refusalRetry(now int64, a *arrival, reason Reason, est int64) int64 {
	retryAfter := a.first()
	budget := s.budget(now, a.deadline)
	fit := func(d int64) int64 { return max(min(d, budget), retryAfter, minRetry) }
	switch reason {
	case ReasonWaitExceedsBudget:
		slot := now + est
		t, _ := s.queueOf(now, a)
		if t == nil {
			// A tenant without a queue yet keeps its promise in the
			// table like an idle tenant (evicted first when a slot is
			// needed), so its next refusals are told the places after.
			band, lowered := s.bandFor(a.tenant, a.band)
			t = s.newTenant(now, a.tenant, band, lowered, s.weights.Of(a.tenant))
			s.linkIdle(t, now)
		}
		if t.promised != 0 {
			slot = max(slot, t.promised+s.stepOf(t, a.cost, a.interval))
		}
		t.promised = slot
		return max(slot-now, retryAfter, minRetry)
	case ReasonTenantQueueFull, ReasonTenantTableFull:
		t, _ := s.queueOf(now, a)
		base := s.room(now, a, reason)
		if t == nil {
			return fit(base)
		}
		step := s.stepOf(t, a.cost, a.interval)
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
		step := int64(s.spacing.or(a.interval))
		return fit(successive(&s.promised, now, now+s.room(now, a, reason), step, budget))
	}
	return fit(retryAfter)
}

// refusedOutside returns the Retry-After of a request refused at now without
// queuing (see Queue.Refuse), first being the expected time until its limit
// has room and step the time between rooms after: first from now, or step
// after the latest time told such a refusal when that is later, so
// refusals close together are told successive times. A time beyond budget
// is cut to it and promises nothing (the client comes back before it); a
// first beyond budget is told as it is, never less.
func (s *sched) refusedOutside(now, first, step, budget int64) int64 {
	first, step = max(first, minRetry), max(step, minRetry)
	d := successive(&s.outside, now, now+first, step, budget)
	return max(min(d, budget), first)
}

// successive returns the time from now until at or, when later, step after
// *last, the latest time promised a refusal of its kind (0: none), so
// refusals close together are told successive times. It records the time
// in *last only when it fits budget: a time beyond budget promises nothing.
func successive(last *int64, now, at, step, budget int64) int64 {
	if *last != 0 {
		at = max(at, *last+step)
	}
	d := at - now
	if d <= budget {
		*last = at
	}
	return d
}

// budget returns how long from now a request whose deadline is deadline may
// still wait: until the deadline or MaxWait from now, whichever is earlier.
func (s *sched) budget(now, deadline int64) int64 {
	return min(deadline, now+int64(s.bounds.MaxWait)) - now
}
