package usage

import "bytes"

// What ended the line whose CR was the last byte seen: a LF right after it
// belongs to the same line ending.
const (
	crLine    = iota // a line within an event
	crEvent          // an event, relayed
	crDropped        // an event, stripped: its LF goes too
)

// maxEarlyParses bounds how many of an event's data lines are followed by
// an attempt to parse its data so far while it is held back: every server
// sends the usage chunk as one line, and trying after each of many lines
// would cost time quadratic in the event's size. An event not decided by
// then is relayed, and parsed once at its end.
const maxEarlyParses = 4

// sseState parses a text/event-stream body incrementally, whatever the
// write boundaries, and when stripping holds back the bytes of an event that
// may still be the usage-only chunk.
type sseState struct {
	// line is the current line (at most maxEventBytes of it), lineLen its
	// full length.
	line    []byte
	lineLen int
	// data is the current event's data lines joined by LF; dataOver is set
	// when they exceed maxEventBytes, and the event is not parsed.
	data     []byte
	hasData  bool
	dataOver bool
	// parsed is set once the current event's chunk was accounted.
	parsed bool
	// tries counts the current event's data lines after which its data was
	// parsed early, to learn whether it is the usage chunk.
	tries int

	// holding: the current event's bytes are held in held, not relayed.
	holding bool
	held    []byte
	// drop: the current event is the usage-only chunk, stripped at its end.
	drop bool

	afterCR bool
	crEnded int
}

// feed parses p. When m strips, it returns out with the bytes to relay
// appended; otherwise out is returned unchanged.
func (s *sseState) feed(m *Meter, p []byte, out []byte) []byte {
	for len(p) > 0 {
		if s.afterCR {
			s.afterCR = false
			if p[0] == '\n' {
				switch s.crEnded {
				case crDropped:
				case crEvent:
					out = s.relay(m, out, p[:1])
				default:
					out = s.put(m, out, p[:1])
				}
				p = p[1:]
				continue
			}
		}
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			s.addLine(p)
			return s.put(m, out, p)
		}
		s.addLine(p[:i])
		out = s.put(m, out, p[:i+1])
		cr := p[i] == '\r'
		p = p[i+1:]
		out = s.endLine(m, out, cr)
	}
	return out
}

// relay appends b to out when stripping.
func (s *sseState) relay(m *Meter, out, b []byte) []byte {
	if !m.strip {
		return out
	}
	return append(out, b...)
}

// put relays b, or holds it back with the current event.
func (s *sseState) put(m *Meter, out, b []byte) []byte {
	if !m.strip || !s.holding {
		return s.relay(m, out, b)
	}
	if len(s.held)+len(b) > maxEventBytes { // too large to be the usage chunk
		return append(s.release(out), b...)
	}
	s.held = append(s.held, b...)
	return out
}

// release relays the held bytes and stops holding the current event.
func (s *sseState) release(out []byte) []byte {
	out = append(out, s.held...)
	s.held = s.held[:0]
	s.holding, s.drop = false, false
	return out
}

// flushHeld returns out with the held bytes of an unterminated last event
// appended, unless that event is the usage chunk being stripped.
func (s *sseState) flushHeld(out []byte) []byte {
	if s.drop {
		s.held = s.held[:0]
		s.holding, s.drop = false, false
		return out
	}
	return s.release(out)
}

func (s *sseState) addLine(b []byte) {
	s.lineLen += len(b)
	if room := maxEventBytes - len(s.line); room > 0 {
		s.line = append(s.line, b[:min(len(b), room)]...)
	}
}

// endLine handles the line just ended (by a CR when cr).
func (s *sseState) endLine(m *Meter, out []byte, cr bool) []byte {
	blank := s.lineLen == 0
	if !blank {
		s.field(m)
		if m.strip && s.holding && !s.drop && (s.parsed || s.tries >= maxEarlyParses) {
			out = s.release(out)
		}
		if cr {
			s.afterCR, s.crEnded = true, crLine
		}
		return out
	}
	s.dispatch(m)
	ended := crEvent
	if m.strip {
		if s.drop {
			s.held = s.held[:0]
			ended = crDropped
		} else {
			out = append(out, s.held...)
			s.held = s.held[:0]
		}
		s.holding, s.drop = true, false
	}
	if cr {
		s.afterCR, s.crEnded = true, ended
	}
	return out
}

// field handles the complete non-blank line in s.line: a data line adds to
// the event's data, which while the event is held back is parsed as soon as
// it is a complete JSON chunk, to decide whether to strip it. Other fields
// (event, id, retry) and comments are relayed untouched.
func (s *sseState) field(m *Meter) {
	line, over := s.line, s.lineLen > len(s.line)
	s.line, s.lineLen = s.line[:0], 0
	if s.parsed {
		return // the event's chunk is accounted; more data is malformed
	}
	value, ok := bytes.CutPrefix(line, []byte("data"))
	if !ok || (len(value) > 0 && value[0] != ':') {
		return
	}
	if len(value) > 0 {
		value = value[1:]
		value, _ = bytes.CutPrefix(value, []byte(" "))
	}
	if s.hasData && !s.dataOver {
		s.data = append(s.data, '\n')
	}
	s.hasData = true
	if over || len(s.data)+len(value) > maxEventBytes {
		s.dataOver = true
	}
	if s.dataOver {
		return
	}
	s.data = append(s.data, value...)
	if !m.strip || !s.holding || s.tries >= maxEarlyParses {
		return // parsed once, at the event's end
	}
	s.tries++
	if bytes.Equal(s.data, []byte("[DONE]")) {
		s.parsed = true
		return
	}
	if c, ok := parseChunk(s.data); ok {
		s.parsed = true
		c.account(m)
		s.drop = c.usageOnly()
	}
}

// dispatch ends the current event.
func (s *sseState) dispatch(m *Meter) {
	if s.hasData && !s.parsed && !s.dataOver {
		if c, ok := parseChunk(s.data); ok {
			c.account(m)
		}
	}
	s.data, s.hasData, s.dataOver, s.parsed, s.tries = s.data[:0], false, false, false, 0
}

// finish accounts a final line and event the stream did not terminate.
func (s *sseState) finish(m *Meter) {
	if s.lineLen > 0 {
		s.field(m)
	}
	s.dispatch(m)
}
