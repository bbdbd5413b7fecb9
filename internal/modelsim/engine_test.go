package modelsim

import (
	"testing"
	"time"
)

// sim drives an engine step by step on simulated time, as the Server's loop
// does on its clock.
type sim struct {
	t   *testing.T
	e   *engine
	now time.Time
}

func newSim(t *testing.T, cfg Config) *sim {
	t.Helper()
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return &sim{t: t, e: newEngine(cfg), now: time.Unix(1_700_000_000, 0)}
}

// add queues a request of prompt and output tokens.
func (s *sim) add(prompt, output int) *sequence {
	seq := newSequence(prompt, output, "length", s.now)
	if !s.e.enqueue(seq) {
		s.t.Fatalf("enqueue(%d, %d) refused: queue full", prompt, output)
	}
	return seq
}

// step runs one step and returns its duration; it fails the test when the
// engine breaks an invariant.
func (s *sim) step() time.Duration {
	s.t.Helper()
	d := s.e.plan(s.now)
	if d == 0 {
		return 0
	}
	s.check()
	s.now = s.now.Add(d)
	s.e.complete(s.now)
	s.check()
	return d
}

// runUntil steps until cond holds, at most limit steps.
func (s *sim) runUntil(limit int, what string, cond func() bool) {
	s.t.Helper()
	for range limit {
		if cond() {
			return
		}
		if s.step() == 0 && !cond() {
			s.t.Fatalf("the engine went idle before %s", what)
		}
	}
	if !cond() {
		s.t.Fatalf("%s did not happen within %d steps", what, limit)
	}
}

func (s *sim) check() {
	s.t.Helper()
	e := s.e
	if len(e.running) > e.cfg.MaxNumSeqs {
		s.t.Fatalf("running %d > MaxNumSeqs %d", len(e.running), e.cfg.MaxNumSeqs)
	}
	held := 0
	for _, r := range e.running {
		held += r.blocks
		if r.blocks < blocksFor(r.tokens(), e.cfg.BlockSize) {
			s.t.Fatalf("a running sequence of %d tokens holds only %d blocks", r.tokens(), r.blocks)
		}
	}
	if held != e.usedBlocks || e.usedBlocks > e.totalBlocks {
		s.t.Fatalf("KV blocks: used %d, held by running %d, total %d", e.usedBlocks, held, e.totalBlocks)
	}
}

func TestBatchBound(t *testing.T) {
	s := newSim(t, Config{MaxNumSeqs: 4})
	for range 10 {
		s.add(10, 5)
	}
	s.step()
	if st := s.e.stats(); st.Running != 4 || st.Waiting != 6 {
		t.Fatalf("after one step: running %d, waiting %d; want 4 and 6", st.Running, st.Waiting)
	}
	s.runUntil(100, "all finished", func() bool { return s.e.idle() })
	if c := s.e.counts; c.Finished != 10 || c.GenerationTokens != 50 || c.PromptTokens != 100 {
		t.Errorf("counts %+v, want 10 finished, 50 generated, 100 prompt tokens", c)
	}
}

func TestKVBudgetHoldsRequestsInTheQueue(t *testing.T) {
	// 1000 tokens of KV, blocks of one token, no watermark: three prompts
	// of 300 (plus their first token) fit, the fourth waits.
	s := newSim(t, Config{KVCacheTokens: 1000, BlockSize: 1, KVWatermark: 1e-9, MaxModelLen: 900, DefaultMaxTokens: 10})
	for range 5 {
		s.add(300, 20)
	}
	s.step()
	st := s.e.stats()
	if st.Running != 3 || st.Waiting != 2 {
		t.Fatalf("running %d, waiting %d; want 3 admitted and 2 waiting for KV", st.Running, st.Waiting)
	}
	if st.KVCacheUsage <= 0.9 || st.KVCacheUsage > 1 {
		t.Errorf("KV usage %.3f, want in (0.9, 1]", st.KVCacheUsage)
	}
	s.runUntil(500, "all finished", func() bool { return s.e.idle() })
	if c := s.e.counts; c.Finished != 5 || c.GenerationTokens != 100 {
		t.Errorf("counts %+v, want 5 finished with 20 tokens each", c)
	}
	if st := s.e.stats(); st.KVBlocksUsed != 0 {
		t.Errorf("idle engine holds %d KV blocks, want 0", st.KVBlocksUsed)
	}
}

