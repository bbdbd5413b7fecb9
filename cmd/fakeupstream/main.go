// Command fakeupstream serves a tiny OpenAI-compatible API (chat completions,
// optionally streamed, and a model list) with configurable latency, for demos
// and local runs of the data plane. It is not part of the production image.
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

	"github.com/fairqueue/fairqueue/dataplane/fakeupstream"
)

func main() {
	listen := flag.String("listen", ":8000", "address to serve on")
	latency := flag.Duration("latency", 0, "delay before each response's headers")
	chunks := flag.Int("chunks", 3, "content chunks per streamed answer")
	chunkInterval := flag.Duration("chunk-interval", 50*time.Millisecond, "pause between streamed chunks")
	models := flag.String("models", "fake-model", "comma-separated model ids for /v1/models")
	flag.Parse()

	srv := &http.Server{
		Addr:              *listen,
		ReadHeaderTimeout: 10 * time.Second,
		Handler: fakeupstream.New(fakeupstream.Options{
			Latency: *latency, Chunks: *chunks, ChunkInterval: *chunkInterval, Models: strings.Split(*models, ","),
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
