/*
Copyright 2026 The fairqueue Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestVarRefs(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{name: "no variables", in: "team-research", want: nil},
		{name: "braced", in: "${ACME_KEY}", want: []string{"ACME_KEY"}},
		{name: "bare takes the longest name", in: "$ACME_KEY-2", want: []string{"ACME_KEY"}},
		{name: "several in order, each once", in: "${B}x$A${B}", want: []string{"B", "A"}},
		{name: "doubled dollar is a literal", in: "$$ACME", want: nil},
		{name: "literal then variable", in: "$$$ACME", want: []string{"ACME"}},
		{name: "malformed references skipped", in: "$1 ${} ${A-B} ${OPEN $OK", want: []string{"OK"}},
		{name: "trailing dollar", in: "cost$", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := VarRefs(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("VarRefs(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"ACME_KEY": "sk-acme", "TEAM": "research", "EMPTY": ""}
	lookup := func(name string) (string, bool) { v, ok := vars[name]; return v, ok }
	tests := []struct {
		name       string
		in         string
		want       string
		unresolved string // name in the *UnresolvedVariableError expected
		malformed  bool
	}{
		{name: "plain identity unchanged", in: "team-research", want: "team-research"},
		{name: "braced", in: "${ACME_KEY}", want: "sk-acme"},
		{name: "bare", in: "team-$TEAM", want: "team-research"},
		{name: "bare stops at non-name byte", in: "$TEAM.eu", want: "research.eu"},
		{name: "braced joins text", in: "${TEAM}2", want: "research2"},
		{name: "empty value", in: "x${EMPTY}y", want: "xy"},
		{name: "escape", in: "price$$5", want: "price$5"},
		{name: "escape before name", in: "$$TEAM", want: "$TEAM"},
		{name: "values are not re-expanded", in: "${ACME_KEY}$$", want: "sk-acme$"},
		{name: "unresolved braced", in: "${NOPE}", unresolved: "NOPE"},
		{name: "unresolved bare", in: "a-$NOPE", unresolved: "NOPE"},
		{name: "lone dollar", in: "cost$", malformed: true},
		{name: "digit after dollar", in: "$1", malformed: true},
		{name: "unclosed brace", in: "${TEAM", malformed: true},
		{name: "empty braces", in: "${}", malformed: true},
		{name: "bad name in braces", in: "${TE-AM}", malformed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Expand(tt.in, lookup)
			var unresolved *UnresolvedVariableError
			switch {
			case tt.unresolved != "":
				if !errors.As(err, &unresolved) || unresolved.Name != tt.unresolved {
					t.Fatalf("Expand(%q) error = %v, want unresolved variable %q", tt.in, err, tt.unresolved)
				}
				if !strings.Contains(err.Error(), tt.unresolved) || !strings.Contains(err.Error(), "weightsFrom") {
					t.Errorf("error %q should name the variable and weightsFrom", err)
				}
			case tt.malformed:
				if err == nil || errors.As(err, &unresolved) || !strings.Contains(err.Error(), "$$") {
					t.Fatalf("Expand(%q) = %q, %v; want a malformed-reference error explaining $$", tt.in, got, err)
				}
			default:
				if err != nil || got != tt.want {
					t.Fatalf("Expand(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
				}
			}
		})
	}
}

// TestExpandErrorHidesValues guards the rule that no raw identity reaches a
// log or condition: Expand's errors never carry variable values or the text
// around the bad reference.
func TestExpandErrorHidesValues(t *testing.T) {
	_, err := Expand("sk-secret-prefix-$", func(string) (string, bool) { return "", false })
	if err == nil || strings.Contains(err.Error(), "sk-secret") {
		t.Fatalf("error %v must not quote the identity", err)
	}
	if !strings.Contains(err.Error(), "byte 17") {
		t.Errorf("error %q should give the offset of the bad '$'", err)
	}
}

func FuzzExpand(f *testing.F) {
	for _, s := range []string{"${A}", "$A$$", "$", "${", "a$$b", "$_x9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Expand(s, func(name string) (string, bool) { return "<" + name + ">", true })
		if err != nil {
			return
		}
		// Every reference VarRefs reports must have been substituted.
		for _, name := range VarRefs(s) {
			if !strings.Contains(got, "<"+name+">") {
				t.Fatalf("Expand(%q) = %q lacks variable %q", s, got, name)
			}
		}
	})
}

// BenchmarkExpand measures one identity's expansion; the operator expands up
// to 1024 of them per render.
func BenchmarkExpand(b *testing.B) {
	vars := map[string]string{"ACME_KEY": "sk-example-acme-0000000000000000"}
	lookup := func(name string) (string, bool) { v, ok := vars[name]; return v, ok }
	for _, in := range []string{"team-research", "${ACME_KEY}", "prefix-$ACME_KEY-$$-suffix"} {
		b.Run(in, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Expand(in, lookup); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
