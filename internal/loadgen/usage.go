package loadgen

import (
	"bytes"
	"encoding/json"
	"mime"
)

// maxUsageBody bounds how much of a JSON answer a UsageTap keeps to find its
// usage, and maxUsageLine one line of a stream.
const (
	maxUsageBody = 1 << 20
	maxUsageLine = 64 << 10
)

// Usage is the token usage an answer reported in its OpenAI "usage" object.
type Usage struct {
	// Prompt is usage.prompt_tokens.
	Prompt int64
	// Completion is usage.completion_tokens.
	Completion int64
	// Total is usage.total_tokens, or Prompt plus Completion when the
	// answer left it out.
	Total int64
}

// usageJSON is the OpenAI usage object.
type usageJSON struct {
	Prompt     int64  `json:"prompt_tokens"`
	Completion int64  `json:"completion_tokens"`
	Total      *int64 `json:"total_tokens"`
}

func (u *usageJSON) usage() Usage {
	total := u.Prompt + u.Completion
	if u.Total != nil {
		total = *u.Total
	}
	return Usage{Prompt: u.Prompt, Completion: u.Completion, Total: total}
}

// UsageTap is an io.Writer that is handed the bytes of one answer body as the
// client reads them and finds the token usage the server reported: the
// "usage" object of a JSON answer, or the last non-null "usage" of a stream
// of server-sent events (the final usage chunk OpenAI sends when the request
// sets stream_options.include_usage). It keeps at most 1 MiB of a JSON body
// and 64 KiB of one event line.
type UsageTap struct {
	stream bool
	buf    []byte
	skip   bool // stream: the current line is too long and is ignored
	parsed bool // JSON: buf has been parsed
	usage  Usage
	found  bool
}

// NewUsageTap returns a tap for an answer with the given Content-Type:
// text/event-stream is read as a stream, anything else as JSON.
func NewUsageTap(contentType string) *UsageTap {
	mt, _, _ := mime.ParseMediaType(contentType)
	return &UsageTap{stream: mt == "text/event-stream"}
}

// Write implements io.Writer; it never fails.
func (t *UsageTap) Write(p []byte) (int, error) {
	n := len(p)
	if !t.stream {
		if room := maxUsageBody - len(t.buf); room > 0 {
			t.buf = append(t.buf, p[:min(room, len(p))]...)
		}
		return n, nil
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			t.appendLine(p)
			return n, nil
		}
		t.appendLine(p[:i])
		if !t.skip {
			t.line(bytes.TrimSuffix(t.buf, []byte("\r")))
		}
		t.buf, t.skip = t.buf[:0], false
		p = p[i+1:]
	}
	return n, nil
}

// appendLine adds p to the current line, or marks the line skipped when it
// grows too long.
func (t *UsageTap) appendLine(p []byte) {
	if t.skip {
		return
	}
	if len(t.buf)+len(p) > maxUsageLine {
		t.buf, t.skip = t.buf[:0], true
		return
	}
	t.buf = append(t.buf, p...)
}

// line reads one complete line of a stream.
func (t *UsageTap) line(l []byte) {
	data, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok || !bytes.Contains(data, []byte(`"usage"`)) {
		return
	}
	var chunk struct {
		Usage *usageJSON `json:"usage"`
	}
	if json.Unmarshal(bytes.TrimSpace(data), &chunk) == nil && chunk.Usage != nil {
		t.usage, t.found = chunk.Usage.usage(), true
	}
}

// Usage returns the usage found in the bytes written so far, and whether
// there was one. Call it once the body has been read to its end.
func (t *UsageTap) Usage() (Usage, bool) {
	if !t.stream && !t.parsed {
		t.parsed = true
		var body struct {
			Usage *usageJSON `json:"usage"`
		}
		if json.Unmarshal(t.buf, &body) == nil && body.Usage != nil {
			t.usage, t.found = body.Usage.usage(), true
		}
		t.buf = nil
	}
	return t.usage, t.found
}
