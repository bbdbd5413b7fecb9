package proxy

// NextIndex advances the weighted round-robin cursor and returns the index
// of the backend whose turn it is, in configured order: where a caller that
// chooses among the backends itself (capacity mode, which takes the first
// with room) starts, so the weights still spread the load.
func (p *Pool) NextIndex() int {
	return p.order[int((p.next.Add(1)-1)%uint32(len(p.order)))]
}

// Names returns the backends' names in configured order.
func (p *Pool) Names() []string {
	out := make([]string, len(p.backends))
	for i, b := range p.backends {
		out[i] = b.name
	}
	return out
}

// ByName returns the backend named name, or nil.
func (p *Pool) ByName(name string) *Backend {
	for _, b := range p.backends {
		if b.name == name {
			return b
		}
	}
	return nil
}
