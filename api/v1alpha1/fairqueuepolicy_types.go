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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Names of the hash-key Secret.
const (
	// HashKeySecretKey is the data key of the hash-key Secret holding the HMAC key.
	HashKeySecretKey = "key"
	// HashKeySecretSuffix is appended to the policy name to name the hash-key
	// Secret when spec.hashKeySecretRef is unset.
	HashKeySecretSuffix = "-hash-key"
)

// Condition types set on FairQueuePolicy status.conditions.
const (
	// ConditionReady is True when the policy's current generation is rendered
	// into its ConfigMap. When False, the last good ConfigMap stays in force.
	ConditionReady = "Ready"
	// ConditionSecretsResolved is True when every Secret the policy names
	// (weightsFrom, keyRegistry, hash key) exists and holds the keys it needs.
	ConditionSecretsResolved = "SecretsResolved"
	// ConditionPaused is True while the policy carries PausedAnnotation: the
	// operator then writes no ConfigMap for it. It is absent otherwise.
	ConditionPaused = "Paused"
	// ConditionHashKeyRotated is True when the operator had to generate a
	// new hash key for a policy it had already rendered (the hash-key Secret
	// was deleted): every identity hash changed, resetting limits and queues.
	// It turns False (reason HashKeyFollowed) once every data plane that
	// reports on the policy runs a config rendered with the new key.
	ConditionHashKeyRotated = "HashKeyRotated"
)

// PausedAnnotation is the annotation that, set to "true" on a policy, stops
// the operator from writing the policy's ConfigMap (creation, updates and
// repairs) until it is removed, for incident response; status still reports
// what would render.
const PausedAnnotation = "fairqueue.dev/paused"

// Condition reasons set on FairQueuePolicy status.conditions.
const (
	// ReasonRendered means the ConfigMap holds the current generation.
	ReasonRendered = "Rendered"
	// ReasonResolved means every referenced Secret and variable was found.
	ReasonResolved = "Resolved"
	// ReasonSecretNotFound means a referenced Secret does not exist.
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonSecretKeyNotFound means a referenced Secret lacks the data key the policy needs.
	ReasonSecretKeyNotFound = "SecretKeyNotFound"
	// ReasonVariableUnresolved means a ${VAR} in weights is in none of the weightsFrom Secrets.
	ReasonVariableUnresolved = "VariableUnresolved"
	// ReasonDuplicateIdentity means two key registry entries hold the same
	// API key. (Weights entries that resolve to one identity are merged
	// instead, so status never confirms a guessed Secret value.)
	ReasonDuplicateIdentity = "DuplicateIdentity"
	// ReasonInvalid means the policy or a referenced Secret holds a value the
	// operator cannot render, for example a malformed key registry.
	ReasonInvalid = "Invalid"
	// ReasonPaused means the policy carries PausedAnnotation and its current
	// generation is not in its ConfigMap.
	ReasonPaused = "Paused"
	// ReasonReconciling means the operator is still rendering the current
	// generation (an API error is being retried); Ready is Unknown.
	ReasonReconciling = "Reconciling"
	// ReasonHashKeyGenerated means the operator generated a new hash key for
	// a policy whose ConfigMap was rendered with another one.
	ReasonHashKeyGenerated = "HashKeyGenerated"
	// ReasonHashKeyFollowed means every data plane reporting on the policy
	// runs a config rendered with the hash key the operator generated.
	ReasonHashKeyFollowed = "HashKeyFollowed"
)

