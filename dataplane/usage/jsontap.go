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

	// output is the output tokens of the last complete "choices" or
	// "output" member; hasOutput is set once one was seen.
	output    int64
	hasOutput bool
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
				t.begin()
				continue
			}
		}
		if t.target != targetNone {
			t.capture(c)
		}
	}
}

// begin starts the value of the member whose name is in t.key.
func (t *jsonTap) begin() {
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
	case "choices":
		t.target = targetChoices
	case "output":
		t.target = targetOutput
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
	if target == targetNone {
		return
	}
	if target == targetUsage {
		var u wireUsage
		if !t.capOver && json.Unmarshal(t.buf, &u) == nil {
			m.report(&u)
		}
		return
	}
	t.output, t.hasOutput = t.pendingOutput(m, target), true
}

// pendingOutput counts the output tokens of the captured target value: by
// the tokenizer when it fit its bound, else one token per four bytes.
func (t *jsonTap) pendingOutput(m *Meter, target int) int64 {
	if t.capOver {
		return int64(t.capLen) / 4
	}
	tc := textCounter{budget: newTokenBudget(m.enc)}
	switch target {
	case targetChoices:
		var c chunk
		if json.Unmarshal(t.buf, &c.Choices) == nil {
			c.texts(tc.add)
		}
	case targetOutput:
		var items outputItems
		if json.Unmarshal(t.buf, &items) == nil {
			items.texts(tc.add)
		}
	}
	return tc.total()
}

// outputTokens is the output counted from the response so far: the last
// complete choices or output member, else the one still being relayed.
func (t *jsonTap) outputTokens(m *Meter) int64 {
	if t.hasOutput {
		return t.output
	}
	if t.target == targetChoices || t.target == targetOutput {
		return int64(t.capLen) / 4
	}
	return 0
}