func TestGrowthPreemptsTheLatestAndEveryoneFinishes(t *testing.T) {
	// Two sequences whose outputs cannot both fit: the later one is
	// preempted, recomputed and still answers in full.
	s := newSim(t, Config{KVCacheTokens: 100, BlockSize: 1, KVWatermark: 1e-9, MaxModelLen: 90, DefaultMaxTokens: 10})
	a, b := s.add(30, 40), s.add(30, 40)
	s.runUntil(1000, "both finished", func() bool { return a.state == stateDone && b.state == stateDone })
	if s.e.counts.Preemptions == 0 {
		t.Errorf("no preemption, want at least one: 140 tokens do not fit a 100-token cache")
	}
	if a.generated != 40 || b.generated != 40 {
		t.Errorf("generated %d and %d, want 40 each", a.generated, b.generated)
	}
	if !a.firstToken.Before(b.firstToken) && a.firstToken != b.firstToken {
		t.Errorf("first tokens at %v and %v: the earlier request came later", a.firstToken, b.firstToken)
	}
}

func TestFCFSHeadOfLineWaitsForKV(t *testing.T) {
	// A large head of the queue that does not fit yet is not passed by the
	// small requests behind it, as vLLM's FCFS scheduler does.
	s := newSim(t, Config{KVCacheTokens: 1000, BlockSize: 1, KVWatermark: 1e-9, MaxModelLen: 900, DefaultMaxTokens: 10})
	first := s.add(600, 5)
	big := s.add(600, 5)
	small := s.add(10, 5)
	s.step()
	if first.state != stateRunning || big.state != stateWaiting || small.state != stateWaiting {
		t.Fatalf("states first %d big %d small %d: want the small one behind the big one", first.state, big.state, small.state)
	}
	s.runUntil(100, "all finished", func() bool { return s.e.idle() })
	if !first.firstToken.Before(big.firstToken) || small.firstToken.Before(big.firstToken) {
		t.Errorf("first tokens %v, %v, %v: want arrival order", first.firstToken, big.firstToken, small.firstToken)
	}
}

func TestFCFSOrder(t *testing.T) {
	s := newSim(t, Config{MaxNumSeqs: 1})
	var seqs []*sequence
	for i := range 5 {
		seqs = append(seqs, s.add(10+i, 3))
	}
	s.runUntil(100, "all finished", func() bool { return s.e.idle() })
	for i := 1; i < len(seqs); i++ {
		if !seqs[i-1].firstToken.Before(seqs[i].firstToken) {
			t.Errorf("request %d got its first token at %v, not before request %d at %v", i-1, seqs[i-1].firstToken, i, seqs[i].firstToken)
		}
	}
}

func TestTTFTRisesWithTheQueue(t *testing.T) {
	ttft := func(ahead int) time.Duration {
		s := newSim(t, Config{MaxNumSeqs: 4})
		for range ahead {
			s.add(200, 50)
		}
		probe := s.add(200, 50)
		s.runUntil(10_000, "the probe's first token", func() bool { return !probe.firstToken.IsZero() })
		return probe.firstToken.Sub(probe.arrived)
	}
	prev := ttft(0)
	for _, ahead := range []int{4, 16, 64} {
		got := ttft(ahead)
		if got <= prev {
			t.Errorf("TTFT behind %d requests %v, not above the TTFT behind fewer, %v", ahead, got, prev)
		}
		prev = got
	}
}

