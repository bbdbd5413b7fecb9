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
	"go/ast"
	"go/parser"
	"go/token"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

// parityCase is one data-plane validation rule: a policy the API server must
// refuse, and the same value in a rendered config, which the data plane
// refuses under dpPath.
type parityCase struct {
	// dpPath is the JSON path config.Validate names, as it names it.
	dpPath string
	// spec is the policy spec (YAML) holding the value.
	spec string
	// want are substrings of the API server's refusal: the field and what
	// is wrong.
	want []string
	// dp puts the same value into a valid data-plane config.
	dp func(c *config.Config)
}

// limit returns a valid data-plane limit.
func limit() *config.Limit {
	return &config.Limit{Requests: 1, Period: config.Duration{Duration: time.Second}, Burst: 1}
}

// parityCases holds a row for every rule of dataplane/config's Validate that
// a policy author can reach; TestValidationParity checks that the list is
// complete.
var parityCases = []parityCase{
	// Identity.
	{"identity.apiKeyHeaders", "identity: {apiKeyHeaders: []}", []string{"spec.identity.apiKeyHeaders", "should have at least 1 items"},
		func(c *config.Config) { c.Identity.APIKeyHeaders = nil }},
	{"identity.apiKeyHeaders[0]", "identity: {apiKeyHeaders: ['x key']}", []string{"spec.identity.apiKeyHeaders[0]", "should match"},
		func(c *config.Config) { c.Identity.APIKeyHeaders = []string{"x key"} }},
	{"identity.apiKeyHeaders[1]", "identity: {apiKeyHeaders: [X-Key, x-key]}", []string{"spec.identity.apiKeyHeaders", "names a header twice"},
		func(c *config.Config) { c.Identity.APIKeyHeaders = []string{"X-Key", "x-key"} }},
	{"identity.userHeader", "identity: {userHeader: 'x user'}", []string{"spec.identity.userHeader", "should match"},
		func(c *config.Config) { c.Identity.UserHeader = "x user" }},
	{"identity.teamHeader", "identity: {teamHeader: 'x team'}", []string{"spec.identity.teamHeader", "should match"},
		func(c *config.Config) { c.Identity.TeamHeader = "x team" }},
	{"identity.modelHeader", "identity: {modelHeader: 'x model'}", []string{"spec.identity.modelHeader", "should match"},
		func(c *config.Config) { c.Identity.ModelHeader = "x model" }},
	{"identity.teamHeader", "identity: {userHeader: X-User, teamHeader: x-user}", []string{"spec.identity.teamHeader", "names the same header as userHeader"},
		func(c *config.Config) { c.Identity.UserHeader, c.Identity.TeamHeader = "X-User", "x-user" }},
	{"identity.userHeader", "identity: {userHeader: authorization}", []string{"spec.identity.userHeader", "must not be Authorization or one of apiKeyHeaders"},
		func(c *config.Config) { c.Identity.UserHeader = "authorization" }},
	{"identity.teamHeader", "identity: {apiKeyHeaders: [X-Api-Key], teamHeader: x-api-key}", []string{"spec.identity.teamHeader", "must not be Authorization or one of apiKeyHeaders"},
		func(c *config.Config) {
			c.Identity.APIKeyHeaders, c.Identity.TeamHeader = []string{"X-Api-Key"}, "x-api-key"
		}},
	{"identity.trustHeaders", "identity: {trustHeaders: true}", []string{"spec.identity", "trustHeaders is true but neither userHeader nor teamHeader is set"},
		func(c *config.Config) { c.Identity.TrustHeaders = true }},

	// Rate limits.
	{"rateLimits.perUser.requests", "rateLimits: {perUser: {requests: 0}}", []string{"spec.rateLimits.perUser.requests", "should be greater than or equal to 1"},
		func(c *config.Config) { l := limit(); l.Requests = 0; c.RateLimits.PerUser = l }},
	{"rateLimits.global.period", "rateLimits: {global: {requests: 1, period: 0s}}", []string{"spec.rateLimits.global.period", "must be a positive duration"},
		func(c *config.Config) { l := limit(); l.Period.Duration = 0; c.RateLimits.Global = l }},
	{"rateLimits.perTeam.burst", "rateLimits: {perTeam: {requests: 1, burst: 0}}", []string{"spec.rateLimits.perTeam.burst", "should be greater than or equal to 1"},
		func(c *config.Config) { l := limit(); l.Burst = 0; c.RateLimits.PerTeam = l }},
	{"rateLimits.perModel", "rateLimits: {perModel: {period: 1s}}", []string{"spec.rateLimits.perModel", "perModel needs requests"},
		func(c *config.Config) { c.RateLimits.PerModel = &config.ModelLimits{} }},
	{"rateLimits.perModel.default.requests", "rateLimits: {perModel: {requests: 0}}", []string{"spec.rateLimits.perModel.requests", "should be greater than or equal to 1"},
		func(c *config.Config) {
			l := limit()
			l.Requests = 0
			c.RateLimits.PerModel = &config.ModelLimits{Default: l}
		}},
	{"rateLimits.perModel.overrides[0].limit.burst", "rateLimits: {perModel: {overrides: [{model: m, requests: 1, burst: 0}]}}", []string{"spec.rateLimits.perModel.overrides[0].burst", "should be greater than or equal to 1"},
		func(c *config.Config) {
			l := limit()
			l.Burst = 0
			c.RateLimits.PerModel = &config.ModelLimits{Overrides: []config.ModelOverride{{Model: "m", Limit: *l}}}
		}},
	{"rateLimits.perModel.overrides[0].model", "rateLimits: {perModel: {overrides: [{model: '', requests: 1}]}}", []string{"spec.rateLimits.perModel.overrides[0].model", "should be at least 1 chars long"},
		func(c *config.Config) {
			c.RateLimits.PerModel = &config.ModelLimits{Overrides: []config.ModelOverride{{Model: "", Limit: *limit()}}}
		}},
	{"rateLimits.perModel.overrides[1].model", "rateLimits: {perModel: {overrides: [{model: m, requests: 1}, {model: m, requests: 2}]}}", []string{"spec.rateLimits.perModel.overrides[1]", "Duplicate value"},
		func(c *config.Config) {
			c.RateLimits.PerModel = &config.ModelLimits{Overrides: []config.ModelOverride{{Model: "m", Limit: *limit()}, {Model: "m", Limit: *limit()}}}
		}},

	// Fair queuing.
	{"fairQueuing.tenantDimension", "fairQueuing: {tenantDimension: client}", []string{"spec.fairQueuing.tenantDimension", "Unsupported value"},
		func(c *config.Config) { c.FairQueuing.TenantDimension = "client" }},
	{"fairQueuing.defaultWeight", "fairQueuing: {defaultWeight: 1001}", []string{"spec.fairQueuing.defaultWeight", "should be less than or equal to 1000"},
		func(c *config.Config) { c.FairQueuing.DefaultWeight = 1001 }},
	{"fairQueuing.weights[0].weight", "fairQueuing: {weights: [{identity: a, weight: 0}]}", []string{"spec.fairQueuing.weights[0].weight", "should be greater than or equal to 1"},
		func(c *config.Config) {
			c.FairQueuing.Weights = []config.Weight{{TenantHash: strings.Repeat("a", 64), Weight: 0}}
		}},
	{"fairQueuing.bounds.maxQueueDepthPerTenant", "fairQueuing: {bounds: {maxQueueDepthPerTenant: 0}}", []string{"spec.fairQueuing.bounds.maxQueueDepthPerTenant", "should be greater than or equal to 1"},
		func(c *config.Config) { c.FairQueuing.Bounds.MaxQueueDepthPerTenant = 0 }},
	{"fairQueuing.bounds.maxTotalQueued", "fairQueuing: {bounds: {maxTotalQueued: 1048577}}", []string{"spec.fairQueuing.bounds.maxTotalQueued", "should be less than or equal to 1048576"},
		func(c *config.Config) { c.FairQueuing.Bounds.MaxTotalQueued = config.LimitMaxTotalQueued + 1 }},
	{"fairQueuing.bounds.maxTenants", "fairQueuing: {bounds: {maxTenants: 65537}}", []string{"spec.fairQueuing.bounds.maxTenants", "should be less than or equal to 65536"},
		func(c *config.Config) { c.FairQueuing.Bounds.MaxTenants = config.LimitMaxTenants + 1 }},
	{"fairQueuing.bounds.maxInFlight", "fairQueuing: {bounds: {maxInFlight: 0}}", []string{"spec.fairQueuing.bounds.maxInFlight", "should be greater than or equal to 1"},
		func(c *config.Config) { c.FairQueuing.Bounds.MaxInFlight = 0 }},
	{"fairQueuing.bounds.maxTotalQueued", "fairQueuing: {bounds: {maxQueueDepthPerTenant: 10, maxTotalQueued: 5}}", []string{"spec.fairQueuing.bounds.maxTotalQueued", "maxTotalQueued must be at least maxQueueDepthPerTenant"},
		func(c *config.Config) {
			c.FairQueuing.Bounds.MaxQueueDepthPerTenant, c.FairQueuing.Bounds.MaxTotalQueued = 10, 5
		}},
	{"fairQueuing.bounds.maxWait", "fairQueuing: {bounds: {maxWait: 11m}}", []string{"spec.fairQueuing.bounds.maxWait", "maxWait must be a positive duration of at most 10m"},
		func(c *config.Config) { c.FairQueuing.Bounds.MaxWait.Duration = 11 * time.Minute }},

	{"rateLimits.perModel.unknownModel.action", "rateLimits: {perModel: {requests: 1, unknownModel: {action: Skip}}}", []string{"spec.rateLimits.perModel.unknownModel.action", "Unsupported value"},
		func(c *config.Config) {
			c.RateLimits.PerModel = &config.ModelLimits{Default: limit(), UnknownModel: config.UnknownModel{Action: "Skip"}}
		}},
	{"rateLimits.perModel.unknownModel.chargeAs", "rateLimits: {perModel: {overrides: [{model: m, requests: 1}], unknownModel: {action: Charge, chargeAs: other}}}", []string{"spec.rateLimits.perModel", "chargeAs names a model without a limit"},
		func(c *config.Config) {
			c.RateLimits.PerModel = &config.ModelLimits{Overrides: []config.ModelOverride{{Model: "m", Limit: *limit()}},
				UnknownModel: config.UnknownModel{Action: config.UnknownModelCharge, ChargeAs: "other"}}
		}},

	// Timeouts.
	{"timeouts.requestTotal", "timeouts: {request: {default: {total: -1s}}}", []string{"spec.timeouts.request.default.total", "total must be a duration"},
		func(c *config.Config) { c.Timeouts.RequestTotal.Duration = -time.Second }},
	{"timeouts.models[0].model", "timeouts: {request: {models: [{model: '', total: 1s}]}}", []string{"spec.timeouts.request.models[0].model", "should be at least 1 chars long"},
		func(c *config.Config) {
			c.Timeouts.Models = []config.ModelTimeout{{Model: "", Total: config.Duration{Duration: time.Second}}}
		}},
	{"timeouts.models[1].model", "timeouts: {request: {models: [{model: m, total: 1s}, {model: m, total: 2s}]}}", []string{"spec.timeouts.request.models[1]", "Duplicate value"},
		func(c *config.Config) {
			c.Timeouts.Models = []config.ModelTimeout{{Model: "m", Total: config.Duration{Duration: time.Second}}, {Model: "m", Total: config.Duration{Duration: time.Second}}}
		}},
	{"timeouts.clientDeadlineHeader", "timeouts: {request: {clientDeadlineHeader: 'x deadline'}}", []string{"spec.timeouts.request.clientDeadlineHeader", "should match"},
		func(c *config.Config) { c.Timeouts.ClientDeadlineHeader = "x deadline" }},
	{"timeouts.models[0].total", "timeouts: {request: {models: [{model: m, total: 0s}]}}", []string{"spec.timeouts.request.models[0].total", "total must be a positive duration"},
		func(c *config.Config) { c.Timeouts.Models = []config.ModelTimeout{{Model: "m"}} }},

	// Backends.
	{"backends[0].name", "backends: [{name: Vllm, url: 'http://v:1'}]", []string{"spec.backends[0].name", "should match"},
		func(c *config.Config) { c.Backends[0].Name = "Vllm" }},
	{"backends[1].name", "backends: [{name: v, url: 'http://v:1'}, {name: v, url: 'http://w:1'}]", []string{"spec.backends[1]", "Duplicate value"},
		func(c *config.Config) { c.Backends = append(c.Backends, c.Backends[0]) }},
	{"backends[0].weight", "backends: [{name: v, url: 'http://v:1', weight: 1001}]", []string{"spec.backends[0].weight", "should be less than or equal to 1000"},
		func(c *config.Config) { c.Backends[0].Weight = 1001 }},
	{"backends[0].url", "backends: [{name: v, url: 'http://[::1'}]", []string{"spec.backends[0].url", "url must be an absolute http or https URL"},
		func(c *config.Config) { c.Backends[0].URL = "http://[::1" }},
	{"backends[0].url", "backends: [{name: v, url: 'ftp://v:1'}]", []string{"spec.backends[0].url", "url must be an absolute http or https URL"},
		func(c *config.Config) { c.Backends[0].URL = "ftp://v:1" }},
	{"backends[0].url", "backends: [{name: v, url: 'http:///v1'}]", []string{"spec.backends[0].url", "url must be an absolute http or https URL"},
		func(c *config.Config) { c.Backends[0].URL = "http:///v1" }},
	{"backends[0].url", "backends: [{name: v, url: 'http://user:pw@v:1'}]", []string{"spec.backends[0].url", "url must not hold credentials"},
		func(c *config.Config) { c.Backends[0].URL = "http://user:pw@v:1" }},
	{"backends[0].url", "backends: [{name: v, url: 'http://a:1/v1?token=abc#frag'}]", []string{"spec.backends[0].url", "url must not have a query (?...) or fragment (#...)"},
		func(c *config.Config) { c.Backends[0].URL = "http://a:1/v1?token=abc#frag" }},
	{"backends[0].url", "backends: [{name: v, url: 'http://a:1/v1#frag'}]", []string{"spec.backends[0].url", "url must not have a query (?...) or fragment (#...)"},
		func(c *config.Config) { c.Backends[0].URL = "http://a:1/v1#frag" }},

	// Deferred admission and token-weighted fair queuing.
	{"deferredAdmission.tokenLimits.perAPIKey.tokens", "deferredAdmission: {enabled: true, tokenLimits: {perAPIKey: {tokens: 0}}}", []string{"spec.deferredAdmission.tokenLimits.perAPIKey.tokens", "should be greater than or equal to 1"},
		func(c *config.Config) {
			d := deferred()
			l := tokenLimit()
			l.Tokens = 0
			d.TokenLimits.PerAPIKey = l
			c.DeferredAdmission = d
		}},
	{"deferredAdmission.tokenLimits.perUser.tokens", "deferredAdmission: {enabled: true, tokenLimits: {perUser: {tokens: 1000000000001}}}", []string{"spec.deferredAdmission.tokenLimits.perUser.tokens", "should be less than or equal to"},
		func(c *config.Config) {
			d := deferred()
			l := tokenLimit()
			l.Tokens = config.LimitTokens + 1
			d.TokenLimits.PerUser = l
			c.DeferredAdmission = d
		}},
	{"deferredAdmission.tokenLimits.perTeam.period", "deferredAdmission: {enabled: true, tokenLimits: {perTeam: {tokens: 1, period: 0s}}}", []string{"spec.deferredAdmission.tokenLimits.perTeam.period", "period must be a positive duration"},
		func(c *config.Config) {
			d := deferred()
			l := tokenLimit()
			l.Period.Duration = 0
			d.TokenLimits.PerTeam = l
			c.DeferredAdmission = d
		}},
	{"deferredAdmission.tokenLimits.perTeam.burst", "deferredAdmission: {enabled: true, tokenLimits: {perTeam: {tokens: 1, burst: 0}}}", []string{"spec.deferredAdmission.tokenLimits.perTeam.burst", "should be greater than or equal to 1"},
		func(c *config.Config) {
			d := deferred()
			l := tokenLimit()
			l.Burst = 0
			d.TokenLimits.PerTeam = l
			c.DeferredAdmission = d
		}},
	{"deferredAdmission.tokenLimits.perModel", "deferredAdmission: {enabled: true, tokenLimits: {perModel: {period: 1m}}}", []string{"spec.deferredAdmission.tokenLimits.perModel", "perModel needs tokens"},
		func(c *config.Config) {
			d := deferred()
			d.TokenLimits.PerModel = &config.ModelLimits{}
			c.DeferredAdmission = d
		}},
	{"deferredAdmission.tokenLimits.perModel.default.tokens", "deferredAdmission: {enabled: true, tokenLimits: {perModel: {tokens: 0}}}", []string{"spec.deferredAdmission.tokenLimits.perModel.tokens", "should be greater than or equal to 1"},
		func(c *config.Config) {
			d := deferred()
			l := tokenLimit()
			l.Tokens = 0
			d.TokenLimits.PerModel = &config.ModelLimits{Default: l}
			c.DeferredAdmission = d
		}},
	{"deferredAdmission.tokenLimits.perModel.overrides[0].limit.burst", "deferredAdmission: {enabled: true, tokenLimits: {perModel: {overrides: [{model: m, tokens: 1, burst: 0}]}}}", []string{"spec.deferredAdmission.tokenLimits.perModel.overrides[0].burst", "should be greater than or equal to 1"},
		func(c *config.Config) {
			d := deferred()
			l := tokenLimit()
			l.Burst = 0
			d.TokenLimits.PerModel = &config.ModelLimits{Overrides: []config.ModelOverride{{Model: "m", Limit: *l}}}
			c.DeferredAdmission = d
		}},
	{"deferredAdmission.tokenLimits.perModel.overrides[0].model", "deferredAdmission: {enabled: true, tokenLimits: {perModel: {overrides: [{model: '', tokens: 1}]}}}", []string{"spec.deferredAdmission.tokenLimits.perModel.overrides[0].model", "should be at least 1 chars long"},
		func(c *config.Config) {
			d := deferred()
			d.TokenLimits.PerModel = &config.ModelLimits{Overrides: []config.ModelOverride{{Model: "", Limit: *tokenLimit()}}}
			c.DeferredAdmission = d
		}},
	{"deferredAdmission.tokenLimits.perModel.overrides[1].model", "deferredAdmission: {enabled: true, tokenLimits: {perModel: {overrides: [{model: m, tokens: 1}, {model: m, tokens: 2}]}}}", []string{"spec.deferredAdmission.tokenLimits.perModel.overrides[1]", "Duplicate value"},
		func(c *config.Config) {
			d := deferred()
			d.TokenLimits.PerModel = &config.ModelLimits{Overrides: []config.ModelOverride{{Model: "m", Limit: *tokenLimit()}, {Model: "m", Limit: *tokenLimit()}}}
			c.DeferredAdmission = d
		}},
	{"deferredAdmission.estimation.defaultMaxTokens", "deferredAdmission: {enabled: true, estimation: {defaultMaxTokens: 0}}", []string{"spec.deferredAdmission.estimation.defaultMaxTokens", "should be greater than or equal to 1"},
		func(c *config.Config) { d := deferred(); d.Estimation.DefaultMaxTokens = 0; c.DeferredAdmission = d }},
	{"deferredAdmission.bounds.maxHeld", "deferredAdmission: {enabled: true, bounds: {maxHeld: 1048577}}", []string{"spec.deferredAdmission.bounds.maxHeld", "should be less than or equal to 1048576"},
		func(c *config.Config) {
			d := deferred()
			d.Bounds.MaxHeld = config.LimitMaxHeld + 1
			c.DeferredAdmission = d
		}},
	{"deferredAdmission.bounds.maxHeldPerTenant", "deferredAdmission: {enabled: true, bounds: {maxHeldPerTenant: 0}}", []string{"spec.deferredAdmission.bounds.maxHeldPerTenant", "should be greater than or equal to 1"},
		func(c *config.Config) { d := deferred(); d.Bounds.MaxHeldPerTenant = 0; c.DeferredAdmission = d }},
	{"deferredAdmission.bounds.maxHeldPerTenant", "deferredAdmission: {enabled: true, bounds: {maxHeld: 8, maxHeldPerTenant: 9}}", []string{"spec.deferredAdmission.bounds.maxHeldPerTenant", "maxHeldPerTenant must be at most maxHeld"},
		func(c *config.Config) {
			d := deferred()
			d.Bounds.MaxHeld, d.Bounds.MaxHeldPerTenant = 8, 9
			c.DeferredAdmission = d
		}},
	{"deferredAdmission.bounds.maxWait", "deferredAdmission: {enabled: true, bounds: {maxWait: 11m}}", []string{"spec.deferredAdmission.bounds.maxWait", "maxWait must be a positive duration of at most 10m"},
		func(c *config.Config) {
			d := deferred()
			d.Bounds.MaxWait.Duration = 11 * time.Minute
			c.DeferredAdmission = d
		}},
	{"fairQueuing.cost", "fairQueuing: {enabled: true, cost: Bytes}", []string{"spec.fairQueuing.cost", "Unsupported value"},
		func(c *config.Config) { c.FairQueuing.Cost = "Bytes" }},
	{"fairQueuing.cost", "fairQueuing: {enabled: true, cost: Tokens}", []string{"spec.fairQueuing.cost", "fairQueuing.cost Tokens needs deferredAdmission.enabled: token-weighted fairness charges the reservation that deferred admission estimates"},
		func(c *config.Config) { c.FairQueuing.Enabled, c.FairQueuing.Cost = true, config.CostTokens }},

	// The hash key Secret's name comes from spec.hashKeySecretRef.
	{"hashKeySecret.name", "hashKeySecretRef: {name: Bad_Name}", []string{"spec.hashKeySecretRef.name", "should match"},
		func(c *config.Config) { c.HashKeySecret.Name = "Bad_Name" }},
}

