package fairqueue

import "testing"

// TestFreeList checks that a free list hands back the nodes put into it,
// and new ones when it has none.
func TestFreeList(t *testing.T) {
	var f freeList[keyState]
	a := f.get()
	b := f.get()
	if a == nil || b == nil || a == b {
		t.Fatalf("get on an empty list = %p, %p; want two new nodes", a, b)
	}
	f.put(a)
	f.put(b)
	got := map[*keyState]bool{f.get(): true, f.get(): true}
	if !got[a] || !got[b] {
		t.Fatalf("get after put returned new nodes, not the recycled %p and %p", a, b)
	}
	if c := f.get(); c == a || c == b {
		t.Fatalf("get returned a node already handed out")
	}
	if n := testing.AllocsPerRun(100, func() { f.put(f.get()) }); n != 0 {
		t.Errorf("recycling allocates %.0f times; want 0", n)
	}
}
