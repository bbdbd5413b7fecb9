package usage

import (
	"bytes"
	"encoding/json"
	"math"
)

// OpenAI's chat format wraps every message as
// <|start|>{role/name}\n{content}<|end|>\n and primes the reply with
// <|start|>assistant<|message|>; these are the token counts of that framing
// for the gpt-3.5-turbo-0613 and later, gpt-4 and gpt-4o families, as OpenAI's
// cookbook ("How to count tokens with tiktoken") gives them.
const (
	// tokensPerMessage frames each message.
	tokensPerMessage = 3
	// tokensPerName is added when a message has a name (besides the name's
	// own tokens).
	tokensPerName = 1
	// replyPrimer primes the assistant's reply once per chat request.
	replyPrimer = 3
)

// nonTextPartTokens is the fixed estimate for an image, audio or file part
// of a message: the bytes (often a URL) say little about what the model
// bills. 765 is what gpt-4o bills a 1024x1024 image at high detail (85 base
// + 4 tiles x 170); smaller and low-detail images bill less, larger ones
// more. The settle step corrects the difference.
const nonTextPartTokens = 765

// maxReservable bounds an output cap read from a request (max_tokens of
// 1e300 is a valid JSON number), so that MaxOutput x n and Total never
// overflow.
const maxReservable = 1 << 40

// exactTextBytes is how much text one estimate (and one response's output)
// tokenises exactly; text beyond it counts at the tokens per byte measured
// on the first exactTextBytes. The tokenizer costs about a microsecond per
// token, so this bounds the CPU one request can cost (an 8 MiB body would
// take seconds) while keeping ordinary requests exact.
const exactTextBytes = 64 << 10

// maxChoices bounds the n a request may ask for (OpenAI allows 128).
const maxChoices = 128

// Estimator estimates the tokens a request will use before it is sent: its
// prompt, counted with the model family's tokenizer, and the output cap it
// may generate. It is safe for concurrent use.
type Estimator struct {
	defaultMaxTokens int64
	cache            *countCache
}

// NewEstimator returns an Estimator that reserves defaultMaxTokens of output
// for a request that sets no cap (a negative value is taken as 0).
func NewEstimator(defaultMaxTokens int64) *Estimator {
	return &Estimator{defaultMaxTokens: min(max(defaultMaxTokens, 0), maxReservable), cache: newCountCache()}
}

// Estimate is a request's token estimate, the reservation made before it is
// forwarded.
type Estimate struct {
	// Prompt is the prompt tokens counted with the model family's tokenizer.
	Prompt int64
	// MaxOutput is the output cap reserved: max_completion_tokens, else
	// max_tokens, else max_output_tokens, else the default, times n.
	MaxOutput int64
	// Stream is set when the body has "stream": true.
	Stream bool
	// ClientAskedUsage is set when the body already has
	// stream_options.include_usage true.
	ClientAskedUsage bool
}

// Total is the reservation: prompt plus output cap.
func (e Estimate) Total() int64 { return e.Prompt + e.MaxOutput }

// Estimate reads body as encoding/json decodes it into a map (exact keys,
// the last duplicate winning) and counts, with model's tokenizer:
//   - messages (chat completions) as OpenAI's chat format frames them: per
//     message tokensPerMessage plus its role, content and name (plus
//     tokensPerName) tokens, other members (tool_calls, tool_call_id) by
//     their string values, and replyPrimer once; content is a string or an
//     array of parts, text parts counted, each image, audio or file part
//     nonTextPartTokens;
//   - prompt (completions) and input (embeddings, Responses API): a string,
//     an array of strings, token ids (one each) or, for input, items that
//     are counted like messages; instructions (Responses API) as text;
//   - tools and functions: their JSON, counted as text.
//
// A body with none of these, or one that is not a JSON object, counts the
// tokens of every string value in it (of the whole body when it is not JSON
// at all). Estimate never fails: an unexpected shape only makes the estimate
// rougher, which the settle step corrects.
func (e *Estimator) Estimate(model string, body []byte) Estimate {
	c := &counter{budget: newTokenBudget(encodingFor(model)), cache: e.cache}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		if json.Valid(body) {
			return Estimate{Prompt: c.strings(body), MaxOutput: e.maxOutput(model, nil)}
		}
		return Estimate{Prompt: c.count(string(body)), MaxOutput: e.maxOutput(model, nil)}
	}
	var (
		prompt int64
		found  bool
	)
	if raw, ok := top["messages"]; ok {
		prompt += c.messages(raw)
		found = true
	}
	for _, k := range [...]string{"prompt", "input"} {
		if raw, ok := top[k]; ok {
			prompt += c.prompt(raw)
			found = true
		}
	}
	if raw, ok := top["instructions"]; ok {
		prompt += c.strings(raw)
		found = true
	}
	if !found {
		prompt = c.strings(body)
	}
	for _, k := range [...]string{"tools", "functions"} {
		if raw, ok := top[k]; ok && !isNull(raw) {
			prompt += c.count(string(raw))
		}
	}
	est := Estimate{Prompt: prompt, MaxOutput: e.maxOutput(model, top)}
	if raw, ok := top["stream"]; ok {
		est.Stream = isTrue(raw)
	}
	if raw, ok := top["stream_options"]; ok {
		var opts map[string]json.RawMessage
		if json.Unmarshal(raw, &opts) == nil {
			est.ClientAskedUsage = isTrue(opts["include_usage"])
		}
	}
	return est
}

