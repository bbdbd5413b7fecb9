package usage

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tiktoken-go/tokenizer/codec"
)

// tiktoken counts s with the library directly, independently of countText.
func tiktoken(t testing.TB, enc encoding, s string) int64 {
	t.Helper()
	c := codec.NewCl100kBase()
	if enc == o200k {
		c = codec.NewO200kBase()
	}
	n, err := c.Count(s)
	if err != nil {
		t.Fatalf("tiktoken %s: %v", enc, err)
	}
	return int64(n)
}

type msg struct {
	Role    string `json:"role"`
	Name    string `json:"name,omitempty"`
	Content string `json:"content"`
}

// cookbookMessages is the example of OpenAI's cookbook "How to count tokens
// with tiktoken", for which the API reported 129 prompt tokens for gpt-4 and
// gpt-3.5-turbo and 124 for gpt-4o and gpt-4o-mini.
var cookbookMessages = []msg{
	{Role: "system", Content: "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
	{Role: "system", Name: "example_user", Content: "New synergies will help drive top-line growth."},
	{Role: "system", Name: "example_assistant", Content: "Things working well together will increase revenue."},
	{Role: "system", Name: "example_user", Content: "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
	{Role: "system", Name: "example_assistant", Content: "Let's talk later when we're less busy about how to do better."},
	{Role: "user", Content: "This late pivot means we don't have time to boil the ocean for the client deliverable."},
}

func chatBody(t testing.TB, model string, msgs []msg) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"model": model, "messages": msgs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEstimateMatchesOpenAIAccounting checks the prompt count against what
// the OpenAI API reports for the cookbook example, and for a corpus against
// OpenAI's rule: 3 tokens per message, its role, content and name tokens, 1
// more per name, and 3 priming the reply.
func TestEstimateMatchesOpenAIAccounting(t *testing.T) {
	e := NewEstimator(1024)
	for model, want := range map[string]int64{"gpt-4": 129, "gpt-3.5-turbo": 129, "gpt-4o": 124, "gpt-4o-mini": 124} {
		if got := e.Estimate(model, chatBody(t, model, cookbookMessages)).Prompt; got != want {
			t.Errorf("cookbook example for %s: Prompt = %d, the API reports %d", model, got, want)
		}
	}

	corpus := [][]msg{
		{{Role: "user", Content: "Hello!"}},
		{{Role: "system", Content: "You are terse."}, {Role: "user", Content: "Summarise the plot of Hamlet in one sentence."}},
		{{Role: "user", Name: "alice", Content: "Wie spät ist es in Tokyo? 東京の時間を教えてください。"}, {Role: "assistant", Content: "It is 9:41 in Tokyo."}},
		{{Role: "user", Content: "```go\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n```\nWhat does this print?"}},
		{{Role: "developer", Content: strings.Repeat("The quick brown fox jumps over the lazy dog. ", 200)}},
		{{Role: "user", Content: ""}},
		{{Role: "user", Content: "emoji 🙂🚀 and <|endoftext|> as plain text"}},
	}
	for _, model := range []string{"gpt-4", "gpt-4o", "gpt-4.1-mini", "gpt-5", "o3-mini", "gpt-3.5-turbo", "meta-llama/Llama-3.1-8B-Instruct"} {
		enc := encodingFor(model)
		for i, msgs := range corpus {
			want := int64(replyPrimer)
			for _, m := range msgs {
				want += 3 + tiktoken(t, enc, m.Role) + tiktoken(t, enc, m.Content)
				if m.Name != "" {
					want += 1 + tiktoken(t, enc, m.Name)
				}
			}
			if got := e.Estimate(model, chatBody(t, model, msgs)).Prompt; got != want {
				t.Errorf("%s corpus[%d]: Prompt = %d, OpenAI's rule with %s gives %d", model, i, got, enc, want)
			}
		}
	}
}

func TestEncodingFor(t *testing.T) {
	for model, want := range map[string]encoding{
		"gpt-4o":                         o200k,
		"gpt-4o-mini-2024-07-18":         o200k,
		"chatgpt-4o-latest":              o200k,
		"gpt-4.1":                        o200k,
		"GPT-5-nano":                     o200k,
		"o1-preview":                     o200k,
		"o3":                             o200k,
		"o4-mini":                        o200k,
		"ft:gpt-4o-mini:acme::abc123":    o200k,
		"openai/gpt-4o":                  o200k,
		"gpt-4":                          cl100k,
		"gpt-4-turbo":                    cl100k,
		"gpt-3.5-turbo-0125":             cl100k,
		"text-embedding-3-small":         cl100k,
		"text-embedding-ada-002":         cl100k,
		"meta-llama/Llama-3.1-8B":        cl100k,
		"mistral-large":                  cl100k,
		"Qwen/Qwen2.5-7B-Instruct":       cl100k,
		"":                               cl100k,
		"ollama/llama3:8b-instruct-q4_0": cl100k,
	} {
		if got := encodingFor(model); got != want {
			t.Errorf("encodingFor(%q) = %s, want %s", model, got, want)
		}
	}
}

func TestWarm(t *testing.T) {
	Warm("gpt-4o")
	if codecs[o200k].codec == nil {
		t.Error("Warm(gpt-4o) did not build o200k_base")
	}
}

// TestEstimateCache checks that a resent history counts the same from the
// cache, that the cache stays bounded, and that a zero Estimator works.
func TestEstimateCache(t *testing.T) {
	long := strings.Repeat("A long message that the client resends with every turn; 東京の天気. ", 10)
	history := []msg{{Role: "user", Content: long}, {Role: "assistant", Content: long + "!"}}
	e := NewEstimator(0)
	first := e.Estimate("gpt-4o", chatBody(t, "gpt-4o", history))
	if got := len(e.cache.cur); got != 2 {
		t.Fatalf("%d counts cached after one estimate, want the 2 long messages", got)
	}
	again := e.Estimate("gpt-4o", chatBody(t, "gpt-4o", history))
	uncached := (&Estimator{}).Estimate("gpt-4o", chatBody(t, "gpt-4o", history))
	if first != again || first != uncached {
		t.Errorf("estimates differ: first %+v, cached %+v, uncached %+v", first, again, uncached)
	}
	cl, want := e.Estimate("gpt-4", chatBody(t, "gpt-4", history)), (&Estimator{}).Estimate("gpt-4", chatBody(t, "gpt-4", history))
	if cl != want || cl.Prompt == first.Prompt {
		t.Errorf("gpt-4 (cl100k_base) after gpt-4o: %+v, uncached %+v, gpt-4o %+v; the cache must keep encodings apart", cl, want, first)
	}

	c := newCountCache()
	for i := range uint64(5 * cacheGeneration) {
		c.put(i, 1)
	}
	if n := len(c.cur) + len(c.prev); n > 2*cacheGeneration {
		t.Errorf("cache holds %d counts, want at most %d", n, 2*cacheGeneration)
	}
	if _, ok := c.get(5*cacheGeneration - 1); !ok {
		t.Error("the most recent count was evicted")
	}
}

func TestEstimateShapes(t *testing.T) {
	count := func(s string) int64 { return tiktoken(t, cl100k, s) }
	tools := `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	tests := []struct {
		name string
		body string
		want int64
	}{{
		name: "content parts: text counted, image fixed",
		body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"What is in this image?"},{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}`,
		want: 3 + 3 + count("user") + count("What is in this image?") + nonTextPartTokens,
	}, {
		name: "assistant tool call and tool result",
		body: `{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},{"role":"tool","tool_call_id":"call_1","content":"18C"}]}`,
		want: 3 + 3 + count("assistant") + count("call_1") + count("function") + count("get_weather") + count(`{"city":"Paris"}`) +
			3 + count("tool") + count("call_1") + count("18C"),
	}, {
		name: "tools counted as their JSON text",
		body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":` + tools + `}`,
		want: 3 + 3 + count("user") + count("hi") + count(tools),
	}, {
		name: "completions prompt string",
		body: `{"model":"m","prompt":"Once upon a time"}`,
		want: count("Once upon a time"),
	}, {
		name: "completions prompt array of strings",
		body: `{"model":"m","prompt":["Once upon a time","In a galaxy"]}`,
		want: count("Once upon a time") + count("In a galaxy"),
	}, {
		name: "prompt token ids, flat and nested",
		body: `{"model":"m","prompt":[[1,2,3],[4,5]],"input":[7,8]}`,
		want: 7,
	}, {
		name: "Responses API input string and instructions",
		body: `{"model":"m","instructions":"Be brief.","input":"Tell me a joke"}`,
		want: count("Be brief.") + count("Tell me a joke"),
	}, {
		name: "Responses API input items",
		body: `{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"Describe"},{"type":"input_image","image_url":"data:..."}]},{"type":"function_call_output","call_id":"c1","output":"42"}]}`,
		want: 3 + count("user") + count("Describe") + nonTextPartTokens + count("c1") + count("42"),
	}, {
		name: "unknown shape counts every string value",
		body: `{"model":"m","query":{"text":"hello world","tags":["a b"]},"k":3}`,
		want: count("m") + count("hello world") + count("a b"),
	}, {
		name: "messages of the wrong type count their strings",
		body: `{"model":"m","messages":{"role":"user","content":"hi there"}}`,
		want: count("user") + count("hi there"),
	}, {
		name: "JSON that is not an object",
		body: `["alpha","beta gamma"]`,
		want: count("alpha") + count("beta gamma"),
	}, {
		name: "not JSON: the whole body as text",
		body: `{"messages":[{"role":"user","content":"cut`,
		want: count(`{"messages":[{"role":"user","content":"cut`),
	}, {
		name: "member names match exactly, as the model scanner reads them",
		body: `{"model":"m","Messages":[{"role":"user","content":"x"}],"prompt":"only this"}`,
		want: count("only this"),
	}, {
		name: "empty object",
		body: `{}`,
		want: 0,
	}}
	e := NewEstimator(100)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := e.Estimate("mistral-7b", []byte(tt.body)).Prompt; got != tt.want {
				t.Errorf("Prompt = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestEstimateOutputCapAndFlags(t *testing.T) {
	tests := []struct {
		name  string
		model string
		body  string
		want  Estimate // Prompt not compared
	}{
		{"default", "gpt-4o", `{"messages":[]}`, Estimate{MaxOutput: 500}},
		{"max_tokens", "gpt-4o", `{"max_tokens":64}`, Estimate{MaxOutput: 64}},
		{"max_completion_tokens wins", "gpt-4o", `{"max_tokens":64,"max_completion_tokens":32}`, Estimate{MaxOutput: 32}},
		{"max_output_tokens (Responses API)", "gpt-4o", `{"max_output_tokens":77}`, Estimate{MaxOutput: 77}},
		{"max_tokens before max_output_tokens", "gpt-4o", `{"max_output_tokens":77,"max_tokens":5}`, Estimate{MaxOutput: 5}},
		{"n multiplies", "gpt-4o", `{"max_tokens":10,"n":3}`, Estimate{MaxOutput: 30}},
		{"n multiplies the default", "gpt-4o", `{"n":2}`, Estimate{MaxOutput: 1000}},
		{"n above 128 is 128", "gpt-4o", `{"max_tokens":10,"n":100000}`, Estimate{MaxOutput: 1280}},
		{"n 0 and 1 are one choice", "gpt-4o", `{"max_tokens":10,"n":0}`, Estimate{MaxOutput: 10}},
		{"zero cap falls through", "gpt-4o", `{"max_completion_tokens":0,"max_tokens":9}`, Estimate{MaxOutput: 9}},
		{"negative cap is the default", "gpt-4o", `{"max_tokens":-5}`, Estimate{MaxOutput: 500}},
		{"string cap is the default", "gpt-4o", `{"max_tokens":"64"}`, Estimate{MaxOutput: 500}},
		{"fraction rounds up", "gpt-4o", `{"max_tokens":10.5}`, Estimate{MaxOutput: 11}},
		{"huge cap saturates", "gpt-4o", `{"max_tokens":1e300,"n":128}`, Estimate{MaxOutput: maxReservable * 128}},
		{"embedding model reserves no output", "text-embedding-3-small", `{"input":"hi","max_tokens":9}`, Estimate{}},
		{"self-hosted embedding model", "BAAI/bge-m3", `{"input":"hi"}`, Estimate{}},
		{"stream", "gpt-4o", `{"stream":true}`, Estimate{MaxOutput: 500, Stream: true}},
		{"stream false", "gpt-4o", `{"stream":false,"stream_options":{"include_usage":true}}`, Estimate{MaxOutput: 500, ClientAskedUsage: true}},
		{"client asked usage", "gpt-4o", `{"stream":true,"stream_options":{"include_usage":true}}`, Estimate{MaxOutput: 500, Stream: true, ClientAskedUsage: true}},
		{"include_usage false", "gpt-4o", `{"stream":true,"stream_options":{"include_usage":false}}`, Estimate{MaxOutput: 500, Stream: true}},
		{"last duplicate wins", "gpt-4o", `{"stream":true,"stream":false}`, Estimate{MaxOutput: 500}},
		{"stream as a string is not streaming", "gpt-4o", `{"stream":"true"}`, Estimate{MaxOutput: 500}},
		{"not JSON: default cap", "gpt-4o", `nope`, Estimate{MaxOutput: 500}},
	}
	e := NewEstimator(500)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := e.Estimate(tt.model, []byte(tt.body))
			got.Prompt = 0
			if got != tt.want {
				t.Errorf("Estimate = %+v, want %+v", got, tt.want)
			}
		})
	}
	if got := NewEstimator(-3).Estimate("gpt-4o", []byte(`{}`)).MaxOutput; got != 0 {
		t.Errorf("negative default: MaxOutput = %d, want 0", got)
	}
	if got := (Estimate{Prompt: 7, MaxOutput: 5}).Total(); got != 12 {
		t.Errorf("Total = %d, want 12", got)
	}
}

