package fakeupstream

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestChat(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		header     map[string]string
		wantStatus int
		wantCT     string
		wantLines  []string // for streams: the data lines in order
		wantModel  string   // for whole answers
	}{
		{name: "whole answer", body: `{"model":"m1"}`, wantStatus: 200, wantCT: "application/json", wantModel: "m1"},
		{name: "stream", body: `{"model":"m1","stream":true}`, wantStatus: 200, wantCT: "text/event-stream",
			wantLines: []string{`"content":"fair"`, `"content":" queue"`, "[DONE]"}},
		{name: "malformed", body: `{"model":`, wantStatus: 400, wantCT: "application/json"},
		{name: "forced status", body: `{}`, header: map[string]string{"X-Fake-Status": "503"}, wantStatus: 503},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := New(Options{Chunks: 2, Record: 1})
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(tc.body))
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			up.ServeHTTP(rec, req)
			if rec.Code != tc.wantStatus {
				t.Fatalf("status = %d, want %d (body %q)", rec.Code, tc.wantStatus, rec.Body)
			}
			if tc.wantCT != "" && !strings.HasPrefix(rec.Header().Get("Content-Type"), tc.wantCT) {
				t.Errorf("Content-Type = %q, want %q", rec.Header().Get("Content-Type"), tc.wantCT)
			}
			if tc.wantModel != "" {
				var got struct{ Model string }
				if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.Model != tc.wantModel {
					t.Errorf("model = %q (err %v), want %q", got.Model, err, tc.wantModel)
				}
			}
			if tc.wantLines != nil {
				var data []string
				sc := bufio.NewScanner(rec.Body)
				for sc.Scan() {
					if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
						data = append(data, line)
					}
				}
				if len(data) != len(tc.wantLines) {
					t.Fatalf("got %d data lines %q, want %d", len(data), data, len(tc.wantLines))
				}
				for i, want := range tc.wantLines {
					if !strings.Contains(data[i], want) {
						t.Errorf("data line %d = %q, want it to contain %q", i, data[i], want)
					}
				}
			}
			got := up.Requests()
			if len(got) != 1 || string(got[0].Body) != tc.body || got[0].Path != "/v1/chat/completions" {
				t.Errorf("recorded %+v, want the one request with body %q", got, tc.body)
			}
		})
	}
}

func TestRecordIsBounded(t *testing.T) {
	up := New(Options{Record: 2})
	for _, model := range []string{"a", "b", "c"} {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"`+model+`"}`))
		up.ServeHTTP(httptest.NewRecorder(), req)
	}
	got := up.Requests()
	if len(got) != 2 || string(got[0].Body) != `{"model":"b"}` || string(got[1].Body) != `{"model":"c"}` {
		t.Errorf("recorded %d requests %+v, want the last two (b, c)", len(got), got)
	}
	if up.Count() != 3 {
		t.Errorf("Count() = %d, want 3", up.Count())
	}
}

func TestModels(t *testing.T) {
	up := New(Options{Models: []string{"x", "y"}})
	rec := httptest.NewRecorder()
	up.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/models", nil))
	var got struct {
		Data []struct{ ID string }
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Data) != 2 || got.Data[0].ID != "x" || got.Data[1].ID != "y" {
		t.Errorf("models = %+v, want x, y", got.Data)
	}
}

// answer is what a client reads from a whole answer or a stream.
type answer struct {
	contents []string // per choice: the message content or text, deltas joined
	finish   []string // per choice: the finish_reason
	usage    *usageJSON
	// for streams
	lines        int  // data lines, [DONE] included
	usageNulls   int  // chunks carrying "usage": null
	usageKeyless int  // content chunks without a "usage" key
	usageLast    bool // the usage chunk, with no choices, came right before [DONE]
}

type usageJSON struct {
	Prompt     int64 `json:"prompt_tokens"`
	Completion int64 `json:"completion_tokens"`
	Total      int64 `json:"total_tokens"`
}

type choiceJSON struct {
	Index   int `json:"index"`
	Message struct {
		Content string `json:"content"`
	} `json:"message"`
	Delta struct {
		Content string `json:"content"`
	} `json:"delta"`
	Text         string  `json:"text"`
	FinishReason *string `json:"finish_reason"`
}

func readAnswer(t *testing.T, rec *httptest.ResponseRecorder) answer {
	t.Helper()
	var a answer
	grow := func(i int) {
		for len(a.contents) <= i {
			a.contents, a.finish = append(a.contents, ""), append(a.finish, "")
		}
	}
	if !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
		var whole struct {
			Choices []choiceJSON `json:"choices"`
			Usage   *usageJSON   `json:"usage"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &whole); err != nil {
			t.Fatalf("whole answer %q: %v", rec.Body, err)
		}
		for _, c := range whole.Choices {
			grow(c.Index)
			a.contents[c.Index] = c.Message.Content + c.Text
			if c.FinishReason != nil {
				a.finish[c.Index] = *c.FinishReason
			}
		}
		a.usage = whole.Usage
		return a
	}
	sc := bufio.NewScanner(rec.Body)
	var lastWasUsage bool
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		a.lines++
		if data == "[DONE]" {
			a.usageLast = lastWasUsage
			continue
		}
		var chunk struct {
			Choices []choiceJSON     `json:"choices"`
			Usage   *json.RawMessage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		var raw map[string]json.RawMessage
		_ = json.Unmarshal([]byte(data), &raw) // decoded just above
		u, hasUsage := raw["usage"]
		lastWasUsage = false
		switch {
		case !hasUsage:
			a.usageKeyless++
		case string(u) == "null":
			a.usageNulls++
		default:
			if len(chunk.Choices) != 0 {
				t.Errorf("the usage chunk %q has choices, want none", data)
			}
			a.usage = new(usageJSON)
			if err := json.Unmarshal(u, a.usage); err != nil {
				t.Fatalf("usage %s: %v", u, err)
			}
			lastWasUsage = true
		}
		for _, c := range chunk.Choices {
			grow(c.Index)
			a.contents[c.Index] += c.Delta.Content + c.Text
			if c.FinishReason != nil {
				a.finish[c.Index] = *c.FinishReason
			}
		}
	}
	return a
}

