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
	"fmt"
	"strconv"
	"testing"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
)

// TestInterpolationAgreesWithServer checks that the API server's CEL rules and
// the operator's Go parser (v1alpha1.Expand and VarRefs) agree on which
// identities are well formed and which reference a variable. A disagreement
// would let the server accept a policy the operator cannot render, or reject
// one it could.
func TestInterpolationAgreesWithServer(t *testing.T) {
	ns := newNamespace(t)
	identities := []string{
		"team-research", "$$", "a$$b", "$$$$", "${A}", "$A", "$A_1-x", "${A}${B}", "$A$B",
		"$$A", "$$$A", "${A}}", "{$A}", "é$A", "${_}",
		"$", "a$", "$$$", "$1", "${}", "${1A}", "${A", "$-", "$ {A}", "${A-B}", "$é",
	}
	always := func(string) (string, bool) { return "v", true }
	for i, id := range identities {
		t.Run(strconv.Quote(id), func(t *testing.T) {
			_, err := fqv1alpha1.Expand(id, always)
			wellFormed := err == nil
			needsSecret := len(fqv1alpha1.VarRefs(id)) > 0
			weight := fmt.Sprintf("weights: [{identity: %s, weight: 2}]", strconv.Quote(id))

			withSecret := policyFromSpec(t, ns, fmt.Sprintf("with-%d", i),
				"fairQueuing: {weightsFrom: [{secretRef: {name: ids}}], "+weight+"}\n"+backendYAML)
			err = env.Client.Create(testContext(t), withSecret)
			if accepted := err == nil; accepted != wellFormed {
				t.Errorf("with weightsFrom: server accepted=%v (%v), Expand well-formed=%v", accepted, err, wellFormed)
			}

			without := policyFromSpec(t, ns, fmt.Sprintf("without-%d", i), "fairQueuing: {"+weight+"}\n"+backendYAML)
			err = env.Client.Create(testContext(t), without)
			if accepted, want := err == nil, wellFormed && !needsSecret; accepted != want {
				t.Errorf("without weightsFrom: server accepted=%v (%v), want %v (well-formed=%v, VarRefs=%q)",
					accepted, err, want, wellFormed, fqv1alpha1.VarRefs(id))
			}
		})
	}
}
