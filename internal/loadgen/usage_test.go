package loadgen

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/internal/fakeupstream"
)

func TestRequestBody(t *testing.T) {
	type body struct {
		Model    string `json:"model"`
		Messages []struct {
			Role, Content string
		} `json:"messages"`
		MaxTokens     int  `json:"max_tokens"`
		Stream        bool `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	tests := []struct {
		name          string
		tenant        Tenant
		wantContent   int // bytes; 0 means "fqload"
		wantMaxTokens int
		wantStream    bool
	}{
		{name: "default is the smallest request", tenant: Tenant{}, wantMaxTokens: 1},
		{name: "prompt shorter than the text", tenant: Tenant{PromptBytes: 10, MaxTokens: 50}, wantContent: 10, wantMaxTokens: 50},
		{name: "prompt repeating the text", tenant: Tenant{PromptBytes: 4000, MaxTokens: 100}, wantContent: 4000, wantMaxTokens: 100},
		{name: "stream asks for the usage chunk", tenant: Tenant{PromptBytes: 400, Stream: true}, wantContent: 400, wantMaxTokens: 1, wantStream: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := RequestBody("m", tc.tenant)
			var b body
			if err := json.Unmarshal(raw, &b); err != nil {
				t.Fatalf("body %s: %v", raw, err)
			}
			if b.Model != "m" || len(b.Messages) != 1 || b.Messages[0].Role != "user" || b.MaxTokens != tc.wantMaxTokens {
				t.Errorf("body %s, want model m, one user message, max_tokens %d", raw, tc.wantMaxTokens)
			}
			content := b.Messages[0].Content
			if tc.wantContent == 0 && content != "fqload" {
				t.Errorf("content %q, want fqload", content)
			}
			if tc.wantContent > 0 && (len(content) != tc.wantContent || !strings.HasPrefix(strings.Repeat(promptText, 50), content)) {
				t.Errorf("content of %d bytes starting %.20q, want %d bytes of English text", len(content), content, tc.wantContent)
			}
			if b.Stream != tc.wantStream || (b.StreamOptions != nil) != tc.wantStream || (tc.wantStream && !b.StreamOptions.IncludeUsage) {
				t.Errorf("body %s: stream %v with include_usage, want %v", raw, b.Stream, tc.wantStream)
			}
		})
	}
}

func TestUsageTap(t *testing.T) {
	usageChunk := `data: {"id":"x","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":50,"total_tokens":150}}`
	tests := []struct {
		name        string
		contentType string
		body        string
		oneByOne    bool // written a byte at a time
		want        Usage
		wantFound   bool
	}{
		{name: "JSON answer", contentType: "application/json; charset=utf-8",
			body: `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`,
			want: Usage{7, 3, 10}, wantFound: true},
		{name: "JSON answer without total_tokens", contentType: "application/json",
			body: `{"usage":{"prompt_tokens":7,"completion_tokens":3}}`, want: Usage{7, 3, 10}, wantFound: true},
		{name: "JSON answer without usage", contentType: "application/json", body: `{"choices":[]}`},
		{name: "JSON answer with usage null", contentType: "application/json", body: `{"usage":null}`},
		{name: "not JSON", contentType: "text/plain", body: `usage`},
		{name: "stream with the usage chunk", contentType: "text/event-stream",
			body:     "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n" + usageChunk + "\n\ndata: [DONE]\n\n",
			oneByOne: true, want: Usage{100, 50, 150}, wantFound: true},
		{name: "stream with CRLF lines", contentType: "text/event-stream",
			body: "data: {\"usage\":null}\r\n\r\n" + usageChunk + "\r\n\r\ndata: [DONE]\r\n\r\n", want: Usage{100, 50, 150}, wantFound: true},
		{name: "stream without a usage chunk", contentType: "text/event-stream",
			body: "data: {\"choices\":[{\"delta\":{\"content\":\"usage\"}}]}\n\ndata: [DONE]\n\n"},
		{name: "stream with usage null only", contentType: "text/event-stream",
			body: "data: {\"choices\":[],\"usage\":null}\n\ndata: [DONE]\n\n"},
		{name: "an overlong line is skipped, later usage still read", contentType: "text/event-stream",
			body: "data: {\"usage\":{\"prompt_tokens\":1},\"pad\":\"" + strings.Repeat("x", maxUsageLine) + "\"}\n\n" + usageChunk + "\n\n",
			want: Usage{100, 50, 150}, wantFound: true},
		{name: "a stream cut before the usage line ends", contentType: "text/event-stream", body: usageChunk},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tap := NewUsageTap(tc.contentType)
			if tc.oneByOne {
				for i := range len(tc.body) {
					_, _ = tap.Write([]byte{tc.body[i]}) // never fails
				}
			} else {
				_, _ = tap.Write([]byte(tc.body)) // never fails
			}
			got, found := tap.Usage()
			if got != tc.want || found != tc.wantFound {
				t.Errorf("Usage() = %+v, %v; want %+v, %v", got, found, tc.want, tc.wantFound)
			}
		})
	}
}

// TestCountsSettledTokens runs tenants of different sizes against the fake
// upstream and checks the tokens counted against the fake's own rule.
func TestCountsSettledTokens(t *testing.T) {
	srv := httptest.NewServer(fakeupstream.New(fakeupstream.Options{CompletionFraction: 0.5}))
	defer srv.Close()
	tenants := []Tenant{
		{Name: "small", Rate: 1000, PromptBytes: 400, MaxTokens: 100},
		{Name: "large", Rate: 1000, PromptBytes: 4000, MaxTokens: 100},
		{Name: "stream", Rate: 1000, PromptBytes: 400, MaxTokens: 20, Stream: true},
		{Name: "default", Rate: 1000},
	}
	// A 3ms window at 1000 req/s holds three arrivals per tenant.
	s, err := Run(context.Background(), Config{Targets: []string{srv.URL}, Tenants: tenants, Duration: 3 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i, ts := range s.Tenants {
		prompt, err := fakeupstream.PromptTokens(RequestBody(DefaultModel, tenants[i]))
		if err != nil {
			t.Fatal(err)
		}
		completion := (int64(max(tenants[i].MaxTokens, 1)) + 1) / 2 // half the cap, rounded up
		want := uint64(3 * (prompt + completion))
		if ts.Admitted != 3 || ts.TokensSettled != want || ts.PromptTokens != uint64(3*prompt) || ts.CompletionTokens != uint64(3*completion) || ts.AdmittedWithoutUsage != 0 {
			t.Errorf("%s: admitted %d, tokens %d (prompt %d, completion %d, %d without usage); want 3 admitted, %d tokens (prompt %d, completion %d)",
				ts.Name, ts.Admitted, ts.TokensSettled, ts.PromptTokens, ts.CompletionTokens, ts.AdmittedWithoutUsage, want, 3*prompt, 3*completion)
		}
		if got := sum(ts.TokensPerSecond); got != ts.TokensSettled {
			t.Errorf("%s: tokens_per_second sums to %d, want %d", ts.Name, got, ts.TokensSettled)
		}
		if wantRate := float64(want) / 0.003; !within(ts.MeanTokensPerSecond, wantRate, 1e-9) {
			t.Errorf("%s: mean tokens/s %v, want %v", ts.Name, ts.MeanTokensPerSecond, wantRate)
		}
	}
	if large, small := s.Tenants[1].PromptTokens, s.Tenants[0].PromptTokens; large != 10*small {
		t.Errorf("large prompts counted %d tokens, want 10x the small ones' %d", large, small)
	}
}

// TestUsageOfRefusalsAndStreamsWithoutUsage checks what is not settled: a
// refusal's body, and an admitted stream that sent no usage chunk.
func TestUsageOfRefusalsAndStreamsWithoutUsage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer refused" {
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":{},"usage":{"prompt_tokens":5,"completion_tokens":5,"total_tokens":10}}`))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n"))
	}))
	defer srv.Close()
	s, err := Run(context.Background(), Config{Targets: []string{srv.URL}, Duration: time.Millisecond,
		Tenants: []Tenant{{Name: "refused", Rate: 1000, APIKey: "refused"}, {Name: "stream", Rate: 1000, Stream: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Tenants[0]; r.Refused != 1 || r.TokensSettled != 0 || r.AdmittedWithoutUsage != 0 {
		t.Errorf("refused tenant: refused %d, tokens %d, %d admitted without usage; want 1, 0, 0", r.Refused, r.TokensSettled, r.AdmittedWithoutUsage)
	}
	if st := s.Tenants[1]; st.Admitted != 1 || st.TokensSettled != 0 || st.AdmittedWithoutUsage != 1 {
		t.Errorf("stream tenant: admitted %d, tokens %d, %d without usage; want 1, 0, 1", st.Admitted, st.TokensSettled, st.AdmittedWithoutUsage)
	}
}