func TestUsage(t *testing.T) {
	// 10 bytes are 3 tokens, 8 bytes 2, 1 byte 1.
	const ten, eight = "0123456789", "abcdefgh"
	tests := []struct {
		name       string
		opts       Options
		path       string
		body       string
		wantUsage  *usageJSON // nil: the answer carries none
		wantText   []string   // per choice
		wantFinish string
		wantLines  int // streams: data lines, [DONE] included
	}{{
		name:      "whole chat answer without a cap has Chunks tokens",
		body:      `{"model":"m","messages":[{"role":"user","content":"` + ten + `"}]}`,
		wantUsage: &usageJSON{3, 3, 6}, wantText: []string{"fair queue share"}, wantFinish: "stop",
	}, {
		name:      "CompletionTokens sets the length without a cap",
		opts:      Options{CompletionTokens: 5},
		body:      `{"messages":[{"role":"system","content":"` + eight + `"},{"role":"user","content":"` + ten + `"}]}`,
		wantUsage: &usageJSON{5, 5, 10}, wantText: []string{"fair queue share token time"}, wantFinish: "stop",
	}, {
		name:      "an answer fills max_tokens by default and stops for length",
		body:      `{"messages":[{"role":"user","content":"x"}],"max_tokens":4}`,
		wantUsage: &usageJSON{1, 4, 5}, wantText: []string{"fair queue share token"}, wantFinish: "length",
	}, {
		name:      "CompletionFraction of max_tokens, rounded up",
		opts:      Options{CompletionFraction: 0.25},
		body:      `{"messages":[{"role":"user","content":"x"}],"max_tokens":10}`,
		wantUsage: &usageJSON{1, 3, 4}, wantText: []string{"fair queue share"}, wantFinish: "stop",
	}, {
		name:      "max_completion_tokens wins over max_tokens",
		opts:      Options{CompletionFraction: 0.5},
		body:      `{"messages":[{"role":"user","content":"x"}],"max_tokens":100,"max_completion_tokens":4}`,
		wantUsage: &usageJSON{1, 2, 3}, wantText: []string{"fair queue"}, wantFinish: "stop",
	}, {
		name:      "n choices each have the length",
		body:      `{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"n":2}`,
		wantUsage: &usageJSON{1, 4, 5}, wantText: []string{"fair queue", "fair queue"}, wantFinish: "length",
	}, {
		name:      "content parts count their text only",
		body:      `{"messages":[{"role":"user","content":[{"type":"text","text":"` + ten + `"},{"type":"image_url","image_url":{"url":"http://x/very-long-url"}},{"type":"text","text":"` + eight + `"}]}],"max_tokens":1}`,
		wantUsage: &usageJSON{5, 1, 6}, wantText: []string{"fair"}, wantFinish: "length",
	}, {
		name: "completions with a prompt string", path: "/v1/completions",
		body:      `{"model":"m","prompt":"` + ten + `","max_tokens":2}`,
		wantUsage: &usageJSON{3, 2, 5}, wantText: []string{"fair queue"}, wantFinish: "length",
	}, {
		name: "completions with prompt strings", path: "/v1/completions",
		body:      `{"model":"m","prompt":["` + ten + `","` + eight + `"],"max_tokens":1}`,
		wantUsage: &usageJSON{5, 1, 6}, wantText: []string{"fair"}, wantFinish: "length",
	}, {
		name:     "stream without stream_options has no usage anywhere",
		body:     `{"messages":[{"role":"user","content":"` + ten + `"}],"stream":true,"max_tokens":3}`,
		wantText: []string{"fair queue share"}, wantFinish: "length", wantLines: 4,
	}, {
		name:     "stream with include_usage false has no usage",
		body:     `{"messages":[{"role":"user","content":"` + ten + `"}],"stream":true,"stream_options":{"include_usage":false},"max_tokens":3}`,
		wantText: []string{"fair queue share"}, wantFinish: "length", wantLines: 4,
	}, {
		name:      "stream with include_usage ends with the usage chunk",
		opts:      Options{CompletionFraction: 0.5},
		body:      `{"messages":[{"role":"user","content":"` + ten + `"}],"stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":8}`,
		wantUsage: &usageJSON{3, 4, 7}, wantText: []string{"fair queue share token"}, wantFinish: "stop", wantLines: 6,
	}, {
		name: "completions stream with include_usage and two choices", path: "/v1/completions",
		body:      `{"prompt":"` + eight + `","stream":true,"stream_options":{"include_usage":true},"max_tokens":2,"n":2}`,
		wantUsage: &usageJSON{2, 4, 6}, wantText: []string{"fair queue", "fair queue"}, wantFinish: "length", wantLines: 6,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "" {
				path = "/v1/chat/completions"
			}
			rec := httptest.NewRecorder()
			New(tc.opts).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(tc.body)))
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			a := readAnswer(t, rec)
			switch {
			case tc.wantUsage == nil && a.usage != nil:
				t.Errorf("usage %+v, want none", *a.usage)
			case tc.wantUsage != nil && (a.usage == nil || *a.usage != *tc.wantUsage):
				t.Errorf("usage %+v, want %+v", a.usage, *tc.wantUsage)
			}
			if len(a.contents) != len(tc.wantText) {
				t.Fatalf("%d choices %q, want %d", len(a.contents), a.contents, len(tc.wantText))
			}
			for i, want := range tc.wantText {
				if a.contents[i] != want || a.finish[i] != tc.wantFinish {
					t.Errorf("choice %d: %q finish %q, want %q finish %q", i, a.contents[i], a.finish[i], want, tc.wantFinish)
				}
				// The usage counts the words the client received.
				if tc.wantUsage != nil && int64(len(strings.Fields(a.contents[i]))*len(tc.wantText)) != tc.wantUsage.Completion {
					t.Errorf("choice %d has %d words, but completion_tokens %d over %d choices", i, len(strings.Fields(a.contents[i])), tc.wantUsage.Completion, len(tc.wantText))
				}
			}
			if tc.wantLines == 0 {
				return
			}
			if a.lines != tc.wantLines {
				t.Errorf("%d data lines, want %d", a.lines, tc.wantLines)
			}
			if tc.wantUsage != nil {
				// OpenAI: every chunk but the last carries "usage": null.
				if !a.usageLast || a.usageNulls != tc.wantLines-2 || a.usageKeyless != 0 {
					t.Errorf("usage chunk last %v, %d chunks with usage null and %d without the key; want it last, %d and 0",
						a.usageLast, a.usageNulls, a.usageKeyless, tc.wantLines-2)
				}
			} else if a.usageNulls != 0 {
				t.Errorf("%d chunks carry usage null without include_usage, want none", a.usageNulls)
			}
		})
	}
}

