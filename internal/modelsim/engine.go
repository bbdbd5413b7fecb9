package modelsim

import (
	"container/list"
	"slices"
	"time"
)

// engine is the continuous-batching scheduler, with no goroutines, locks or
// clock of its own: the Server's loop calls plan at a step's start and
// complete at its end, under the Server's lock. It follows vLLM's scheduler
// (FCFS policy): running sequences first, in admission order (a prefill chunk
// or one decode token each, within the step's token budget), then waiting
// requests in arrival order while the batch, the budget and the KV cache
// have room; the head of the queue is never skipped. A running sequence that
// needs a KV block when none is free preempts the most recently admitted
// running sequence, which frees its blocks and returns to the queue's head
// to recompute its prompt and output later, as vLLM's recompute preemption.
type engine struct {
	cfg Config

	waiting     list.List // of *sequence, arrival order (preempted ones at the front)
	running     []*sequence
	totalBlocks int
	usedBlocks  int

	step     []*sequence // the sequences of the step in progress
	stepping bool
	stepDur  time.Duration // the step in progress's duration

	counts Counts
	// hooks observe latencies for the metrics; nil hooks are skipped.
	onAdmit      func(queued time.Duration)
	onFirstToken func(ttft time.Duration)
	onFinish     func(e2e time.Duration, reason string)
}

// Counts are the engine's cumulative counters.
type Counts struct {
	// PromptTokens counts the prompt tokens of requests whose prefill
	// finished (once each, even if preempted later).
	PromptTokens int64
	// GenerationTokens counts output tokens produced.
	GenerationTokens int64
	// Preemptions counts running sequences preempted for KV space.
	Preemptions int64
	// Finished counts requests answered in full; Aborted those whose client
	// left first; Rejected those refused because the queue was full.
	Finished, Aborted, Rejected int64
	// Steps counts forward passes.
	Steps int64
}

type seqState uint8

const (
	stateWaiting seqState = iota
	stateRunning
	stateDone
)

// sequence is one request inside the engine.
type sequence struct {
	prompt    int // prompt tokens
	maxOutput int // output tokens to generate
	finish    string
	generated int
	// prefillLeft is what is still to prefill before the next token: the
	// prompt, or after a preemption the prompt and the output so far.
	prefillLeft int
	blocks      int
	state       seqState
	elem        *list.Element // in engine.waiting while waiting

	arrived, admitted, firstToken time.Time

	// notify is signalled (never blocking) when a token is produced or the
	// sequence ends; the request's handler waits on it.
	notify chan struct{}

	// the current step's work
	chunk int  // prompt tokens prefilled in this step
	emits bool // a token comes out at the step's end
}

func newSequence(prompt, maxOutput int, finish string, now time.Time) *sequence {
	return &sequence{prompt: prompt, maxOutput: maxOutput, finish: finish, prefillLeft: prompt,
		arrived: now, notify: make(chan struct{}, 1)}
}

// tokens is what the sequence's KV holds once prefilled.
func (s *sequence) tokens() int { return s.prompt + s.generated }

func (s *sequence) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func newEngine(cfg Config) *engine {
	return &engine{cfg: cfg, totalBlocks: cfg.KVCacheTokens / cfg.BlockSize}
}

// enqueue puts s at the tail of the waiting queue; it reports false when the
// queue is full.
func (e *engine) enqueue(s *sequence) bool {
	if e.waiting.Len() >= e.cfg.MaxWaiting {
		e.counts.Rejected++
		return false
	}
	s.state = stateWaiting
	s.elem = e.waiting.PushBack(s)
	return true
}

// abort ends s where it is, freeing its KV blocks (vLLM aborts a request
// whose client disconnects). It does nothing to a finished sequence.
func (e *engine) abort(s *sequence) {
	switch s.state {
	case stateWaiting:
		e.waiting.Remove(s.elem)
		s.elem = nil
	case stateRunning:
		e.removeRunning(s)
	default:
		return
	}
	s.state = stateDone
	s.finish = "abort"
	e.counts.Aborted++
	s.signal()
}

// idle reports whether there is nothing to run.
func (e *engine) idle() bool { return len(e.running) == 0 && e.waiting.Len() == 0 }

