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
	"errors"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/fairqueue/fairqueue/dataplane/reload"
	"github.com/fairqueue/fairqueue/dataplane/render"
)

// expectSameRefusal checks SPEC 10 for one invalid policy that the API
// server refused with apiErr: `dataplane --policy` (reload.DecodePolicy)
// refuses the same document with the same causes, each with the same field
// and message. Every table of invalid policies in this package runs through
// it, so the API server and the data plane are checked against one table,
// and the CRD is the one source of the rules.
//
// The one intended difference: --policy prints a backend URL with its
// password redacted, so a cause quoting a URL with credentials is compared
// by field and type only, and must not hold the password.
func expectSameRefusal(t *testing.T, obj *unstructured.Unstructured, apiErr error, secret string) {
	t.Helper()
	var status apierrors.APIStatus
	if !errors.As(apiErr, &status) || status.Status().Details == nil {
		t.Fatalf("the API server's refusal has no causes: %v", apiErr)
	}
	want := status.Status().Details.Causes

	doc, err := yaml.Marshal(obj.Object)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = reload.DecodePolicy(doc)
	var se *reload.SchemaError
	if !errors.As(err, &se) {
		t.Fatalf("--policy: DecodePolicy = %v, want the API server's refusal:\n%v", err, apiErr)
	}
	got := make([]metav1.StatusCause, len(se.Errs))
	for i, e := range se.Errs {
		got[i] = metav1.StatusCause{Type: metav1.CauseType(e.Type), Message: e.ErrorBody(), Field: e.Field}
	}
	byField := func(a, b metav1.StatusCause) int {
		return strings.Compare(a.Field+"\x00"+a.Message, b.Field+"\x00"+b.Message)
	}
	slices.SortFunc(want, byField)
	slices.SortFunc(got, byField)
	if len(got) != len(want) {
		t.Fatalf("--policy refuses with %d causes, the API server with %d:\n--policy:   %v\nAPI server: %v", len(got), len(want), got, want)
	}
	for i := range want {
		w, g := want[i], got[i]
		if secret != "" && strings.Contains(w.Message, secret) {
			w.Message, g.Message = "", strings.ReplaceAll(g.Message, secret, "\x00")
			if strings.Contains(g.Message, "\x00") {
				t.Errorf("--policy echoes the secret %q: %v", secret, got[i])
			}
			g.Message = ""
		}
		if w != g {
			t.Errorf("cause %d differs:\n--policy:   %+v\nAPI server: %+v", i, g, w)
		}
	}
}

// expectSameAcceptance checks that `dataplane --policy` accepts a policy
// the API server accepts: DecodePolicy takes it and it renders to a config
// the data plane loads, so config.Validate is never stricter than the CRD.
// It must run before the object is created, which fills it in. A policy
// whose Secrets are not at hand (weightsFrom, a key registry) is checked up
// to rendering.
func expectSameAcceptance(t *testing.T, obj *unstructured.Unstructured) {
	t.Helper()
	doc, err := yaml.Marshal(obj.Object)
	if err != nil {
		t.Fatal(err)
	}
	p, secrets, err := reload.DecodePolicy(doc)
	if err != nil {
		t.Fatalf("--policy refuses a policy the API server accepts: %v", err)
	}
	_, err = render.Render(render.Input{Policy: p, HashKey: []byte("0123456789abcdef0123456789abcdef"), HashKeySecret: "hash-key", Secrets: secrets})
	var re *render.Error
	if errors.As(err, &re) && !re.SecretsResolved {
		return
	}
	if err != nil {
		t.Fatalf("--policy cannot render a policy the API server accepts: %v", err)
	}
}
