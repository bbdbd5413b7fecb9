package usage

import (
	"bytes"
	"net/http"
	"strings"
	"sync"
)

// Bounds on what a Meter keeps of a response; a response's size does not
// change its memory beyond these.
const (
	// maxEventBytes bounds the data of one SSE event kept for parsing, and
	// the bytes of one event held back while it may be a usage chunk to
	// strip. A larger event is relayed untouched and not parsed.
	maxEventBytes = 1 << 20
	// maxUsageBytes bounds a JSON response's captured "usage" value.
	maxUsageBytes = 4 << 10
	// maxOutputBytes bounds a JSON response's captured "choices" or "output"
	// value, parsed to count the output when the response reports no usage.
	// A larger one (over 60k tokens of output) counts one token per four
	// bytes, the usual rule of thumb.
	maxOutputBytes = 256 << 10
	// textBatch is how much streamed output text is gathered before it is
	// tokenised, so that tokens are counted across chunk boundaries as the
	// model produced them, not one chunk at a time.
	textBatch = 16 << 10
)

// Usage is the tokens a request used.
type Usage struct {
	// Prompt is the prompt (input) tokens.
	Prompt int64
	// Completion is the completion (output) tokens.
	Completion int64
	// Reported is set when the upstream reported the usage; otherwise it was
	// estimated from the request and the relayed output.
	Reported bool
}

// Total is prompt plus completion tokens.
func (u Usage) Total() int64 { return u.Prompt + u.Completion }

// body kinds a Meter understands.
const (
	kindUnknown = iota // no status or byte seen yet
	kindSSE            // text/event-stream
	kindJSON           // application/json or +json
	kindOpaque         // anything else, or a compressed body: not parsed
)

// Meter measures the tokens of one relayed response, fed by the
// ResponseWriter NewResponseWriter returns: the usage the upstream reports
// (a JSON response's "usage", a streamed chunk's non-null "usage"), or else
// the output it relays, counted with the model's tokenizer. It is safe for
// concurrent use: Usage(false) may be called while the response is being
// written.
type Meter struct {
	enc   encoding
	est   Estimate
	strip bool

	mu       sync.Mutex
	kind     int
	status   int
	reported Usage // Reported is set once the upstream reported usage

	// out counts a streamed response's output.
	out textCounter

	sse  sseState
	json jsonTap
}

// NewMeter returns a Meter for a request to model that e estimated as est.
// The output is counted with the tokenizer e counted the prompt with, which
// the model selects (e may be nil). stripUsage removes the usage-only chunk
// from a streamed response: set it when the data plane added
// stream_options.include_usage and the client did not ask for it.
func NewMeter(e *Estimator, model string, est Estimate, stripUsage bool) *Meter {
	enc := encodingFor(model)
	return &Meter{enc: enc, est: est, strip: stripUsage, out: textCounter{budget: newTokenBudget(enc)}}
}

// Usage returns what the request used: the upstream's reported usage when it
// sent one, else est.Prompt plus the output tokens counted from the relayed
// content. complete reports whether the response ended normally: then a
// final SSE line the upstream did not terminate is counted too (so call it
// after the last Write); after a cancelled or failed response that line is
// truncated and is not. A response with a 4xx status and no reported usage
// used nothing (the upstream refused the request). Usage may be called more
// than once.
func (m *Meter) Usage(complete bool) Usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.kind == kindSSE && complete {
		m.sse.finish(m)
	}
	if m.reported.Reported {
		return m.reported
	}
	if m.status >= 400 && m.status < 500 {
		return Usage{}
	}
	if m.kind == kindJSON {
		return Usage{Prompt: m.est.Prompt, Completion: m.json.outputTokens(m)}
	}
	return Usage{Prompt: m.est.Prompt, Completion: m.out.total()}
}

// start records the response's status and decides how to parse its body.
func (m *Meter) start(status int, h http.Header) {
	if m.kind != kindUnknown {
		return
	}
	m.status = status
	m.kind = kindOpaque
	if ce := h.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return
	}
	ct := strings.ToLower(strings.TrimSpace(h.Get("Content-Type")))
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = strings.TrimSpace(ct[:i])
	}
	switch {
	case ct == "text/event-stream":
		m.kind = kindSSE
		m.sse.holding = m.strip
	case ct == "application/json" || strings.HasSuffix(ct, "+json"):
		m.kind = kindJSON
	}
}

// report records usage the upstream reported; a later report replaces an
// earlier one (vLLM's continuous usage stats are cumulative).
func (m *Meter) report(u *wireUsage) {
	if r, ok := u.usage(); ok {
		m.reported = r
		m.out.text = nil // output is no longer counted
	}
}

// addText gathers streamed output text, until the upstream reports usage.
func (m *Meter) addText(s string) {
	if !m.reported.Reported {
		m.out.add(s)
	}
}

// textCounter counts output text in batches, each cut before a space where
// the tokenizer splits anyway, so that tokens are counted across chunk
// boundaries as the model produced them with bounded memory.
type textCounter struct {
	budget
	counted int64  // tokens of the text counted so far
	text    []byte // text gathered but not yet counted
}

