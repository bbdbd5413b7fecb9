package loadgen

import (
	"bytes"
	"time"

	"k8s.io/utils/clock"
)

// firstToken is an io.Writer handed a streamed answer as the client reads it;
// it records when the first server-sent event carrying generated text
// arrived: a chat delta's "content" or a completion's "text" that is not
// empty. A first event with only the assistant's role, which some servers
// send before any token, does not count. It keeps at most one partial line.
type firstToken struct {
	clk  clock.PassiveClock
	at   time.Time
	line []byte
}

// maxTTFTLine bounds the partial event line kept between writes; a longer
// line is judged on its first maxTTFTLine bytes.
const maxTTFTLine = 64 << 10

func (f *firstToken) Write(p []byte) (int, error) {
	if !f.at.IsZero() {
		return len(p), nil
	}
	rest := p
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			f.line = append(f.line, rest[:min(len(rest), maxTTFTLine-len(f.line))]...)
			break
		}
		line := rest[:i]
		if len(f.line) > 0 {
			line = append(f.line, line[:min(len(line), maxTTFTLine-len(f.line))]...)
		}
		rest = rest[i+1:]
		f.line = f.line[:0]
		if carriesText(line) {
			f.at = f.clk.Now()
			return len(p), nil
		}
	}
	return len(p), nil
}

// carriesText reports whether an event line holds generated text: a data
// line with a non-empty "content" or "text" string.
func carriesText(line []byte) bool {
	data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:"))
	if !ok {
		return false
	}
	for _, key := range [...]string{`"content":"`, `"content": "`, `"text":"`, `"text": "`} {
		if i := bytes.Index(data, []byte(key)); i >= 0 {
			if j := i + len(key); j < len(data) && data[j] != '"' {
				return true
			}
		}
	}
	return false
}
