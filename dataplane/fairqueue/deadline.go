package fairqueue

// inDeadlineList marks a waiter held by the deadline list rather than the heap.
const inDeadlineList = -2

// deadlineIndex holds queued waiters by deadline. Most requests arrive with
// the same budget (MaxWait or the route's total timeout), so their deadlines
// grow with arrival time: those are appended to a sorted intrusive list in
// O(1) and removed in O(1). A waiter whose deadline is earlier than the
// list's tail (a shorter client deadline, or a re-queued waiter) goes to a
// min-heap instead. The earliest deadline is the smaller of the two heads.
type deadlineIndex struct {
	head, tail *waiter
	listLen    int
	heap       waiterHeap
}

func (d *deadlineIndex) len() int { return d.listLen + d.heap.len() }

func (d *deadlineIndex) push(w *waiter) {
	if d.tail != nil && w.deadline < d.tail.deadline {
		d.heap.push(w)
		return
	}
	w.dlIdx = inDeadlineList
	w.dlPrev, w.dlNext = d.tail, nil
	if d.tail == nil {
		d.head = w
	} else {
		d.tail.dlNext = w
	}
	d.tail = w
	d.listLen++
}

func (d *deadlineIndex) remove(w *waiter) {
	if w.dlIdx != inDeadlineList {
		d.heap.remove(w.dlIdx)
		return
	}
	if w.dlPrev != nil {
		w.dlPrev.dlNext = w.dlNext
	} else {
		d.head = w.dlNext
	}
	if w.dlNext != nil {
		w.dlNext.dlPrev = w.dlPrev
	} else {
		d.tail = w.dlPrev
	}
	w.dlPrev, w.dlNext, w.dlIdx = nil, nil, -1
	d.listLen--
}

// earliest returns the waiter with the earliest deadline, or nil.
func (d *deadlineIndex) earliest() *waiter {
	switch {
	case d.heap.len() == 0:
		return d.head
	case d.head == nil || d.heap.items[0].deadline < d.head.deadline:
		return d.heap.top()
	}
	return d.head
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