// FairQueuePolicySpec is the desired admission policy of one shared HTTP API:
// how callers are identified, which rate limits apply, whether and how refused
// requests are fairly queued, request timeouts and the backends to proxy to.
// +kubebuilder:validation:XValidation:rule="!has(self.capacity) || self.capacity.backends.all(c, self.backends.exists(b, b.name == c.name))",message="capacity.backends names a backend that is not in spec.backends; each entry must name one of spec.backends",fieldPath=".capacity.backends"
// +kubebuilder:validation:XValidation:rule="!has(self.fairQueuing) || !has(self.fairQueuing.cost) || self.fairQueuing.cost != 'Tokens' || (has(self.deferredAdmission) && has(self.deferredAdmission.enabled) && self.deferredAdmission.enabled)",message="fairQueuing.cost Tokens needs deferredAdmission.enabled: token-weighted fairness charges the reservation that deferred admission estimates",fieldPath=".fairQueuing.cost"
// +kubebuilder:validation:XValidation:rule="!has(self.fairQueuing) || !has(self.fairQueuing.requestBandHeader) || (self.fairQueuing.requestBandHeader.lowerAscii() != 'authorization' && !(has(self.identity) && has(self.identity.apiKeyHeaders) && self.identity.apiKeyHeaders.exists(h, h.lowerAscii() == self.fairQueuing.requestBandHeader.lowerAscii())))",message="fairQueuing.requestBandHeader must not be Authorization or one of identity.apiKeyHeaders: it would read a credential as a band name; name a header of its own, such as x-fair-queue-band",fieldPath=".fairQueuing.requestBandHeader"
type FairQueuePolicySpec struct {
	// identity says where the data plane finds a request's API key, user,
	// team and model. Every field has a default, so it may be omitted.
	// Defaults to {}.
	// +optional
	// +kubebuilder:default={}
	Identity IdentitySpec `json:"identity,omitzero"`

	// rateLimits are the token buckets a request must pass. Each dimension is
	// optional; an absent dimension does not limit.
	// +optional
	RateLimits RateLimits `json:"rateLimits,omitzero"`

	// fairQueuing turns weighted fair queuing of refused requests on or off
	// and sets its weights and bounds. Off by default: every exhausted limit
	// then answers 429 at once. Defaults to {}.
	// +optional
	// +kubebuilder:default={}
	FairQueuing FairQueuing `json:"fairQueuing,omitzero"`

	// deferredAdmission turns on token budgets: per-API-key, user, team and
	// model limits counted in model tokens, reserved from an estimate when
	// a request is admitted and settled from the response's usage. A
	// request refused for tokens is held while they refill when the wait
	// fits its budget. Off by default. Defaults to {}.
	// +optional
	// +kubebuilder:default={}
	DeferredAdmission DeferredAdmission `json:"deferredAdmission,omitzero"`

	// timeouts bound how long a request may take, queued time included.
	// Defaults to {}.
	// +optional
	// +kubebuilder:default={}
	Timeouts Timeouts `json:"timeouts,omitzero"`

	// backends are the upstream servers requests are proxied to: from 1 to 32,
	// with unique names.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Backends []Backend `json:"backends"`

	// hashKeySecretRef names the Secret, in the policy's namespace, whose data
	// key "key" holds the HMAC-SHA256 key (at least 32 random bytes) every
	// identity is hashed with. When unset, the operator uses the Secret
	// "<policy name>-hash-key" and creates it with a random key if it does not
	// exist; a Secret named here must be created by you. Changing the key
	// re-hashes every identity, which resets all queues and limits.
	// +optional
	HashKeySecretRef *LocalSecretReference `json:"hashKeySecretRef,omitempty"`

	// store says where rate-limit bucket state lives: each replica's memory
	// (type Memory, the default) or a Redis shared by every replica (type
	// Redis), so the limits hold for the whole fleet. Defaults to {}.
	// +optional
	// +kubebuilder:default={}
	Store Store `json:"store,omitzero"`

	// capacity admits requests against what the backends can take: per
	// backend, the most requests at once and optionally saturation signals
	// read from its metrics. When unset, the backends do not limit.
	// +optional
	Capacity *Capacity `json:"capacity,omitempty"`
}

