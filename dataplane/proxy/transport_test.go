package proxy

import "testing"

func TestBufferPool(t *testing.T) {
	p := newBufferPool()
	b := p.Get()
	if len(b) != bufferSize {
		t.Fatalf("len(Get()) = %d, want %d", len(b), bufferSize)
	}
	p.Put(b)
	p.Put(make([]byte, 10)) // foreign size must be dropped, not handed out
	for i := 0; i < 4; i++ {
		if got := len(p.Get()); got != bufferSize {
			t.Fatalf("Get() after Put of a foreign buffer returned len %d", got)
		}
	}
}
