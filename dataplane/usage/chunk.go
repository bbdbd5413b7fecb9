package usage

import (
	"encoding/json"
	"errors"
	"strings"
)

// chunk is the part of a streamed event (a chat completions or completions
// chunk, a Responses API event) or of a JSON response the meter reads.
type chunk struct {
	Usage   *wireUsage `json:"usage"`
	Choices []choice   `json:"choices"`
	// Type and Delta are a Responses API event's ("response.output_text.delta").
	Type  string          `json:"type"`
	Delta json.RawMessage `json:"delta"`
	// Response is the response of a Responses API "response.completed" event.
	Response *struct {
		Usage *wireUsage `json:"usage"`
	} `json:"response"`
}

// choice is one choice of a chunk or response.
type choice struct {
	Text    string  `json:"text"` // completions
	Delta   message `json:"delta"`
	Message message `json:"message"`
}

// message is a chat message or a streamed delta of one.
type message struct {
	Content          string `json:"content"`
	Refusal          string `json:"refusal"`
	ReasoningContent string `json:"reasoning_content"` // vLLM, DeepSeek
	Reasoning        string `json:"reasoning"`
	ToolCalls        []struct {
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// parseChunk decodes data, one event's data or a response body. A value of
// an unexpected type (content as an array, say) leaves its field empty and
// the rest decoded; ok is false only when data is not a JSON object.
func parseChunk(data []byte) (c chunk, ok bool) {
	if len(data) == 0 || data[0] != '{' {
		return chunk{}, false
	}
	err := json.Unmarshal(data, &c)
	var typeErr *json.UnmarshalTypeError
	if err != nil && !errors.As(err, &typeErr) {
		return chunk{}, false
	}
	return c, true
}

// usageOnly reports whether c is the final usage chunk include_usage asks
// for: a reported usage and no choices.
func (c *chunk) usageOnly() bool {
	_, ok := c.Usage.usage()
	return ok && len(c.Choices) == 0
}

// account records c's reported usage and gathers its output text.
func (c *chunk) account(m *Meter) {
	m.report(c.Usage)
	if c.Response != nil {
		m.report(c.Response.Usage)
	}
	c.texts(m.addText)
}

// texts yields the output texts of c: choices' text, content, refusal,
// reasoning and tool calls, and a Responses API text or arguments delta.
func (c *chunk) texts(yield func(string)) {
	for i := range c.Choices {
		ch := &c.Choices[i]
		yield(ch.Text)
		ch.Delta.texts(yield)
		ch.Message.texts(yield)
	}
	if len(c.Delta) > 0 && c.Delta[0] == '"' &&
		(strings.Contains(c.Type, "text") || strings.Contains(c.Type, "arguments")) {
		var s string
		if json.Unmarshal(c.Delta, &s) == nil {
			yield(s)
		}
	}
}

func (msg *message) texts(yield func(string)) {
	yield(msg.Content)
	yield(msg.Refusal)
	yield(msg.ReasoningContent)
	yield(msg.Reasoning)
	for _, tc := range msg.ToolCalls {
		yield(tc.Function.Name)
		yield(tc.Function.Arguments)
	}
}

// outputItems is a Responses API response's "output".
type outputItems []struct {
	Content []struct {
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	} `json:"content"`
	Summary []struct {
		Text string `json:"text"`
	} `json:"summary"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// texts yields the output texts of items.
func (items outputItems) texts(yield func(string)) {
	for _, it := range items {
		for _, c := range it.Content {
			yield(c.Text)
			yield(c.Refusal)
		}
		for _, s := range it.Summary {
			yield(s.Text)
		}
		yield(it.Name)
		yield(it.Arguments)
	}
}