// LocalSecretReference names a Secret in the same namespace as the policy.
type LocalSecretReference struct {
	// name is the name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// IdentitySpec says where the data plane reads each identity of a request.
// +kubebuilder:validation:XValidation:rule="!has(self.userHeader) || !has(self.teamHeader) || self.userHeader.lowerAscii() != self.teamHeader.lowerAscii()",message="teamHeader names the same header as userHeader (header names are case-insensitive): every caller's team would equal its user id; name two different headers",fieldPath=".teamHeader"
// +kubebuilder:validation:XValidation:rule="!has(self.userHeader) || (self.userHeader.lowerAscii() != 'authorization' && !(has(self.apiKeyHeaders) && self.apiKeyHeaders.exists(h, h.lowerAscii() == self.userHeader.lowerAscii())))",message="userHeader must not be Authorization or one of apiKeyHeaders: it would make a credential the user id; name the header your authenticating proxy sets",fieldPath=".userHeader"
// +kubebuilder:validation:XValidation:rule="!has(self.teamHeader) || (self.teamHeader.lowerAscii() != 'authorization' && !(has(self.apiKeyHeaders) && self.apiKeyHeaders.exists(h, h.lowerAscii() == self.teamHeader.lowerAscii())))",message="teamHeader must not be Authorization or one of apiKeyHeaders: it would make a credential the team id; name the header your authenticating proxy sets",fieldPath=".teamHeader"
// +kubebuilder:validation:XValidation:rule="!has(self.trustHeaders) || !self.trustHeaders || has(self.userHeader) || has(self.teamHeader)",message="trustHeaders is true but neither userHeader nor teamHeader is set; name the header your authenticating proxy sets, or set trustHeaders to false"
type IdentitySpec struct {
	// apiKeyHeaders are the request headers an API key is read from, 1 to 8
	// distinct names, first match wins. "Authorization" is read as "Bearer <key>"; any other header
	// holds the bare key. Defaults to ["Authorization", "x-api-key"].
	// +optional
	// +listType=set
	// +kubebuilder:default={"Authorization","x-api-key"}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9][A-Za-z0-9-]*$`
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.exists_one(b, b.lowerAscii() == a.lowerAscii()))",message="apiKeyHeaders names a header twice; header names are case-insensitive"
	APIKeyHeaders []string `json:"apiKeyHeaders,omitempty"`

	// userHeader is the header holding the user id, set by an authenticating
	// proxy in front of the data plane. Read only when trustHeaders is true.
	// It may not be Authorization, an apiKeyHeaders entry or teamHeader.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9-]*$`
	UserHeader string `json:"userHeader,omitempty"`

	// teamHeader is the header holding the team id, set by an authenticating
	// proxy in front of the data plane. Read only when trustHeaders is true.
	// It may not be Authorization, an apiKeyHeaders entry or userHeader.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9-]*$`
	TeamHeader string `json:"teamHeader,omitempty"`

	// noTeamValue is a placeholder team id that means "no team" (for example
	// "none"), not blank and without surrounding whitespace. A request whose
	// team is empty or equal to it has no team identity.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[[:space:]]|[[:space:]]$')",message="noTeamValue must not be blank or start or end with whitespace: header values never do, so it could never match"
	NoTeamValue string `json:"noTeamValue,omitempty"`

	// trustHeaders says whether userHeader and teamHeader are honoured. Set
	// it only when every request reaches the data plane through a proxy that
	// sets or strips these headers, otherwise callers can pick their tenant.
	// Defaults to false.
	// +optional
	// +kubebuilder:default=false
	TrustHeaders bool `json:"trustHeaders,omitempty"`

	// modelHeader is a header naming the model. When unset, or absent from a
	// request, the model is the "model" field of a JSON request body.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9-]*$`
	ModelHeader string `json:"modelHeader,omitempty"`

	// keyRegistry maps API keys to users and teams from a Secret. Registry
	// entries take precedence over trusted headers.
	// +optional
	KeyRegistry *KeyRegistry `json:"keyRegistry,omitempty"`
}

// KeyRegistry is a Secret mapping API keys to their user and team. The data
// key (default "keys.json") holds a JSON array of entries such as
//
//	[{"apiKey": "sk-abc", "user": "alice", "team": "research"}]
//
// where user and team are optional. The operator renders only hashes of these
// values into the ConfigMap.
type KeyRegistry struct {
	// secretRef names the Secret holding the registry.
	// +required
	SecretRef LocalSecretReference `json:"secretRef"`

	// key is the data key of the Secret holding the JSON registry. Defaults
	// to "keys.json".
	// +optional
	// +kubebuilder:default="keys.json"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key,omitempty"`

	// enforce, when true, refuses with 401 a request whose API key is not in
	// the registry. When false, such a request keeps its API-key identity and
	// has no user or team from the registry. Defaults to false.
	// +optional
	// +kubebuilder:default=false
	Enforce bool `json:"enforce,omitempty"`
}

// RateLimits are the token buckets of the policy, one per dimension. The
// identity dimensions (perAPIKey, perUser, perTeam, perModel) are checked
// together and atomically, and their refusals are queueable when fair queuing
// is enabled; global and perClient refusals are never queued.
type RateLimits struct {
	// global limits all requests together, before authentication.
	// +optional
	Global *RateLimit `json:"global,omitempty"`

	// perClient limits each client address, before authentication.
	// +optional
	PerClient *RateLimit `json:"perClient,omitempty"`

	// perAPIKey limits each API key.
	// +optional
	PerAPIKey *RateLimit `json:"perAPIKey,omitempty"`

	// perUser limits each user.
	// +optional
	PerUser *RateLimit `json:"perUser,omitempty"`

	// perTeam limits each team.
	// +optional
	PerTeam *RateLimit `json:"perTeam,omitempty"`

	// perModel limits each model, with optional per-model overrides.
	// +optional
	PerModel *ModelRateLimit `json:"perModel,omitempty"`

	// perBackend limits each backend. An exhausted backend is skipped; a
	// request is refused only when every backend is exhausted.
	// +optional
	PerBackend *RateLimit `json:"perBackend,omitempty"`
}

