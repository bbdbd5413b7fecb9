package usage

import (
	"bytes"
	"encoding/json"
)

// includeUsageMember is the member AddStreamUsage adds.
const includeUsageMember = `"include_usage":true`

// AddStreamUsage asks the upstream for a final usage chunk: when body is a
// JSON object with "stream": true, it returns a copy with
// stream_options.include_usage set to true (stream_options added after the
// last member, include_usage added first in an existing stream_options, or
// its value replaced), every other byte unchanged. Members are read as
// encoding/json decodes the body into a map: exact keys, the last duplicate
// winning. It returns body and false when not applicable: not a JSON object,
// not streaming, include_usage already true, or stream_options neither an
// object nor null (which the upstream rejects anyway). stream_options is a
// parameter of chat completions and completions: call AddStreamUsage for
// those endpoints only (the Responses API reports usage in its
// response.completed event without being asked).
func AddStreamUsage(body []byte) ([]byte, bool) {
	if !json.Valid(body) {
		return body, false
	}
	top, ok := members(body)
	if !ok {
		return body, false
	}
	var stream, opts *member
	for i := range top.list {
		switch m := &top.list[i]; m.key {
		case "stream":
			stream = m
		case "stream_options":
			opts = m
		}
	}
	if stream == nil || !isTrue(body[stream.start:stream.end]) {
		return body, false
	}
	switch {
	case opts == nil:
		last := top.list[len(top.list)-1]
		return splice(body, last.end, last.end, `,"stream_options":{`+includeUsageMember+`}`), true
	case isNull(body[opts.start:opts.end]):
		return splice(body, opts.start, opts.end, `{`+includeUsageMember+`}`), true
	case body[opts.start] != '{':
		return body, false
	}
	inner, ok := members(body[opts.start:opts.end])
	if !ok {
		return body, false
	}
	var include *member
	for i := range inner.list {
		if inner.list[i].key == "include_usage" {
			include = &inner.list[i]
		}
	}
	switch {
	case include != nil && isTrue(body[opts.start+include.start:opts.start+include.end]):
		return body, false
	case include != nil:
		return splice(body, opts.start+include.start, opts.start+include.end, "true"), true
	case len(inner.list) == 0:
		return splice(body, opts.start+1, opts.end-1, includeUsageMember), true
	default:
		return splice(body, opts.start+1, opts.start+1, includeUsageMember+","), true
	}
}

// splice returns a new slice: body with body[from:to] replaced by s.
func splice(body []byte, from, to int, s string) []byte {
	out := make([]byte, 0, len(body)-(to-from)+len(s))
	out = append(out, body[:from]...)
	out = append(out, s...)
	return append(out, body[to:]...)
}

// member is one member of a JSON object: its decoded name and the offsets of
// its value.
type member struct {
	key        string
	start, end int
}

// object is the members of a JSON object, in order.
type object struct {
	list []member
}

// members lists the members of the JSON object obj, which is valid JSON;
// ok is false when obj is not an object.
func members(obj []byte) (object, bool) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return object{}, false
	}
	var o object
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return object{}, false
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return object{}, false
		}
		end := int(dec.InputOffset())
		o.list = append(o.list, member{key: key, start: end - len(raw), end: end})
	}
	return o, true
}
