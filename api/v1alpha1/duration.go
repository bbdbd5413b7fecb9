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

import "time"

// Duration is a positive duration of at most 24h in Go syntax, such as "5s",
// "1m30s" or "500ms". It is declared once, with its rules, the way
// gateway-api declares its Duration, so every duration field of the API
// checks the same syntax; a field with a narrower range adds one rule of its
// own. The API server names the field in the error, so the messages here
// name none.
//
// The first rule checks the syntax. The range rule first matches at most six
// numbers whose digits fit an int64 of nanoseconds in their unit, so CEL's
// duration() cannot fail on what reaches it: a value too large for a Go
// duration is refused as out of range, not with an evaluation error. The API
// server evaluates every rule even when another one failed, so range rules
// (here and on fields) are guarded by the syntax.
//
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="must be a duration such as 5s, 1m30s or 500ms: numbers each followed by h, m, s, ms, us or ns"
// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (self.matches('^(([0-9]{1,5}([.][0-9]+)?h)|([0-9]{1,7}([.][0-9]+)?m)|([0-9]{1,9}([.][0-9]+)?s)|([0-9]{1,12}([.][0-9]+)?ms)|([0-9]{1,15}([.][0-9]+)?us)|([0-9]{1,18}([.][0-9]+)?ns)){1,6}$') && duration(self) > duration('0s') && duration(self) <= duration('24h'))",message="must be a positive duration of at most 24h, such as 1s or 1m"
type Duration string

// Duration returns d as a time.Duration: 0 when d is unset, or when it is
// not a duration, which the schema refuses before a policy reaches a
// reader.
func (d Duration) Duration() time.Duration {
	v, err := time.ParseDuration(string(d))
	if err != nil {
		return 0
	}
	return v
}
