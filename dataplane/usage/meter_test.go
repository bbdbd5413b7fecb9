package usage

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// fakeWriter is an http.ResponseWriter recording what reaches the client.
type fakeWriter struct {
	header  http.Header
	status  int
	body    bytes.Buffer
	discard bool // count bytes only
	n       int
	flushes int
	err     error // returned by Write once set
}

func newFakeWriter(contentType string) *fakeWriter {
	h := http.Header{}
	if contentType != "" {
		h.Set("Content-Type", contentType)
	}
	return &fakeWriter{header: h}
}

func (w *fakeWriter) Header() http.Header { return w.header }

func (w *fakeWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *fakeWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.err != nil {
		return 0, w.err
	}
	w.n += len(p)
	if !w.discard {
		w.body.Write(p)
	}
	return len(p), nil
}

func (w *fakeWriter) Flush() { w.flushes++ }

// relay writes the parts through a metered writer and returns what the
// client received and the settled usage.
func relay(t testing.TB, contentType string, status int, strip bool, parts ...string) (string, Usage) {
	t.Helper()
	fw := newFakeWriter(contentType)
	m := NewMeter(NewEstimator(100), "gpt-4", Estimate{Prompt: 40, MaxOutput: 100}, strip)
	w := NewResponseWriter(fw, m)
	if status != 0 {
		w.WriteHeader(status)
	}
	for _, p := range parts {
		n, err := w.Write([]byte(p))
		if err != nil || n != len(p) {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	return fw.body.String(), m.Usage(true)
}

const (
	ev0      = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}` + "\n\n"
	ev1      = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}],"usage":null}` + "\n\n"
	ev2      = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" world"},"finish_reason":"stop"}],"usage":null}` + "\n\n"
	evUsage  = `data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14}}` + "\n\n"
	evDone   = "data: [DONE]\n\n"
	sse      = "text/event-stream"
	jsonType = "application/json"
)

var reported = Usage{Prompt: 12, Completion: 2, Reported: true}

func TestMeterSSE(t *testing.T) {
	crlf := func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }
	cr := func(s string) string { return strings.ReplaceAll(s, "\n", "\r") }
	// Without usage the output is counted: "Hello world" is 2 tokens.
	counted := Usage{Prompt: 40, Completion: 2}
	tests := []struct {
		name   string
		in     string
		strip  bool
		want   string // what the client gets; "" means the input
		wantU  Usage
		ctype  string
		status int
	}{
		{name: "usage chunk relayed when the client asked", in: ev0 + ev1 + ev2 + evUsage + evDone, wantU: reported},
		{name: "usage chunk stripped", in: ev0 + ev1 + ev2 + evUsage + evDone, strip: true, want: ev0 + ev1 + ev2 + evDone, wantU: reported},
		{name: "CRLF stripped", in: crlf(ev0 + ev1 + ev2 + evUsage + evDone), strip: true, want: crlf(ev0 + ev1 + ev2 + evDone), wantU: reported},
		{name: "CR stripped", in: cr(ev0 + ev1 + ev2 + evUsage + evDone), strip: true, want: cr(ev0 + ev1 + ev2 + evDone), wantU: reported},
		{name: "CRLF relayed", in: crlf(ev0 + ev1 + ev2 + evUsage + evDone), wantU: reported},
		{name: "usage chunk not last", in: ev0 + evUsage + ev1 + ev2 + evDone, strip: true, want: ev0 + ev1 + ev2 + evDone, wantU: reported},
		{name: "no usage: output counted", in: ev0 + ev1 + ev2 + evDone, strip: true, wantU: counted},
		{name: "no [DONE]", in: ev0 + ev1 + ev2 + evUsage, strip: true, want: ev0 + ev1 + ev2, wantU: reported},
		{name: "malformed chunks relayed untouched",
			in:    "data: {not json\n\n" + `data: {"choices":5,"usage":"x"}` + "\n\n" + "data: \n\n" + "data\n\n" + ev1 + ev2 + evDone,
			strip: true, wantU: counted},
		{name: "fields, comments and multi-line data",
			in:    ": keep-alive\n\nevent: chunk\nid: 7\ndata: {\"choices\":[{\"delta\":\ndata: {\"content\":\"Hello\"}}]}\n\n" + ev2 + "retry: 10\n\n" + evUsage + evDone,
			strip: true,
			want:  ": keep-alive\n\nevent: chunk\nid: 7\ndata: {\"choices\":[{\"delta\":\ndata: {\"content\":\"Hello\"}}]}\n\n" + ev2 + "retry: 10\n\n" + evDone,
			wantU: reported},
		{name: "the usage event's other fields go with it",
			in: ev1 + "event: usage\n" + evUsage + evDone, strip: true, want: ev1 + evDone, wantU: reported},
		{name: "data without a space",
			in: strings.Replace(evUsage, "data: ", "data:", 1) + evDone, strip: true, want: evDone, wantU: reported},
		{name: "continuous usage stats: chunks with choices are kept, the last usage wins",
			in:    `data: {"choices":[{"delta":{"content":"Hi"}}],"usage":{"prompt_tokens":12,"completion_tokens":1}}` + "\n\n" + `data: {"choices":[{"delta":{"content":"!"}}],"usage":{"prompt_tokens":12,"completion_tokens":2}}` + "\n\n" + evDone,
			strip: true, wantU: reported},
		{name: "completions text counted",
			in:    `data: {"choices":[{"text":"Hello","index":0}]}` + "\n\n" + `data: {"choices":[{"text":" world","index":0}]}` + "\n\n" + evDone,
			wantU: counted},
		{name: "tool call arguments counted",
			in:    `data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\":"}}]}}]}` + "\n\n" + `data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}` + "\n\n",
			wantU: Usage{Prompt: 40, Completion: tiktoken(t, cl100k, `f{"a":1}`)}},
		{name: "Responses API events",
			in: "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hello\"}\n\n" +
				"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"output\":[],\"usage\":{\"input_tokens\":12,\"output_tokens\":2,\"total_tokens\":14}}}\n\n",
			strip: true, wantU: reported},
		{name: "Responses API without usage counts text deltas, not audio",
			in: "data: {\"type\":\"response.output_text.delta\",\"delta\":\"Hello\"}\n\n" +
				"data: {\"type\":\"response.output_audio.delta\",\"delta\":\"UklGRiQAAABXQVZF\"}\n\n" +
				"data: {\"type\":\"response.output_text.delta\",\"delta\":\" world\"}\n\n",
			wantU: counted},
		{name: "4xx without usage used nothing", in: `data: {"error":{"message":"bad"}}` + "\n\n", status: 400, wantU: Usage{}},
		{name: "5xx without usage settles the prompt", in: "", status: 502, wantU: Usage{Prompt: 40}},
		{name: "content type with parameters", in: ev1 + evUsage, strip: true, want: ev1, wantU: reported, ctype: "Text/Event-Stream; charset=utf-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if want == "" {
				want = tt.in
			}
			ctype := tt.ctype
			if ctype == "" {
				ctype = sse
			}
			got, u := relay(t, ctype, tt.status, tt.strip, tt.in)
			if got != want {
				t.Errorf("client got\n%q\nwant\n%q", got, want)
			}
			if u != tt.wantU {
				t.Errorf("Usage = %+v, want %+v", u, tt.wantU)
			}
		})
	}
}

// TestMeterSSEWriteBoundaries splits one stream at every byte offset, and
// into single bytes: the client gets the same bytes, the meter the same
// usage.
func TestMeterSSEWriteBoundaries(t *testing.T) {
	for _, tc := range []struct {
		name, in, stripped string
		wantU              Usage
	}{
		{"LF", ev0 + ev1 + evUsage + ev2 + evDone, ev0 + ev1 + ev2 + evDone, reported},
		{"CRLF", strings.ReplaceAll(ev0+ev1+evUsage+ev2+evDone, "\n", "\r\n"), strings.ReplaceAll(ev0+ev1+ev2+evDone, "\n", "\r\n"), reported},
		{"no usage", ev0 + ev1 + ev2 + evDone, ev0 + ev1 + ev2 + evDone, Usage{Prompt: 40, Completion: 2}},
	} {
		for _, strip := range []bool{false, true} {
			want := tc.in
			if strip {
				want = tc.stripped
			}
			t.Run(fmt.Sprintf("%s/strip=%v", tc.name, strip), func(t *testing.T) {
				for i := 0; i <= len(tc.in); i++ {
					got, u := relay(t, sse, 0, strip, tc.in[:i], tc.in[i:])
					if got != want || u != tc.wantU {
						t.Fatalf("split at %d: client got %q, usage %+v; want %q, %+v", i, got, u, want, tc.wantU)
					}
				}
				bytewise := make([]string, len(tc.in))
				for i := range tc.in {
					bytewise[i] = tc.in[i : i+1]
				}
				if got, u := relay(t, sse, 0, strip, bytewise...); got != want || u != tc.wantU {
					t.Fatalf("byte by byte: client got %q, usage %+v; want %q, %+v", got, u, want, tc.wantU)
				}
			})
		}
	}
}

func TestMeterSSEUnterminatedEnd(t *testing.T) {
	in := ev1 + `data: {"choices":[{"delta":{"content":" world"}}]}` // no line end
	for _, complete := range []bool{true, false} {
		fw := newFakeWriter(sse)
		m := NewMeter(nil, "gpt-4", Estimate{Prompt: 40}, false)
		if _, err := NewResponseWriter(fw, m).Write([]byte(in)); err != nil {
			t.Fatal(err)
		}
		want := Usage{Prompt: 40, Completion: 1} // "Hello"
		if complete {
			want.Completion = 2 // the final line counts when the response ended normally
		}
		for range 2 { // Usage is repeatable
			if u := m.Usage(complete); u != want {
				t.Errorf("complete=%v: Usage = %+v, want %+v", complete, u, want)
			}
		}
	}
}

// TestFinishRelaysAnUnterminatedLastEvent checks that a stream whose last
// event is not ended by a blank line reaches the client whole once the body
// has ended, while a usage chunk being stripped stays stripped.
func TestFinishRelaysAnUnterminatedLastEvent(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{name: "[DONE] with one line end", in: ev1 + "data: [DONE]\n", want: ev1 + "data: [DONE]\n"},
		{name: "a chunk without a line end", in: ev1 + strings.TrimSuffix(ev2, "\n\n"), want: ev1 + strings.TrimSuffix(ev2, "\n\n")},
		{name: "a comment line", in: ev1 + ": keep-alive\n", want: ev1 + ": keep-alive\n"},
		{name: "the usage chunk with one line end", in: ev1 + strings.TrimSuffix(evUsage, "\n"), want: ev1},
		{name: "a terminated stream", in: ev1 + evUsage + evDone, want: ev1 + evDone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fw := newFakeWriter(sse)
			w := NewResponseWriter(fw, NewMeter(nil, "gpt-4", Estimate{Prompt: 40}, true))
			if _, err := w.Write([]byte(tc.in)); err != nil {
				t.Fatal(err)
			}
			if err := Finish(w); err != nil {
				t.Fatal(err)
			}
			if got := fw.body.String(); got != tc.want {
				t.Errorf("client received %q, want %q", got, tc.want)
			}
			if err := Finish(w); err != nil || fw.body.String() != tc.want {
				t.Errorf("a second Finish changed the body to %q (err %v)", fw.body.String(), err)
			}
		})
	}
	// Writers that do not strip hold nothing back.
	fw := newFakeWriter(sse)
	w := NewResponseWriter(fw, NewMeter(nil, "gpt-4", Estimate{}, false))
	if _, err := w.Write([]byte(ev1 + "data: [DONE]\n")); err != nil {
		t.Fatal(err)
	}
	if err := Finish(w); err != nil || fw.body.String() != ev1+"data: [DONE]\n" {
		t.Errorf("without stripping: body %q, err %v", fw.body.String(), err)
	}
	if err := Finish(fw); err != nil {
		t.Errorf("Finish of a plain writer: %v", err)
	}
}

func TestMeterSSEStripHeadersFlushAndErrors(t *testing.T) {
	fw := newFakeWriter(sse)
	fw.header.Set("Content-Length", "999")
	m := NewMeter(nil, "gpt-4o", Estimate{}, true)
	w := NewResponseWriter(fw, m)
	w.WriteHeader(http.StatusOK)
	if fw.header.Get("Content-Length") != "" {
		t.Error("a stripped stream kept its Content-Length, which no longer matches the body")
	}
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil || fw.flushes != 1 {
		t.Errorf("Flush through http.ResponseController: err %v, flushes %d; want nil, 1", err, fw.flushes)
	}
	w.(http.Flusher).Flush()
	if fw.flushes != 2 {
		t.Errorf("Flush: flushes %d, want 2", fw.flushes)
	}
	if u, ok := w.(interface{ Unwrap() http.ResponseWriter }); !ok || u.Unwrap() != fw {
		t.Error("Unwrap does not give the underlying writer")
	}

	boom := errors.New("client gone")
	fw.err = boom
	if _, err := w.Write([]byte(ev1)); !errors.Is(err, boom) {
		t.Errorf("stripping Write error = %v, want %v", err, boom)
	}
	fw2 := newFakeWriter(sse)
	fw2.err = boom
	if _, err := NewResponseWriter(fw2, NewMeter(nil, "m", Estimate{}, false)).Write([]byte(ev1)); !errors.Is(err, boom) {
		t.Errorf("relaying Write error = %v, want %v", err, boom)
	}
	fw3 := newFakeWriter(jsonType)
	fw3.err = boom
	if _, err := NewResponseWriter(fw3, NewMeter(nil, "m", Estimate{}, false)).Write([]byte(`{}`)); !errors.Is(err, boom) {
		t.Errorf("JSON Write error = %v, want %v", err, boom)
	}
	fw4 := newFakeWriter(sse)
	fw4.header.Set("Content-Length", "999")
	NewResponseWriter(fw4, NewMeter(nil, "m", Estimate{}, false)).WriteHeader(http.StatusOK)
	if fw4.header.Get("Content-Length") != "999" {
		t.Error("an unstripped stream lost its Content-Length")
	}
}

func TestMeterJSON(t *testing.T) {
	chat := `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello world"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14},"system_fingerprint":null}`
	tests := []struct {
		name   string
		ctype  string
		status int
		in     string
		want   Usage
	}{
		{name: "chat completion usage", in: chat, want: reported},
		{name: "usage first", in: `{"usage":{"prompt_tokens":12,"completion_tokens":2},"choices":[{"message":{"content":"ignored"}}]}`, want: reported},
		{name: "Responses API usage", in: `{"id":"r","output":[{"type":"message","content":[{"type":"output_text","text":"Hello world"}]}],"usage":{"input_tokens":12,"output_tokens":2,"total_tokens":14}}`, want: reported},
		{name: "embeddings usage", in: `{"data":[{"embedding":[0.1,0.2]}],"usage":{"prompt_tokens":8,"total_tokens":8}}`, want: Usage{Prompt: 8, Reported: true}},
		{name: "total only", in: `{"usage":{"prompt_tokens":12,"total_tokens":14}}`, want: reported},
		{name: "escaped member name", in: `{"\u0075sage":{"prompt_tokens":12,"completion_tokens":2}}`, want: reported},
		{name: "last duplicate wins", in: `{"usage":{"prompt_tokens":1,"completion_tokens":1},"usage":{"prompt_tokens":12,"completion_tokens":2}}`, want: reported},
		{name: "nested usage is not the response's", in: `{"choices":[{"message":{"content":"Hello world","usage":{"prompt_tokens":9}}}]}`, want: Usage{Prompt: 40, Completion: 2}},
		{name: "strings with braces and escapes", in: `{"choices":[{"message":{"content":"Hello world"}}],"x":"},\"usage\":{","usage":{"prompt_tokens":12,"completion_tokens":2}}`, want: reported},
		{name: "null usage: output counted", in: `{"choices":[{"message":{"content":"Hello world"}}],"usage":null}`, want: Usage{Prompt: 40, Completion: 2}},
		{name: "no usage: output counted", in: `{"choices":[{"message":{"content":"Hello"}},{"message":{"content":" world"}}]}`, want: Usage{Prompt: 40, Completion: 2}},
		{name: "Responses API output counted", in: `{"output":[{"type":"message","content":[{"type":"output_text","text":"Hello world"}]}]}`, want: Usage{Prompt: 40, Completion: 2}},
		{name: "+json content type", ctype: "application/vnd.api+json", in: chat, want: reported},
		{name: "4xx error used nothing", status: 429, in: `{"error":{"message":"slow down"}}`, want: Usage{}},
		{name: "compressed body not parsed", ctype: "gzip", in: chat, want: Usage{Prompt: 40}},
		{name: "other content type not parsed", ctype: "text/plain", in: chat, want: Usage{Prompt: 40}},
		{name: "top-level array", in: `[{"usage":{"prompt_tokens":1}}]`, want: Usage{Prompt: 40}},
		{name: "truncated: a quarter token per byte relayed", in: `{"choices":[{"message":{"content":"Hello world, this is`, want: Usage{Prompt: 40, Completion: int64(len(`[{"message":{"content":"Hello world, this is`)) / 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctype := tt.ctype
			if ctype == "" || ctype == "gzip" {
				ctype = jsonType
			}
			for i := 0; i <= len(tt.in); i++ {
				fw := newFakeWriter(ctype)
				if tt.ctype == "gzip" {
					fw.header.Set("Content-Encoding", "gzip")
				}
				m := NewMeter(nil, "gpt-4", Estimate{Prompt: 40}, true)
				w := NewResponseWriter(fw, m)
				if tt.status != 0 {
					w.WriteHeader(tt.status)
				}
				_, _ = w.Write([]byte(tt.in[:i]))
				_, _ = w.Write([]byte(tt.in[i:]))
				if fw.body.String() != tt.in {
					t.Fatalf("client got %q, want the response unchanged", fw.body.String())
				}
				if u := m.Usage(true); u != tt.want {
					t.Fatalf("split at %d: Usage = %+v, want %+v", i, u, tt.want)
				}
			}
		})
	}
}

