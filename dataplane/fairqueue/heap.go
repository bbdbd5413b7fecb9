package fairqueue

// The scheduler's heaps keep each element's sort key inline, so a sift
// compares integers without dereferencing the element or calling through an
// interface or a type parameter's method. Each element's index lives in the
// element itself, kept up to date through idx, so an element can be removed
// or re-keyed in O(log n).

// heapItem is one element of a minHeap.
type heapItem[P any] struct {
	// key orders the heap, compared with wrap-around arithmetic (exact
	// while the keys are within 2^63 of each other): a virtual finish tag,
	// a ready time or a deadline.
	key uint64
	// seq breaks ties in key: the order of arrival.
	seq uint64
	// idx is the element's own index field, -1 once it leaves the heap.
	idx *int
	p   P
}

func (a *heapItem[P]) less(b *heapItem[P]) bool {
	if d := int64(a.key - b.key); d != 0 {
		return d < 0
	}
	return a.seq < b.seq
}

// minHeap is a 4-ary min-heap by (key, seq): half the depth of a binary
// heap, which matters for the pop on every grant.
type minHeap[P any] struct {
	items []heapItem[P]
}

func (h *minHeap[P]) len() int { return len(h.items) }

func (h *minHeap[P]) top() P { return h.items[0].p }

func (h *minHeap[P]) topKey() uint64 { return h.items[0].key }

// push adds p with key and seq; idx is p's index field.
func (h *minHeap[P]) push(p P, key, seq uint64, idx *int) {
	h.items = append(h.items, heapItem[P]{key: key, seq: seq, idx: idx, p: p})
	i := len(h.items) - 1
	*idx = i
	h.up(i)
}

func (h *minHeap[P]) pop() P { return h.remove(0) }

// remove deletes and returns the element at index i.
func (h *minHeap[P]) remove(i int) P {
	n := len(h.items) - 1
	e := h.items[i]
	if i != n {
		h.items[i] = h.items[n]
		*h.items[i].idx = i
	}
	h.items[n] = heapItem[P]{}
	h.items = h.items[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
	*e.idx = -1
	return e.p
}

// fix replaces the key of the element at index i and restores the heap order.
func (h *minHeap[P]) fix(i int, key uint64) {
	h.items[i].key = key
	if !h.down(i) {
		h.up(i)
	}
}

// rekey replaces every key through keyOf and restores the heap order.
func (h *minHeap[P]) rekey(keyOf func(P) uint64) {
	for i := range h.items {
		h.items[i].key = keyOf(h.items[i].p)
	}
	if len(h.items) < 2 {
		return
	}
	for i := (len(h.items) - 2) / 4; i >= 0; i-- {
		h.down(i)
	}
}

func (h *minHeap[P]) up(i int) {
	e := h.items[i]
	for i > 0 {
		p := (i - 1) / 4
		if !e.less(&h.items[p]) {
			break
		}
		h.items[i] = h.items[p]
		*h.items[i].idx = i
		i = p
	}
	h.items[i] = e
	*e.idx = i
}

// down sifts element i0 towards the leaves and reports whether it moved.
func (h *minHeap[P]) down(i0 int) bool {
	i, n := i0, len(h.items)
	e := h.items[i]
	for {
		first := 4*i + 1
		if first >= n {
			break
		}
		c := first
		for j := first + 1; j < min(first+4, n); j++ {
			if h.items[j].less(&h.items[c]) {
				c = j
			}
		}
		if !h.items[c].less(&e) {
			break
		}
		h.items[i] = h.items[c]
		*h.items[i].idx = i
		i = c
	}
	h.items[i] = e
	*e.idx = i
	return i > i0
}
