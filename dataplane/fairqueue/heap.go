package fairqueue

// The scheduler's heaps are concrete (not container/heap or generic) and keep
// each element's sort key inline, so a sift compares integers without
// dereferencing the element or calling through an interface. Each element
// records its index so it can be removed in O(log n).

// tenantEntry is one tenant in a tenantHeap. key is the virtual finish tag
// (ready heap) or the head's ready time (pending heap); both are compared with
// wrap-around arithmetic, exact while keys are within 2^63 of each other.
type tenantEntry struct {
	key uint64
	seq uint64
	t   *tenant
}

func (a *tenantEntry) less(b *tenantEntry) bool {
	if d := int64(a.key - b.key); d != 0 {
		return d < 0
	}
	return a.seq < b.seq
}

// tenantHeap is a 4-ary min-heap of tenants by (key, arrival): half the depth
// of a binary heap, which matters for the pop on every grant.
type tenantHeap struct {
	items []tenantEntry
}

func (h *tenantHeap) len() int { return len(h.items) }

func (h *tenantHeap) top() *tenant { return h.items[0].t }

func (h *tenantHeap) topKey() uint64 { return h.items[0].key }

func (h *tenantHeap) push(t *tenant, key uint64) {
	h.items = append(h.items, tenantEntry{key: key, seq: t.seq, t: t})
	i := len(h.items) - 1
	t.heapIdx = i
	h.up(i)
}

func (h *tenantHeap) pop() *tenant { return h.remove(0) }

// remove deletes and returns the tenant at index i.
func (h *tenantHeap) remove(i int) *tenant {
	n := len(h.items) - 1
	t := h.items[i].t
	if i != n {
		h.items[i] = h.items[n]
		h.items[i].t.heapIdx = i
	}
	h.items[n] = tenantEntry{}
	h.items = h.items[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
	t.heapIdx = -1
	return t
}

// fix replaces the key of the element at index i and restores the heap order.
func (h *tenantHeap) fix(i int, key uint64) {
	h.items[i].key = key
	if !h.down(i) {
		h.up(i)
	}
}

// rekey replaces every key through keyOf and restores the heap order.
func (h *tenantHeap) rekey(keyOf func(*tenant) uint64) {
	for i := range h.items {
		h.items[i].key = keyOf(h.items[i].t)
	}
	if len(h.items) < 2 {
		return
	}
	for i := (len(h.items) - 2) / 4; i >= 0; i-- {
		h.down(i)
	}
}

func (h *tenantHeap) up(i int) {
	e := h.items[i]
	for i > 0 {
		p := (i - 1) / 4
		if !e.less(&h.items[p]) {
			break
		}
		h.items[i] = h.items[p]
		h.items[i].t.heapIdx = i
		i = p
	}
	h.items[i] = e
	e.t.heapIdx = i
}

// down sifts element i0 towards the leaves and reports whether it moved.
func (h *tenantHeap) down(i0 int) bool {
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
		h.items[i].t.heapIdx = i
		i = c
	}
	h.items[i] = e
	e.t.heapIdx = i
	return i > i0
}

// waiterEntry is one waiter in a waiterHeap, keyed by its deadline.
type waiterEntry struct {
	deadline int64
	w        *waiter
}

// waiterHeap is a min-heap of queued waiters by deadline.
type waiterHeap struct {
	items []waiterEntry
}

func (h *waiterHeap) len() int { return len(h.items) }

func (h *waiterHeap) top() *waiter { return h.items[0].w }

func (h *waiterHeap) push(w *waiter) {
	h.items = append(h.items, waiterEntry{deadline: w.deadline, w: w})
	h.up(len(h.items) - 1)
}

// remove deletes and returns the waiter at index i.
func (h *waiterHeap) remove(i int) *waiter {
	n := len(h.items) - 1
	w := h.items[i].w
	if i != n {
		h.items[i] = h.items[n]
		h.items[i].w.dlIdx = i
	}
	h.items[n] = waiterEntry{}
	h.items = h.items[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
	w.dlIdx = -1
	return w
}

func (h *waiterHeap) up(i int) {
	e := h.items[i]
	for i > 0 {
		p := (i - 1) / 2
		if e.deadline >= h.items[p].deadline {
			break
		}
		h.items[i] = h.items[p]
		h.items[i].w.dlIdx = i
		i = p
	}
	h.items[i] = e
	e.w.dlIdx = i
}

// down sifts element i0 towards the leaves and reports whether it moved.
func (h *waiterHeap) down(i0 int) bool {
	i, n := i0, len(h.items)
	e := h.items[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && h.items[r].deadline < h.items[l].deadline {
			c = r
		}
		if h.items[c].deadline >= e.deadline {
			break
		}
		h.items[i] = h.items[c]
		h.items[i].w.dlIdx = i
		i = c
	}
	h.items[i] = e
	e.w.dlIdx = i
	return i > i0
}
