// Command fakeupstream serves a tiny OpenAI-compatible API (chat completions
// and completions, optionally streamed, with OpenAI-style token usage, and a
// model list) with configurable latency and answer length, for demos and
// local runs of the data plane; a request header X-Fake-Fault (reset, break,
// hang) makes it fail as a broken or hung backend does. With --sim it serves instead a simulated
// continuous-batching GPU server (internal/modelsim, docs/modelsim.md) whose
// latency follows its load, with vLLM's /metrics. It is not part of the
// production image.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/internal/cli"
	"github.com/fairqueue/fairqueue/internal/fakeupstream"
	"github.com/fairqueue/fairqueue/internal/modelsim"
	"github.com/fairqueue/fairqueue/internal/version"
)

func main() {
	if version.PrintIfRequested(os.Stdout, "fakeupstream", os.Args[1:]) {
		return
	}
	listen := flag.String("listen", ":8000", "address to serve on")
	latency := flag.Duration("latency", 0, "delay before each response's headers")
	chunks := flag.Int("chunks", 3, "tokens (one per streamed chunk) of an answer to a request without max_tokens")
	completionTokens := flag.Int("completion-tokens", 0, "tokens of an answer to a request without max_completion_tokens or max_tokens (default --chunks)")
	completionFraction := flag.Float64("completion-fraction", 1, "share of a request's max_completion_tokens (else max_tokens) its answer uses, in (0, 1]")
	chunkInterval := flag.Duration("chunk-interval", 50*time.Millisecond, "pause between streamed chunks")
	models := flag.String("models", "fake-model", "comma-separated model ids for /v1/models")
	sim := flag.Bool("sim", false, "serve a simulated continuous-batching GPU server (vLLM-like, docs/modelsim.md) instead of the fixed-latency fake; the --sim-* flags shape it and the flags above do not apply")
	simCfg := simFlags(flag.CommandLine)
	version.AddFlag(flag.CommandLine)
	flag.Parse()

	fake := fakeupstream.New(fakeupstream.Options{
		Latency: *latency, Chunks: *chunks, ChunkInterval: *chunkInterval, Models: strings.Split(*models, ","),
		CompletionTokens: *completionTokens, CompletionFraction: *completionFraction,
	})
	var handler http.Handler = fake
	what := "fake OpenAI upstream"
	if *sim {
		s, err := modelsim.New(clock.RealClock{}, *simCfg)
		if err != nil {
			cli.Exit("fakeupstream", err)
		}
		defer s.Close()
		handler = s
		c := s.Config()
		what = fmt.Sprintf("simulated model server (max-num-seqs %d, KV cache %d tokens, %d batched tokens a step)",
			c.MaxNumSeqs, c.KVCacheTokens, c.MaxNumBatchedTokens)
	}
	srv := &http.Server{Addr: *listen, ReadHeaderTimeout: 10 * time.Second, Handler: handler}
	cli.Main("fakeupstream", func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			fake.Close() // hung requests (X-Fake-Fault: hang) would hold Shutdown
			_ = srv.Shutdown(shutdownCtx)
		}()
		log.Printf("%s listening on %s", what, *listen)
		if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
}

// simFlags registers the --sim-* flags, defaulting to the simulator's
// calibrated defaults, and returns the Config they fill.
func simFlags(fs *flag.FlagSet) *modelsim.Config {
	c := &modelsim.Config{}
	fs.IntVar(&c.MaxNumSeqs, "sim-max-num-seqs", modelsim.DefaultMaxNumSeqs, "running batch bound (vLLM --max-num-seqs)")
	fs.IntVar(&c.KVCacheTokens, "sim-kv-cache-tokens", modelsim.DefaultKVCacheTokens, "KV cache size in tokens")
	fs.IntVar(&c.BlockSize, "sim-block-size", modelsim.DefaultBlockSize, "KV block size in tokens")
	fs.Float64Var(&c.KVWatermark, "sim-kv-watermark", modelsim.DefaultKVWatermark, "share of the KV cache an admission leaves free")
	fs.IntVar(&c.MaxNumBatchedTokens, "sim-max-num-batched-tokens", modelsim.DefaultMaxNumBatchedTokens, "tokens per step: one per decoding sequence, the rest prefill chunks")
	fs.IntVar(&c.MaxModelLen, "sim-max-model-len", modelsim.DefaultMaxModelLen, "prompt plus output bound of one request (longer: 400)")
	fs.IntVar(&c.MaxWaiting, "sim-max-waiting", modelsim.DefaultMaxWaiting, "waiting queue bound (beyond: 503)")
	fs.IntVar(&c.DefaultMaxTokens, "sim-default-max-tokens", modelsim.DefaultMaxTokens, "output tokens of a request without max_tokens")
	fs.DurationVar(&c.StepBase, "sim-step-base", modelsim.DefaultStepBase, "fixed time of a step")
	fs.DurationVar(&c.StepPerSeq, "sim-step-per-seq", modelsim.DefaultStepPerSeq, "step time per sequence in the batch")
	fs.DurationVar(&c.StepPerPrefillToken, "sim-step-per-prefill-token", modelsim.DefaultStepPerPrefillToken, "step time per prompt token prefilled")
	fs.DurationVar(&c.StepPerContextToken, "sim-step-per-context-token", modelsim.DefaultStepPerContextToken, "step time per KV token a decoding sequence attends to")
	fs.StringVar(&c.ModelName, "sim-model", modelsim.DefaultModelName, "model id for /v1/models and the metrics' model_name label")
	return c
}
