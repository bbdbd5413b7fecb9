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
)

func TestHashKeySecretName(t *testing.T) {
	tests := []struct {
		name string
		ref  *LocalSecretReference
		want string
	}{
		{name: "derived from the policy name", ref: nil, want: "prod-hash-key"},
		{name: "empty reference is unset", ref: &LocalSecretReference{}, want: "prod-hash-key"},
		{name: "explicit reference", ref: &LocalSecretReference{Name: "shared-key"}, want: "shared-key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &FairQueuePolicy{ObjectMeta: metav1.ObjectMeta{Name: "prod"}, Spec: FairQueuePolicySpec{HashKeySecretRef: tt.ref}}
			if got := p.HashKeySecretName(); got != tt.want {
				t.Errorf("HashKeySecretName() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDeepCopyIsIndependent(t *testing.T) {
	in := &FairQueuePolicy{Spec: FairQueuePolicySpec{
		FairQueuing: FairQueuing{Weights: []TenantWeight{{Identity: "a", Weight: 2}}},
		Backends:    []Backend{{Name: "a", URL: "http://a"}},
		RateLimits:  RateLimits{PerModel: &ModelRateLimit{Overrides: []ModelRateLimitOverride{{Model: "m"}}}},
	}}
	out := in.DeepCopy()
	out.Spec.FairQueuing.Weights[0].Weight = 9
	out.Spec.Backends[0].Name = "b"
	out.Spec.RateLimits.PerModel.Overrides[0].Model = "n"
	if in.Spec.FairQueuing.Weights[0].Weight != 2 || in.Spec.Backends[0].Name != "a" || in.Spec.RateLimits.PerModel.Overrides[0].Model != "m" {
		t.Fatalf("DeepCopy shares memory with the original: %+v", in.Spec)
	}
}
