package usage

import (
	"strings"
	"testing"
)

// FuzzMeterSSE feeds arbitrary streams, split at an arbitrary offset, to the
// SSE tap. It never panics; without stripping the client gets the input
// byte for byte; with stripping the client gets the same bytes whatever the
// write boundaries, bytes are only removed, and without a usage chunk in
// the stream nothing is, but for an unterminated final event.
func FuzzMeterSSE(f *testing.F) {
	for _, s := range []string{
		ev0 + ev1 + ev2 + evUsage + evDone,
		strings.ReplaceAll(ev1+evUsage+evDone, "\n", "\r\n"),
		strings.ReplaceAll(ev1+evUsage+evDone, "\n", "\r"),
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\r\n\r\ndata: x\n",
		": c\nevent: e\ndata: {\"a\":\ndata: 1}\n\n",
		"data: {not json\n\ndata\n\n\n\n",
	} {
		f.Add([]byte(s), uint16(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, in []byte, split uint16) {
		at := int(split) % (len(in) + 1)
		plain, _ := relay(t, sse, 0, false, string(in[:at]), string(in[at:]))
		if plain != string(in) {
			t.Fatalf("without stripping the client got %q, want %q", plain, in)
		}
		stripped, u := relay(t, sse, 0, true, string(in[:at]), string(in[at:]))
		whole, u2 := relay(t, sse, 0, true, string(in))
		if stripped != whole || u != u2 {
			t.Fatalf("split at %d: client got %q, usage %+v; in one write %q, %+v", at, stripped, u, whole, u2)
		}
		if !isSubsequence(stripped, string(in)) {
			t.Fatalf("stripping added or reordered bytes: %q from %q", stripped, in)
		}
		if !strings.Contains(strings.ToLower(string(in)), "usage") && !strings.Contains(string(in), `\`) &&
			!strings.HasPrefix(string(in), stripped) {
			// No event can be a usage chunk: all is relayed but for the
			// bytes of an unterminated final event still held back.
			t.Fatalf("a stream without usage lost bytes: %q from %q", stripped, in)
		}
		// Once the body has ended (Finish), such a stream reaches the client
		// byte for byte, an unterminated final event included.
		if finished := relayFinished(t, string(in[:at]), string(in[at:])); !strings.Contains(strings.ToLower(string(in)), "usage") &&
			!strings.Contains(string(in), `\`) && finished != string(in) {
			t.Fatalf("a stream without usage, finished, reached the client as %q, want %q", finished, in)
		} else if !strings.HasPrefix(finished, stripped) || !isSubsequence(finished, string(in)) {
			t.Fatalf("finishing changed what was relayed: %q then %q, from %q", stripped, finished, in)
		}
	})
}

// relayFinished writes the parts through a stripping writer, ends the body
// with Finish and returns what the client received.
func relayFinished(t testing.TB, parts ...string) string {
	t.Helper()
	fw := newFakeWriter(sse)
	w := NewResponseWriter(fw, NewMeter(NewEstimator(100), "gpt-4", Estimate{Prompt: 40, MaxOutput: 100}, true))
	for _, p := range parts {
		if _, err := w.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := Finish(w); err != nil {
		t.Fatal(err)
	}
	return fw.body.String()
}

// isSubsequence reports whether sub's bytes appear in s in order.
func isSubsequence(sub, s string) bool {
	i := 0
	for j := 0; i < len(sub) && j < len(s); j++ {
		if sub[i] == s[j] {
			i++
		}
	}
	return i == len(sub)
}

// FuzzEstimate checks that Estimate never panics and never reports a
// negative or overflowing count, whatever the body.
func FuzzEstimate(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url"}]}],"n":3,"max_tokens":9}`,
		`{"prompt":[[1,2],["a",{"x":"y"}]],"input":{"role":"user"},"tools":[{}]}`,
		`{"messages":[1,"a",null,[]],"stream":true,"stream_options":{"include_usage":true}}`,
		`[["deep"]]`, `"str"`, `{"max_tokens":1e400}`, "\xff\xfe",
	} {
		f.Add([]byte(s))
	}
	e := NewEstimator(1024)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, model := range []string{"gpt-4o", "llama-3"} {
			est := e.Estimate(model, body)
			if est.Prompt < 0 || est.MaxOutput < 0 || est.Total() < 0 {
				t.Fatalf("Estimate(%q) = %+v", body, est)
			}
		}
	})
}
