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
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// TestMarkerDefaultsMatchConfig keeps the +kubebuilder:default markers in
// step with dataplane/config, the defaults' one home: a marker needs a
// literal, so the generated CRD's default of each field is compared with
// the constant the data plane applies when the field is unset (a policy
// given to --policy, a config file).
func TestMarkerDefaultsMatchConfig(t *testing.T) {
	spec := loadCRDSchema(t).Properties["spec"]
	for _, tt := range []struct {
		path string
		want any
	}{
		{"identity.apiKeyHeaders", config.DefaultAPIKeyHeaders()},
		{"identity.keyRegistry.key", config.DefaultKeyRegistryKey},
		{"rateLimits.global.period", config.DefaultRatePeriod},
		{"rateLimits.perClient.period", config.DefaultRatePeriod},
		{"rateLimits.perAPIKey.period", config.DefaultRatePeriod},
		{"rateLimits.perUser.period", config.DefaultRatePeriod},
		{"rateLimits.perTeam.period", config.DefaultRatePeriod},
		{"rateLimits.perBackend.period", config.DefaultRatePeriod},
		{"rateLimits.perModel.period", config.DefaultRatePeriod},
		{"rateLimits.perModel.overrides.period", config.DefaultRatePeriod},
		{"fairQueuing.defaultWeight", config.DefaultWeight},
		{"fairQueuing.bounds.maxQueueDepthPerTenant", config.DefaultMaxQueueDepthPerTenant},
		{"fairQueuing.bounds.maxTotalQueued", config.DefaultMaxTotalQueued},
		{"fairQueuing.bounds.maxTenants", config.DefaultMaxTenants},
		{"fairQueuing.bounds.maxInFlight", config.DefaultMaxInFlight},
		{"fairQueuing.bounds.maxWait", config.DefaultMaxWait},
		{"timeouts.request.default.total", config.DefaultRequestTotalTimeout},
		{"backends.weight", config.DefaultWeight},
		{"deferredAdmission.tokenLimits.perAPIKey.period", config.DefaultTokenPeriod},
		{"deferredAdmission.tokenLimits.perUser.period", config.DefaultTokenPeriod},
		{"deferredAdmission.tokenLimits.perTeam.period", config.DefaultTokenPeriod},
		{"deferredAdmission.tokenLimits.perModel.period", config.DefaultTokenPeriod},
		{"deferredAdmission.tokenLimits.perModel.overrides.period", config.DefaultTokenPeriod},
		{"deferredAdmission.estimation.defaultMaxTokens", config.DefaultMaxTokensReserved},
		{"deferredAdmission.estimation.includeUsage", config.DefaultIncludeUsage},
		{"deferredAdmission.bounds.maxHeld", config.DefaultMaxHeld},
		{"deferredAdmission.bounds.maxHeldPerTenant", config.DefaultMaxHeldPerTenant},
		{"deferredAdmission.bounds.maxWait", config.DefaultMaxHoldWait},
		{"store.redis.timeout", config.DefaultStoreTimeout},
		{"capacity.backends.saturation.interval", config.DefaultSaturationInterval},
		{"capacity.backends.saturation.staleAfter", config.DefaultSaturationStaleAfter},
		{"capacity.backends.saturation.timeout", config.DefaultSaturationTimeout},
	} {
		t.Run(tt.path, func(t *testing.T) {
			s := spec
			for _, name := range strings.Split(tt.path, ".") {
				if s.Type == "array" { // a list's field is its items'
					s = *s.Items.Schema
				}
				p, ok := s.Properties[name]
				if !ok {
					t.Fatalf("the CRD has no field spec.%s", tt.path)
				}
				s = p
			}
			if s.Default == nil {
				t.Fatalf("spec.%s has no default in the CRD", tt.path)
			}
			var got any
			if err := json.Unmarshal(s.Default.Raw, &got); err != nil {
				t.Fatal(err)
			}
			if d, ok := tt.want.(time.Duration); ok {
				str, _ := got.(string)
				if v, err := time.ParseDuration(str); err != nil || v != d {
					t.Errorf("spec.%s defaults to %s in the CRD, config to %s: change the marker or the constant", tt.path, s.Default.Raw, d)
				}
				return
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("spec.%s defaults to %s in the CRD, config to %v: change the marker or the constant", tt.path, s.Default.Raw, tt.want)
			}
		})
	}
}

// loadCRDSchema returns the generated CRD's OpenAPI schema.
func loadCRDSchema(t *testing.T) *apiextensionsv1.JSONSchemaProps {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(env.Root, "config", "crd", "bases", "fairqueue.dev_fairqueuepolicies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema
}
