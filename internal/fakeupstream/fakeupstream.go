// Package fakeupstream is a tiny OpenAI-compatible HTTP server for tests and
// demos: chat completions and completions (whole or streamed as server-sent
// events) and a model list, with configurable latency and a bounded record of
// what it received. It is never linked into the production data plane.
//
// Every answer reports its token usage as OpenAI does: a whole (JSON) answer
// carries "usage" {prompt_tokens, completion_tokens, total_tokens}; a stream
// carries it only when the request sets stream_options.include_usage, in a
// last chunk with no choices before "data: [DONE]", every other chunk then
// carrying "usage": null. The fake has no tokenizer: prompt tokens follow the
// documented rule of PromptTokens (about four bytes per token), and an answer
// is as many one-word tokens as Options.CompletionFraction of the request's
// max_completion_tokens (else max_tokens) gives, or Options.CompletionTokens
// when the request sets neither, per choice ("n"). A stream sends one token
// per chunk.
package fakeupstream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
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
	// Chunks is the number of content chunks (tokens) in an answer to a
	// request that sets no output cap, unless CompletionTokens is set; 0
	// means 3.
	Chunks int
	// CompletionTokens is the length in tokens of each choice of an answer
	// to a request that sets neither max_completion_tokens nor max_tokens; 0
	// means Chunks. At most MaxCompletionTokens.
	CompletionTokens int
	// CompletionFraction is the share of a request's output cap
	// (max_completion_tokens, else max_tokens) each choice of the answer
	// uses, rounded up; 0 (or a value outside (0, 1]) means 1, an answer cut
	// off at the cap with finish_reason "length".
	CompletionFraction float64
	// Record is how many of the most recent requests are kept for
	// Requests; 0 keeps none.
	Record int
	// Models lists the model ids served by /v1/models; nil means one "fake-model".
	Models []string
	// Hold, if set, is called with each request once it is read and counted
	// in flight, before its latency, fault or answer: a test blocks in it to
	// keep a request at the backend. It should return when the request's
	// context ends.
	Hold func(*http.Request)
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

	flight    inFlight
	closed    chan struct{} // closed by Close: hung requests end
	closeOnce sync.Once

	mu       sync.Mutex
	recorded []Recorded
	total    int
}

// New returns a fake upstream serving POST /v1/chat/completions, POST
// /v1/completions and GET /v1/models. A request header X-Fake-Status answers with that status
// instead; X-Fake-Latency-Ms overrides Options.Latency for one request;
// FaultHeader makes it fail (see there).
func New(opts Options) *Upstream {
	if opts.Chunks <= 0 {
		opts.Chunks = 3
	}
	if opts.CompletionTokens <= 0 {
		opts.CompletionTokens = opts.Chunks
	}
	opts.CompletionTokens = min(opts.CompletionTokens, MaxCompletionTokens)
	if !(opts.CompletionFraction > 0 && opts.CompletionFraction <= 1) {
		opts.CompletionFraction = 1
	}
	if len(opts.Models) == 0 {
		opts.Models = []string{"fake-model"}
	}
	u := &Upstream{opts: opts, mux: http.NewServeMux(), closed: make(chan struct{})}
	u.mux.HandleFunc("POST /v1/chat/completions", u.chat)
	u.mux.HandleFunc("POST /v1/completions", u.completion)
	u.mux.HandleFunc("GET /v1/models", u.models)
	return u
}

