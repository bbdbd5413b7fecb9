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
	list    list[waiter] // linked through waiter.inDeadlines
	listLen int
	// heap is keyed by deadline. Deadlines in it are after their arrival
	// and at most MaxWait from it, far within the 2^63 of each other the
	// heap's wrap-around comparison needs.
	heap minHeap[*waiter]
}

func (d *deadlineIndex) len() int { return d.listLen + d.heap.len() }

func (d *deadlineIndex) push(w *waiter) {
	if t := d.list.back(); t != nil && w.deadline < t.deadline {
		d.heap.push(w, uint64(w.deadline), 0, &w.inDeadlineHeap)
		return
	}
	w.inDeadlineHeap.idx = inDeadlineList
	d.list.pushBack(&w.inDeadlines, w)
	d.listLen++
}

func (d *deadlineIndex) remove(w *waiter) {
	if w.inDeadlineHeap.idx != inDeadlineList {
		d.heap.remove(w.inDeadlineHeap.idx)
		return
	}
	d.list.remove(&w.inDeadlines)
	w.inDeadlineHeap.idx = -1
	d.listLen--
}

// earliest returns the waiter with the earliest deadline, or nil.
func (d *deadlineIndex) earliest() *waiter {
	switch {
	case d.heap.len() == 0:
		return d.list.front()
	case d.list.head == nil || int64(d.heap.topKey()) < d.list.front().deadline:
		return d.heap.top()
	}
	return d.list.front()
}

// expire finishes every queued waiter whose deadline is not after now with
// ReasonDeadlineExceeded.
func (s *sched) expire(now int64) {
	for w := s.deadlines.earliest(); w != nil && w.deadline <= now; w = s.deadlines.earliest() {
		s.deadlines.remove(w)
		w.retryAfter = s.ownPlace(now, w, max(w.t.head().readyAt-now, w.firstGrant, 0))
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
