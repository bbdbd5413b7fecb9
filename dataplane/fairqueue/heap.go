package fairqueue

// The scheduler's heaps keep each element's sort key inline, so a sift
// compares integers without dereferencing the element or calling through an
// interface or a type parameter's method. Each element's index lives in the
// element itself, in its heapSlot, kept up to date by the heap, so an element
// can be removed or re-keyed in O(log n).

// heapSlot is an element's place in a minHeap: its index there (-1 outside)
// and the element itself, so that an item of the heap stays three words.
type heapSlot[P any] struct {
	idx  int
	elem P
}

// heapItem is one element of a minHeap.
type heapItem[P any] struct {
	// key orders the heap, compared with wrap-around arithmetic (exact
	// while the keys are within 2^63 of each other): a virtual finish tag,
	// a ready time or a deadline.
	key uint64
	// seq breaks ties in key: the order of arrival.
	seq  uint64
	slot *heapSlot[P]
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

func (h *minHeap[P]) top() P { return h.items[0].slot.elem }

func (h *minHeap[P]) topKey() uint64 { return h.items[0].key }

// push adds p with key and seq; slot is p's place in this heap.
func (h *minHeap[P]) push(p P, key, seq uint64, slot *heapSlot[P]) {
	slot.elem = p
	h.items = append(h.items, heapItem[P]{key: key, seq: seq, slot: slot})
	i := len(h.items) - 1
	slot.idx = i
	h.up(i)
}

func (h *minHeap[P]) pop() P { return h.remove(0) }

// remove deletes and returns the element at index i.
func (h *minHeap[P]) remove(i int) P {
	n := len(h.items) - 1
	e := h.items[i]
	if i != n {
		h.set(i, h.items[n])
	}
	h.items[n] = heapItem[P]{}
	h.items = h.items[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
	e.slot.idx = -1
	return e.slot.elem
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
		h.items[i].key = keyOf(h.items[i].slot.elem)
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
		h.set(i, h.items[p])
		i = p
	}
	h.set(i, e)
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
		h.set(i, h.items[c])
		i = c
	}
	h.set(i, e)
	return i > i0
}

// set puts e at index i and records the index in e's slot.
func (h *minHeap[P]) set(i int, e heapItem[P]) {
	h.items[i] = e
	e.slot.idx = i
}