// operatorOnly are the data-plane rules on values the operator computes
// rather than copies from the spec, with why no policy can reach them.
var operatorOnly = map[string]string{
	"apiVersion":                "constant written by the renderer",
	"kind":                      "constant written by the renderer",
	"policy.namespace":          "the policy's namespace, a valid name by construction",
	"policy.name":               "the policy's name, a valid name by construction",
	"policy.generation":         "metadata.generation, never negative",
	"hashKeySecret.namespace":   "the policy's namespace",
	"hashKeySecret.key":         "constant data key \"key\"",
	"hashKeySecret.fingerprint": "computed from the hash key",
	"identity.keyRegistry.entries[0].apiKeyHash": "HMAC computed by the operator; duplicates are refused while rendering (DuplicateIdentity)",
	"identity.keyRegistry.entries[0].userHash":   "HMAC computed by the operator",
	"identity.keyRegistry.entries[0].teamHash":   "HMAC computed by the operator",
	"fairQueuing.weights[0].tenantHash":          "HMAC computed by the operator; equal identities are merged while rendering",
}

// tokenLimit returns a valid data-plane token limit.
func tokenLimit() *config.Limit {
	return &config.Limit{Tokens: 1, Period: config.Duration{Duration: time.Minute}, Burst: 1}
}