// TestEstimateLargeBodyBudget checks that a body with more text than is
// tokenised exactly is still estimated within 2% of the exact count.
func TestEstimateLargeBodyBudget(t *testing.T) {
	sentences := []string{
		"The gateway reserves tokens before forwarding, then settles them from the usage the upstream reports.",
		"Rate limits are enforced per API key, user, team and model; each has its own bucket.",
		"func refill(now time.Time) { b.tokens = min(b.burst, b.tokens+rate*now.Sub(b.last).Seconds()) }",
		"Les jetons non utilisés sont rendus au locataire lorsque la réponse se termine.",
		"东京的天气今天很好，适合散步。",
	}
	var sb strings.Builder
	for i := 0; sb.Len() < 4*exactTextBytes; i++ {
		sb.WriteString(sentences[i*7%len(sentences)])
		sb.WriteString("\n")
	}
	text := sb.String()
	body := chatBody(t, "gpt-4o", []msg{{Role: "user", Content: text}})
	want := replyPrimer + 3 + tiktoken(t, o200k, "user") + tiktoken(t, o200k, text)
	got := NewEstimator(0).Estimate("gpt-4o", body).Prompt
	if diff := float64(got-want) / float64(want); diff > 0.02 || diff < -0.02 {
		t.Errorf("Prompt = %d, exact %d: off by %.1f%%, want within 2%%", got, want, 100*diff)
	}
	t.Logf("%d bytes of text: estimated %d, exact %d", len(text), got, want)
}

