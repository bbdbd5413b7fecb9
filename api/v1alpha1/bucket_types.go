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

// A limit is a token bucket: a rate (requests or tokens, declared by each
// limit with its own range and whether it is required) refilled every
// period, holding at most burst. Period and burst are the bucket shape,
// embedded inline by the limits of its unit: RequestBucket by RateLimit and
// ModelRateLimit, TokenBucket by TokenLimit and ModelTokenLimit.
//
// The shape is declared once per unit because a field's default and range
// are markers on the field itself (+kubebuilder:default cannot be set on a
// type, nor by the type that embeds it), and the units differ in both: a
// request bucket refills per second and holds at most 1e9 requests, a token
// bucket per minute and 1e12 tokens.

// RequestBucket is the refill period and capacity of a limit counted in
// requests.
type RequestBucket struct {
	// period is the refill period of requests, a positive duration of at most
	// 24h such as "1s" or "1m". Defaults to "1s".
	// +optional
	// +kubebuilder:default="1s"
	Period Duration `json:"period,omitzero"`

	// burst is the bucket capacity: how many requests may pass at once after
	// an idle spell. When unset, the data plane uses requests.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	Burst int64 `json:"burst,omitempty"`
}

// TokenBucket is the refill period and capacity of a limit counted in model
// tokens.
type TokenBucket struct {
	// period is the refill period of tokens, a positive duration of at most
	// 24h such as "1m". Defaults to "1m".
	// +optional
	// +kubebuilder:default="1m"
	Period Duration `json:"period,omitzero"`

	// burst is the bucket capacity in tokens: how many may be used at once
	// after an idle spell. A request reserving more than burst waits for a
	// full bucket. When unset, the data plane uses tokens.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000000
	Burst int64 `json:"burst,omitempty"`
}