// TestMeterBoundedMemory relays a 10 MiB JSON response and a 10 MiB stream
// and checks the meter allocates a small fraction of that, so neither is
// buffered whole.
func TestMeterBoundedMemory(t *testing.T) {
	const size = 10 << 20
	content := strings.Repeat("lorem ipsum dolor sit amet ", 1024) // 27 KiB
	var jsonResp bytes.Buffer
	jsonResp.WriteString(`{"choices":[`)
	for jsonResp.Len() < size {
		fmt.Fprintf(&jsonResp, `{"message":{"content":%q}},`, content)
	}
	jsonResp.WriteString(`{}],"usage":{"prompt_tokens":12,"completion_tokens":2}}`)
	var stream bytes.Buffer
	for stream.Len() < size {
		fmt.Fprintf(&stream, "data: {\"choices\":[{\"delta\":{\"content\":%q}}]}\n\n", "lorem ipsum ")
	}
	stream.WriteString(evUsage + evDone)

	for _, tc := range []struct {
		name, ctype string
		body        []byte
	}{{"json", jsonType, jsonResp.Bytes()}, {"sse", sse, stream.Bytes()}} {
		t.Run(tc.name, func(t *testing.T) {
			fw := newFakeWriter(tc.ctype)
			fw.discard = true
			m := NewMeter(nil, "gpt-4", Estimate{Prompt: 40}, true)
			w := NewResponseWriter(fw, m)
			countText(cl100k, "build the codec before measuring")
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for b := tc.body; len(b) > 0; {
				n := min(len(b), 32<<10)
				if _, err := w.Write(b[:n]); err != nil {
					t.Fatal(err)
				}
				b = b[n:]
			}
			u := m.Usage(true)
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(w)
			if u != reported {
				t.Errorf("Usage = %+v, want %+v", u, reported)
			}
			// What the meter keeps after relaying 10 MiB: at most its
			// bounds (1 MiB) plus small buffers.
			if live := int64(after.HeapAlloc) - int64(before.HeapAlloc); live > 2<<20 {
				t.Errorf("the meter holds %d bytes after relaying %d; the response is being buffered", live, len(tc.body))
			}
			t.Logf("meter holds %d bytes after relaying %d", int64(after.HeapAlloc)-int64(before.HeapAlloc), len(tc.body))
		})
	}
}

