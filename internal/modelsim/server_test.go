package modelsim

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func startFake(t *testing.T, cfg Config) (*Server, *clocktesting.FakeClock) {
	t.Helper()
	fc := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	s, err := New(fc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, fc
}

// runUntil steps the scheduler on the fake clock, one step at a time, until
// cond holds.
func runUntil(t *testing.T, s *Server, fc *clocktesting.FakeClock, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 100_000 {
			t.Fatalf("%s: not after 100000 steps", what)
		}
		// A real-time wait for the scheduler's goroutine to reach its timer
		// (or for cond, which a handler may make true meanwhile).
		testutil.EventuallyWithin(t, 10*time.Second, "the scheduler waits on its step timer, or "+what,
			func() bool { return cond() || fc.HasWaiters() })
		if cond() {
			return
		}
		s.mu.Lock()
		d := s.eng.stepDur
		s.mu.Unlock()
		fc.Step(d)
	}
}

// call runs one request through the handler in its own goroutine; wait
// returns the finished recording.
type call struct {
	rec    *httptest.ResponseRecorder
	cancel context.CancelFunc
	done   chan struct{}
}

func start(s *Server, path, body string, header map[string]string) *call {
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, path, strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	c := &call{rec: httptest.NewRecorder(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		s.ServeHTTP(c.rec, req)
	}()
	return c
}

func (c *call) finished() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *call) wait(t *testing.T) *httptest.ResponseRecorder {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not return within 10s")
	}
	c.cancel()
	return c.rec
}

// exchange runs a request to its end on the fake clock.
func exchange(t *testing.T, s *Server, fc *clocktesting.FakeClock, path, body string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	c := start(s, path, body, header)
	runUntil(t, s, fc, "the answer", c.finished)
	return c.wait(t)
}

type usageJSON struct {
	Prompt     int `json:"prompt_tokens"`
	Completion int `json:"completion_tokens"`
	Total      int `json:"total_tokens"`
}

type chunkJSON struct {
	Object  string `json:"object"`
	Choices []struct {
		Delta *struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"delta"`
		Message *struct {
			Content string `json:"content"`
		} `json:"message"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usageJSON `json:"usage"`
}

// stream is what a client reads from an SSE answer.
type stream struct {
	text       string
	finish     string
	usage      *usageJSON
	tokens     int // chunks with a choice
	usageNulls int // chunks with "usage": null
	done       bool
}

func readStream(t *testing.T, body io.Reader) stream {
	t.Helper()
	var st stream
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line %q is not an SSE data line", line)
		}
		if st.done {
			t.Fatalf("data after [DONE]: %q", data)
		}
		if data == "[DONE]" {
			st.done = true
			continue
		}
		if st.usage != nil {
			t.Fatalf("a chunk after the usage chunk: %q", data)
		}
		var c chunkJSON
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		if strings.Contains(data, `"usage":null`) {
			st.usageNulls++
		}
		if len(c.Choices) == 0 {
			st.usage = c.Usage
			continue
		}
		st.tokens++
		ch := c.Choices[0]
		switch {
		case ch.Delta != nil:
			if (st.tokens == 1) != (ch.Delta.Role == "assistant") {
				t.Errorf("chunk %d has role %q; want the role on the first chunk only", st.tokens, ch.Delta.Role)
			}
			st.text += ch.Delta.Content
		case ch.Text != nil:
			st.text += *ch.Text
		}
		if ch.FinishReason != nil {
			st.finish = *ch.FinishReason
		}
	}
	return st
}

