package admission

import (
	"context"
	"testing"

	"github.com/fairqueue/fairqueue/dataplane/capacity"
)

// BenchmarkBeginCapacity is the admission fast path through Begin and Done,
// with capacity mode off and on (a slot taken and released on a backend
// with room): capacity mode must add no allocation.
func BenchmarkBeginCapacity(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			c, r, _ := newFastPath(b)
			if on {
				tr := capacity.New(capacity.Options{})
				b.Cleanup(tr.Close)
				if err := tr.Apply([]capacity.Backend{{Name: "a", MaxInFlight: 1 << 20}, {Name: "b", MaxInFlight: 1 << 20}}, 0); err != nil {
					b.Fatal(err)
				}
				r.Capacity = Capacity{Tracker: tr}
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				var tk Ticket
				r.Capacity.Start = i & 1
				if d := c.Begin(ctx, r, &tk); !d.Allowed {
					b.Fatalf("refused: %+v", d)
				}
				tk.Done(0)
			}
		})
	}
}
