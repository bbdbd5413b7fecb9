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
	"strings"
	"testing"
)

// backendYAML is a valid backends list, added to every row that sets none.
const backendYAML = "backends: [{name: vllm, url: 'http://vllm:8000'}]\n"

// weightsYAML returns n distinct weights entries in flow style.
func weightsYAML(n int) string {
	entries := make([]string, n)
	for i := range entries {
		entries[i] = fmt.Sprintf("{identity: tenant-%d, weight: 1}", i)
	}
	return "[" + strings.Join(entries, ", ") + "]"
}

// secretRefsYAML returns n distinct weightsFrom entries in flow style.
func secretRefsYAML(n int) string {
	entries := make([]string, n)
	for i := range entries {
		entries[i] = fmt.Sprintf("{secretRef: {name: s%d}}", i)
	}
	return "[" + strings.Join(entries, ", ") + "]"
}

// TestValidationRejects creates one invalid policy per validation rule and
// checks that the API server refuses it with a message naming the field and
// what is wrong.
func TestValidationRejects(t *testing.T) {
	ns := newNamespace(t)
	tests := []struct {
		name string
		spec string
		// objectName overrides the policy's generated name.
		objectName string
		// want are substrings the API server's error must contain.
		want []string
		// secret is a substring the error must not contain: a password
		// must not reach whoever reads the error (CI logs, an Argo CD UI).
		secret string
	}{
		{
			name:       "policy name longer than 63 characters",
			objectName: strings.Repeat("p", 64),
			want:       []string{"metadata.name must be at most 63 characters"},
		},
		// Weights.
		{
			name: "weight below 1",
			spec: "fairQueuing: {weights: [{identity: team-a, weight: 0}]}",
			want: []string{"spec.fairQueuing.weights[0].weight", "should be greater than or equal to 1"},
		},
		{
			name: "weight above 1000",
			spec: "fairQueuing: {weights: [{identity: team-a, weight: 1001}]}",
			want: []string{"spec.fairQueuing.weights[0].weight", "should be less than or equal to 1000"},
		},
		{
			name: "defaultWeight below 1",
			spec: "fairQueuing: {defaultWeight: 0}",
			want: []string{"spec.fairQueuing.defaultWeight", "should be greater than or equal to 1"},
		},
		{
			name: "duplicate identity in weights",
			spec: "fairQueuing: {weights: [{identity: team-a, weight: 2}, {identity: team-a, weight: 3}]}",
			want: []string{"spec.fairQueuing.weights[1]", "Duplicate value", `"team-a"`},
		},
		{
			name: "more than 1024 weights",
			spec: "fairQueuing: {weights: " + weightsYAML(1025) + "}",
			want: []string{"spec.fairQueuing.weights", "must have at most 1024 items"},
		},
		{
			name: "weight without identity",
			spec: "fairQueuing: {weights: [{weight: 2}]}",
			want: []string{"spec.fairQueuing.weights[0].identity", "Required value"},
		},
		// Variables in weights.
		{
			name: "${VAR} without weightsFrom",
			spec: "fairQueuing: {weights: [{identity: '${ACME_KEY}', weight: 3}]}",
			want: []string{"spec.fairQueuing.weights", "weights use a ${VAR} reference but weightsFrom names no Secret"},
		},
		{
			name: "$VAR without weightsFrom",
			spec: "fairQueuing: {weights: [{identity: 'team-$TEAM', weight: 3}]}",
			want: []string{"spec.fairQueuing.weights", "weightsFrom names no Secret"},
		},
		{
			name: "variable after an escaped dollar without weightsFrom",
			spec: "fairQueuing: {weights: [{identity: '$$$TEAM', weight: 3}]}",
			want: []string{"weightsFrom names no Secret"},
		},
		{
			name: "lone dollar in identity",
			spec: "fairQueuing: {weights: [{identity: 'cost$5', weight: 3}]}",
			want: []string{"spec.fairQueuing.weights[0].identity", "identity has a '$' that starts no variable"},
		},
		{
			name: "unclosed ${ in identity",
			spec: "fairQueuing: {weightsFrom: [{secretRef: {name: ids}}], weights: [{identity: '${ACME', weight: 3}]}",
			want: []string{"spec.fairQueuing.weights[0].identity", "identity has a '$' that starts no variable"},
		},
		{
			name: "same Secret twice in weightsFrom",
			spec: "fairQueuing: {weightsFrom: [{secretRef: {name: ids}}, {secretRef: {name: ids}}]}",
			want: []string{"spec.fairQueuing.weightsFrom", "weightsFrom names the same Secret more than once"},
		},
		{
			name: "more than 16 weightsFrom",
			spec: "fairQueuing: {weightsFrom: " + secretRefsYAML(17) + "}",
			want: []string{"spec.fairQueuing.weightsFrom", "must have at most 16 items"},
		},
		{
			name: "weightsFrom Secret name not a DNS subdomain",
			spec: "fairQueuing: {weightsFrom: [{secretRef: {name: Tenant_IDs}}]}",
			want: []string{"spec.fairQueuing.weightsFrom[0].secretRef.name", "should match"},
		},
		{
			name: "unknown tenantDimension",
			spec: "fairQueuing: {tenantDimension: tenant}",
			want: []string{"spec.fairQueuing.tenantDimension", `Unsupported value: "tenant"`, `"user"`, `"apiKey"`, `"team"`},
		},
		// Bounds.
		{
			name: "maxTotalQueued below the default maxQueueDepthPerTenant",
			spec: "fairQueuing: {bounds: {maxTotalQueued: 10}}",
			want: []string{"spec.fairQueuing.bounds.maxTotalQueued", "maxTotalQueued must be at least maxQueueDepthPerTenant"},
		},
		{
			name: "maxTotalQueued below maxQueueDepthPerTenant",
			spec: "fairQueuing: {bounds: {maxQueueDepthPerTenant: 100, maxTotalQueued: 99}}",
			want: []string{"maxTotalQueued must be at least maxQueueDepthPerTenant"},
		},
		{
			name: "maxQueueDepthPerTenant zero",
			spec: "fairQueuing: {bounds: {maxQueueDepthPerTenant: 0}}",
			want: []string{"spec.fairQueuing.bounds.maxQueueDepthPerTenant", "should be greater than or equal to 1"},
		},
		{
			name: "maxTenants zero",
			spec: "fairQueuing: {bounds: {maxTenants: 0}}",
			want: []string{"spec.fairQueuing.bounds.maxTenants", "should be greater than or equal to 1"},
		},
		{
			name: "maxInFlight zero",
			spec: "fairQueuing: {bounds: {maxInFlight: 0}}",
			want: []string{"spec.fairQueuing.bounds.maxInFlight", "should be greater than or equal to 1"},
		},
		{
			name: "maxInFlight above its bound",
			spec: "fairQueuing: {bounds: {maxInFlight: 5000}}",
			want: []string{"spec.fairQueuing.bounds.maxInFlight", "should be less than or equal to 4096"},
		},
		{
			name: "maxWait zero",
			spec: "fairQueuing: {bounds: {maxWait: 0s}}",
			want: []string{"spec.fairQueuing.bounds.maxWait", "maxWait must be a positive duration of at most 10m"},
		},
		{
			name: "maxWait above 10m",
			spec: "fairQueuing: {bounds: {maxWait: 10m1s}}",
			want: []string{"spec.fairQueuing.bounds.maxWait", "maxWait must be a positive duration of at most 10m"},
		},
		{
			name: "maxWait negative",
			spec: "fairQueuing: {bounds: {maxWait: -5s}}",
			want: []string{"spec.fairQueuing.bounds.maxWait", ": must be a duration such as 5s, 1m30s or 500ms"},
		},
		{
			name: "maxWait too large for a duration",
			spec: "fairQueuing: {bounds: {maxWait: 9999999999999h}}",
			want: []string{"spec.fairQueuing.bounds.maxWait", "maxWait must be a positive duration of at most 10m"},
		},
		{
			name: "maxWait overflowing only as a sum",
			spec: "fairQueuing: {bounds: {maxWait: 2000000h2000000h}}",
			want: []string{"spec.fairQueuing.bounds.maxWait", "maxWait must be a positive duration of at most 10m"},
		},
		{
			name: "period too large for a duration",
			spec: "rateLimits: {perUser: {requests: 1, period: 99999999999999999999s}}",
			want: []string{"spec.rateLimits.perUser.period", ": must be a positive duration of at most 24h"},
		},
		{
			name: "total too large for a duration",
			spec: "timeouts: {request: {default: {total: 9999999999999999999ns}}}",
			want: []string{"spec.timeouts.request.default.total", "total must be a positive duration of at most 1h"},
		},
		{
			name: "maxWait without a unit",
			spec: "fairQueuing: {bounds: {maxWait: '5'}}",
			want: []string{"spec.fairQueuing.bounds.maxWait", ": must be a duration such as 5s, 1m30s or 500ms"},
		},
		// Rate limits.
		{
			name: "requests zero",
			spec: "rateLimits: {perUser: {requests: 0}}",
			want: []string{"spec.rateLimits.perUser.requests", "should be greater than or equal to 1"},
		},
		{
			name: "requests missing",
			spec: "rateLimits: {perTeam: {period: 1m}}",
			want: []string{"spec.rateLimits.perTeam.requests", "Required value"},
		},
		{
			name: "burst zero",
			spec: "rateLimits: {global: {requests: 10, burst: 0}}",
			want: []string{"spec.rateLimits.global.burst", "should be greater than or equal to 1"},
		},
		{
			name: "period zero",
			spec: "rateLimits: {perAPIKey: {requests: 10, period: 0s}}",
			want: []string{"spec.rateLimits.perAPIKey.period", ": must be a positive duration of at most 24h"},
		},
		{
			name: "period above 24h",
			spec: "rateLimits: {perClient: {requests: 10, period: 25h}}",
			want: []string{"spec.rateLimits.perClient.period", ": must be a positive duration of at most 24h"},
		},
		{
			name: "period in days",
			spec: "rateLimits: {perBackend: {requests: 10, period: 1d}}",
			want: []string{"spec.rateLimits.perBackend.period", ": must be a duration such as 5s"},
		},
		{
			name: "perModel without requests or overrides",
			spec: "rateLimits: {perModel: {period: 1m}}",
			want: []string{"spec.rateLimits.perModel", "perModel needs requests"},
		},
		{
			name: "perModel burst without requests",
			spec: "rateLimits: {perModel: {burst: 5, overrides: [{model: m, requests: 1}]}}",
			want: []string{"spec.rateLimits.perModel", "perModel.burst is set without perModel.requests"},
		},
		{
			name: "perModel override period zero",
			spec: "rateLimits: {perModel: {overrides: [{model: m, requests: 1, period: 0s}]}}",
			want: []string{"spec.rateLimits.perModel.overrides[0].period", ": must be a positive duration"},
		},
		{
			name: "perModel override named twice",
			spec: "rateLimits: {perModel: {overrides: [{model: m, requests: 1}, {model: m, requests: 2}]}}",
			want: []string{"spec.rateLimits.perModel.overrides[1]", "Duplicate value"},
		},
		{
			name: "unknownModel charge without chargeAs",
			spec: "rateLimits: {perModel: {requests: 1, unknownModel: {action: Charge}}}",
			want: []string{"spec.rateLimits.perModel.unknownModel", "set chargeAs exactly when action is Charge"},
		},
		{
			name: "unknownModel chargeAs with the default action Refuse",
			spec: "rateLimits: {perModel: {requests: 1, unknownModel: {chargeAs: m}}}",
			want: []string{"spec.rateLimits.perModel.unknownModel", "set chargeAs exactly when action is Charge"},
		},
		{
			name: "unknownModel action unknown",
			spec: "rateLimits: {perModel: {requests: 1, unknownModel: {action: Skip}}}",
			want: []string{"spec.rateLimits.perModel.unknownModel.action", "Unsupported value"},
		},
		{
			name: "unknownModel charged to a model without a limit",
			spec: "rateLimits: {perModel: {overrides: [{model: big, requests: 1}], unknownModel: {action: Charge, chargeAs: small}}}",
			want: []string{"spec.rateLimits.perModel", "unknownModel.chargeAs names a model without a limit"},
		},
		// Timeouts.
		{
			name: "default total zero",
			spec: "timeouts: {request: {default: {total: 0s}}}",
			want: []string{"spec.timeouts.request.default.total", "total must be a positive duration of at most 1h"},
		},
		{
			name: "model total above 1h",
			spec: "timeouts: {request: {models: [{model: m, total: 2h}]}}",
			want: []string{"spec.timeouts.request.models[0].total", "total must be a positive duration of at most 1h"},
		},
		{
			name: "model timeout without total",
			spec: "timeouts: {request: {models: [{model: m}]}}",
			want: []string{"spec.timeouts.request.models[0].total", "Required value"},
		},
		// Backends.
		{
			name: "backends missing",
			spec: "backends: null",
			want: []string{"spec.backends", "Required value"},
		},
		{
			name: "backends empty",
			spec: "backends: []",
			want: []string{"spec.backends", "should have at least 1 items"},
		},
		{
			name: "backend names not unique",
			spec: "backends: [{name: a, url: 'http://a'}, {name: a, url: 'http://b'}]",
			want: []string{"spec.backends[1]", "Duplicate value"},
		},
		{
			name: "backend name not a DNS label",
			spec: "backends: [{name: vLLM_A, url: 'http://a'}]",
			want: []string{"spec.backends[0].name", "should match"},
		},
		{
			name: "backend url without scheme",
			spec: "backends: [{name: a, url: 'vllm-a:8000'}]",
			want: []string{"spec.backends[0].url", "url must be an absolute http or https URL"},
		},
		{
			name: "backend url is a path",
			spec: "backends: [{name: a, url: '/v1'}]",
			want: []string{"spec.backends[0].url", "url must be an absolute http or https URL"},
		},
		{
			name: "backend url with another scheme",
			spec: "backends: [{name: a, url: 'ftp://a'}]",
			want: []string{"spec.backends[0].url", "url must be an absolute http or https URL"},
		},
		{
			name: "backend url without host",
			spec: "backends: [{name: a, url: 'http://'}]",
			want: []string{"spec.backends[0].url", "url must be an absolute http or https URL"},
		},
		{
			name:   "backend url with credentials",
			spec:   "backends: [{name: a, url: 'https://user:secret@a.example.com/v1'}]",
			want:   []string{"spec.backends[0].url", "url must not hold credentials"},
			secret: "secret",
		},
		{
			name:   "backend url with credentials and a port",
			spec:   "backends: [{name: a, url: 'http://user:pw-9f3c1a@a:8000'}]",
			want:   []string{"spec.backends[0].url", "url must not hold credentials"},
			secret: "pw-9f3c1a",
		},
		{
			name:   "backend url with credentials and another scheme",
			spec:   "backends: [{name: a, url: 'ftp://user:pw-77ab0e@a:21'}]",
			want:   []string{"spec.backends[0].url", "url must be an absolute http or https URL", "url must not hold credentials"},
			secret: "pw-77ab0e",
		},
		{
			name:   "backend url with credentials and a query",
			spec:   "backends: [{name: b, url: 'http://vllm:8000'}, {name: a, url: 'http://user:pw-c0ffee@a:8000/?token=tk-5e5e'}]",
			want:   []string{"spec.backends[1].url", "url must not hold credentials", "url must not have a query"},
			secret: "pw-c0ffee",
		},
		{
			name: "backend weight zero",
			spec: "backends: [{name: a, url: 'http://a', weight: 0}]",
			want: []string{"spec.backends[0].weight", "should be greater than or equal to 1"},
		},
		// Identity.
		{
			name: "trusted headers without a header",
			spec: "identity: {trustHeaders: true}",
			want: []string{"spec.identity", "trustHeaders is true but neither userHeader nor teamHeader is set"},
		},
		{
			name: "API key header listed twice",
			spec: "identity: {apiKeyHeaders: [x-api-key, x-api-key]}",
			want: []string{"spec.identity.apiKeyHeaders[1]", "Duplicate value"},
		},
		{
			name: "API key header listed twice in different case",
			spec: "identity: {apiKeyHeaders: [Authorization, authorization]}",
			want: []string{"spec.identity.apiKeyHeaders", "apiKeyHeaders names a header twice; header names are case-insensitive"},
		},
		{
			name: "API key headers empty",
			spec: "identity: {apiKeyHeaders: []}",
			want: []string{"spec.identity.apiKeyHeaders", "should have at least 1 items"},
		},
		{
			name: "header name with a colon",
			spec: "identity: {userHeader: 'x-user:'}",
			want: []string{"spec.identity.userHeader", "should match"},
		},
		{
			name: "key registry without secretRef",
			spec: "identity: {keyRegistry: {key: keys.json}}",
			want: []string{"spec.identity.keyRegistry.secretRef", "Required value"},
		},
		{
			name: "hash key Secret name not a DNS subdomain",
			spec: "hashKeySecretRef: {name: Hash_Key}",
			want: []string{"spec.hashKeySecretRef.name", "should match"},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			if !strings.Contains(spec, "backends:") {
				spec += "\n" + backendYAML
			}
			name := tt.objectName
			if name == "" {
				name = fmt.Sprintf("invalid-%d", i)
			}
			obj := policyFromSpec(t, ns, name, spec)
			err := env.Client.Create(testContext(t), obj)
			if err == nil {
				t.Fatalf("the API server accepted an invalid policy:\n%s", spec)
			}
			t.Log(err)
			// A rule that fails to evaluate shows the user CEL internals
			// instead of what to fix.
			if strings.Contains(err.Error(), "evaluating rule") {
				t.Errorf("a validation rule failed to evaluate instead of explaining the problem:\n%v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
			if tt.secret != "" && strings.Contains(err.Error(), tt.secret) {
				t.Errorf("error echoes the secret %q:\n%v", tt.secret, err)
			}
			expectSameRefusal(t, obj, err, tt.secret)
		})
	}
}

// TestValidationAccepts guards against rules that reject what users are
// promised they may write.
func TestValidationAccepts(t *testing.T) {
	ns := newNamespace(t)
	tests := []struct {
		name string
		spec string
	}{
		{name: "weights staged while fair queuing is off", spec: "fairQueuing: {enabled: false, weights: [{identity: team-a, weight: 5}]}"},
		{name: "escaped dollar needs no weightsFrom", spec: "fairQueuing: {weights: [{identity: 'cost$$5', weight: 2}]}"},
		{name: "variables with weightsFrom", spec: "fairQueuing: {weightsFrom: [{secretRef: {name: ids}}], weights: [{identity: '${ACME_KEY}', weight: 3}, {identity: 'team-$TEAM_1', weight: 2}]}"},
		{name: "1024 weights", spec: "fairQueuing: {weights: " + weightsYAML(1024) + "}"},
		{name: "16 weightsFrom", spec: "fairQueuing: {weightsFrom: " + secretRefsYAML(16) + "}"},
		{name: "equal queue bounds", spec: "fairQueuing: {bounds: {maxQueueDepthPerTenant: 64, maxTotalQueued: 64}}"},
		{name: "largest bounds", spec: "fairQueuing: {bounds: {maxQueueDepthPerTenant: 65536, maxTotalQueued: 1048576, maxTenants: 65536, maxInFlight: 4096, maxWait: 10m}}"},
		{name: "durations at the bounds in small units", spec: "fairQueuing: {bounds: {maxWait: 600000ms}}\nrateLimits: {perUser: {requests: 1, period: 86400000000000ns}, perTeam: {requests: 1, period: 1h1h1h1h1h19h}}\ntimeouts: {request: {default: {total: 3600000000us}}}"},
		{name: "durations as Go prints them", spec: "fairQueuing: {bounds: {maxWait: 1m30s}}\nrateLimits: {global: {requests: 1, period: 1.5s}, perUser: {requests: 1, period: 500ms}, perTeam: {requests: 1, period: 24h0m0s}}"},
		{name: "burst below requests smooths", spec: "rateLimits: {perAPIKey: {requests: 100, burst: 1}}"},
		{name: "unknownModel charged to an overridden model", spec: "rateLimits: {perModel: {overrides: [{model: big, requests: 1}], unknownModel: {action: Charge, chargeAs: big}}}"},
		{name: "unknownModel charged under the default limit", spec: "rateLimits: {perModel: {requests: 5, unknownModel: {action: Charge, chargeAs: any}}}"},
		{name: "unknownModel refused explicitly", spec: "rateLimits: {perModel: {requests: 5, unknownModel: {action: Refuse}}}"},
		{name: "perModel overrides only", spec: "rateLimits: {perModel: {overrides: [{model: meta-llama/Llama-3.1-8B-Instruct, requests: 5}]}}"},
		{name: "https backend with a path", spec: "backends: [{name: a, url: 'https://api.example.com/v1'}, {name: b-2, url: 'http://10.0.0.1:8000'}]"},
		{name: "backend path with an @", spec: "backends: [{name: a, url: 'http://a:8000/v1/@team'}]"},
		{name: "trusted team header only", spec: "identity: {trustHeaders: true, teamHeader: x-team}"},
		{name: "URL with a path and port", spec: "backends: [{name: v, url: 'http://a:1/v1/chat'}]"},
		{name: "user and team headers", spec: "identity: {userHeader: X-User, teamHeader: X-Team, trustHeaders: true}"},
		{name: "user header that only starts like Authorization", spec: "identity: {apiKeyHeaders: [X-Api-Key], userHeader: Authorization-User, trustHeaders: true}"},
		{name: "noTeamValue", spec: "identity: {noTeamValue: none}"},
		{name: "identity with an inner space", spec: "fairQueuing: {weights: [{identity: 'team a', weight: 2}]}"},
		{name: "identity with an escaped dollar", spec: "fairQueuing: {weights: [{identity: 'sk-$$x', weight: 2}]}"},
		{name: "override with burst 1", spec: "rateLimits: {perModel: {overrides: [{model: m, requests: 1, burst: 1}]}}"},
		{name: "token override with burst 1", spec: "deferredAdmission: {enabled: true, tokenLimits: {perModel: {overrides: [{model: m, tokens: 1, burst: 1}]}}}"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			if !strings.Contains(spec, "backends:") {
				spec += "\n" + backendYAML
			}
			obj := policyFromSpec(t, ns, fmt.Sprintf("valid-%d", i), spec)
			expectSameAcceptance(t, obj)
			if err := env.Client.Create(testContext(t), obj); err != nil {
				t.Fatalf("the API server rejected a valid policy:\n%s\n%v", indent(spec, "  "), err)
			}
		})
	}
}