// RateLimit is a token bucket: requests per period, with up to burst
// requests saved up.
type RateLimit struct {
	// requests is the number of requests allowed per period.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	Requests int64 `json:"requests"`

	RequestBucket `json:",inline"`
}

// ModelRateLimit limits each model: requests, period and burst apply to every
// model without an override, and overrides set a model's own limit. With
// overrides only, models without an override are not limited.
// +kubebuilder:validation:XValidation:rule="has(self.requests) || (has(self.overrides) && size(self.overrides) > 0)",message="perModel needs requests (a limit for every model), overrides (limits for named models), or both"
// +kubebuilder:validation:XValidation:rule="!has(self.burst) || has(self.requests)",message="perModel.burst is set without perModel.requests; set requests too, or move the burst into an override"
// +kubebuilder:validation:XValidation:rule="!has(self.unknownModel) || !has(self.unknownModel.chargeAs) || has(self.requests) || (has(self.overrides) && self.overrides.exists(o, o.model == self.unknownModel.chargeAs))",message="perModel.unknownModel.chargeAs names a model without a limit; add an override for it or set perModel.requests"
type ModelRateLimit struct {
	// requests is the number of requests allowed per period for each model
	// without an override. When unset, only overridden models are limited.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	Requests int64 `json:"requests,omitempty"`

	RequestBucket `json:",inline"`

	// overrides set the limit of named models: at most 64, with unique model
	// names.
	// +optional
	// +listType=map
	// +listMapKey=model
	// +kubebuilder:validation:MaxItems=64
	Overrides []ModelRateLimitOverride `json:"overrides,omitempty"`

	// unknownModel says what happens to a request with a body whose model
	// cannot be read: a body that is not a JSON object Go's encoding/json
	// accepts (for example one containing NaN, which some upstreams accept)
	// or that has no non-empty string "model". Per-model limits are never
	// skipped: by default such a request is refused with 400
	// model_not_determined; with action Charge it is charged to the bucket of
	// the model named in chargeAs. Requests without a body are not affected.
	// +optional
	UnknownModel *UnknownModelPolicy `json:"unknownModel,omitempty"`
}

// UnknownModelAction is what happens to a request whose model cannot be read.
// +kubebuilder:validation:Enum=Refuse;Charge
type UnknownModelAction string

const (
	// UnknownModelRefuse answers 400 model_not_determined.
	UnknownModelRefuse UnknownModelAction = "Refuse"
	// UnknownModelCharge charges the bucket of UnknownModelPolicy.ChargeAs.
	UnknownModelCharge UnknownModelAction = "Charge"
)

// UnknownModelPolicy decides how per-model limits apply to a request whose
// model cannot be read from its body.
// +kubebuilder:validation:XValidation:rule="(self.action == 'Charge') == has(self.chargeAs)",message="set chargeAs exactly when action is Charge: it names the model whose bucket such requests are charged to"
type UnknownModelPolicy struct {
	// action is Refuse (the default: answer 400 model_not_determined) or
	// Charge (charge the bucket of chargeAs). Defaults to "Refuse".
	// +optional
	// +kubebuilder:default=Refuse
	Action UnknownModelAction `json:"action,omitempty"`

	// chargeAs is the model whose per-model bucket is charged when action is
	// Charge, typically the most expensive one. It must have a limit: an
	// override, or perModel.requests.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	ChargeAs string `json:"chargeAs,omitempty"`
}

// ModelRateLimitOverride is the rate limit of one named model.
type ModelRateLimitOverride struct {
	// model is the model name as clients send it, for example
	// "meta-llama/Llama-3.1-8B-Instruct".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Model string `json:"model"`

	RateLimit `json:",inline"`
}

// TenantDimension is the identity a request is queued under.
// +kubebuilder:validation:Enum=user;apiKey;team
type TenantDimension string

const (
	// TenantDimensionUser queues each user separately.
	TenantDimensionUser TenantDimension = "user"
	// TenantDimensionAPIKey queues each API key separately.
	TenantDimensionAPIKey TenantDimension = "apiKey"
	// TenantDimensionTeam queues each team separately.
	TenantDimensionTeam TenantDimension = "team"
)

