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

// PriorityBand is one priority band of fairQueuing.priorityBands.
type PriorityBand struct {
	// name labels the band in weights, weightsFrom, defaultBand, the
	// x-fair-queue-band header and the band metric label: a DNS label of at
	// most 63 lowercase letters, digits and '-', such as "interactive".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// A float64 rather than a string or a Quantity, so that it reads and
	// round-trips through kubectl as `minShare: 0.05` (a Quantity prints
	// 50m, a string "0.05"). A fraction in [0, 1) compared with < has no
	// cross-language precision trap, the reason controller-gen refuses
	// floats unless run with crd:allowDangerousTypes=true, as the Makefile
	// does.

	// minShare is the fraction of grants the band receives while it has
	// waiting requests, at least 0 and below 1, such as 0.05: it is taken
	// from the bands above, so they can starve this band only down to it.
	// The minShare of all bands sums to less than 1, and the highest band
	// sets none. Defaults to 0: strict priority.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	// +kubebuilder:validation:ExclusiveMaximum=true
	MinShare float64 `json:"minShare,omitempty"`
}

// EffectiveDefaultBand returns the band of tenants placed in none: defaultBand
// when set, else the lowest (last) of priorityBands, else "" (no bands).
func (fq *FairQueuing) EffectiveDefaultBand() string {
	switch {
	case len(fq.PriorityBands) == 0:
		return ""
	case fq.DefaultBand != "":
		return fq.DefaultBand
	default:
		return fq.PriorityBands[len(fq.PriorityBands)-1].Name
	}
}