// maxOutput returns the output cap a request with top-level members top
// reserves; top is nil for a body that is not a JSON object.
func (e *Estimator) maxOutput(model string, top map[string]json.RawMessage) int64 {
	if isEmbeddingModel(model) {
		return 0
	}
	limit := e.defaultMaxTokens
	for _, k := range [...]string{"max_completion_tokens", "max_tokens", "max_output_tokens"} {
		if n, ok := positiveInt(top[k]); ok {
			limit = min(n, maxReservable)
			break
		}
	}
	if n, ok := positiveInt(top["n"]); ok && n > 1 {
		limit *= min(n, maxChoices) // both bounded: no overflow
	}
	return limit
}

// positiveInt returns raw as an integer when it is a JSON number of at least
// 1 (a fraction rounds up, a huge value saturates).
func positiveInt(raw json.RawMessage) (int64, bool) {
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return 0, false
	}
	var f float64
	if json.Unmarshal(raw, &f) != nil || !(f >= 1) {
		return 0, false
	}
	if f >= maxReservable {
		return maxReservable, true
	}
	return int64(math.Ceil(f)), true
}

func isTrue(raw json.RawMessage) bool { return bytes.Equal(raw, []byte("true")) }

func isNull(raw json.RawMessage) bool { return bytes.Equal(raw, []byte("null")) }

// counter counts the parts of a request body in one encoding.
type counter struct {
	budget
	cache *countCache
}

// count returns the tokens of s, from the cache when s is long and was
// counted before.
func (c *counter) count(s string) int64 {
	if len(s) < cacheMinBytes || c.cache == nil {
		return c.budget.count(s)
	}
	k := c.cache.key(c.enc, s)
	if n, ok := c.cache.get(k); ok {
		return n
	}
	n, exact := c.countExact(s)
	if exact {
		c.cache.put(k, n)
	}
	return n
}

// messages counts a chat completions messages array.
func (c *counter) messages(raw json.RawMessage) int64 {
	var msgs []json.RawMessage
	if json.Unmarshal(raw, &msgs) != nil {
		return c.strings(raw)
	}
	n := int64(replyPrimer)
	for _, m := range msgs {
		n += c.item(m)
	}
	return n
}

// item counts one message, Responses API input item or content part.
func (c *counter) item(raw json.RawMessage) int64 {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return c.prompt(raw)
	}
	if _, ok := obj["role"]; ok {
		return c.message(obj)
	}
	return c.part(obj)
}

// message counts one message of OpenAI's chat format.
func (c *counter) message(obj map[string]json.RawMessage) int64 {
	n := int64(tokensPerMessage)
	for k, v := range obj {
		switch k {
		case "content":
			n += c.prompt(v)
		case "name":
			n += c.strings(v) + tokensPerName
		case "type": // a Responses API item's "message"
		default: // role, tool_calls, tool_call_id, refusal, ...
			n += c.strings(v)
		}
	}
	return n
}

// part counts one content part: text by its text, an image, audio or file
// by the fixed estimate, anything else by its string values.
func (c *counter) part(obj map[string]json.RawMessage) int64 {
	var typ string
	if raw, ok := obj["type"]; ok && json.Unmarshal(raw, &typ) == nil {
		switch typ {
		case "image_url", "input_image", "image", "input_audio", "audio", "file", "input_file":
			return nonTextPartTokens
		}
	}
	var n int64
	for k, v := range obj {
		if k != "type" {
			n += c.strings(v)
		}
	}
	return n
}

// prompt counts a content, prompt or input value: a string, an array of
// strings, token ids, parts or items, or (rarely) an object.
func (c *counter) prompt(raw json.RawMessage) int64 {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	switch raw[0] {
	case '"':
		return c.strings(raw)
	case '[':
		var elems []json.RawMessage
		if json.Unmarshal(raw, &elems) != nil {
			return 0
		}
		var n int64
		for _, el := range elems {
			if len(el) > 0 && (el[0] == '-' || (el[0] >= '0' && el[0] <= '9')) {
				n++ // a token id
				continue
			}
			n += c.prompt(el)
		}
		return n
	case '{':
		return c.item(raw)
	default: // null, true, false, a number
		return 0
	}
}

// strings counts the tokens of every string value (not member names) in
// the JSON value raw, which is valid JSON.
func (c *counter) strings(raw []byte) int64 {
	if len(raw) > 0 && raw[0] == '"' { // the common case: one string
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0
		}
		return c.count(s)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var (
		n     int64
		inObj []bool // per open container: is it an object
		isKey bool   // the next string in the current object is a member name
	)
	for {
		tok, err := dec.Token()
		if err != nil {
			return n
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				inObj = append(inObj, true)
				isKey = true
			case '[':
				inObj = append(inObj, false)
			default:
				inObj = inObj[:len(inObj)-1]
				isKey = len(inObj) > 0 && inObj[len(inObj)-1]
			}
			continue
		case string:
			if !isKey {
				n += c.count(t)
			}
		}
		// After a member name the value follows; after a value, a name.
		if len(inObj) > 0 && inObj[len(inObj)-1] {
			if _, str := tok.(string); str && isKey {
				isKey = false
				continue
			}
			isKey = true
		}
	}
}