// FairQueuing configures the per-tenant queues and weighted scheduler that hold
// requests refused by an identity rate limit.
// +kubebuilder:validation:XValidation:rule="!has(self.weights) || (has(self.weightsFrom) && size(self.weightsFrom) > 0) || self.weights.all(w, !w.identity.matches('^([^$]|[$][$])*[$]([{]|[A-Za-z_])'))",message="weights use a ${VAR} reference but weightsFrom names no Secret to resolve it from; add weightsFrom, or write $$ for a literal $",fieldPath=".weights"
// +kubebuilder:validation:XValidation:rule="has(self.priorityBands) || !has(self.defaultBand)",message="defaultBand is set but priorityBands is not: list the bands in priorityBands, highest first, or remove defaultBand",fieldPath=".defaultBand"
// +kubebuilder:validation:XValidation:rule="!has(self.priorityBands) || !has(self.defaultBand) || self.priorityBands.exists(b, b.name == self.defaultBand)",message="defaultBand names no band of priorityBands: name one of them, or leave defaultBand unset for the lowest (last) band",fieldPath=".defaultBand"
// +kubebuilder:validation:XValidation:rule="has(self.priorityBands) || !has(self.requestBandHeader)",message="requestBandHeader is set but priorityBands is not: list the bands in priorityBands, highest first, or remove requestBandHeader",fieldPath=".requestBandHeader"
// +kubebuilder:validation:XValidation:rule="has(self.priorityBands) || !has(self.weights) || self.weights.all(w, !has(w.band))",message="a weights entry names a band but priorityBands is not set: list the bands in priorityBands, highest first, or remove the band from weights",fieldPath=".weights"
// +kubebuilder:validation:XValidation:rule="!has(self.priorityBands) || !has(self.weights) || self.weights.all(w, !has(w.band) || self.priorityBands.exists(b, b.name == w.band))",message="a weights entry names a band that priorityBands does not list: name one of priorityBands",fieldPath=".weights"
// +kubebuilder:validation:XValidation:rule="has(self.priorityBands) || !has(self.weightsFrom) || self.weightsFrom.all(s, !has(s.band))",message="a weightsFrom entry names a band but priorityBands is not set: list the bands in priorityBands, highest first, or remove the band from weightsFrom",fieldPath=".weightsFrom"
// +kubebuilder:validation:XValidation:rule="!has(self.priorityBands) || !has(self.weightsFrom) || self.weightsFrom.all(s, !has(s.band) || self.priorityBands.exists(b, b.name == s.band))",message="a weightsFrom entry names a band that priorityBands does not list: name one of priorityBands",fieldPath=".weightsFrom"
type FairQueuing struct {
	// enabled turns fair queuing on. When false, every exhausted limit
	// answers 429 at once and the other fields are ignored. Defaults to
	// false.
	// +optional
	// +kubebuilder:default=false
	Enabled bool `json:"enabled,omitempty"`

	// tenantDimension is the identity a request is queued under: user,
	// apiKey or team. When a request lacks it, the data plane falls back to
	// user, then team, then API key; a request with none is not queued.
	// Defaults to "user".
	// +optional
	// +kubebuilder:default=user
	TenantDimension TenantDimension `json:"tenantDimension,omitempty"`

	// defaultWeight is the weight of every tenant without a weights entry,
	// from 1 to 1000. Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	DefaultWeight int32 `json:"defaultWeight,omitempty"`

	// weights give tenants a relative share of admission attempts: a tenant
	// at weight 3 is served three times as often as one at weight 1 while
	// both wait, and optionally a priority band. Identities are unique; at
	// most 1024 entries. Weights are accepted and ignored while enabled is
	// false, so they can be staged before fair queuing is turned on.
	// +optional
	// +listType=map
	// +listMapKey=identity
	// +kubebuilder:validation:MaxItems=1024
	Weights []TenantWeight `json:"weights,omitempty"`

	// weightsFrom names the Secrets, in the policy's namespace, whose data
	// keys resolve ${VAR} and $VAR references in weights. A variable name is
	// a Secret data key made of letters, digits and '_'; when several Secrets
	// hold it, the first listed wins. An entry with a band also puts every
	// identity the Secret holds (each data value is one) in that band. At
	// most 16 Secrets, each named once. Accepted and ignored while enabled
	// is false.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.exists_one(b, b.secretRef.name == a.secretRef.name))",message="weightsFrom names the same Secret more than once"
	WeightsFrom []WeightsSource `json:"weightsFrom,omitempty"`

	// bounds cap the queues' size and waiting time. Every bound has a default.
	// Defaults to {}.
	// +optional
	// +kubebuilder:default={}
	Bounds FairQueuingBounds `json:"bounds,omitzero"`
	// cost is what one granted request charges its tenant's share: Requests
	// (one per request, so fairness holds in requests) or Tokens (the
	// request's token reservation at grant, corrected by the tokens used
	// when the response ends, so a tenant sending 10x larger requests does
	// not get 10x the capacity). Tokens needs deferredAdmission.enabled,
	// which estimates the reservation. Defaults to "Requests".
	// +optional
	// +kubebuilder:default=Requests
	Cost FairQueuingCost `json:"cost,omitempty"`

	// priorityBands are the priority bands tenants are scheduled in, highest
	// first: freed capacity goes to the highest band with a waiting request,
	// and within a band to its tenants by weight. At most 8 bands with
	// unique names. A lower band's minShare bounds how long the bands above
	// can starve it. Unset by default: every tenant is in one band, as
	// without bands.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="self.map(b, has(b.minShare) ? b.minShare : 0.0).sum() < 1.0",message="the minShare of all priorityBands must sum to less than 1: they are fractions of the same grants, and the highest band needs the rest"
	// +kubebuilder:validation:XValidation:rule="size(self) == 0 || !has(self[0].minShare) || self[0].minShare == 0.0",message="the highest band (the first of priorityBands) must not set minShare: it already receives every grant it can use; set minShare on a lower band"
	PriorityBands []PriorityBand `json:"priorityBands,omitempty"`

	// defaultBand is the band of every tenant that neither a weights entry
	// nor a weightsFrom Secret with a band places in one. It must name one
	// of priorityBands and needs them. Defaults to the lowest (last) band of
	// priorityBands, so a tenant nobody placed never outranks one that was.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	DefaultBand string `json:"defaultBand,omitempty"`

	// requestBandHeader names a request header with which a request may move
	// itself to a lower band than its tenant's (a batch job of an
	// interactive tenant), never a higher one: a value naming a higher or
	// unknown band is ignored. It may not be Authorization or one of
	// identity.apiKeyHeaders, and needs priorityBands. Unset by default:
	// requests keep their tenant's band.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9-]*$`
	RequestBandHeader string `json:"requestBandHeader,omitempty"`
}

