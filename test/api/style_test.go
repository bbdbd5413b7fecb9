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
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// TestSchemaStyle keeps future fields in the API's style: every field has a
// doc comment starting with its JSON name (what kubectl explain shows), every
// string has a maxLength or an enum, and every list a maxItems, so CEL cost
// and object size stay bounded.
func TestSchemaStyle(t *testing.T) {
	root := loadCRDSchema(t)
	// Fields whose schema comes from Kubernetes itself.
	exempt := map[string]bool{".apiVersion": true, ".kind": true, ".metadata": true, ".status.conditions[]": true}

	var walk func(path string, s *apiextensionsv1.JSONSchemaProps)
	walk = func(path string, s *apiextensionsv1.JSONSchemaProps) {
		for name, prop := range s.Properties {
			p := path + "." + name
			if exempt[p] {
				continue
			}
			if rest, ok := strings.CutPrefix(prop.Description, name); !ok || !strings.HasPrefix(rest, " ") && !strings.HasPrefix(rest, ",") {
				t.Errorf("%s: description should start with %q: %q", p, name, prop.Description)
			}
			switch prop.Type {
			case "string":
				if prop.MaxLength == nil && len(prop.Enum) == 0 {
					t.Errorf("%s: string without maxLength", p)
				}
			case "array":
				if prop.MaxItems == nil {
					t.Errorf("%s: list without maxItems", p)
				}
				if prop.Items != nil && prop.Items.Schema != nil {
					item := prop.Items.Schema
					if item.Type == "string" && item.MaxLength == nil {
						t.Errorf("%s: list of strings without an item maxLength", p)
					}
					if !exempt[p+"[]"] {
						walk(p+"[]", item)
					}
				}
			}
			walk(p, &prop)
		}
	}
	walk("", root)
}
