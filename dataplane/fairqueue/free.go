package fairqueue

// freeList recycles the scheduler's nodes (waiters, tenants, key states), so
// that once the queue has held its largest load the grant path allocates
// nothing. A node from get may hold a previous life's fields: the caller
// sets every field it relies on.
type freeList[T any] struct {
	nodes []*T
}

// get returns a recycled node, or a new one.
func (f *freeList[T]) get() *T {
	n := len(f.nodes)
	if n == 0 {
		return new(T)
	}
	x := f.nodes[n-1]
	f.nodes[n-1] = nil
	f.nodes = f.nodes[:n-1]
	return x
}

// put recycles x, which nothing may use any more.
func (f *freeList[T]) put(x *T) { f.nodes = append(f.nodes, x) }
