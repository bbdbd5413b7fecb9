package resolver

import (
	"unicode/utf16"
	"unicode/utf8"
)

// maxJSONDepth is encoding/json's nesting limit: deeper documents are
// invalid to it, so they are to modelFromJSON too.
const maxJSONDepth = 10000

// modelFromJSON returns the top-level "model" string of a JSON body exactly
// as an encoding/json upstream decoding it into a map reads it: the key
// matched after unescaping ("\u006dodel" is "model"), the last duplicate
// winning, escapes decoded and invalid UTF-8 replaced by U+FFFD. ok is false
// when the body is not a JSON document encoding/json accepts, is not an
// object, or has no non-empty string model. known interns the model names
// the config mentions, so that for them no string is allocated; it may be
// nil.
//
// The body is validated and scanned in one pass, in place, with no decoding
// into values; FuzzModelFromJSON checks it against encoding/json.
func modelFromJSON(body []byte, known map[string]string) (model string, ok bool) {
	var (
		inObject [maxJSONDepth/64 + 1]uint64 // bit d: depth d is an object
		depth    int
		i        = skipSpace(body, 0)
		lit      []byte // the model's string literal, nil when not a string
		pending  bool   // the value being parsed is the top-level "model"
	)
	if i == len(body) || body[i] != '{' {
		return "", false
	}
value:
	i = skipSpace(body, i)
	if i == len(body) {
		return "", false
	}
	switch c := body[i]; {
	case c == '{' || c == '[':
		if pending {
			lit, pending = nil, false
		}
		if depth++; depth > maxJSONDepth {
			return "", false
		}
		if c == '{' {
			inObject[depth/64] |= 1 << (depth % 64)
		} else {
			inObject[depth/64] &^= 1 << (depth % 64)
		}
		i = skipSpace(body, i+1)
		if i < len(body) && body[i] == c+2 { // '}' or ']'
			i++
			depth--
			goto after
		}
		if c == '[' {
			goto value
		}
		goto key
	case c == '"':
		end, _, valid := scanString(body, i)
		if !valid {
			return "", false
		}
		if pending {
			lit, pending = body[i:end], false
		}
		i = end
	case c == '-' || (c >= '0' && c <= '9'):
		if i = scanNumber(body, i); i < 0 {
			return "", false
		}
		if pending {
			lit, pending = nil, false
		}
	default:
		if i = scanLiteral(body, i); i < 0 {
			return "", false
		}
		if pending {
			lit, pending = nil, false
		}
	}
after:
	if depth == 0 {
		if skipSpace(body, i) != len(body) {
			return "", false // trailing data
		}
		if len(lit) <= 2 {
			return "", false // no model, not a string, or ""
		}
		return stringValue(lit, known), true
	}
	i = skipSpace(body, i)
	if i == len(body) {
		return "", false
	}
	if inObject[depth/64]&(1<<(depth%64)) != 0 {
		switch body[i] {
		case ',':
			i = skipSpace(body, i+1)
			goto key
		case '}':
			i++
			depth--
			goto after
		}
		return "", false
	}
	switch body[i] {
	case ',':
		i++
		goto value
	case ']':
		i++
		depth--
		goto after
	}
	return "", false
key:
	if i == len(body) || body[i] != '"' {
		return "", false
	}
	end, plain, valid := scanString(body, i)
	if !valid {
		return "", false
	}
	if depth == 1 {
		pending = isModelKey(body[i+1:end-1], plain)
	}
	i = skipSpace(body, end)
	if i == len(body) || body[i] != ':' {
		return "", false
	}
	i++
	goto value
}

// isModelKey reports whether the raw key (without quotes) unescapes to
// "model"; plain says it holds no escape and no non-ASCII byte.
func isModelKey(raw []byte, plain bool) bool {
	if plain {
		return string(raw) == "model"
	}
	var buf [8]byte
	got, complete := appendUnquoted(buf[:0], raw, len("model")+1)
	return complete && string(got) == "model"
}

// stringValue returns the value of the JSON string literal lit, which
// scanString has validated.
func stringValue(lit []byte, known map[string]string) string {
	raw := lit[1 : len(lit)-1]
	if needsUnquote(raw) {
		v, _ := appendUnquoted(nil, raw, -1)
		return string(v)
	}
	if v, ok := known[string(raw)]; ok {
		return v
	}
	return string(raw)
}

// needsUnquote reports whether raw has an escape or a non-ASCII byte that is
// not valid UTF-8, so its value differs from its bytes.
func needsUnquote(raw []byte) bool {
	for _, c := range raw {
		if c == '\\' || c >= utf8.RuneSelf {
			return !isPlainUTF8(raw)
		}
	}
	return false
}

// isPlainUTF8 reports whether raw has no escape and is valid UTF-8.
func isPlainUTF8(raw []byte) bool {
	for _, c := range raw {
		if c == '\\' {
			return false
		}
	}
	return utf8.Valid(raw)
}

// appendUnquoted appends the value of the string literal body raw (valid per
// scanString) to dst as encoding/json decodes it: escapes decoded, a valid
// surrogate pair joined, a lone surrogate and each invalid UTF-8 byte
// replaced by U+FFFD. With limit >= 0 it stops once dst holds more than
// limit bytes and reports complete=false.
func appendUnquoted(dst, raw []byte, limit int) (out []byte, complete bool) {
	for r := 0; r < len(raw); {
		if limit >= 0 && len(dst) > limit {
			return dst, false
		}
		c := raw[r]
		switch {
		case c == '\\':
			switch e := raw[r+1]; e {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				rr := hex4(raw[r+2:])
				r += 6
				if utf16.IsSurrogate(rr) {
					if r+6 <= len(raw) && raw[r] == '\\' && raw[r+1] == 'u' {
						if dec := utf16.DecodeRune(rr, hex4(raw[r+2:])); dec != utf8.RuneError {
							dst = utf8.AppendRune(dst, dec)
							r += 6
							continue
						}
					}
					rr = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, rr)
				continue
			default: // '"', '\\', '/'
				dst = append(dst, e)
			}
			r += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			r++
		default:
			rr, size := utf8.DecodeRune(raw[r:])
			dst = utf8.AppendRune(dst, rr)
			r += size
		}
	}
	return dst, limit < 0 || len(dst) <= limit
}

// hex4 decodes four hex digits that scanString has validated.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// skipSpace returns the index of the first non-whitespace byte at or after i.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString validates the string literal starting at b[i] == '"' and
// returns the index just past it. plain reports that it holds neither an
// escape nor a non-ASCII byte.
func scanString(b []byte, i int) (end int, plain, valid bool) {
	plain = true
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, plain, true
		case c == '\\':
			plain = false
			if j+1 == len(b) {
				return 0, false, false
			}
			j++
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(b) || !isHex(b[j+1]) || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) {
					return 0, false, false
				}
				j += 4
			default:
				return 0, false, false
			}
		case c < 0x20:
			return 0, false, false
		case c >= utf8.RuneSelf:
			plain = false
		}
	}
	return 0, false, false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// scanNumber validates the JSON number starting at i and returns the index
// just past it, or -1.
func scanNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i == len(b) || !isDigit(b[i]) {
			return -1
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i == len(b) || !isDigit(b[i]) {
			return -1
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i
}

// scanLiteral validates true, false or null at i and returns the index just
// past it, or -1.
func scanLiteral(b []byte, i int) int {
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
			return i + len(lit)
		}
	}
	return -1
}
