package fairqueue

import (
	"math"
	"slices"
	"testing"
)

// heapNode is an element of a test heap.
type heapNode struct {
	name string
	idx  int
}

func TestMinHeap(t *testing.T) {
	type op struct {
		push         string // push name with key and seq
		key, seq     uint64
		remove, fix  string // remove name, or fix name's key to key
		pop          bool
		wantTopAfter string
	}
	cases := []struct {
		name string
		ops  []op
		// want is the order in which the rest pop.
		want []string
	}{
		{
			name: "by key",
			ops:  []op{{push: "c", key: 3}, {push: "a", key: 1}, {push: "b", key: 2}},
			want: []string{"a", "b", "c"},
		},
		{
			name: "ties by seq",
			ops:  []op{{push: "late", key: 5, seq: 9}, {push: "early", key: 5, seq: 1}, {push: "mid", key: 5, seq: 4}},
			want: []string{"early", "mid", "late"},
		},
		{
			name: "keys wrap around",
			ops:  []op{{push: "after", key: 2}, {push: "before", key: math.MaxUint64 - 1}, {push: "at", key: 0}},
			want: []string{"before", "at", "after"},
		},
		{
			name: "remove from the middle and the top",
			ops: []op{
				{push: "a", key: 1}, {push: "b", key: 2}, {push: "c", key: 3}, {push: "d", key: 4}, {push: "e", key: 5}, {push: "f", key: 6},
				{remove: "c"}, {remove: "a", wantTopAfter: "b"},
			},
			want: []string{"b", "d", "e", "f"},
		},
		{
			name: "fix moves up and down",
			ops: []op{
				{push: "a", key: 10}, {push: "b", key: 20}, {push: "c", key: 30}, {push: "d", key: 40}, {push: "e", key: 50}, {push: "f", key: 60},
				{fix: "f", key: 5, wantTopAfter: "f"}, {fix: "f", key: 45, wantTopAfter: "a"},
			},
			want: []string{"a", "b", "c", "d", "f", "e"},
		},
		{
			name: "pop",
			ops:  []op{{push: "a", key: 1}, {push: "b", key: 2}, {pop: true, wantTopAfter: "b"}},
			want: []string{"b"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var h minHeap[*heapNode]
			nodes := map[string]*heapNode{}
			check := func() {
				t.Helper()
				for i, it := range h.items {
					if *it.idx != i || it.p.idx != i {
						t.Fatalf("%s at %d records index %d", it.p.name, i, it.p.idx)
					}
					if i > 0 && it.less(&h.items[(i-1)/4]) {
						t.Fatalf("heap out of order at %d", i)
					}
				}
			}
			for _, o := range tc.ops {
				switch {
				case o.push != "":
					n := &heapNode{name: o.push}
					nodes[o.push] = n
					h.push(n, o.key, o.seq, &n.idx)
				case o.remove != "":
					n := nodes[o.remove]
					if got := h.remove(n.idx); got != n || n.idx != -1 {
						t.Fatalf("remove(%s) = %s, index left at %d", o.remove, got.name, n.idx)
					}
				case o.fix != "":
					h.fix(nodes[o.fix].idx, o.key)
				case o.pop:
					h.pop()
				}
				check()
				if o.wantTopAfter != "" && h.top().name != o.wantTopAfter {
					t.Fatalf("top = %s, want %s", h.top().name, o.wantTopAfter)
				}
			}
			var got []string
			for h.len() > 0 {
				got = append(got, h.pop().name)
				check()
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("popped %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMinHeapRekey checks that rekey restores the order after every key
// changed.
func TestMinHeapRekey(t *testing.T) {
	var h minHeap[*heapNode]
	var ns []*heapNode
	for i := range 20 {
		n := &heapNode{name: string(rune('a' + i))}
		ns = append(ns, n)
		h.push(n, uint64(i), 0, &n.idx)
	}
	// Below 0 for the last ones: keys wrap around.
	h.rekey(func(n *heapNode) uint64 { return 100 - uint64(n.name[0]) })
	for i := 19; i >= 0; i-- {
		if got := h.pop(); got != ns[i] {
			t.Fatalf("popped %s, want %s", got.name, ns[i].name)
		}
	}
}
