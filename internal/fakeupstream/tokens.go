package fakeupstream

import (
	"encoding/json"
	"fmt"
	"strings"
)

// BytesPerToken is the fake's counting rule: a text of b bytes is
// ceil(b/BytesPerToken) tokens. Real tokenizers average about four bytes per
// token of English, so a data plane estimating with one is close to the fake
// but not exact, and its estimation error can be measured.
const BytesPerToken = 4

// Usage is the token usage the fake reports for one answer.
type Usage struct {
	// Prompt is the prompt tokens counted by PromptTokens.
	Prompt int64
	// Completion is the tokens of every choice of the answer together.
	Completion int64
}

// Total returns Prompt plus Completion.
func (u Usage) Total() int64 { return u.Prompt + u.Completion }

// json renders u as an OpenAI usage object.
func (u Usage) json() string {
	return fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, u.Prompt, u.Completion, u.Total())
}

// CountTokens returns the tokens of text by the fake's rule: ceil(bytes/4).
func CountTokens(text string) int64 {
	return int64((len(text) + BytesPerToken - 1) / BytesPerToken)
}

// PromptTokens returns the prompt tokens the fake reports for a request body:
// the sum of CountTokens over each text the prompt carries, which is each chat
// message's string content or the "text" of each of its content parts, and a
// completion request's "prompt" string or strings. Roles, names, images and
// tools count nothing. It fails when body is not a JSON object.
func PromptTokens(body []byte) (int64, error) {
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		return 0, fmt.Errorf("counting prompt tokens: the body is not a chat completion or completion request: %w", err)
	}
	return promptTokens(req), nil
}

func promptTokens(req request) int64 {
	var n int64
	for _, m := range req.Messages {
		n += rawTextTokens(m.Content)
	}
	return n + rawTextTokens(req.Prompt)
}

// rawTextTokens counts a JSON string, an array of strings, or an array of
// content parts with a "text"; anything else counts nothing.
func rawTextTokens(raw json.RawMessage) int64 {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return CountTokens(s)
	}
	var parts []json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		return 0
	}
	var n int64
	for _, p := range parts {
		var (
			text string
			part struct {
				Text string `json:"text"`
			}
		)
		if json.Unmarshal(p, &text) == nil {
			n += CountTokens(text)
		} else if json.Unmarshal(p, &part) == nil {
			n += CountTokens(part.Text)
		}
	}
	return n
}

// words are the answer's vocabulary: common English words that real
// tokenizers (cl100k, o200k, Llama 3) each encode as one token, with the
// leading space every token after the first carries.
var words = [...]string{"fair", "queue", "share", "token", "time", "every", "tenant", "gets", "its", "weight"}

// tokenText returns the text of token t of an answer: one word, after a space
// unless it is the first.
func tokenText(t int) string {
	w := words[t%len(words)]
	if t == 0 {
		return w
	}
	return " " + w
}

// answerText returns the whole text of an answer of n tokens.
func answerText(n int) string {
	var b strings.Builder
	for t := range n {
		b.WriteString(tokenText(t))
	}
	return b.String()
}