func TestUsage(t *testing.T) {
	prompt40 := strings.Repeat("x", 40) // 10 tokens at four bytes a token
	tests := []struct {
		name       string
		path, body string
		header     map[string]string
		want       usageJSON
		wantFinish string
	}{
		{name: "chat, max_tokens", path: "/v1/chat/completions",
			body: `{"model":"m","messages":[{"role":"user","content":"` + prompt40 + `"}],"max_tokens":7}`,
			want: usageJSON{10, 7, 17}, wantFinish: "length"},
		{name: "chat, max_completion_tokens wins", path: "/v1/chat/completions",
			body: `{"model":"m","messages":[{"role":"user","content":"` + prompt40 + `"}],"max_tokens":7,"max_completion_tokens":3}`,
			want: usageJSON{10, 3, 13}, wantFinish: "length"},
		{name: "completion, prompt header", path: "/v1/completions",
			body: `{"model":"m","prompt":"hi","max_tokens":5}`, header: map[string]string{PromptTokensHeader: "900"},
			want: usageJSON{900, 5, 905}, wantFinish: "length"},
		{name: "no cap: output header", path: "/v1/chat/completions",
			body: `{"model":"m","messages":[{"role":"user","content":"` + prompt40 + `"}]}`, header: map[string]string{OutputTokensHeader: "4"},
			want: usageJSON{10, 4, 14}, wantFinish: "stop"},
		{name: "no cap: default", path: "/v1/completions",
			body: `{"model":"m","prompt":"` + prompt40 + `"}`,
			want: usageJSON{10, 6, 16}, wantFinish: "stop"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, fc := startFake(t, Config{DefaultMaxTokens: 6})
			t.Run("whole", func(t *testing.T) {
				rec := exchange(t, s, fc, tc.path, tc.body, tc.header)
				if rec.Code != 200 {
					t.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
				var c chunkJSON
				if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil {
					t.Fatal(err)
				}
				if c.Usage == nil || *c.Usage != tc.want {
					t.Errorf("usage %+v, want %+v", c.Usage, tc.want)
				}
				if len(c.Choices) != 1 || c.Choices[0].FinishReason == nil || *c.Choices[0].FinishReason != tc.wantFinish {
					t.Fatalf("choices %s, want one finishing %q", rec.Body, tc.wantFinish)
				}
				text := ""
				if ch := c.Choices[0]; ch.Message != nil {
					text = ch.Message.Content
				} else if ch.Text != nil {
					text = *ch.Text
				}
				if got := strings.Count(text, "sim"); got != tc.want.Completion {
					t.Errorf("answer %q has %d tokens, want %d", text, got, tc.want.Completion)
				}
			})
			for _, include := range []bool{true, false} {
				name := "stream without usage"
				body := strings.Replace(tc.body, `{"model":"m"`, `{"model":"m","stream":true`, 1)
				if include {
					name = "stream with usage"
					body = strings.Replace(body, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
				}
				t.Run(name, func(t *testing.T) {
					rec := exchange(t, s, fc, tc.path, body, tc.header)
					if ct := rec.Header().Get("Content-Type"); ct != "text/event-stream" {
						t.Fatalf("Content-Type %q, body %s", ct, rec.Body)
					}
					st := readStream(t, rec.Body)
					if !st.done || st.tokens != tc.want.Completion || st.finish != tc.wantFinish {
						t.Errorf("stream: %d token chunks, finish %q, [DONE] %v; want %d, %q, true", st.tokens, st.finish, st.done, tc.want.Completion, tc.wantFinish)
					}
					switch {
					case include && (st.usage == nil || *st.usage != tc.want || st.usageNulls != st.tokens):
						t.Errorf("usage %+v after %d chunks with usage null of %d; want %+v after all", st.usage, st.usageNulls, st.tokens, tc.want)
					case !include && (st.usage != nil || st.usageNulls != 0):
						t.Errorf("usage %+v, %d null usages, without include_usage; want none", st.usage, st.usageNulls)
					}
				})
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	s, fc := startFake(t, Config{MaxNumSeqs: 1, MaxWaiting: 1, MaxModelLen: 1000, DefaultMaxTokens: 10})
	tests := []struct {
		name, body string
		header     map[string]string
		want       string
	}{
		{"malformed", `{"model":`, nil, "unexpected end"},
		{"too long", `{"prompt":"x","max_tokens":1000}`, nil, "maximum context length is 1000"},
		{"bad header", `{"prompt":"x"}`, map[string]string{PromptTokensHeader: "-3"}, PromptTokensHeader},
		{"n", `{"prompt":"x","n":2}`, nil, "n > 1"},
	}
	for _, tc := range tests {
		rec := exchange(t, s, fc, "/v1/completions", tc.body, tc.header)
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s: %d %s, want 400 saying %q", tc.name, rec.Code, rec.Body, tc.want)
		}
	}
	// One running, one waiting: the third finds the queue full.
	running := start(s, "/v1/completions", `{"prompt":"x","max_tokens":100}`, nil)
	runUntil(t, s, fc, "one running", func() bool { return s.Stats().Running == 1 })
	waiting := start(s, "/v1/completions", `{"prompt":"x","max_tokens":1}`, nil)
	testutil.Eventually(t, "one waiting", func() bool { return s.Stats().Waiting == 1 })
	rec := exchange(t, s, fc, "/v1/completions", `{"prompt":"x"}`, nil)
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "queue is full") {
		t.Errorf("third request: %d %s, want 503 queue full", rec.Code, rec.Body)
	}
	runUntil(t, s, fc, "both answered", func() bool { return running.finished() && waiting.finished() })
	running.wait(t)
	waiting.wait(t)
}

func TestDisconnectFreesTheSlot(t *testing.T) {
	s, fc := startFake(t, Config{MaxNumSeqs: 1})
	long := start(s, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hello"}],"max_tokens":5000,"stream":true}`, nil)
	runUntil(t, s, fc, "the long request streams", func() bool { return s.Stats().GenerationTokens >= 3 })
	next := start(s, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hello"}],"max_tokens":2}`, nil)
	testutil.Eventually(t, "the next request waits", func() bool { return s.Stats().Waiting == 1 })

	long.cancel()
	long.wait(t)
	st := s.Stats()
	if st.Aborted != 1 || st.Running != 0 || st.KVBlocksUsed != 0 {
		t.Fatalf("after the client left: %+v; want it aborted, its slot and KV free", st)
	}
	rec := func() *httptest.ResponseRecorder {
		runUntil(t, s, fc, "the next request's answer", next.finished)
		return next.wait(t)
	}()
	if rec.Code != 200 {
		t.Errorf("next request: %d %s", rec.Code, rec.Body)
	}
}

func TestMetricsReflectState(t *testing.T) {
	s, fc := startFake(t, Config{MaxNumSeqs: 1, KVCacheTokens: 16_000, MaxModelLen: 4000})
	var calls []*call
	for range 3 {
		calls = append(calls, start(s, "/v1/completions", `{"prompt":"x","max_tokens":4}`, map[string]string{PromptTokensHeader: "1590"}))
	}
	runUntil(t, s, fc, "one running, two waiting", func() bool { st := s.Stats(); return st.Running == 1 && st.Waiting == 2 })
	m := scrape(t, s)
	for name, want := range map[string]float64{
		MetricRunning: 1, MetricWaiting: 2,
		MetricKVCacheUsage: 0.1, MetricGPUCacheUsage: 0.1, // 100 blocks (1590-1595 tokens) of 1000
	} {
		if got := value(t, m, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	runUntil(t, s, fc, "all answered", func() bool { return calls[0].finished() && calls[1].finished() && calls[2].finished() })
	for _, c := range calls {
		c.wait(t)
	}
	m = scrape(t, s)
	for name, want := range map[string]float64{
		MetricRunning: 0, MetricWaiting: 0, MetricKVCacheUsage: 0,
		MetricPromptTokens: 3 * 1590, MetricGenerationTokens: 12,
	} {
		if got := value(t, m, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if h := m[MetricTTFT].GetMetric()[0].GetHistogram(); h.GetSampleCount() != 3 || h.GetSampleSum() <= 0 {
		t.Errorf("TTFT histogram: %d samples summing to %v, want 3 above 0", h.GetSampleCount(), h.GetSampleSum())
	}
	for _, mm := range m[MetricRequestSuccess].GetMetric() {
		if lbl := mm.GetLabel(); len(lbl) > 0 && lbl[len(lbl)-1].GetValue() == "length" && mm.GetCounter().GetValue() != 3 {
			t.Errorf("success{finished_reason=length} = %v, want 3", mm.GetCounter().GetValue())
		}
	}
}

func scrape(t *testing.T, s *Server) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	m, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return m
}

func value(t *testing.T, m map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	f, ok := m[name]
	if !ok || len(f.GetMetric()) != 1 {
		t.Fatalf("/metrics has no single %s", name)
	}
	mm := f.GetMetric()[0]
	if l := mm.GetLabel(); len(l) != 1 || l[0].GetName() != "model_name" || l[0].GetValue() != DefaultModelName {
		t.Errorf("%s labels %v, want model_name=%q", name, l, DefaultModelName)
	}
	if g := mm.GetGauge(); g != nil {
		return g.GetValue()
	}
	return mm.GetCounter().GetValue()
}

func TestCloseEndsRequests(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	s, err := New(fc, Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := start(s, "/v1/completions", `{"prompt":"x","max_tokens":10}`, nil)
	testutil.Eventually(t, "the request is queued or running", func() bool { st := s.Stats(); return st.Running+st.Waiting == 1 })
	s.Close()
	if rec := c.wait(t); rec.Code != 503 {
		t.Errorf("a request in progress at Close: %d, want 503", rec.Code)
	}
	s.Close() // twice is fine
}

// TestRealHTTPStream runs the simulator on the real clock behind a real HTTP
// server and reads a stream the way an OpenAI client does.
func TestRealHTTPStream(t *testing.T) {
	s, err := New(clock.RealClock{}, Config{StepBase: time.Millisecond, StepPerSeq: time.Microsecond,
		StepPerPrefillToken: time.Microsecond, StepPerContextToken: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hs := httptest.NewServer(s)
	defer hs.Close()

	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := `{"model":"llama","stream":true,"stream_options":{"include_usage":true},"max_tokens":20,` +
				`"messages":[{"role":"user","content":"` + strings.Repeat("word ", 20*(i+1)) + `"}]}`
			resp, err := http.Post(hs.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			defer func() { _ = resp.Body.Close() }()
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Errorf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
				return
			}
			st := readStream(t, resp.Body)
			want := usageJSON{25 * (i + 1), 20, 25*(i+1) + 20}
			if !st.done || st.tokens != 20 || st.usage == nil || *st.usage != want || st.finish != "length" {
				t.Errorf("stream %d: %d chunks, usage %+v, finish %q, done %v; want 20, %+v, length, true", i, st.tokens, st.usage, st.finish, st.done, want)
			}
			if st.text != strings.TrimPrefix(strings.Repeat(" sim", 20), " ") {
				t.Errorf("stream text %q", st.text)
			}
		}()
	}
	testutil.WaitGroupWithin(t, 30*time.Second, "four streams", &wg)

	resp, err := http.Get(hs.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var models struct {
		Data []struct{ ID string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&models); err != nil || len(models.Data) != 1 || models.Data[0].ID != DefaultModelName {
		t.Errorf("/v1/models: %+v (%v)", models, err)
	}
	if st := s.Stats(); st.Finished != 4 || st.Running != 0 || st.KVBlocksUsed != 0 {
		t.Errorf("after four answers: %+v", st)
	}
}
