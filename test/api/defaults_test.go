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

package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// TestDefaultsAreDocumented checks that every field with a default
// (+kubebuilder:default) states it in its description, which is what
// kubectl explain shows: "Defaults to X." with X the default as JSON
// (strings quoted, lists as ["a", "b"]).
func TestDefaultsAreDocumented(t *testing.T) {
	checked := 0
	var walk func(path string, s *apiextensionsv1.JSONSchemaProps)
	walk = func(path string, s *apiextensionsv1.JSONSchemaProps) {
		for name, prop := range s.Properties {
			p := path + "." + name
			if prop.Default != nil {
				checked++
				want := "Defaults to " + describeDefault(t, prop.Default.Raw) + "."
				if desc := strings.Join(strings.Fields(prop.Description), " "); !strings.Contains(desc, want) {
					t.Errorf("%s has a default but its description does not say %q: %q", p, want, prop.Description)
				}
			}
			walk(p, &prop)
			if prop.Items != nil && prop.Items.Schema != nil {
				walk(p+"[]", prop.Items.Schema)
			}
		}
	}
	walk("", loadCRDSchema(t))
	if checked < 20 {
		t.Fatalf("found only %d defaulted fields: the walk is broken", checked)
	}
	t.Logf("%d defaulted fields state their default", checked)
}

// describeDefault renders a schema default as a description states it.
func describeDefault(t *testing.T, raw []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("default %s is not JSON: %v", raw, err)
	}
	if list, ok := v.([]any); ok {
		parts := make([]string, len(list))
		for i, e := range list {
			b, _ := json.Marshal(e)
			parts[i] = string(b)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	b, _ := json.Marshal(v)
	return string(b)
}
