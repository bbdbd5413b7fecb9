// Package modelsim simulates a continuous-batching GPU model server (vLLM's
// scheduler, calibrated to an 8B model on one A100) behind an
// OpenAI-compatible HTTP API, so that gateways and benchmarks meet a backend
// whose latency depends on its load the way a real one's does: a bounded
// running batch, a KV-cache token budget, chunked prefill, decode steps that
// slow down as the batch grows, its own FCFS waiting queue, streaming with
// usage, and /metrics under vLLM's metric names. Time comes from an injected
// clock, so tests run it on a fake one. docs/modelsim.md describes the model
// and its calibration.
package modelsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/internal/fakeupstream"
)

// Request headers a load generator sets to control lengths exactly.
const (
	// PromptTokensHeader overrides the prompt's length in tokens, which is
	// otherwise estimated from the body (fakeupstream.PromptTokens: about
	// four bytes a token).
	PromptTokensHeader = "X-Sim-Prompt-Tokens"
	// OutputTokensHeader sets the output length of a request that sets
	// neither max_completion_tokens nor max_tokens.
	OutputTokensHeader = "X-Sim-Output-Tokens"
)

// maxBody bounds the request body the simulator reads.
const maxBody = 8 << 20

// Server is the simulated model server: an http.Handler serving
// POST /v1/chat/completions, POST /v1/completions, GET /v1/models,
// GET /health and GET /metrics. Its scheduler runs in one goroutine from New
// to Close; each request's handler runs in the caller's goroutine and ends
// with the request.
type Server struct {
	cfg   Config
	clock clock.Clock
	mux   *http.ServeMux
	reg   *prometheus.Registry

	mu  sync.Mutex
	eng *engine

	wake   chan struct{} // cap 1: work arrived
	done   chan struct{} // closed by Close
	exited chan struct{} // closed when the loop returns
	closed sync.Once
	ids    atomic.Uint64
}

// New starts a simulated server on clk (clock.RealClock{} to serve, a fake
// clock in tests). Zero fields of cfg take their defaults; New fails when a
// field cannot work. Close stops it.
func New(clk clock.Clock, cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("modelsim: %w", err)
	}
	s := &Server{
		cfg: cfg, clock: clk, mux: http.NewServeMux(), reg: prometheus.NewRegistry(),
		eng:  newEngine(cfg),
		wake: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{}),
	}
	s.registerMetrics()
	s.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, chatAPI) })
	s.mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, completionAPI) })
	s.mux.HandleFunc("GET /v1/models", s.models)
	s.mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	go s.loop()
	return s, nil
}

// Config returns the configuration in effect, defaults filled in.
func (s *Server) Config() Config { return s.cfg }

// ServeHTTP routes a request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Stats returns a snapshot of the batch, the queue, the KV cache and the
// counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eng.stats()
}

// Close stops the scheduler; requests in progress end at once (a stream
// stops, a whole answer gets 503). It waits for the scheduler's goroutine
// and is safe to call more than once.
func (s *Server) Close() {
	s.closed.Do(func() { close(s.done) })
	<-s.exited
}

// loop runs steps back to back while there is work, and sleeps on wake
// otherwise.
func (s *Server) loop() {
	defer close(s.exited)
	for {
		s.mu.Lock()
		d := s.eng.plan(s.clock.Now())
		s.mu.Unlock()
		if d == 0 {
			select {
			case <-s.wake:
				continue
			case <-s.done:
				return
			}
		}
		t := s.clock.NewTimer(d)
		select {
		case <-t.C():
		case <-s.done:
			t.Stop()
			return
		}
		s.mu.Lock()
		s.eng.complete(s.clock.Now())
		s.mu.Unlock()
	}
}

// api is one of the two completion APIs.
type api struct {
	object, chunkObject, idPrefix string
	chat                          bool
}

var (
	chatAPI       = api{object: "chat.completion", chunkObject: "chat.completion.chunk", idPrefix: "chatcmpl-sim-", chat: true}
	completionAPI = api{object: "text_completion", chunkObject: "text_completion", idPrefix: "cmpl-sim-"}
)

