package resolver

import (
	"encoding/json"
	"strings"
	"testing"
)

// benchBody is a typical chat completion request.
const benchBody = `{"model":"llama","messages":[{"role":"user","content":"Say hello."}]}`

func TestModelFromJSON(t *testing.T) {
	known := map[string]string{"llama": "llama"}
	tests := []struct {
		body, want string
		ok         bool
	}{
		{`{"model":"gpt-4o","messages":[]}`, "gpt-4o", true},
		{`{"model":"llama"}`, "llama", true},
		{` { "model" : "spaced" } `, "spaced", true},
		{`{"messages":[{"model":"inner"}],"model":"outer"}`, "outer", true},
		{`{"meta":{"model":"inner","x":[1,{"model":"deeper"}]},"n":1.5e3,"ok":true,"z":null}`, "", false},
		{`{"s":"a \"model\": \"fake\" }","model":"real"}`, "real", true},
		{`{"model":"first","model":"last"}`, "last", true},
		{`{"model":"first","model":7}`, "", false},
		{`{"MODEL":"upper"}`, "", false},
		{`{"model":"gpt\u002d4"}`, "gpt-4", true},
		{`{"\u006dodel":"expensive"}`, "expensive", true},
		{`{"mod\u0065l":"expensive","model":"cheap"}`, "cheap", true},
		{`{"model":"cheap","\u006d\u006f\u0064\u0065\u006c":"expensive"}`, "expensive", true},
		{"{\"model\":\"\xe6\"}", "\uFFFD", true},
		{"{\"model\":\"big\xff\"}", "big\uFFFD", true},
		{`{"model":"\ud83d\ude00"}`, "\U0001F600", true},
		{`{"model":"\ud83d"}`, "\uFFFD", true},
		{`{"model":""}`, "", false},
		{`{"model":"expensive","t":NaN}`, "", false},
		{`{"model":"expensive","n":01}`, "", false},
		{`{"model":"expensive","s":"\x"}`, "", false},
		{"{\"model\":\"ctl\x01\"}", "", false},
		{`{"model":42}`, "", false},
		{`{"model":"m",`, "", false},
		{`{"model":"m"} trailing`, "", false},
		{`[]`, "", false},
		{`"model"`, "", false},
		{`{}`, "", false},
		{``, "", false},
		{strings.Repeat("[", 9999) + strings.Repeat("]", 9999), "", false},
		{`{"model":"deep","x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`, "deep", true},
		{`{"model":"too deep","x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, "", false},
	}
	for _, tc := range tests {
		got, ok := modelFromJSON([]byte(tc.body), known)
		if got != tc.want || ok != tc.ok {
			t.Errorf("modelFromJSON(%.80q) = %q, %v, want %q, %v", tc.body, got, ok, tc.want, tc.ok)
		}
		if ref, refOK := referenceModel([]byte(tc.body)); ref != got || refOK != ok {
			t.Errorf("modelFromJSON(%.80q) = %q, %v, encoding/json says %q, %v", tc.body, got, ok, ref, refOK)
		}
	}
}

// referenceModel decodes body with encoding/json into a map, as an upstream
// does: the "model" key matched exactly after unescaping, the last duplicate
// winning. ok is false when body is not a JSON object or has no non-empty
// string model.
func referenceModel(body []byte) (model string, ok bool) {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil || m == nil {
		return "", false
	}
	s, _ := m["model"].(string)
	return s, s != ""
}

// FuzzModelFromJSON is a differential test: the in-place scanner must read
// every body exactly as encoding/json does. testdata holds the two inputs
// that broke the previous scanner (an escaped key, invalid UTF-8).
func FuzzModelFromJSON(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"a":[1,2,{"b":"\\"}],"model":"x\"y"}`))
	f.Add([]byte(`{"\u006dodel":"x","n":-1.5e+3,"t":[true,false,null]}`))
	f.Add([]byte(`{"model":"\ud83d\ude00\ud800"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := modelFromJSON(body, nil)
		ref, refOK := referenceModel(body)
		if ref != got || refOK != ok {
			t.Fatalf("modelFromJSON(%q) = %q, %v, encoding/json says %q, %v", body, got, ok, ref, refOK)
		}
	})
}

func BenchmarkModelFromJSON(b *testing.B) {
	body := []byte(benchBody)
	known := map[string]string{"llama": "llama"}
	b.ReportAllocs()
	for b.Loop() {
		if m, _ := modelFromJSON(body, known); m != "llama" {
			b.Fatal("wrong model")
		}
	}
}

// BenchmarkModelFromJSONReference is the same body through encoding/json,
// the baseline the scanner must beat.
func BenchmarkModelFromJSONReference(b *testing.B) {
	body := []byte(benchBody)
	b.ReportAllocs()
	for b.Loop() {
		if m, _ := referenceModel(body); m != "llama" {
			b.Fatal("wrong model")
		}
	}
}
