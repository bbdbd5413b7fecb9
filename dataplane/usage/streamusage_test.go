package usage

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestAddStreamUsage(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string // "" when not applicable
	}{
		{"adds stream_options after the last member",
			`{"model":"m","stream":true}`,
			`{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{"keeps formatting and member order",
			"{\n  \"stream\": true,\n  \"messages\": [ {\"role\": \"user\", \"content\": \"a}b\"} ]\n}\n",
			"{\n  \"stream\": true,\n  \"messages\": [ {\"role\": \"user\", \"content\": \"a}b\"} ],\"stream_options\":{\"include_usage\":true}\n}\n"},
		{"adds include_usage to existing stream_options",
			`{"stream":true,"stream_options":{"foo":1},"model":"m"}`,
			`{"stream":true,"stream_options":{"include_usage":true,"foo":1},"model":"m"}`},
		{"fills empty stream_options",
			`{"stream":true,"stream_options":{ }}`,
			`{"stream":true,"stream_options":{"include_usage":true}}`},
		{"replaces include_usage false",
			`{"stream":true,"stream_options":{"include_usage": false ,"x":2}}`,
			`{"stream":true,"stream_options":{"include_usage": true ,"x":2}}`},
		{"replaces include_usage null",
			`{"stream":true,"stream_options":{"include_usage":null}}`,
			`{"stream":true,"stream_options":{"include_usage":true}}`},
		{"replaces the last duplicate, the one that counts",
			`{"stream":true,"stream_options":{"include_usage":true,"include_usage":false}}`,
			`{"stream":true,"stream_options":{"include_usage":true,"include_usage":true}}`},
		{"replaces null stream_options",
			`{"stream":true,"stream_options":null}`,
			`{"stream":true,"stream_options":{"include_usage":true}}`},
		{"last stream duplicate true",
			`{"stream":false,"stream":true}`,
			`{"stream":false,"stream":true,"stream_options":{"include_usage":true}}`},
		{"escaped member name is stream",
			`{"\u0073tream":true}`,
			`{"\u0073tream":true,"stream_options":{"include_usage":true}}`},
		{"already true", `{"stream":true,"stream_options":{"include_usage":true}}`, ""},
		{"not streaming", `{"stream":false}`, ""},
		{"no stream member", `{"model":"m"}`, ""},
		{"last stream duplicate false", `{"stream":true,"stream":false}`, ""},
		{"stream as a string", `{"stream":"true"}`, ""},
		{"member names are exact", `{"Stream":true}`, ""},
		{"nested stream is not the request's", `{"x":{"stream":true}}`, ""},
		{"stream_options of another type", `{"stream":true,"stream_options":"yes"}`, ""},
		{"not an object", `[{"stream":true}]`, ""},
		{"not JSON", `{"stream":true`, ""},
		{"trailing garbage", `{"stream":true} x`, ""},
		{"empty", ``, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.body)
			got, ok := AddStreamUsage(in)
			if tt.want == "" {
				if ok || string(got) != tt.body {
					t.Fatalf("AddStreamUsage = %q, %v; want the body unchanged and false", got, ok)
				}
				return
			}
			if !ok || string(got) != tt.want {
				t.Fatalf("AddStreamUsage = %q, %v; want %q, true", got, ok, tt.want)
			}
			if string(in) != tt.body {
				t.Fatalf("the input was modified: %q", in)
			}
			checkOnlyIncludeUsageChanged(t, in, got)
		})
	}
}

// checkOnlyIncludeUsageChanged decodes both bodies as an upstream does and
// checks they differ only in stream_options.include_usage, now true.
func checkOnlyIncludeUsageChanged(t *testing.T, before, after []byte) {
	t.Helper()
	var a, b map[string]any
	if err := json.Unmarshal(before, &a); err != nil {
		t.Fatalf("decoding the input: %v", err)
	}
	if err := json.Unmarshal(after, &b); err != nil {
		t.Fatalf("the output is not JSON: %v (%q)", err, after)
	}
	opts, _ := b["stream_options"].(map[string]any)
	if opts["include_usage"] != true {
		t.Fatalf("stream_options.include_usage is %v in %q", opts["include_usage"], after)
	}
	want, _ := a["stream_options"].(map[string]any)
	if want == nil {
		want = map[string]any{}
	}
	want["include_usage"] = true
	a["stream_options"] = want
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("more than include_usage changed:\n before %v\n after  %v", a, b)
	}
}

// FuzzAddStreamUsage checks that an applied change is valid JSON differing
// from the input only in stream_options.include_usage, and that
// AddStreamUsage never panics.
func FuzzAddStreamUsage(f *testing.F) {
	for _, s := range []string{
		`{"stream":true}`, `{"stream":true,"stream_options":{"a":[1,{"b":"}"}]}}`,
		`{"stream":true,"stream_options":null}`, ` { "stream" : true } `, `[]`, `{"stream":true`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		orig := string(body)
		got, ok := AddStreamUsage(body)
		if string(body) != orig {
			t.Fatal("the input was modified")
		}
		if !ok {
			if string(got) != orig {
				t.Fatal("not applicable, yet the body changed")
			}
			return
		}
		checkOnlyIncludeUsageChanged(t, body, got)
	})
}
