package fairqueue

// link is an element's place in one intrusive list. An element holds one
// link per list it can be in, so joining or leaving a list allocates nothing
// and takes O(1), and the list code runs on links alone, without calling back
// into the element's type.
type link[T any] struct {
	prev, next *link[T]
	elem       *T // the element; nil while in no list
}

// element returns n's element; nil for a nil link, so the neighbours of
// the ends of a list read as nil.
func (n *link[T]) element() *T {
	if n == nil {
		return nil
	}
	return n.elem
}

// nextElem returns the element after n's in its list, or nil.
func (n *link[T]) nextElem() *T { return n.next.element() }

// prevElem returns the element before n's in its list, or nil.
func (n *link[T]) prevElem() *T { return n.prev.element() }

// list is an intrusive doubly-linked list of T.
type list[T any] struct {
	head, tail *link[T]
}

// front returns the first element, or nil.
func (l *list[T]) front() *T { return l.head.element() }

// back returns the last element, or nil.
func (l *list[T]) back() *T { return l.tail.element() }

// pushBack appends e through n, its link for this list, which must be in no
// list.
func (l *list[T]) pushBack(n *link[T], e *T) {
	n.elem, n.prev, n.next = e, l.tail, nil
	if l.tail == nil {
		l.head = n
	} else {
		l.tail.next = n
	}
	l.tail = n
}

// remove unlinks n, which must be in l.
func (l *list[T]) remove(n *link[T]) {
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		l.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		l.tail = n.prev
	}
	*n = link[T]{}
}
