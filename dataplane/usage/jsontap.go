package usage

import (
	"bytes"
	"encoding/json"
)

// Top-level members of a JSON response the tap captures.
const (
	targetNone    = iota
	targetUsage   // "usage": the reported usage
	targetChoices // "choices": chat completions and completions output
	targetOutput  // "output": Responses API output
)

// maxKeyBytes bounds a captured member name; longer names are not targets.
const maxKeyBytes = 64

// jsonTap scans a JSON response as it is relayed, one byte at a time with
// no buffering of the document, and captures the values of the few
// top-level members the meter needs (bounded by maxUsageBytes and
// maxOutputBytes). The last duplicate member wins, as in encoding/json.
type jsonTap struct {
	depth     int
	inStr     bool
	esc       bool
	expectKey bool // at depth 1, the next string is a member name
	inKey     bool
	key       []byte
	done      bool // the top-level value ended, or is not an object

	target  int // the member being captured, targetNone when none
	buf     []byte
	capLen  int  // bytes of the value seen, beyond the bound too
	capOver bool // the value exceeded its bound

	// out is the last complete "choices" or "output" value (outKind),
	// kept within its bound to count the output only if the response
	// reports no usage; outLen is its full length.
	out     []byte
	outKind int
	outLen  int
	outOver bool
}

// feed scans p.
func (t *jsonTap) feed(m *Meter, p []byte) {
	for _, c := range p {
		if t.done {
			return
		}
		if t.inStr {
			switch {
			case t.esc:
				t.esc = false
			case c == '\\':
				t.esc = true
			case c == '"':
				t.inStr = false
				if t.inKey {
					t.inKey = false
					continue
				}
			}
			if t.inKey {
				if len(t.key) < maxKeyBytes+1 {
					t.key = append(t.key, c)
				}
			} else if t.target != targetNone {
				t.capture(c)
			}
			continue
		}
		switch c {
		case '"':
			t.inStr = true
			if t.depth == 1 && t.expectKey {
				t.inKey, t.expectKey, t.key = true, false, t.key[:0]
				continue
			}
		case '{', '[':
			t.depth++
			if t.depth == 1 {
				t.expectKey = c == '{'
				t.done = c != '{'
				continue
			}
		case '}', ']':
			t.depth--
			if t.depth == 0 {
				t.end(m)
				t.done = true
				continue
			}
		case ',':
			if t.depth == 1 {
				t.end(m)
				t.expectKey = true
				continue
			}
		case ':':
			if t.depth == 1 {
				t.begin(m)
				continue
			}
		}
		if t.target != targetNone {
			t.capture(c)
		}
	}
}

// begin starts the value of the member whose name is in t.key. Output is
// not captured once the response reported its usage.
func (t *jsonTap) begin(m *Meter) {
	t.target = targetNone
	if len(t.key) > maxKeyBytes {
		return
	}
	name := t.key
	if bytes.IndexByte(name, '\\') >= 0 {
		var s string
		if json.Unmarshal(append(append([]byte{'"'}, name...), '"'), &s) != nil {
			return
		}
		name = []byte(s)
	}
	switch string(name) {
	case "usage":
		t.target = targetUsage
	case "choices", "output":
		if m.reported.Reported {
			return
		}
		t.target = targetChoices
		if string(name) == "output" {
			t.target = targetOutput
		}
	default:
		return
	}
	t.buf, t.capLen, t.capOver = t.buf[:0], 0, false
}

func (t *jsonTap) capture(c byte) {
	t.capLen++
	if t.capOver {
		return
	}
	limit := maxOutputBytes
	if t.target == targetUsage {
		limit = maxUsageBytes
	}
	if len(t.buf) >= limit {
		t.capOver, t.buf = true, nil
		return
	}
	t.buf = append(t.buf, c)
}

// end ends the current member's value.
func (t *jsonTap) end(m *Meter) {
	target := t.target
	t.target = targetNone
	switch target {
	case targetNone:
	case targetUsage:
		var u wireUsage
		if !t.capOver && json.Unmarshal(t.buf, &u) == nil {
			m.report(&u)
		}
		if m.reported.Reported {
			t.out, t.outKind = nil, targetNone // not needed any more
		}
	default:
		t.out, t.buf = t.buf, t.out[:0]
		t.outKind, t.outLen, t.outOver = target, t.capLen, t.capOver
	}
}

// outputTokens counts the output of the response relayed so far: the last
// complete choices or output member by the tokenizer (one token per four
// bytes when it exceeded its bound), else one token per four bytes of the
// one still being relayed.
func (t *jsonTap) outputTokens(m *Meter) int64 {
	if t.outKind == targetNone {
		if t.target == targetChoices || t.target == targetOutput {
			return int64(t.capLen) / 4
		}
		return 0
	}
	if t.outOver {
		return int64(t.outLen) / 4
	}
	tc := textCounter{budget: newTokenBudget(m.enc)}
	if t.outKind == targetChoices {
		var c chunk
		if json.Unmarshal(t.out, &c.Choices) == nil {
			c.texts(tc.add)
		}
	} else {
		var items outputItems
		if json.Unmarshal(t.out, &items) == nil {
			items.texts(tc.add)
		}
	}
	return tc.total()
}