// TenantWeight is the weight of one tenant.
type TenantWeight struct {
	// identity is the tenant's raw user id, team id or API key, matching
	// tenantDimension, at most 512 characters, not blank and without
	// surrounding whitespace. It may contain ${VAR} or $VAR references resolved from
	// weightsFrom Secrets; write $$ for a literal $. Keep API keys in a
	// Secret and reference them, never write them here. The rendered
	// ConfigMap holds only the identity's hash.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^([^$]|[$][$]|[$][{][A-Za-z_][A-Za-z0-9_]*[}]|[$][A-Za-z_][A-Za-z0-9_]*)*$')",message="identity has a '$' that starts no variable: write ${NAME} or $NAME (letters, digits and '_', not starting with a digit), or $$ for a literal '$'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[[:space:]]|[[:space:]]$')",message="identity must not be blank or start or end with whitespace: a request's identity never does, so the entry could never match"
	Identity string `json:"identity"`

	// weight is the tenant's relative share, from 1 to 1000.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Weight int32 `json:"weight"`

	// band is the tenant's priority band, one of priorityBands. When unset,
	// the tenant is in the band of the first weightsFrom Secret with a band
	// that holds its identity, else in defaultBand.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Band string `json:"band,omitempty"`
}

// WeightsSource is a Secret whose data keys are variables for weights, and
// optionally whose values are the members of one priority band.
type WeightsSource struct {
	// secretRef names the Secret.
	// +required
	SecretRef LocalSecretReference `json:"secretRef"`

	// band, one of priorityBands, puts every identity the Secret holds in
	// that band: each data value is one raw identity matching
	// tenantDimension, on one line (surrounding whitespace is removed), at
	// most 4096 across all such Secrets, at defaultWeight. This keeps band membership in Secrets, for
	// GitOps. A weights entry naming the same identity sets its weight, and
	// its band when the entry names one; an identity in several such Secrets
	// is in the band of the first listed. Unset by default: the Secret only
	// resolves variables.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Band string `json:"band,omitempty"`
}

