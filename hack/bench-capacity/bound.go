package main

import (
	"slices"

	"github.com/fairqueue/fairqueue/internal/modelsim"
)

// Bound is a lower bound on a light request's TTFT from the simulator's
// step model (docs/modelsim.md), at a given rate of heavy completions: what
// no admission gateway can beat without taking throughput from the heavy
// tenant. docs/benchmarks.md states the derivation:
//
//   - A step's time is at least StepBase + StepPerSeq + StepPerPrefillToken
//     for each prompt token it prefills. The server takes a running
//     sequence's prefill in chunks as large as the step's token budget
//     allows (vLLM's chunked prefill), so a heavy prompt of P tokens is
//     prefilled in steps of min(P, budget) tokens at best, each of the
//     duration d_j below. Steps that prefill two heavy prompts at once are
//     longer still, never shorter.
//   - At h heavy completions per second the server spends a share
//     q = h * sum(d_j) of its time in such steps.
//   - A light request arrives at a time independent of the steps (Poisson
//     arrivals see time averages): with probability h*d_j it lands in a
//     chunk-j step and waits out the step's rest, uniform on [0, d_j]; a
//     request is only admitted between steps. Its first token comes at the
//     end of its own step, which prefills its prompt: at least StepBase +
//     StepPerSeq + StepPerPrefillToken * its prompt.
//
// So TTFT >= R + own in distribution, with R the residual above (0 outside
// heavy-prefill steps), and every quantile of the TTFT is at least that of
// R + own. Everything else the server does (the decoding batch's per-seq
// and context terms, steps whose budget heavy prefills use up so the light
// request cannot join, the server's own queue) only adds to it.
//
// With a batch (the mean running sequences and KV tokens a run observed)
// the same model is an estimate rather than a bound: every step also pays
// StepPerSeq per running sequence and StepPerContextToken per token in the
// KV cache, and the time outside heavy prefills is decode steps of that
// batch, whose rest a light request landing there waits out too.
type Bound struct {
	// HeavyPerSecond is the heavy completions per second it is computed at.
	HeavyPerSecond float64 `json:"heavy_per_second"`
	// Running and ContextTokens are the batch every step carries (0 for
	// the bound).
	Running       float64 `json:"running"`
	ContextTokens float64 `json:"context_tokens"`
	// StepsMS are the durations of the steps one heavy prompt's prefill
	// takes at best.
	StepsMS []float64 `json:"prefill_steps_ms"`
	// PrefillShare is the share of the server's time in those steps.
	PrefillShare float64 `json:"prefill_share"`
	// OwnStepMS is the shortest step that prefills a light prompt.
	OwnStepMS float64 `json:"own_step_ms"`
	// MeanMS, P50MS and P99MS bound the light TTFT from below.
	MeanMS float64 `json:"mean_ms"`
	P50MS  float64 `json:"p50_ms"`
	P99MS  float64 `json:"p99_ms"`
}

// stepModel is the simulator's step model (modelsim.Config's Step fields
// and MaxNumBatchedTokens) the bound is computed on.
type stepModel struct{ modelsim.Config }

// defaultStepModel is the simulator's calibrated model, as bench-capacity
// runs it.
var defaultStepModel = stepModel{modelsim.Config{
	StepBase: modelsim.DefaultStepBase, StepPerSeq: modelsim.DefaultStepPerSeq,
	StepPerPrefillToken: modelsim.DefaultStepPerPrefillToken, StepPerContextToken: modelsim.DefaultStepPerContextToken,
	MaxNumBatchedTokens: modelsim.DefaultMaxNumBatchedTokens,
}}

// step returns the time, in seconds, of a step that prefills n prompt
// tokens of one sequence beside a batch of running sequences attending to
// context tokens.
func (m stepModel) step(n int, running, context float64) float64 {
	return m.StepDuration(1+running, float64(n), context).Seconds()
}

// bound computes the Bound for heavy prompts of heavyPrompt tokens
// completing at heavyPerSecond, and light prompts of lightPrompt tokens,
// beside a batch of running sequences and context tokens (0 and 0 for the
// bound proper).
func (m stepModel) bound(heavyPerSecond float64, heavyPrompt, lightPrompt int, running, context float64) *Bound {
	own := m.step(lightPrompt, running, context)
	b := &Bound{HeavyPerSecond: heavyPerSecond, Running: running, ContextTokens: context, OwnStepMS: own * 1000}
	var steps []float64 // seconds
	sum, sumSq := 0.0, 0.0
	for left := heavyPrompt; left > 0; {
		c := min(left, m.MaxNumBatchedTokens)
		d := m.step(c, running, context)
		steps = append(steps, d)
		b.StepsMS = append(b.StepsMS, d*1000)
		sum += d
		sumSq += d * d
		left -= c
	}
	h := heavyPerSecond
	if h*sum > 1 {
		h = 1 / sum // more than the server can prefill: it prefills all the time
	}
	b.PrefillShare = h * sum
	// Outside heavy prefills: decode steps of the batch, or (the bound)
	// nothing to wait for.
	decode, decodeShare := 0.0, 0.0
	if running > 0 {
		decode = m.StepDuration(running, 0, context).Seconds()
		decodeShare = 1 - b.PrefillShare
	}
	// P(R <= r) = 1 - q + h*sum_j min(r, d_j) without a batch; with one,
	// the decode steps' share counts min(r, decode)/decode of itself.
	cdf := func(r float64) float64 {
		p := 1 - b.PrefillShare - decodeShare
		for _, d := range steps {
			p += h * min(r, d)
		}
		if decode > 0 {
			p += decodeShare * min(r, decode) / decode
		}
		return p
	}
	quantile := func(p float64) float64 {
		lo, hi := 0.0, sum+decode // cdf(hi) = 1
		if p <= cdf(0) {
			return 0
		}
		for range 60 {
			mid := (lo + hi) / 2
			if cdf(mid) < p {
				lo = mid
			} else {
				hi = mid
			}
		}
		return hi
	}
	b.MeanMS = (h*sumSq/2 + decodeShare*decode/2 + own) * 1000
	b.P50MS = (quantile(0.50) + own) * 1000
	b.P99MS = (quantile(0.99) + own) * 1000
	return b
}

// boundFor returns the table's bound and estimate at the heavy tenant's
// completions per second and the batch in the oracle mode (or, without it,
// the capacity mode (c, d, e) with the most heavy completions); nil when
// none of them ran.
func boundFor(t *Table, heavyPrompt, lightPrompt int) (bound, estimate *Bound) {
	var from *ModeResult
	rate := 0.0
	for i := range t.Modes {
		r := &t.Modes[i]
		if r.Error != "" || !slices.Contains([]string{"c", "d", "e", "o"}, r.Mode) || from != nil && from.Mode == "o" {
			continue
		}
		for _, tr := range r.Tenants {
			if tr.Name == "heavy" && (r.Mode == "o" || tr.CompletionsPerSecond > rate) {
				rate, from = tr.CompletionsPerSecond, r
			}
		}
	}
	if from == nil {
		return nil, nil
	}
	return defaultStepModel.bound(rate, heavyPrompt, lightPrompt, 0, 0),
		defaultStepModel.bound(rate, heavyPrompt, lightPrompt, from.RunningMean, from.KVTokensMean)
}
