package fairqueue

import (
	"slices"
	"testing"
)

// listNode is an element of a test list, in two lists at once.
type listNode struct {
	name     string
	inA, inB link[listNode]
}

func TestList(t *testing.T) {
	cases := []struct {
		name   string
		push   string // pushed in this order to both lists
		remove string // then removed from list A in this order
		wantA  string
	}{
		{name: "empty", wantA: ""},
		{name: "in order", push: "abc", wantA: "abc"},
		{name: "remove the head", push: "abc", remove: "a", wantA: "bc"},
		{name: "remove the tail", push: "abc", remove: "c", wantA: "ab"},
		{name: "remove the middle", push: "abcd", remove: "cb", wantA: "ad"},
		{name: "remove all", push: "abc", remove: "bac", wantA: ""},
	}
	names := func(l *list[listNode], at func(*listNode) *link[listNode], backwards bool) string {
		var s []byte
		if backwards {
			for n := l.back(); n != nil; n = at(n).prevElem() {
				s = append(s, n.name[0])
			}
			slices.Reverse(s)
			return string(s)
		}
		for n := l.front(); n != nil; n = at(n).nextElem() {
			s = append(s, n.name[0])
		}
		return string(s)
	}
	inA := func(n *listNode) *link[listNode] { return &n.inA }
	inB := func(n *listNode) *link[listNode] { return &n.inB }
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var a, b list[listNode]
			nodes := map[byte]*listNode{}
			for i := range len(tc.push) {
				n := &listNode{name: tc.push[i : i+1]}
				nodes[tc.push[i]] = n
				a.pushBack(&n.inA, n)
				b.pushBack(&n.inB, n)
			}
			for i := range len(tc.remove) {
				n := nodes[tc.remove[i]]
				a.remove(&n.inA)
				if n.inA != (link[listNode]{}) {
					t.Fatalf("%s still linked after remove", n.name)
				}
			}
			for _, backwards := range []bool{false, true} {
				if got := names(&a, inA, backwards); got != tc.wantA {
					t.Errorf("list A (backwards %v) = %q, want %q", backwards, got, tc.wantA)
				}
				if got := names(&b, inB, backwards); got != tc.push {
					t.Errorf("list B (backwards %v) = %q, want %q: removing from A touched B", backwards, got, tc.push)
				}
			}
		})
	}
}