// ServeHTTP records the request, applies the latency and any fault, and
// routes it.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	done := u.flight.enter()
	defer done()
	// A request whose client went away is no longer the backend's, though
	// its handler may not have noticed yet: a model server aborts it.
	defer context.AfterFunc(r.Context(), done)()
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	u.record(r, body)
	if u.opts.Hold != nil {
		u.opts.Hold(r)
	}

	latency := u.opts.Latency
	if v := r.Header.Get("X-Fake-Latency-Ms"); v != "" {
		if ms, err := strconv.Atoi(v); err == nil {
			latency = time.Duration(ms) * time.Millisecond
		}
	}
	if !sleep(r, latency) {
		return
	}
	switch r.Header.Get(FaultHeader) {
	case FaultReset:
		done()
		reset(w)
		return
	case FaultHang:
		u.hang(w, r, done)
		return
	case FaultBreak:
		w = &breaker{ResponseWriter: w, done: done}
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

// Bounds of an answer, so a request cannot make the fake allocate or stream
// without limit.
const (
	// MaxCompletionTokens bounds the tokens of one choice of an answer.
	MaxCompletionTokens = 1 << 16
	// MaxChoices bounds the choices ("n") of one answer.
	MaxChoices = 16
)

// request is the part of a chat completion or completion request the fake
// reads.
type request struct {
	Model               string          `json:"model"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	MaxTokens           int64           `json:"max_tokens"`
	MaxCompletionTokens int64           `json:"max_completion_tokens"`
	N                   int             `json:"n"`
	Messages            []message       `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type message struct {
	Content json.RawMessage `json:"content"`
}

// kind is one of the two completion APIs the fake serves.
type kind struct {
	object, chunkObject, id string
	// choice renders one choice holding text: a message or delta for chat,
	// text for completions. first marks a stream's first chunk of a choice.
	choice func(index int, text string, stream, first bool, finish string) string
}

var (
	chatKind = kind{object: "chat.completion", chunkObject: "chat.completion.chunk", id: "chatcmpl-fake",
		choice: func(index int, text string, stream, first bool, finish string) string {
			t, _ := json.Marshal(text) // a string always encodes
			switch {
			case !stream:
				return fmt.Sprintf(`{"index":%d,"message":{"role":"assistant","content":%s},"finish_reason":%s}`, index, t, finish)
			case first:
				return fmt.Sprintf(`{"index":%d,"delta":{"role":"assistant","content":%s},"finish_reason":%s}`, index, t, finish)
			default:
				return fmt.Sprintf(`{"index":%d,"delta":{"content":%s},"finish_reason":%s}`, index, t, finish)
			}
		}}
	completionKind = kind{object: "text_completion", chunkObject: "text_completion", id: "cmpl-fake",
		choice: func(index int, text string, _, _ bool, finish string) string {
			t, _ := json.Marshal(text) // a string always encodes
			return fmt.Sprintf(`{"index":%d,"text":%s,"logprobs":null,"finish_reason":%s}`, index, t, finish)
		}}
)

func (u *Upstream) chat(w http.ResponseWriter, r *http.Request) { u.complete(w, r, chatKind) }
func (u *Upstream) completion(w http.ResponseWriter, r *http.Request) {
	u.complete(w, r, completionKind)
}

// complete answers a chat completion or completion request, whole or
// streamed, with the usage the package documentation describes.
func (u *Upstream) complete(w http.ResponseWriter, r *http.Request, k kind) {
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, `{"error":{"message":%q,"type":"invalid_request_error"}}`, "invalid JSON body: "+err.Error()) // fails only when the client left
		return
	}
	model, _ := json.Marshal(req.Model) // a string always encodes
	choices := min(max(req.N, 1), MaxChoices)
	length, finish := u.completionLength(req)
	usage := Usage{Prompt: promptTokens(req), Completion: int64(choices * length)}
	if !req.Stream {
		var b strings.Builder
		fmt.Fprintf(&b, `{"id":%q,"object":%q,"model":%s,"choices":[`, k.id, k.object, model)
		text := answerText(length)
		for c := range choices {
			if c > 0 {
				b.WriteByte(',')
			}
			b.WriteString(k.choice(c, text, false, false, strconv.Quote(finish)))
		}
		fmt.Fprintf(&b, `],"usage":%s}`, usage.json())
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, b.String()) // fails only when the client left
		return
	}
	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	// With include_usage every chunk carries "usage":null and one more chunk,
	// with no choices, carries the usage, as OpenAI sends them.
	tail := "}\n\n"
	if includeUsage {
		tail = `,"usage":null}` + "\n\n"
	}
	head := fmt.Sprintf(`data: {"id":%q,"object":%q,"model":%s,"choices":[`, k.id, k.chunkObject, model)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	for t := range length {
		if t > 0 && !sleep(r, u.opts.ChunkInterval) {
			return
		}
		fin := "null"
		if t == length-1 {
			fin = strconv.Quote(finish)
		}
		for c := range choices {
			if _, err := io.WriteString(w, head+k.choice(c, tokenText(t), true, t == 0, fin)+"]"+tail); err != nil {
				return // the client left: stop streaming
			}
		}
		if rc.Flush() != nil {
			return
		}
	}
	if includeUsage {
		if _, err := fmt.Fprintf(w, `data: {"id":%q,"object":%q,"model":%s,"choices":[],"usage":%s}`+"\n\n", k.id, k.chunkObject, model, usage.json()); err != nil {
			return
		}
	}
	if _, err := io.WriteString(w, "data: [DONE]\n\n"); err == nil {
		_ = rc.Flush() // the handler returns next, which flushes anyway
	}
}

// completionLength returns how many tokens each choice of the answer to req
// has, and its finish reason: "length" when the answer stops at the
// request's cap, "stop" otherwise.
func (u *Upstream) completionLength(req request) (int, string) {
	limit := req.MaxCompletionTokens
	if limit <= 0 {
		limit = req.MaxTokens
	}
	if limit <= 0 {
		return u.opts.CompletionTokens, "stop"
	}
	limit = min(limit, MaxCompletionTokens)
	n := int(math.Ceil(float64(limit) * u.opts.CompletionFraction))
	if int64(n) >= limit {
		return int(limit), "length"
	}
	return n, "stop"
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
