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
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestAddToScheme checks what clients and the manager rely on: after
// AddToScheme the scheme maps both kinds to fairqueue.dev/v1alpha1 and can
// build them, and list options for the group are known.
func TestAddToScheme(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatalf("AddToScheme: %v", err)
	}
	tests := []struct {
		obj  runtime.Object
		kind string
	}{
		{obj: &FairQueuePolicy{}, kind: "FairQueuePolicy"},
		{obj: &FairQueuePolicyList{}, kind: "FairQueuePolicyList"},
		{obj: &metav1.ListOptions{}, kind: "ListOptions"},
	}
	for _, tc := range tests {
		t.Run(tc.kind, func(t *testing.T) {
			gvks, _, err := scheme.ObjectKinds(tc.obj)
			if err != nil {
				t.Fatalf("ObjectKinds: %v", err)
			}
			want := GroupVersion.WithKind(tc.kind)
			found := false
			for _, gvk := range gvks {
				found = found || gvk == want
			}
			if !found {
				t.Errorf("ObjectKinds = %v, want it to contain %v", gvks, want)
			}
			if _, err := scheme.New(want); err != nil {
				t.Errorf("scheme.New(%v): %v", want, err)
			}
		})
	}
}