func TestStepTimeGrowsWithBatchAndPrefill(t *testing.T) {
	cfg := Config{StepBase: 10 * time.Millisecond, StepPerSeq: 100 * time.Microsecond,
		StepPerPrefillToken: 50 * time.Microsecond, StepPerContextToken: time.Microsecond}
	decode := func(batch int) time.Duration {
		s := newSim(t, cfg)
		for range batch {
			s.add(100, 50)
		}
		prefillStep := s.step() // all prompts in one chunk: 100*batch <= 2048 for batch <= 20
		if want := 10*time.Millisecond + time.Duration(batch)*(100*time.Microsecond+100*50*time.Microsecond); prefillStep != want {
			t.Errorf("prefill step of %d prompts of 100 tokens took %v, want %v", batch, prefillStep, want)
		}
		return s.step()
	}
	tests := []struct {
		batch int
		want  time.Duration
	}{
		// base + per sequence + each sequence attends to its 101 tokens
		{1, 10*time.Millisecond + 100*time.Microsecond + 101*time.Microsecond},
		{8, 10*time.Millisecond + 8*(100*time.Microsecond+101*time.Microsecond)},
		{20, 10*time.Millisecond + 20*(100*time.Microsecond+101*time.Microsecond)},
	}
	for _, tc := range tests {
		if got := decode(tc.batch); got != tc.want {
			t.Errorf("decode step of a batch of %d took %v, want %v", tc.batch, got, tc.want)
		}
	}
}

func TestChunkedPrefill(t *testing.T) {
	s := newSim(t, Config{})
	long := s.add(5000, 5) // 2048 + 2048 + 904
	s.runUntil(10, "the first token", func() bool { return long.generated > 0 })
	if steps := s.e.counts.Steps; steps != 3 {
		t.Errorf("a 5000-token prompt took %d steps to its first token with a 2048-token budget, want 3", steps)
	}
	// Running sequences take the budget first (vLLM V1): a short request
	// arriving behind a long prefill gets what the long one's last chunk
	// leaves, in that same step.
	s2 := newSim(t, Config{})
	long2 := s2.add(5000, 5)
	s2.step()
	short := s2.add(10, 5)
	s2.step()
	if short.state != stateWaiting {
		t.Errorf("a short request was admitted while a long prompt used the whole budget")
	}
	s2.step()
	if long2.generated != 1 || short.generated != 1 {
		t.Errorf("after the long prompt's last chunk: long generated %d, short %d; want both 1", long2.generated, short.generated)
	}
}

func TestAbortFreesTheSlot(t *testing.T) {
	s := newSim(t, Config{MaxNumSeqs: 1})
	a := s.add(100, 1000)
	b := s.add(100, 10)
	s.step()
	s.e.abort(a)
	if st := s.e.stats(); st.Running != 0 || st.KVBlocksUsed != 0 || st.Aborted != 1 {
		t.Fatalf("after aborting the running request: %+v, want nothing running, no KV held, 1 aborted", st)
	}
	s.step()
	if b.state != stateRunning {
		t.Errorf("the waiting request was not admitted to the freed slot")
	}
	s.e.abort(b)
	s.e.abort(b) // twice: counted once
	if s.e.counts.Aborted != 2 {
		t.Errorf("aborted %d, want 2", s.e.counts.Aborted)
	}
	c := s.add(10, 1)
	d := s.add(10, 1)
	s.e.abort(c) // waiting
	if s.e.waiting.Len() != 1 || s.e.waiting.Front().Value != d {
		t.Errorf("aborting a waiting request left the queue at %d", s.e.waiting.Len())
	}
}

func TestQueueBound(t *testing.T) {
	s := newSim(t, Config{MaxWaiting: 2})
	s.add(1, 1)
	s.add(1, 1)
	if s.e.enqueue(newSequence(1, 1, "length", s.now)) {
		t.Fatal("a third request entered a queue bounded at 2")
	}
	if s.e.counts.Rejected != 1 {
		t.Errorf("rejected %d, want 1", s.e.counts.Rejected)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"negative seqs", Config{MaxNumSeqs: -1}},
		{"budget below batch", Config{MaxNumSeqs: 512, MaxNumBatchedTokens: 256}},
		{"cache below one request", Config{KVCacheTokens: 4096, MaxModelLen: 8192}},
		{"watermark", Config{KVWatermark: 1.5}},
		{"negative step", Config{StepBase: -time.Millisecond}},
	}
	for _, tc := range tests {
		if _, err := tc.cfg.withDefaults(); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if _, err := (Config{}).withDefaults(); err != nil {
		t.Errorf("the defaults fail: %v", err)
	}
}

