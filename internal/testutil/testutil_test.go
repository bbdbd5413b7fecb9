package testutil

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSyncBufferConcurrentWritesAndReads(t *testing.T) {
	var b SyncBuffer
	const writers, lines = 4, 100
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range lines {
				_, _ = b.Write([]byte("x\n")) // never fails
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := strings.Count(b.String(), "x\n"); got != writers*lines {
		t.Errorf("buffer holds %d lines, want %d", got, writers*lines)
	}
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	Eventually(t, "the third poll", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("cond polled %d times, want 3", n)
	}
}

func TestEventuallyFailsNamingWhatItAwaited(t *testing.T) {
	ft := &FatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		EventuallyWithin(ft, 20*time.Millisecond, "the sky falls", func() bool { return false })
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("EventuallyWithin did not give up")
	}
	if !strings.Contains(ft.Msg, "the sky falls") {
		t.Errorf("failure message %q does not name what was awaited", ft.Msg)
	}
}

func TestWeightedShares(t *testing.T) {
	for _, tc := range []struct {
		weights []int
		want    []float64
	}{
		{[]int{1}, []float64{1}},
		{[]int{1, 1}, []float64{0.5, 0.5}},
		{[]int{1, 3}, []float64{0.25, 0.75}},
	} {
		if got := WeightedShares(tc.weights); !slices.Equal(got, tc.want) {
			t.Errorf("WeightedShares(%v) = %v, want %v", tc.weights, got, tc.want)
		}
	}
	if got := WeightedShares([]float64{2, 1, 1}); !slices.Equal(got, []float64{0.5, 0.25, 0.25}) {
		t.Errorf("WeightedShares of float weights = %v, want [0.5 0.25 0.25]", got)
	}
}
