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

// Package v1alpha1 holds the fairqueue.dev/v1alpha1 API: the FairQueuePolicy
// custom resource that turns on weighted fair queuing for a shared HTTP API.
//
// The API server does the defaulting and validation: every bound and timeout
// has a +kubebuilder:default, so a stored object shows its effective values,
// and invalid values are refused with CEL rules whose messages say what to
// fix. Optional structs are values tagged omitzero, so Go clients never send a
// zero duration the server would refuse. The defaults' Go home is
// dataplane/config: render applies them to objects that did not pass
// through an API server (a policy file), and test/api checks the markers
// against them. Expand and VarRefs implement the ${VAR} grammar of
// weights identities, which the CEL rules mirror.
//
// Every duration field has two rules: one for the format, and one for the
// range that only converts the value with duration() after a second pattern
// has bounded each number's digits (at most 6 numbers, 5 digits for h up to
// 18 for ns), so no accepted string can overflow a time.Duration. A value
// such as 9999999999999h is then refused with the field's range instead of
// CEL's type-conversion error.
//
// Rules on a field whose value may hold a secret (a backend url with
// user:password@) sit on the enclosing object with a fieldPath: the API
// server quotes a refused string field's value in its error, but not an
// object's.
//
// +kubebuilder:object:generate=true
// +groupName=fairqueue.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "fairqueue.dev", Version: "v1alpha1"}

	// SchemeBuilder collects the functions that register the types of this
	// package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a runtime.Scheme; call it
	// once when building the scheme of a client or manager.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes registers the FairQueuePolicy kinds under GroupVersion, along
// with the meta/v1 options types (ListOptions, DeleteOptions, ...) that
// clients send for them.
func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&FairQueuePolicy{},
		&FairQueuePolicyList{},
	)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
