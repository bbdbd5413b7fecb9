package main

import (
	"math"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/internal/modelsim"
)

func TestBound(t *testing.T) {
	// Round numbers: a step of n prefill tokens takes 10 ms + n ms, with a
	// budget of 100 tokens.
	m := stepModel{modelsim.Config{StepBase: 9 * time.Millisecond, StepPerSeq: time.Millisecond, StepPerPrefillToken: time.Millisecond, MaxNumBatchedTokens: 100}}
	for _, tc := range []struct {
		name                string
		rate                float64
		heavy, light        int
		running             float64
		steps               []float64
		share               float64
		mean, p50, p99, own float64
	}{{
		// One 100 ms step per heavy prompt, five a second: half the time.
		// A light request lands in one with probability 0.5 and waits
		// U[0, 100 ms] there: the median waits 0, the 99th percentile 98 ms.
		name: "one step per prompt", rate: 5, heavy: 90, light: 10,
		steps: []float64{100}, share: 0.5, own: 20,
		mean: 5*0.1*0.1/2*1000 + 20, p50: 20, p99: 98 + 20,
	}, {
		// 250 tokens: steps of 110, 110 and 60 ms, two a second: 56% of
		// the time. P(R <= r) = 0.44 + 2*(2 min(r, .11) + min(r, .06)).
		name: "chunked prompt", rate: 2, heavy: 250, light: 10,
		steps: []float64{110, 110, 60}, share: 0.56, own: 20,
		mean: 2*(0.11*0.11*2+0.06*0.06)/2*1000 + 20, p50: 20 + 10, p99: 20 + (0.99-0.44-2*0.06)/4*1000, // 0.44 + 6r = 0.5; 0.56 + 4r = 0.99
	}, {
		// More prompts than the server can prefill: it prefills all the time.
		name: "over capacity", rate: 20, heavy: 90, light: 10,
		steps: []float64{100}, share: 1, own: 20,
		mean: 0.1/2*1000 + 20, p50: 50 + 20, p99: 99 + 20,
	}, {
		// The estimate: ten running sequences add 10 ms to every step; the
		// rest of the time is 19 ms decode steps, whose rest counts too.
		// P(R <= r) = 5 min(r, .11) + 0.45 min(r, .019)/.019.
		name: "with a batch", rate: 5, heavy: 90, light: 10, running: 10,
		steps: []float64{110}, share: 0.55, own: 30,
		mean: (5*0.11*0.11/2 + 0.45*0.019/2 + 0.030) * 1000,
		p50:  (0.5/(5+0.45/0.019) + 0.030) * 1000, p99: ((0.99-0.45)/5 + 0.030) * 1000,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			b := m.bound(tc.rate, tc.heavy, tc.light, tc.running, 0)
			if len(b.StepsMS) != len(tc.steps) {
				t.Fatalf("steps %v ms, want %v", b.StepsMS, tc.steps)
			}
			for i := range tc.steps {
				if !approx(b.StepsMS[i], tc.steps[i]) {
					t.Fatalf("steps %v ms, want %v", b.StepsMS, tc.steps)
				}
			}
			for _, f := range []struct {
				what      string
				got, want float64
			}{
				{"prefill share", b.PrefillShare, tc.share}, {"own step", b.OwnStepMS, tc.own},
				{"mean", b.MeanMS, tc.mean}, {"p50", b.P50MS, tc.p50}, {"p99", b.P99MS, tc.p99},
			} {
				if !approx(f.got, f.want) {
					t.Errorf("%s = %.3f, want %.3f", f.what, f.got, f.want)
				}
			}
		})
	}
}

func approx(a, b float64) bool { return math.Abs(a-b) < 1e-6*max(1, math.Abs(b)) }