func TestPromptTokens(t *testing.T) {
	tests := []struct {
		body    string
		want    int64
		wantErr bool
	}{
		{body: `{}`, want: 0},
		{body: `{"messages":[{"role":"user","content":"abcd"}]}`, want: 1},
		{body: `{"messages":[{"role":"user","content":"abcde"}]}`, want: 2},
		{body: `{"messages":[{"role":"user","content":null},{"role":"user","content":"abcdefgh"}]}`, want: 2},
		{body: `{"messages":[{"role":"user","content":["abcd",null,{"type":"text","text":"abcde"}]}]}`, want: 3},
		{body: `{"prompt":"` + strings.Repeat("x", 4000) + `"}`, want: 1000},
		{body: `{"prompt":[[1,2,3]]}`, want: 0},
		{body: `{"model":`, wantErr: true},
	}
	for _, tc := range tests {
		got, err := PromptTokens([]byte(tc.body))
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("PromptTokens(%.60s) = %d, %v; want %d (error %v)", tc.body, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestAnswersAreBounded(t *testing.T) {
	rec := httptest.NewRecorder()
	New(Options{}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions",
		strings.NewReader(`{"messages":[],"max_tokens":1000000000,"n":1000}`)))
	a := readAnswer(t, rec)
	if len(a.contents) != MaxChoices || a.usage == nil || a.usage.Completion != MaxChoices*MaxCompletionTokens {
		t.Errorf("%d choices, usage %+v; want %d choices of %d tokens", len(a.contents), a.usage, MaxChoices, MaxCompletionTokens)
	}
}
