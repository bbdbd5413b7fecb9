// Package fakeupstream is a tiny OpenAI-compatible HTTP server for tests and
// demos: chat completions (whole or streamed as server-sent events) and a
// model list, with configurable latency and a bounded record of what it
// received. It is never linked into the production data plane.
package fakeupstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// maxBody bounds how much of a request body the fake reads.
const maxBody = 1 << 20

// Options configures a fake upstream. The zero value answers at once, streams
// three chunks and records nothing.
type Options struct {
	// Latency is how long the fake waits before sending response headers.
	Latency time.Duration
	// ChunkInterval is the pause between streamed chunks.
	ChunkInterval time.Duration
	// Chunks is the number of content chunks in a streamed answer; 0 means 3.
	Chunks int
	// Record is how many of the most recent requests are kept for
	// Requests; 0 keeps none.
	Record int
	// Models lists the model ids served by /v1/models; nil means one "fake-model".
	Models []string
}

// Recorded is one request as the fake received it.
type Recorded struct {
	// Method and Path are the request line.
	Method, Path string
	// Header holds the received headers.
	Header http.Header
	// Body is the received body (at most 1 MiB).
	Body []byte
}

// Upstream is the fake server; it is an http.Handler safe for concurrent use.
type Upstream struct {
	opts Options
	mux  *http.ServeMux

	mu       sync.Mutex
	recorded []Recorded
	total    int
}

// New returns a fake upstream serving POST /v1/chat/completions and GET
// /v1/models. A request header X-Fake-Status answers with that status
// instead; X-Fake-Latency-Ms overrides Options.Latency for one request.
func New(opts Options) *Upstream {
	if opts.Chunks <= 0 {
		opts.Chunks = 3
	}
	if len(opts.Models) == 0 {
		opts.Models = []string{"fake-model"}
	}
	u := &Upstream{opts: opts, mux: http.NewServeMux()}
	u.mux.HandleFunc("POST /v1/chat/completions", u.chat)
	u.mux.HandleFunc("GET /v1/models", u.models)
	return u
}

// ServeHTTP records the request, applies the latency and routes it.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	u.record(r, body)

	latency := u.opts.Latency
	if v := r.Header.Get("X-Fake-Latency-Ms"); v != "" {
		if ms, err := strconv.Atoi(v); err == nil {
			latency = time.Duration(ms) * time.Millisecond
		}
	}
	if !sleep(r, latency) {
		return
	}
	if v := r.Header.Get("X-Fake-Status"); v != "" {
		if code, err := strconv.Atoi(v); err == nil {
			http.Error(w, "fake status", code)
			return
		}
	}
	u.mux.ServeHTTP(w, r)
}

// Requests returns a copy of the most recent recorded requests, oldest first.
func (u *Upstream) Requests() []Recorded {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Recorded(nil), u.recorded...)
}

// Count returns how many requests the fake has received in total.
func (u *Upstream) Count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.total
}

func (u *Upstream) record(r *http.Request, body []byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.total++
	if u.opts.Record <= 0 {
		return
	}
	if len(u.recorded) == u.opts.Record {
		copy(u.recorded, u.recorded[1:])
		u.recorded = u.recorded[:len(u.recorded)-1]
	}
	u.recorded = append(u.recorded, Recorded{
		Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body,
	})
}

// sleep waits d or until the client goes away; it reports whether to go on.
func sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

type chatRequest struct {
	Model  string `json:"model"`
	Stream bool   `json:"stream"`
}

func (u *Upstream) chat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, `{"error":{"message":%q,"type":"invalid_request_error"}}`, "invalid JSON body: "+err.Error()) // fails only when the client left
		return
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"id":"chatcmpl-fake","object":"chat.completion","model":%q,`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`, req.Model) // fails only when the client left
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	for i := 0; i < u.opts.Chunks; i++ {
		if i > 0 && !sleep(r, u.opts.ChunkInterval) {
			return
		}
		_, err := fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-fake\",\"object\":\"chat.completion.chunk\",\"model\":%q,"+
			"\"choices\":[{\"index\":0,\"delta\":{\"content\":\"chunk %d\"}}]}\n\n", req.Model, i)
		if err != nil || rc.Flush() != nil {
			return // the client left: stop streaming
		}
	}
	if _, err := io.WriteString(w, "data: [DONE]\n\n"); err == nil {
		_ = rc.Flush() // the handler returns next, which flushes anyway
	}
}

func (u *Upstream) models(w http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID     string `json:"id"`
		Object string `json:"object"`
	}
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list"}
	for _, m := range u.opts.Models {
		list.Data = append(list.Data, model{ID: m, Object: "model"})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(list)
}