// request is what the simulator reads of a request body.
type request struct {
	Model               string `json:"model"`
	Stream              bool   `json:"stream"`
	MaxTokens           int    `json:"max_tokens"`
	MaxCompletionTokens int    `json:"max_completion_tokens"`
	N                   int    `json:"n"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// lengths returns the prompt and output tokens of a request and the finish
// reason its output ends with, or a client error.
func (s *Server) lengths(r *http.Request, body []byte, req request) (prompt, output int, finish string, err error) {
	if v := r.Header.Get(PromptTokensHeader); v != "" {
		if prompt, err = strconv.Atoi(v); err != nil || prompt < 1 {
			return 0, 0, "", fmt.Errorf("%s is %q: it must be a positive integer", PromptTokensHeader, v)
		}
	} else {
		n, err := fakeupstream.PromptTokens(body)
		if err != nil {
			return 0, 0, "", err
		}
		prompt = max(int(n), 1) // a request always feeds at least one token
	}
	output, finish = req.MaxCompletionTokens, "length"
	if output <= 0 {
		output = req.MaxTokens
	}
	if output <= 0 {
		output, finish = s.cfg.DefaultMaxTokens, "stop"
		if v := r.Header.Get(OutputTokensHeader); v != "" {
			if output, err = strconv.Atoi(v); err != nil || output < 1 {
				return 0, 0, "", fmt.Errorf("%s is %q: it must be a positive integer", OutputTokensHeader, v)
			}
		}
	}
	if prompt+output > s.cfg.MaxModelLen {
		return 0, 0, "", fmt.Errorf("this model's maximum context length is %d tokens, but you requested %d tokens (%d in the messages, %d in the completion); reduce the length of the messages or completion", s.cfg.MaxModelLen, prompt+output, prompt, output)
	}
	return prompt, output, finish, nil
}

// serve answers one completion request: it queues a sequence and writes its
// tokens as the scheduler produces them, whole or streamed. A client that
// leaves aborts the sequence, freeing its place in the batch and its KV.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, a api) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err == nil && len(body) > maxBody {
		err = fmt.Errorf("the body is over %d bytes", maxBody)
	}
	var req request
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err == nil && req.N > 1 {
		err = errors.New("n > 1 is not simulated: send one request per choice")
	}
	var prompt, output int
	var finish string
	if err == nil {
		prompt, output, finish, err = s.lengths(r, body, req)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}

	seq := newSequence(prompt, output, finish, s.clock.Now())
	s.mu.Lock()
	ok := s.eng.enqueue(seq)
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError",
			fmt.Sprintf("the simulator's waiting queue is full (%d requests); retry later or raise MaxWaiting", s.cfg.MaxWaiting))
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}

	out := answer{
		api: a, id: a.idPrefix + strconv.FormatUint(s.ids.Add(1), 10), model: req.Model,
		created: seq.arrived.Unix(), includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		prompt: prompt,
	}
	if req.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush() // headers now, as vLLM sends them
	}
	sent := 0
	for {
		select {
		case <-seq.notify:
		case <-r.Context().Done():
			s.abort(seq)
			return
		case <-s.done:
			s.abort(seq)
			if !req.Stream {
				writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "the simulator is shutting down")
			}
			return
		}
		s.mu.Lock()
		generated, state, reason := seq.generated, seq.state, seq.finish
		s.mu.Unlock()
		if req.Stream && generated > sent {
			if err := out.streamTokens(w, sent, generated, state == stateDone, reason); err != nil {
				s.abort(seq) // the client left mid-write
				return
			}
			sent = generated
		}
		if state == stateDone {
			if req.Stream {
				_ = out.streamEnd(w, generated)
			} else {
				out.writeWhole(w, generated, reason)
			}
			return
		}
	}
}

func (s *Server) abort(seq *sequence) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eng.abort(seq)
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		OwnedBy string `json:"owned_by"`
		MaxLen  int    `json:"max_model_len"`
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{{ID: s.cfg.ModelName, Object: "model", OwnedBy: "modelsim", MaxLen: s.cfg.MaxModelLen}}})
}

// writeError answers with an OpenAI-style error body.
func writeError(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": code}})
}

// answer renders one request's output in the OpenAI formats.
type answer struct {
	api
	id, model    string
	created      int64
	includeUsage bool
	prompt       int
}

type usage struct {
	Prompt     int `json:"prompt_tokens"`
	Completion int `json:"completion_tokens"`
	Total      int `json:"total_tokens"`
}

type message struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

type choice struct {
	Index        int      `json:"index"`
	Message      *message `json:"message,omitempty"`
	Delta        *message `json:"delta,omitempty"`
	Text         *string  `json:"text,omitempty"`
	FinishReason *string  `json:"finish_reason"`
}

type response struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Choices []choice        `json:"choices"`
	Usage   json.RawMessage `json:"usage,omitempty"`
}

func (a *answer) usage(completion int) json.RawMessage {
	b, _ := json.Marshal(usage{Prompt: a.prompt, Completion: completion, Total: a.prompt + completion}) // plain ints always encode
	return b
}

// token returns the text of output token i: one short word each.
func token(i int) string {
	if i == 0 {
		return "sim"
	}
	return " sim"
}

// streamTokens writes tokens [from, to) as one chunk each; the last carries
// the finish reason when the sequence ended.
func (a *answer) streamTokens(w http.ResponseWriter, from, to int, ended bool, reason string) error {
	var buf bytes.Buffer
	for i := from; i < to; i++ {
		c := choice{}
		text := token(i)
		if a.chat {
			c.Delta = &message{Content: text}
			if i == 0 {
				c.Delta.Role = "assistant"
			}
		} else {
			c.Text = &text
		}
		if ended && i == to-1 {
			c.FinishReason = &reason
		}
		r := response{ID: a.id, Object: a.chunkObject, Created: a.created, Model: a.model, Choices: []choice{c}}
		if a.includeUsage {
			r.Usage = json.RawMessage("null")
		}
		writeEvent(&buf, r)
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return err
	}
	return http.NewResponseController(w).Flush()
}

// streamEnd writes the usage chunk (when asked for) and [DONE].
func (a *answer) streamEnd(w http.ResponseWriter, completion int) error {
	var buf bytes.Buffer
	if a.includeUsage {
		writeEvent(&buf, response{ID: a.id, Object: a.chunkObject, Created: a.created, Model: a.model,
			Choices: []choice{}, Usage: a.usage(completion)})
	}
	buf.WriteString("data: [DONE]\n\n")
	_, err := w.Write(buf.Bytes())
	return err
}

func (a *answer) writeWhole(w http.ResponseWriter, completion int, reason string) {
	var text bytes.Buffer
	for i := range completion {
		text.WriteString(token(i))
	}
	c := choice{FinishReason: &reason}
	if a.chat {
		c.Message = &message{Role: "assistant", Content: text.String()}
	} else {
		t := text.String()
		c.Text = &t
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(response{ID: a.id, Object: a.object, Created: a.created, Model: a.model,
		Choices: []choice{c}, Usage: a.usage(completion)})
}

func writeEvent(buf *bytes.Buffer, r response) {
	b, _ := json.Marshal(r) // strings, ints and raw JSON always encode
	buf.WriteString("data: ")
	buf.Write(b)
	buf.WriteString("\n\n")
}