// benchBody returns a chat body of about size bytes: a system message and
// distinct user/assistant turns of English prose and code.
func benchBody(size int) []byte {
	msgs := []msg{{Role: "system", Content: "You are a helpful assistant that answers concisely."}}
	turns := []string{
		"Can you explain how a token bucket rate limiter refills over time, and why burst matters?",
		"A token bucket holds up to `burst` tokens and refills at `rate` per second; each request takes one.\n```go\nfunc (b *Bucket) Take(now time.Time) bool {\n\tb.refill(now)\n\tif b.tokens < 1 {\n\t\treturn false\n\t}\n\tb.tokens--\n\treturn true\n}\n```",
	}
	for i := 0; ; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		// Every turn differs, as in a real conversation (no cache hits
		// within one body).
		msgs = append(msgs, msg{Role: role, Content: fmt.Sprintf("(turn %d) %s", i, turns[i%2])})
		b, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": msgs, "max_tokens": 256})
		if len(b) >= size {
			return b
		}
	}
}

// BenchmarkEstimate measures Estimate on chat bodies: cold (a new
// Estimator, nothing cached), and warm (the conversation's messages counted
// before, as when a client resends its history with every turn), against
// decoding the same body into a map (the least any JSON reading costs) in
// the same run.
func BenchmarkEstimate(b *testing.B) {
	Warm("gpt-4o") // build the codec outside the timing
	for _, size := range []int{1 << 10, 32 << 10, 1 << 20} {
		body := benchBody(size)
		b.Run(fmt.Sprintf("%dKiB/cold", size>>10), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				NewEstimator(1024).Estimate("gpt-4o", body)
			}
		})
		b.Run(fmt.Sprintf("%dKiB/warm", size>>10), func(b *testing.B) {
			e := NewEstimator(1024)
			e.Estimate("gpt-4o", body)
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				e.Estimate("gpt-4o", body)
			}
		})
		b.Run(fmt.Sprintf("%dKiB/baseline-json-decode", size>>10), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var v map[string]any
				_ = json.Unmarshal(body, &v)
			}
		})
	}
}