// deferred returns a valid data-plane deferredAdmission without token limits.
func deferred() *config.DeferredAdmission {
	return &config.DeferredAdmission{Estimation: config.DefaultTokenEstimation(), Bounds: config.DefaultDeferredBounds()}
}

// validConfig returns a data-plane config that passes Validate.
func validConfig() *config.Config {
	return &config.Config{
		APIVersion:    config.APIVersion,
		Kind:          config.Kind,
		Policy:        config.PolicyRef{Namespace: "ns", Name: "p", Generation: 1},
		HashKeySecret: config.HashKeySecret{Namespace: "ns", Name: "p-hash-key", Key: "key", Fingerprint: strings.Repeat("0", 16)},
		Identity:      config.Identity{APIKeyHeaders: []string{"Authorization", "x-api-key"}},
		FairQueuing: config.FairQueuing{
			TenantDimension: identity.DimensionUser, DefaultWeight: 1,
			Bounds: config.Bounds{MaxQueueDepthPerTenant: 32, MaxTotalQueued: 4096, MaxTenants: 1024, MaxInFlight: 8, MaxWait: config.Duration{Duration: 5 * time.Second}},
		},
		Timeouts: config.Timeouts{RequestTotal: config.Duration{Duration: time.Minute}},
		Backends: []config.Backend{{Name: "v", URL: "http://v:1", Weight: 1}},
	}
}