// FairQueuingBounds bound the queues of one data-plane replica. A request that
// does not fit a bound is refused at once.
// +kubebuilder:validation:XValidation:rule="!has(self.maxTotalQueued) || !has(self.maxQueueDepthPerTenant) || self.maxTotalQueued >= self.maxQueueDepthPerTenant",message="maxTotalQueued must be at least maxQueueDepthPerTenant: one tenant's queue cannot hold more than all queues together",fieldPath=".maxTotalQueued"
type FairQueuingBounds struct {
	// maxQueueDepthPerTenant is the most requests queued for one tenant,
	// from 1 to 65536. Defaults to 32.
	// +optional
	// +kubebuilder:default=32
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	MaxQueueDepthPerTenant int32 `json:"maxQueueDepthPerTenant,omitempty"`

	// maxTotalQueued is the most requests queued across all tenants, from 1
	// to 1048576 and at least maxQueueDepthPerTenant. Defaults to 4096.
	// +optional
	// +kubebuilder:default=4096
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1048576
	MaxTotalQueued int32 `json:"maxTotalQueued,omitempty"`

	// maxTenants is the most tenant queues tracked at once, from 1 to 65536.
	// A tenant keeps its slot for maxWait after its queue empties; with every
	// slot taken, new tenants share 16 overflow queues (shuffle sharding).
	// Defaults to 1024.
	// +optional
	// +kubebuilder:default=1024
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	MaxTenants int32 `json:"maxTenants,omitempty"`

	// maxInFlight is the most admission attempts running at once, from 1 to
	// 4096. Defaults to 8.
	// +optional
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	MaxInFlight int32 `json:"maxInFlight,omitempty"`

	// maxWait is the longest time one request may spend queued, a positive
	// duration of at most 10m. A request's budget is the smallest of maxWait,
	// the total timeout of its model and the client's own deadline
	// (X-Stainless-Timeout, X-Envoy-Expected-Rq-Timeout-Ms or
	// timeouts.request.clientDeadlineHeader) less 250ms. Defaults to "5s".
	// +optional
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (self.matches('^(([0-9]{1,5}([.][0-9]+)?h)|([0-9]{1,7}([.][0-9]+)?m)|([0-9]{1,9}([.][0-9]+)?s)|([0-9]{1,12}([.][0-9]+)?ms)|([0-9]{1,15}([.][0-9]+)?us)|([0-9]{1,18}([.][0-9]+)?ns)){1,6}$') && duration(self) > duration('0s') && duration(self) <= duration('10m'))",message="maxWait must be a positive duration of at most 10m, such as 5s"
	MaxWait Duration `json:"maxWait,omitzero"`
}

// Timeouts bound how long requests may take.
type Timeouts struct {
	// request bounds each proxied request, from arrival to the end of the
	// response, queued time included. Defaults to {}.
	// +optional
	// +kubebuilder:default={}
	Request RequestTimeouts `json:"request,omitzero"`
}

// RequestTimeouts are the request timeouts: a default and per-model overrides.
type RequestTimeouts struct {
	// default applies to every request whose model has no entry in models.
	// Defaults to {}.
	// +optional
	// +kubebuilder:default={}
	Default RequestTimeout `json:"default,omitzero"`

	// models set the timeout of named models: at most 64, with unique model
	// names.
	// +optional
	// +listType=map
	// +listMapKey=model
	// +kubebuilder:validation:MaxItems=64
	Models []ModelRequestTimeout `json:"models,omitempty"`

	// clientDeadlineHeader names a request header carrying the client's own
	// timeout, in seconds ("30", "2.5") or as a duration ("1500ms"), counted
	// from arrival. It bounds the request's queueing budget like the
	// X-Stainless-Timeout (seconds; sent by openai-node for a per-request
	// timeout only) and X-Envoy-Expected-Rq-Timeout-Ms headers, which are
	// always honoured. openai-python users may name X-Stainless-Read-Timeout.
	// Default: none (only those two are read).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9-]*$`
	ClientDeadlineHeader string `json:"clientDeadlineHeader,omitempty"`
}

// RequestTimeout is the default request timeout.
type RequestTimeout struct {
	// total is the longest a request may take, queued time included, a
	// positive duration of at most 1h. Defaults to "60s".
	// +optional
	// +kubebuilder:default="60s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (self.matches('^(([0-9]{1,5}([.][0-9]+)?h)|([0-9]{1,7}([.][0-9]+)?m)|([0-9]{1,9}([.][0-9]+)?s)|([0-9]{1,12}([.][0-9]+)?ms)|([0-9]{1,15}([.][0-9]+)?us)|([0-9]{1,18}([.][0-9]+)?ns)){1,6}$') && duration(self) > duration('0s') && duration(self) <= duration('1h'))",message="total must be a positive duration of at most 1h, such as 60s"
	Total Duration `json:"total,omitzero"`
}

// ModelRequestTimeout is the request timeout of one named model.
type ModelRequestTimeout struct {
	// model is the model name as clients send it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Model string `json:"model"`

	// total is the longest a request for this model may take, queued time
	// included, a positive duration of at most 1h.
	// +required
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (self.matches('^(([0-9]{1,5}([.][0-9]+)?h)|([0-9]{1,7}([.][0-9]+)?m)|([0-9]{1,9}([.][0-9]+)?s)|([0-9]{1,12}([.][0-9]+)?ms)|([0-9]{1,15}([.][0-9]+)?us)|([0-9]{1,18}([.][0-9]+)?ns)){1,6}$') && duration(self) > duration('0s') && duration(self) <= duration('1h'))",message="total must be a positive duration of at most 1h, such as 60s"
	Total Duration `json:"total"`
}

