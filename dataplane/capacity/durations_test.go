package capacity

import (
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// countingClock is a fake clock that counts its readings.
type countingClock struct {
	*clocktesting.FakeClock
	reads atomic.Int64
}

func (c *countingClock) Now() time.Time {
	c.reads.Add(1)
	return c.FakeClock.Now()
}

func timedTracker(t *testing.T, bs ...Backend) (*Tracker, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	return newTracker(t, Options{Clock: clk}, bs...), clk
}

func acquire(t *testing.T, tr *Tracker, s *Slot, name string) {
	t.Helper()
	if r := tr.Acquire(s, name); r != Acquired {
		t.Fatalf("acquire on %s: %v, want acquired", name, r)
	}
}

// TestReleaseSpacingFollowsTheSlotsHeld: what a backend's slots say about
// the time between releases, on a fake clock.
func TestReleaseSpacingFollowsTheSlotsHeld(t *testing.T) {
	// a has 2 slots, d 4, b and c 1 each.
	tests := []struct {
		name  string
		run   func(t *testing.T, tr *Tracker, clk *clocktesting.FakeClock)
		names []string
		want  time.Duration
	}{{
		name: "nothing held, nothing measured: the prior",
		run:  func(*testing.T, *Tracker, *clocktesting.FakeClock) {},
		want: DefaultReleaseSpacing,
	}, {
		name: "before the first release, slots held briefly: the prior",
		run: func(t *testing.T, tr *Tracker, clk *clocktesting.FakeClock) {
			acquire(t, tr, new(Slot), "a")
			acquire(t, tr, new(Slot), "a")
			clk.Step(DefaultReleaseSpacing) // 2 slots for 50ms: one per 25ms is not contradicted
		},
		want: DefaultReleaseSpacing,
	}, {
		name: "before the first release, slots held long: their age over their number",
		run: func(t *testing.T, tr *Tracker, clk *clocktesting.FakeClock) {
			acquire(t, tr, new(Slot), "a")
			acquire(t, tr, new(Slot), "a")
			clk.Step(time.Second)
		},
		want: 500 * time.Millisecond,
	}, {
		name: "after releases: the mean time held over the slots in flight",
		run: func(t *testing.T, tr *Tracker, clk *clocktesting.FakeClock) {
			var s1, s2 Slot
			acquire(t, tr, &s1, "a")
			acquire(t, tr, &s2, "a")
			clk.Step(800 * time.Millisecond)
			s1.Release() // held 800ms
			acquire(t, tr, &s1, "a")
			clk.Step(800 * time.Millisecond)
			s1.Release() // held 800ms, mean 800ms
			s2.Release() // held 1.6s: mean 800ms + 800ms/8
			acquire(t, tr, &s1, "a")
			acquire(t, tr, &s2, "a")
		},
		want: 900 * time.Millisecond / 2,
	}, {
		name: "a withdrawn slot is not measured",
		run: func(t *testing.T, tr *Tracker, clk *clocktesting.FakeClock) {
			var s1, s2 Slot
			acquire(t, tr, &s1, "a")
			clk.Step(time.Second)
			s1.Release() // held 1s
			acquire(t, tr, &s1, "a")
			acquire(t, tr, &s2, "a")
			s2.Withdraw() // never reached the backend
		},
		want: time.Second,
	}, {
		name: "no release for longer than the mean: the time since the last one over the slots",
		run: func(t *testing.T, tr *Tracker, clk *clocktesting.FakeClock) {
			var s1, s2 Slot
			acquire(t, tr, &s1, "a")
			acquire(t, tr, &s2, "a")
			clk.Step(100 * time.Millisecond)
			s1.Release() // mean 100ms
			acquire(t, tr, &s1, "a")
			clk.Step(3 * time.Second) // both hang
		},
		want: 1500 * time.Millisecond,
	}, {
		name: "under half full, the time since the last release says nothing",
		run: func(t *testing.T, tr *Tracker, clk *clocktesting.FakeClock) {
			var s1, s2 Slot
			acquire(t, tr, &s1, "d")
			acquire(t, tr, &s2, "d") // half full: timed
			clk.Step(100 * time.Millisecond)
			s1.Release()
			s2.Release()             // held 100ms
			acquire(t, tr, &s1, "d") // 1 of 4 in flight
			clk.Step(time.Hour)
		},
		names: []string{"d"},
		want:  100 * time.Millisecond,
	}, {
		name: "two backends: their release rates add up",
		run: func(t *testing.T, tr *Tracker, clk *clocktesting.FakeClock) {
			var a, b Slot
			acquire(t, tr, &a, "b")
			clk.Step(750 * time.Millisecond)
			acquire(t, tr, &b, "c")
			clk.Step(250 * time.Millisecond)
			a.Release() // b: 1s a slot
			b.Release() // c: 250ms a slot
			acquire(t, tr, &a, "b")
			acquire(t, tr, &b, "c")
		},
		// b frees one a second, c four: five a second.
		names: []string{"b", "c", "not-tracked"},
		want:  200 * time.Millisecond,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, clk := timedTracker(t, Backend{Name: "a", MaxInFlight: 2}, Backend{Name: "d", MaxInFlight: 4},
				Backend{Name: "b", MaxInFlight: 1}, Backend{Name: "c", MaxInFlight: 1})
			tc.run(t, tr, clk)
			names := tc.names
			if names == nil {
				names = []string{"a"}
			}
			if _, got := tr.NextRelease(names); got != tc.want {
				t.Errorf("NextRelease(%v) spacing = %v, want %v", names, got, tc.want)
			}
		})
	}
}

// TestSlotsUnderHalfFullReadNoClock: taking and releasing a slot on a
// backend under half full costs no clock reading; over it, one each.
func TestSlotsUnderHalfFullReadNoClock(t *testing.T) {
	clk := &countingClock{FakeClock: clocktesting.NewFakeClock(time.Unix(1_000_000, 0))}
	tr := newTracker(t, Options{Clock: clk}, Backend{Name: "a", MaxInFlight: 4})
	var s1, s2 Slot
	acquire(t, tr, &s1, "a")
	s1.Release()
	if n := clk.reads.Load(); n != 0 {
		t.Fatalf("one slot of 4 taken and released: %d clock readings, want 0", n)
	}
	acquire(t, tr, &s1, "a")
	acquire(t, tr, &s2, "a") // half full: timed
	s2.Release()
	if n := clk.reads.Load(); n != 2 {
		t.Errorf("a slot taken at half full and released: %d clock readings, want 2", n)
	}
	s1.Release()
}

// BenchmarkAcquireReleaseBusy is BenchmarkAcquireRelease on a backend at
// half full or more, whose slots are timed: two clock readings more.
func BenchmarkAcquireReleaseBusy(b *testing.B) {
	tr := New(Options{})
	defer tr.Close()
	if err := tr.Apply([]Backend{{Name: "vllm-a", MaxInFlight: 2}}, 0); err != nil {
		b.Fatal(err)
	}
	var held, s Slot
	if tr.Acquire(&held, "vllm-a") != Acquired {
		b.Fatal("refused")
	}
	defer held.Release()
	b.ReportAllocs()
	for b.Loop() {
		if tr.Acquire(&s, "vllm-a") != Acquired {
			b.Fatal("refused")
		}
		s.Release()
	}
}