// TestValidationParity checks SPEC 7, that whatever the data plane refuses
// the API server refuses first: every row's value is refused by both, with
// messages naming the field; and every rule in dataplane/config/validate.go
// (found by walking its source) has a row or is on values only the operator
// computes. No refusal quotes a URL's query or credentials.
func TestValidationParity(t *testing.T) {
	ns := newNamespace(t)
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("the base data-plane config is invalid: %v", err)
	}
	covered := map[string]bool{}
	for i, tc := range parityCases {
		t.Run(fmt.Sprintf("%02d %s", i, tc.dpPath), func(t *testing.T) {
			c := validConfig()
			tc.dp(c)
			dpErr := c.Validate()
			if dpErr == nil || !strings.Contains(dpErr.Error(), tc.dpPath+": ") {
				t.Errorf("the data plane does not refuse the value under %s: %v", tc.dpPath, dpErr)
			}
			spec := tc.spec
			if !strings.Contains(spec, "backends:") {
				spec += "\n" + backendYAML
			}
			err := env.Client.Create(testContext(t), policyFromSpec(t, ns, fmt.Sprintf("parity-%d", i), spec))
			if err == nil {
				t.Fatalf("the API server accepted what the data plane refuses (%s):\n%s", tc.dpPath, spec)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the API server's refusal lacks %q:\n%v", w, err)
				}
			}
			// The API server's own refusal quotes the value back to the
			// author who sent it; the data plane's goes to logs, status
			// and Events, so it must not.
			for _, leak := range []string{"token=abc", "user:pw"} {
				if strings.Contains(fmt.Sprint(dpErr), leak) {
					t.Errorf("the data plane's refusal quotes a URL's secret part %q: %v", leak, dpErr)
				}
			}
		})
		covered[indexPattern.ReplaceAllString(tc.dpPath, "[0]")] = true
	}
	for p := range operatorOnly {
		covered[p] = true
	}

	rules := dataPlaneRulePaths(t)
	if len(rules) < 20 {
		t.Fatalf("found only %d rule paths in validate.go: the walk is broken", len(rules))
	}
	for _, r := range rules {
		found := false
		for p := range covered {
			// A rule's path may be the prefix of the paths it reports
			// (a limit's path, then .requests).
			for _, pattern := range []string{r, r + ".*", r + `\[*`} {
				if ok, _ := path.Match(pattern, p); ok {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("data-plane rule on %q has no CRD case in parityCases and is not in operatorOnly: add a CRD rule and a row", r)
		}
	}
	t.Logf("%d invalid objects refused by both; %d rule paths in validate.go; %d operator-only", len(parityCases), len(rules), len(operatorOnly))
}

var indexPattern = regexp.MustCompile(`\[[0-9]+\]`)

// dataPlaneRulePaths walks dataplane/config/validate.go and tokens.go (the
// deferred-admission rules) and returns the path pattern of every rule: the first argument of each errs.add and of each
// require*/validate* helper call, literal parts kept, computed parts as "*"
// and "[%d]" indexes as "[0]". Fully computed paths are left out.
func dataPlaneRulePaths(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	seen := map[string]bool{}
	var out []string
	for _, name := range []string{"validate.go", "tokens.go"} {
		f, err := parser.ParseFile(fset, filepath.Join(env.Root, "dataplane", "config", name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = appendRulePaths(out, seen, f)
	}
	return out
}

// appendRulePaths appends to out the rule path patterns of f not yet seen.
func appendRulePaths(out []string, seen map[string]bool, f *ast.File) []string {
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		var name string
		switch fn := call.Fun.(type) {
		case *ast.SelectorExpr:
			name = fn.Sel.Name
		case *ast.Ident:
			name = fn.Name
		}
		if name != "add" && !strings.HasPrefix(name, "require") && !strings.HasPrefix(name, "validate") {
			return true
		}
		p := pathPattern(call.Args[0])
		if strings.Trim(p, `*.\[]0`) == "" || seen[p] {
			return true
		}
		seen[p] = true
		out = append(out, p)
		return true
	})
	return out
}

// pathPattern renders a path expression as a path.Match pattern: string
// literals as they are (fmt.Sprintf formats with [%d] as [0], brackets
// escaped), anything else as "*".
func pathPattern(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.BasicLit:
		if s, err := strconv.Unquote(e.Value); err == nil {
			s = strings.ReplaceAll(s, "[%d]", "[0]")
			return strings.NewReplacer("[", `\[`, "]", `\]`).Replace(s)
		}
	case *ast.BinaryExpr:
		return pathPattern(e.X) + pathPattern(e.Y)
	case *ast.CallExpr:
		if sel, ok := e.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Sprintf" && len(e.Args) > 0 {
			return pathPattern(e.Args[0])
		}
	}
	return "*"
}

