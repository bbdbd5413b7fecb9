package fairqueue

// minHeap is a binary min-heap of pointers that records each element's index
// through setIdx so elements can be removed or fixed in O(log n). It is used
// instead of container/heap to avoid interface conversions on the grant path.
type minHeap[T any] struct {
	items  []T
	less   func(a, b T) bool
	setIdx func(x T, i int)
}

func (h *minHeap[T]) len() int { return len(h.items) }

func (h *minHeap[T]) top() T { return h.items[0] }

func (h *minHeap[T]) push(x T) {
	h.items = append(h.items, x)
	i := len(h.items) - 1
	h.setIdx(x, i)
	h.up(i)
}

func (h *minHeap[T]) pop() T {
	return h.remove(0)
}

// remove deletes and returns the element at index i.
func (h *minHeap[T]) remove(i int) T {
	n := len(h.items) - 1
	x := h.items[i]
	if i != n {
		h.swap(i, n)
	}
	var zero T
	h.items[n] = zero
	h.items = h.items[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
	h.setIdx(x, -1)
	return x
}

// init restores the heap order after keys changed in bulk.
func (h *minHeap[T]) init() {
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *minHeap[T]) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.setIdx(h.items[i], i)
	h.setIdx(h.items[j], j)
}

func (h *minHeap[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.items[i], h.items[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

// down sifts element i towards the leaves and reports whether it moved.
func (h *minHeap[T]) down(i0 int) bool {
	i, n := i0, len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && h.less(h.items[r], h.items[l]) {
			c = r
		}
		if !h.less(h.items[c], h.items[i]) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > i0
}
