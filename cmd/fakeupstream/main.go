// Command fakeupstream serves a tiny OpenAI-compatible API (chat completions
// and completions, optionally streamed, with OpenAI-style token usage, and a
// model list) with configurable latency and answer length, for demos and
// local runs of the data plane. It is not part of the production image.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/fairqueue/fairqueue/internal/fakeupstream"
)

func main() {
	listen := flag.String("listen", ":8000", "address to serve on")
	latency := flag.Duration("latency", 0, "delay before each response's headers")
	chunks := flag.Int("chunks", 3, "tokens (one per streamed chunk) of an answer to a request without max_tokens")
	completionTokens := flag.Int("completion-tokens", 0, "tokens of an answer to a request without max_completion_tokens or max_tokens (default --chunks)")
	completionFraction := flag.Float64("completion-fraction", 1, "share of a request's max_completion_tokens (else max_tokens) its answer uses, in (0, 1]")
	chunkInterval := flag.Duration("chunk-interval", 50*time.Millisecond, "pause between streamed chunks")
	models := flag.String("models", "fake-model", "comma-separated model ids for /v1/models")
	flag.Parse()

	srv := &http.Server{
		Addr:              *listen,
		ReadHeaderTimeout: 10 * time.Second,
		Handler: fakeupstream.New(fakeupstream.Options{
			Latency: *latency, Chunks: *chunks, ChunkInterval: *chunkInterval, Models: strings.Split(*models, ","),
			CompletionTokens: *completionTokens, CompletionFraction: *completionFraction,
		}),
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	log.Printf("fake OpenAI upstream listening on %s", *listen)
	err := srv.ListenAndServe()
	stop() // before os.Exit, which skips deferred calls
	if !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "fakeupstream:", err)
		os.Exit(1)
	}
}
