package modelsim

import (
	"errors"
	"fmt"
	"time"
)

// Config shapes the simulated GPU server. A zero field takes its default
// (the Default* constants), which together approximate vLLM serving an 8B
// model (Llama-3-8B class, bf16) on one A100 80GB; docs/modelsim.md gives
// the published figures behind each.
type Config struct {
	// MaxNumSeqs bounds the running batch, as vLLM's --max-num-seqs.
	MaxNumSeqs int
	// KVCacheTokens is the KV cache's size in tokens. A running sequence
	// holds its prompt and generated tokens, in blocks of BlockSize.
	KVCacheTokens int
	// BlockSize is the KV cache's block size in tokens (vLLM's --block-size).
	BlockSize int
	// KVWatermark is the share of the KV cache a new admission must leave
	// free, so that running sequences can grow without preempting at once
	// (vLLM's 1% watermark).
	KVWatermark float64
	// MaxNumBatchedTokens is the per-step token budget (vLLM's
	// --max-num-batched-tokens): one per decoding sequence, the rest for
	// prompt chunks (chunked prefill).
	MaxNumBatchedTokens int
	// MaxModelLen bounds prompt plus output tokens of one request; a longer
	// request is refused with 400 as vLLM refuses it.
	MaxModelLen int
	// MaxWaiting bounds the waiting queue; a request beyond it is refused
	// with 503. vLLM's queue is unbounded; this bound only keeps the
	// simulator's memory finite.
	MaxWaiting int
	// DefaultMaxTokens is the output length of a request that sets neither
	// max_completion_tokens nor max_tokens (nor X-Sim-Output-Tokens).
	DefaultMaxTokens int

	// A step (one forward pass of the batch) takes StepBase, plus StepPerSeq
	// per scheduled sequence, plus StepPerPrefillToken per prompt token
	// prefilled in it, plus StepPerContextToken per KV token a decoding
	// sequence attends to.
	StepBase            time.Duration
	StepPerSeq          time.Duration
	StepPerPrefillToken time.Duration
	StepPerContextToken time.Duration

	// ModelName is the id /v1/models lists and the model_name label of the
	// metrics. Requests may name any model: the answer echoes it.
	ModelName string
}

// Defaults; docs/modelsim.md states their sources.
const (
	DefaultMaxNumSeqs          = 256
	DefaultKVCacheTokens       = 150_000
	DefaultBlockSize           = 16
	DefaultKVWatermark         = 0.01
	DefaultMaxNumBatchedTokens = 2048
	DefaultMaxModelLen         = 8192
	DefaultMaxWaiting          = 100_000
	DefaultMaxTokens           = 128
	DefaultStepBase            = 9 * time.Millisecond
	DefaultStepPerSeq          = 150 * time.Microsecond
	DefaultStepPerPrefillToken = 65 * time.Microsecond
	DefaultStepPerContextToken = 65 * time.Nanosecond
	DefaultModelName           = "sim-llama-3-8b"
)

// withDefaults returns c with every zero field set to its default, or an
// error naming the first field that cannot work.
func (c Config) withDefaults() (Config, error) {
	setInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	setInt(&c.MaxNumSeqs, DefaultMaxNumSeqs)
	setInt(&c.KVCacheTokens, DefaultKVCacheTokens)
	setInt(&c.BlockSize, DefaultBlockSize)
	setInt(&c.MaxNumBatchedTokens, DefaultMaxNumBatchedTokens)
	setInt(&c.MaxModelLen, DefaultMaxModelLen)
	setInt(&c.MaxWaiting, DefaultMaxWaiting)
	setInt(&c.DefaultMaxTokens, DefaultMaxTokens)
	if c.KVWatermark == 0 {
		c.KVWatermark = DefaultKVWatermark
	}
	setDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	setDur(&c.StepBase, DefaultStepBase)
	setDur(&c.StepPerSeq, DefaultStepPerSeq)
	setDur(&c.StepPerPrefillToken, DefaultStepPerPrefillToken)
	setDur(&c.StepPerContextToken, DefaultStepPerContextToken)
	if c.ModelName == "" {
		c.ModelName = DefaultModelName
	}

	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxNumSeqs", c.MaxNumSeqs}, {"KVCacheTokens", c.KVCacheTokens}, {"BlockSize", c.BlockSize},
		{"MaxNumBatchedTokens", c.MaxNumBatchedTokens}, {"MaxModelLen", c.MaxModelLen},
		{"MaxWaiting", c.MaxWaiting}, {"DefaultMaxTokens", c.DefaultMaxTokens},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s is %d: it must be positive (0 takes the default)", f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"StepBase", c.StepBase}, {"StepPerSeq", c.StepPerSeq},
		{"StepPerPrefillToken", c.StepPerPrefillToken}, {"StepPerContextToken", c.StepPerContextToken},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s is %v: it must not be negative (0 takes the default)", f.name, f.v))
		}
	}
	if !(c.KVWatermark >= 0 && c.KVWatermark < 1) {
		errs = append(errs, fmt.Errorf("KVWatermark is %v: it must be in [0, 1)", c.KVWatermark))
	}
	if errs != nil {
		return c, errors.Join(errs...)
	}
	if c.MaxNumBatchedTokens < c.MaxNumSeqs {
		return c, fmt.Errorf("MaxNumBatchedTokens (%d) is below MaxNumSeqs (%d): a full batch could not decode in one step; raise it, as vLLM requires", c.MaxNumBatchedTokens, c.MaxNumSeqs)
	}
	if c.DefaultMaxTokens >= c.MaxModelLen {
		return c, fmt.Errorf("DefaultMaxTokens (%d) leaves no room for a prompt within MaxModelLen (%d); lower it", c.DefaultMaxTokens, c.MaxModelLen)
	}
	total := c.KVCacheTokens / c.BlockSize
	if need := blocksFor(c.MaxModelLen+1, c.BlockSize) + watermarkBlocks(c); need > total {
		return c, fmt.Errorf("the KV cache (%d tokens) cannot hold one request of MaxModelLen (%d tokens) plus the watermark; raise KVCacheTokens or lower MaxModelLen", c.KVCacheTokens, c.MaxModelLen)
	}
	return c, nil
}

// StepDuration is the time of a step (see Config's Step fields) that
// schedules seqs sequences, prefills prefillTokens prompt tokens and whose
// decoding sequences attend to contextTokens KV tokens. The engine passes
// whole counts (exact in float64); a model of the engine may pass means. A
// zero Step field counts as zero: the engine's config has its defaults.
func (c Config) StepDuration(seqs, prefillTokens, contextTokens float64) time.Duration {
	return c.StepBase + time.Duration(seqs*float64(c.StepPerSeq)+
		prefillTokens*float64(c.StepPerPrefillToken)+contextTokens*float64(c.StepPerContextToken))
}

// blocksFor returns the KV blocks that hold n tokens.
func blocksFor(n, blockSize int) int { return (n + blockSize - 1) / blockSize }

// watermarkBlocks returns the blocks an admission must leave free.
func watermarkBlocks(c Config) int { return int(c.KVWatermark * float64(c.KVCacheTokens/c.BlockSize)) }