func (c *textCounter) add(s string) {
	if s == "" {
		return
	}
	c.text = append(c.text, s...)
	if len(c.text) < textBatch {
		return
	}
	cut := bytes.LastIndexByte(c.text, ' ')
	if cut <= 0 {
		cut = len(c.text)
	}
	c.counted += c.count(string(c.text[:cut]))
	c.text = c.text[:copy(c.text, c.text[cut:])]
}

// total is the tokens of all text added. The pending text is counted, not
// consumed, so calling total again gives the same answer.
func (c *textCounter) total() int64 {
	b := c.budget // a copy: counting the pending text twice must not spend it twice
	return c.counted + b.count(string(c.text))
}

// wireUsage is a usage object as chat completions, completions and
// embeddings (prompt/completion_tokens) and the Responses API
// (input/output_tokens) report it.
type wireUsage struct {
	PromptTokens     *int64 `json:"prompt_tokens"`
	CompletionTokens *int64 `json:"completion_tokens"`
	TotalTokens      *int64 `json:"total_tokens"`
	InputTokens      *int64 `json:"input_tokens"`
	OutputTokens     *int64 `json:"output_tokens"`
}

// usage converts u; ok is false when it has no token count at all.
func (u *wireUsage) usage() (Usage, bool) {
	if u == nil {
		return Usage{}, false
	}
	get := func(ps ...*int64) (int64, bool) {
		for _, p := range ps {
			if p != nil {
				return max(*p, 0), true
			}
		}
		return 0, false
	}
	prompt, hasPrompt := get(u.PromptTokens, u.InputTokens)
	completion, hasCompletion := get(u.CompletionTokens, u.OutputTokens)
	total, hasTotal := get(u.TotalTokens)
	if !hasCompletion && hasTotal {
		completion = max(total-prompt, 0)
		hasCompletion = true
	}
	if !hasPrompt && !hasCompletion {
		return Usage{}, false
	}
	return Usage{Prompt: prompt, Completion: completion, Reported: true}, true
}

// responseWriter is the ResponseWriter NewResponseWriter returns.
type responseWriter struct {
	http.ResponseWriter
	m *Meter
	// out is the reused buffer of bytes to relay when stripping.
	out []byte
}

// NewResponseWriter returns a ResponseWriter that relays to w and feeds m
// what it relays. A streamed response's usage-only chunk is removed when m
// strips it (and Content-Length dropped, as the length changes); every
// other byte goes through unchanged. While stripping, the bytes of an event
// that may still be the usage chunk are held back until it is known not to
// be. Flush and http.ResponseController (Unwrap) reach w; write errors are
// w's.
func NewResponseWriter(w http.ResponseWriter, m *Meter) http.ResponseWriter {
	return &responseWriter{ResponseWriter: w, m: m}
}

// WriteHeader records the status and content type, then sends the header.
func (w *responseWriter) WriteHeader(code int) {
	if code >= 200 { // 1xx are informational, the final status follows
		w.m.mu.Lock()
		w.start(code)
		w.m.mu.Unlock()
	}
	w.ResponseWriter.WriteHeader(code)
}

// start starts the meter on the response's status and header; a stripped
// stream's length changes, so its Content-Length goes.
func (w *responseWriter) start(code int) {
	if w.m.kind != kindUnknown {
		return
	}
	w.m.start(code, w.Header())
	if w.m.kind == kindSSE && w.m.strip {
		w.Header().Del("Content-Length")
	}
}

// Write relays p, less a stripped usage chunk, and feeds it to the meter.
func (w *responseWriter) Write(p []byte) (int, error) {
	m := w.m
	m.mu.Lock()
	if m.kind == kindUnknown {
		w.start(http.StatusOK)
	}
	if m.kind != kindSSE || !m.strip {
		m.mu.Unlock()
		n, err := w.ResponseWriter.Write(p)
		m.mu.Lock()
		m.feed(p[:n])
		m.mu.Unlock()
		return n, err
	}
	w.out = m.sse.feed(m, p, w.out[:0])
	out := w.out
	m.mu.Unlock()
	if len(out) == 0 {
		return len(p), nil
	}
	if _, err := w.ResponseWriter.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Finish relays what a writer from NewResponseWriter still holds back once
// the upstream's body has ended: the bytes of a last event the upstream did
// not end with a blank line reach the client as sent, unless that event is
// the usage chunk being stripped. Call it once, after the body; for any
// other writer it does nothing.
func Finish(w http.ResponseWriter) error {
	rw, ok := w.(*responseWriter)
	if !ok {
		return nil
	}
	m := rw.m
	m.mu.Lock()
	if m.kind != kindSSE || !m.strip {
		m.mu.Unlock()
		return nil
	}
	rw.out = m.sse.flushHeld(rw.out[:0])
	out := rw.out
	m.mu.Unlock()
	if len(out) == 0 {
		return nil
	}
	_, err := rw.ResponseWriter.Write(out)
	return err
}

// feed parses relayed bytes that go through unchanged.
func (m *Meter) feed(p []byte) {
	switch m.kind {
	case kindSSE:
		m.sse.feed(m, p, nil)
	case kindJSON:
		m.json.feed(m, p)
	}
}

// Flush flushes w.
func (w *responseWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush reporting the error, as http.ResponseController uses it.
func (w *responseWriter) FlushError() error {
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