// TestCalibration holds the defaults to the published figures docs/modelsim.md
// cites (simulated time, so it is exact on any machine): decode steps of
// about 8-12 ms alone and 30-60 ms at a full batch, prefill at 10-20k tokens
// a second, and a saturated server at a few thousand output tokens a second.
func TestCalibration(t *testing.T) {
	cfg, _ := Config{}.withDefaults()
	decodeStep := func(batch, context int) time.Duration {
		return cfg.StepBase + time.Duration(batch)*(cfg.StepPerSeq+time.Duration(context)*cfg.StepPerContextToken)
	}
	prefillRate := float64(cfg.MaxNumBatchedTokens) / (cfg.StepBase + cfg.StepPerSeq + time.Duration(cfg.MaxNumBatchedTokens)*cfg.StepPerPrefillToken).Seconds()
	t.Logf("decode step: batch 1 (1k context) %v, batch 64 %v, batch 256 (512 context) %v; prefill %.0f tokens/s",
		decodeStep(1, 1000), decodeStep(64, 1000), decodeStep(256, 512), prefillRate)
	if d := decodeStep(1, 1000); d < 8*time.Millisecond || d > 12*time.Millisecond {
		t.Errorf("decode step alone %v, want 8-12 ms", d)
	}
	if d := decodeStep(256, 512); d < 30*time.Millisecond || d > 60*time.Millisecond {
		t.Errorf("decode step at 256 %v, want 30-60 ms", d)
	}
	if prefillRate < 10_000 || prefillRate > 20_000 {
		t.Errorf("prefill %.0f tokens/s, want 10-20k", prefillRate)
	}

	// Saturated: a closed loop keeping 300 requests in the server for a
	// simulated minute. Short prompts: a few thousand output tokens a
	// second; long prompts: prefill dominates, so count all tokens.
	for _, shape := range []struct {
		prompt, output     int
		minOut, minAllToks float64
	}{{512, 256, 1500, 0}, {2000, 200, 0, 5000}} {
		s := newSim(t, Config{})
		for range 300 {
			s.add(shape.prompt, shape.output)
		}
		start := s.now
		for s.now.Sub(start) < time.Minute {
			before := s.e.counts.Finished
			s.step()
			for range s.e.counts.Finished - before {
				s.add(shape.prompt, shape.output)
			}
		}
		secs := s.now.Sub(start).Seconds()
		out := float64(s.e.counts.GenerationTokens) / secs
		all := out + float64(s.e.counts.PromptTokens)/secs
		t.Logf("saturated, prompt %d output %d: %.0f output tokens/s, %.0f tokens/s in all, %.1f requests/s, KV %.0f%%, %d preemptions",
			shape.prompt, shape.output, out, all, float64(s.e.counts.Finished)/secs, 100*s.e.stats().KVCacheUsage, s.e.counts.Preemptions)
		if out < shape.minOut || out > 6000 || all < shape.minAllToks {
			t.Errorf("saturated: %.0f output tokens/s (want %.0f-6000), %.0f tokens/s in all (want at least %.0f)", out, shape.minOut, all, shape.minAllToks)
		}
	}
}

// TestStepDuration: a step costs StepBase plus its per-sequence,
// per-prefill-token and per-context-token terms, for whole counts (the
// engine) and for means (bench-capacity's bound).
func TestStepDuration(t *testing.T) {
	c := Config{StepBase: 9 * time.Millisecond, StepPerSeq: 150 * time.Microsecond,
		StepPerPrefillToken: 65 * time.Microsecond, StepPerContextToken: 65 * time.Nanosecond}
	for _, tc := range []struct {
		seqs, prefill, context float64
		want                   time.Duration
	}{
		{0, 0, 0, 9 * time.Millisecond},
		{1, 2048, 0, 9*time.Millisecond + 150*time.Microsecond + 2048*65*time.Microsecond},
		{256, 0, 150_000, 9*time.Millisecond + 256*150*time.Microsecond + 150_000*65*time.Nanosecond},
		{1.5, 0, 0.5, 9*time.Millisecond + 225*time.Microsecond + 32*time.Nanosecond}, // 32.5 ns truncated
	} {
		if got := c.StepDuration(tc.seqs, tc.prefill, tc.context); got != tc.want {
			t.Errorf("StepDuration(%v, %v, %v) = %v, want %v", tc.seqs, tc.prefill, tc.context, got, tc.want)
		}
	}
}