// Backend is one upstream server requests are proxied to.
// +kubebuilder:validation:XValidation:rule="!has(self.url) || (isURL(self.url) && url(self.url).getScheme() in ['http', 'https'] && size(url(self.url).getHostname()) != 0)",message="url must be an absolute http or https URL, such as http://vllm-a.models.svc:8000",fieldPath=".url"
// +kubebuilder:validation:XValidation:rule="!has(self.url) || !self.url.matches('^[^/?#]*//[^/?#]*@')",message="url must not hold credentials (user:password@): a policy is readable by everyone who can read the namespace's policies",fieldPath=".url"
// +kubebuilder:validation:XValidation:rule="!has(self.url) || !self.url.matches('[?#]')",message="url must not have a query (?...) or fragment (#...): the data plane appends each request's own path and query to the base URL",fieldPath=".url"
type Backend struct {
	// name identifies the backend in metrics and in perBackend limits: a DNS
	// label of at most 63 lowercase letters, digits and '-'.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// url is the backend's absolute http or https base URL, for example
	// "http://vllm-a.models.svc:8000", without credentials, query or fragment.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`

	// weight is the backend's relative share of requests, from 1 to 1000.
	// Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Weight int32 `json:"weight,omitempty"`
}

// FairQueuePolicyStatus is the observed state of a FairQueuePolicy, written by
// the operator.
type FairQueuePolicyStatus struct {
	// observedGeneration is the generation of the spec the status describes.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are the latest observations of the policy: Ready,
	// SecretsResolved, and when they apply Paused and HashKeyRotated.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// configMapName is the name of the rendered ConfigMap the data plane
	// loads, in the policy's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ConfigMapName string `json:"configMapName,omitempty"`

	// configHash is the hash of the rendered ConfigMap's content, so a reader
	// can tell which configuration a data-plane replica runs.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ConfigHash string `json:"configHash,omitempty"`

	// weightedTenants is the number of weights entries of the rendered
	// generation.
	// +optional
	// +kubebuilder:validation:Minimum=0
	WeightedTenants int32 `json:"weightedTenants,omitempty"`

	// dataPlaneReplicas is the number of data-plane replicas serving the
	// policy, when known.
	// +optional
	// +kubebuilder:validation:Minimum=0
	DataPlaneReplicas int32 `json:"dataPlaneReplicas"`

	// updatedReplicas is the number of data-plane replicas running the
	// configuration named by configHash, when known.
	// +optional
	// +kubebuilder:validation:Minimum=0
	UpdatedReplicas int32 `json:"updatedReplicas"`
}

// FairQueuePolicy gives every tenant of a shared HTTP API its weighted fair
// share of capacity when rate limits are exhausted. The operator renders it
// into a ConfigMap that the data plane loads. Its name is at most 63
// characters, so that names and labels derived from it stay valid.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=fqp,categories=fairqueue
// +kubebuilder:printcolumn:name="Enabled",type=boolean,JSONPath=`.spec.fairQueuing.enabled`
// +kubebuilder:printcolumn:name="Tenant",type=string,JSONPath=`.spec.fairQueuing.tenantDimension`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Updated",type=integer,JSONPath=`.status.updatedReplicas`,description="Data-plane replicas running the config named by configHash"
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.dataPlaneReplicas`,description="Data-plane replicas serving the policy"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Config Hash",type=string,JSONPath=`.status.configHash`,priority=1
// +kubebuilder:printcolumn:name="Generation",type=integer,JSONPath=`.metadata.generation`,priority=1
// +kubebuilder:printcolumn:name="Observed",type=integer,JSONPath=`.status.observedGeneration`,priority=1,description="The generation the status describes"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name must be at most 63 characters: the operator derives the ConfigMap's and hash key Secret's names and a label value from it"
type FairQueuePolicy struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired policy.
	// +required
	Spec FairQueuePolicySpec `json:"spec"`

	// status is the policy's observed state, written by the operator.
	// +optional
	Status FairQueuePolicyStatus `json:"status,omitzero"`
}

// FairQueuePolicyList is a list of FairQueuePolicy objects.
//
// +kubebuilder:object:root=true
type FairQueuePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// items are the policies.
	Items []FairQueuePolicy `json:"items"`
}