// plan schedules one step starting at now and returns how long it takes; 0
// means nothing is to run.
func (e *engine) plan(now time.Time) time.Duration {
	e.step = e.step[:0]
	budget := e.cfg.MaxNumBatchedTokens
	preempted := false
	prefill, context := 0, 0
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		s.chunk, s.emits = 0, true
		if s.prefillLeft > 0 {
			s.chunk = min(s.prefillLeft, budget)
			s.emits = s.chunk == s.prefillLeft
			budget -= s.chunk
		} else {
			budget--
		}
		// The token coming out needs its KV slot.
		for s.emits && !e.grow(s, s.tokens()+1) {
			victim := e.running[len(e.running)-1]
			e.preempt(victim)
			preempted = true
			if victim == s {
				break
			}
		}
		if s.state != stateRunning {
			budget += max(s.chunk, 1) // it was the victim: give back its share
			continue
		}
		e.step = append(e.step, s)
		prefill += s.chunk
		if s.chunk == 0 {
			context += s.tokens()
		}
	}
	// Admit from the queue's head while everything has room; a preemption
	// in this step means the cache is full, so admit nothing (as vLLM).
	for !preempted && budget > 0 && len(e.running) < e.cfg.MaxNumSeqs && e.waiting.Len() > 0 {
		s := e.waiting.Front().Value.(*sequence)
		need := blocksFor(s.tokens()+1, e.cfg.BlockSize)
		if e.totalBlocks-e.usedBlocks-need < watermarkBlocks(e.cfg) {
			break // FCFS: the head waits for room, nobody passes it
		}
		e.waiting.Remove(s.elem)
		s.elem = nil
		s.state = stateRunning
		s.blocks = need
		e.usedBlocks += need
		e.running = append(e.running, s)
		if s.admitted.IsZero() {
			s.admitted = now
			if e.onAdmit != nil {
				e.onAdmit(now.Sub(s.arrived))
			}
		}
		s.chunk = min(s.prefillLeft, budget)
		s.emits = s.chunk == s.prefillLeft
		budget -= s.chunk
		e.step = append(e.step, s)
		prefill += s.chunk
	}
	if len(e.step) == 0 {
		return 0
	}
	e.stepping = true
	e.stepDur = e.cfg.StepDuration(float64(len(e.step)), float64(prefill), float64(context))
	return e.stepDur
}

// complete applies the planned step's results at now: prefill progress, one
// token per emitting sequence, and the end of sequences that reached their
// output length. A sequence aborted during the step is skipped.
func (e *engine) complete(now time.Time) {
	if !e.stepping {
		return
	}
	e.stepping = false
	e.counts.Steps++
	for _, s := range e.step {
		if s.state != stateRunning {
			continue
		}
		s.prefillLeft -= s.chunk
		if !s.emits {
			continue
		}
		s.generated++
		e.counts.GenerationTokens++
		if s.firstToken.IsZero() {
			s.firstToken = now
			e.counts.PromptTokens += int64(s.prompt)
			if e.onFirstToken != nil {
				e.onFirstToken(now.Sub(s.arrived))
			}
		}
		if s.generated >= s.maxOutput {
			e.removeRunning(s)
			s.state = stateDone
			e.counts.Finished++
			if e.onFinish != nil {
				e.onFinish(now.Sub(s.arrived), s.finish)
			}
		}
		s.signal()
	}
	e.step = e.step[:0]
}

// grow makes s hold blocks for n tokens; it reports false when the cache has
// no room.
func (e *engine) grow(s *sequence, n int) bool {
	need := blocksFor(n, e.cfg.BlockSize) - s.blocks
	if need <= 0 {
		return true
	}
	if e.usedBlocks+need > e.totalBlocks {
		return false
	}
	s.blocks += need
	e.usedBlocks += need
	return true
}

// preempt returns a running sequence to the queue's head, freeing its KV:
// it recomputes its prompt and output when admitted again.
func (e *engine) preempt(s *sequence) {
	e.removeRunning(s)
	s.state = stateWaiting
	s.prefillLeft = s.tokens()
	s.elem = e.waiting.PushFront(s)
	e.counts.Preemptions++
}

func (e *engine) removeRunning(s *sequence) {
	if i := slices.Index(e.running, s); i >= 0 {
		e.running = slices.Delete(e.running, i, i+1)
	}
	e.usedBlocks -= s.blocks
	s.blocks = 0
}

// Stats is a snapshot of the simulated server.
type Stats struct {
	// Running and Waiting are the requests in the batch and in the queue.
	Running, Waiting int
	// KVCacheUsage is the share of KV blocks in use, in [0, 1].
	KVCacheUsage float64
	// KVBlocksUsed and KVBlocksTotal are the blocks behind KVCacheUsage.
	KVBlocksUsed, KVBlocksTotal int
	Counts
}

func (e *engine) stats() Stats {
	return Stats{
		Running: len(e.running), Waiting: e.waiting.Len(),
		KVCacheUsage: float64(e.usedBlocks) / float64(e.totalBlocks),
		KVBlocksUsed: e.usedBlocks, KVBlocksTotal: e.totalBlocks,
		Counts: e.counts,
	}
}