// BenchmarkMeterSSE relays a 1000-chunk chat stream through the meter,
// against relaying it to the same writer unmetered in the same run.
func BenchmarkMeterSSE(b *testing.B) {
	var stream bytes.Buffer
	for i := range 1000 {
		fmt.Fprintf(&stream, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":" word%d"},"finish_reason":null}],"usage":null}`+"\n\n", i%50)
	}
	stream.WriteString(evUsage + evDone)
	events := bytes.SplitAfter(stream.Bytes(), []byte("\n\n"))
	countText(o200k, "build the codec before measuring")
	run := func(b *testing.B, metered, strip bool) {
		b.ReportAllocs()
		b.SetBytes(int64(stream.Len()))
		for b.Loop() {
			fw := newFakeWriter(sse)
			fw.discard = true
			var w http.ResponseWriter = fw
			var m *Meter
			if metered {
				m = NewMeter(nil, "gpt-4o", Estimate{Prompt: 40}, strip)
				w = NewResponseWriter(fw, m)
			}
			for _, ev := range events {
				_, _ = w.Write(ev)
			}
			if metered {
				m.Usage(true)
			}
		}
	}
	b.Run("baseline-unmetered", func(b *testing.B) { run(b, false, false) })
	b.Run("metered", func(b *testing.B) { run(b, true, false) })
	b.Run("metered-strip", func(b *testing.B) { run(b, true, true) })
}

// TestMeterSSEHugeEventNotHeld checks that while stripping, an event too
// large to be the usage chunk is relayed as it arrives, not held whole.
func TestMeterSSEHugeEventNotHeld(t *testing.T) {
	fw := newFakeWriter(sse)
	w := NewResponseWriter(fw, NewMeter(nil, "gpt-4", Estimate{}, true))
	event := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("a", 2*maxEventBytes) + "\"}}]}"
	for b := event; len(b) > 0; {
		n := min(len(b), 64<<10)
		if _, err := w.Write([]byte(b[:n])); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
	if held := len(event) - fw.body.Len(); held > maxEventBytes {
		t.Errorf("%d bytes of an unfinished %d-byte event held back, want at most %d", held, len(event), maxEventBytes)
	}
	if _, err := w.Write([]byte("\n\n" + evDone)); err != nil {
		t.Fatal(err)
	}
	if fw.body.String() != event+"\n\n"+evDone {
		t.Error("the huge event did not reach the client unchanged")
	}
}

// TestMeterSSEManyDataLines checks that while stripping, an event of many
// data lines that do not (yet) form a chunk is relayed after a few, not
// held (and re-parsed) to its end; it is still parsed once at its end.
func TestMeterSSEManyDataLines(t *testing.T) {
	fw := newFakeWriter(sse)
	m := NewMeter(nil, "gpt-4", Estimate{Prompt: 40}, true)
	w := NewResponseWriter(fw, m)
	lines := []string{"data: {\"choices\":\n", "data: [{\"delta\":\n", "data: {\"content\":\n", "data: \"Hello\"\n", "data: }}]\n", "data: }\n"}
	for i, l := range lines {
		if _, err := w.Write([]byte(l)); err != nil {
			t.Fatal(err)
		}
		if i == maxEarlyParses-1 && fw.body.Len() == 0 {
			t.Fatalf("after %d data lines nothing was relayed; the event is held", maxEarlyParses)
		}
	}
	if _, err := w.Write([]byte("\n" + evDone)); err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(lines, "") + "\n" + evDone; fw.body.String() != want {
		t.Errorf("client got %q, want %q", fw.body.String(), want)
	}
	if u := m.Usage(true); u != (Usage{Prompt: 40, Completion: 1}) {
		t.Errorf("Usage = %+v, want the event's \"Hello\" counted once at its end", u)
	}
}

// TestMeterJSONLargeOutputWithoutUsage checks that a choices value beyond
// its capture bound, with no usage reported, counts one token per four
// bytes instead of being kept whole.
func TestMeterJSONLargeOutputWithoutUsage(t *testing.T) {
	choices := `[{"message":{"content":"` + strings.Repeat("word ", maxOutputBytes/4) + `"}}]`
	fw := newFakeWriter(jsonType)
	m := NewMeter(nil, "gpt-4", Estimate{Prompt: 40}, false)
	if _, err := NewResponseWriter(fw, m).Write([]byte(`{"choices":` + choices + `,"model":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if want := (Usage{Prompt: 40, Completion: int64(len(choices)) / 4}); m.Usage(true) != want {
		t.Errorf("Usage = %+v, want %+v", m.Usage(true), want)
	}
	if m.json.out != nil && cap(m.json.out) > maxOutputBytes+1 {
		t.Errorf("kept %d bytes of output, want at most %d", cap(m.json.out), maxOutputBytes)
	}
}