// TestValidationParityNearMisses creates policies next to each new rule's
// boundary that both the API server and the data plane must accept.
func TestValidationParityNearMisses(t *testing.T) {
	ns := newNamespace(t)
	specs := []string{
		"backends: [{name: v, url: 'http://a:1/v1/chat'}]",
		"backends: [{name: v, url: 'https://a.example.com'}]",
		"identity: {userHeader: X-User, teamHeader: X-Team, trustHeaders: true}",
		"identity: {apiKeyHeaders: [X-Api-Key], userHeader: Authorization-User, trustHeaders: true}",
		"identity: {noTeamValue: none}",
		"fairQueuing: {weights: [{identity: 'team a', weight: 2}]}",
		"fairQueuing: {weights: [{identity: 'sk-$$x', weight: 2}]}",
		"rateLimits: {perModel: {overrides: [{model: m, requests: 1, burst: 1}]}}",
		"fairQueuing: {enabled: true, cost: Tokens}\ndeferredAdmission: {enabled: true}",
		"fairQueuing: {enabled: true, cost: Requests}",
		"deferredAdmission: {enabled: true, bounds: {maxHeld: 5, maxHeldPerTenant: 5, maxWait: 10m}}",
		"deferredAdmission: {enabled: true, tokenLimits: {perModel: {overrides: [{model: m, tokens: 1, burst: 1}]}}}",
		"deferredAdmission: {enabled: true, tokenLimits: {perUser: {tokens: 1000000000000, period: 24h}}}",
	}
	for i, spec := range specs {
		if !strings.Contains(spec, "backends:") {
			spec += "\n" + backendYAML
		}
		if err := env.Client.Create(testContext(t), policyFromSpec(t, ns, fmt.Sprintf("near-miss-%d", i), spec)); err != nil {
			t.Errorf("the API server refused a valid policy: %v\n%s", err, spec)
		}
	}
	t.Logf("%d valid near-miss objects accepted", len(specs))
}
