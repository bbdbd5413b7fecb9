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

// FairQueuingCost is what one granted request charges its tenant's share.
// +kubebuilder:validation:Enum=Requests;Tokens
type FairQueuingCost string

const (
	// FairQueuingCostRequests charges one unit per request.
	FairQueuingCostRequests FairQueuingCost = "Requests"
	// FairQueuingCostTokens charges the request's token reservation at grant
	// and corrects it by the tokens used when the response ends.
	FairQueuingCostTokens FairQueuingCost = "Tokens"
)

// DeferredAdmission is the token-budget mode: after a request passes the
// request-count limits it reserves its estimated tokens (prompt plus output
// cap) from the token limits, and is held while they refill when the wait
// fits its budget. The reservation is settled from the response's usage.
type DeferredAdmission struct {
	// enabled turns token budgets and deferred admission on. When false,
	// the other fields are ignored and no request is held for tokens.
	// Defaults to false.
	// +optional
	// +kubebuilder:default=false
	Enabled bool `json:"enabled,omitempty"`

	// tokenLimits are the token buckets a request's reservation must fit.
	// Each dimension is optional; an absent dimension does not limit. With
	// none set, reservations are still estimated and settled, for
	// fairQueuing.cost Tokens.
	// +optional
	TokenLimits TokenLimits `json:"tokenLimits,omitzero"`

	// estimation says how a request's reservation is estimated. Defaults
	// to {}.
	// +optional
	// +kubebuilder:default={}
	Estimation TokenEstimation `json:"estimation,omitzero"`

	// bounds cap the held requests and their waiting time. Every bound has
	// a default. Defaults to {}.
	// +optional
	// +kubebuilder:default={}
	Bounds DeferredAdmissionBounds `json:"bounds,omitzero"`
}

// TokenLimits are the token buckets of deferred admission, one per dimension,
// counted in model tokens (prompt plus completion).
type TokenLimits struct {
	// perAPIKey limits the tokens of each API key.
	// +optional
	PerAPIKey *TokenLimit `json:"perAPIKey,omitempty"`

	// perUser limits the tokens of each user.
	// +optional
	PerUser *TokenLimit `json:"perUser,omitempty"`

	// perTeam limits the tokens of each team.
	// +optional
	PerTeam *TokenLimit `json:"perTeam,omitempty"`

	// perModel limits the tokens of each model, with per-model overrides.
	// +optional
	PerModel *ModelTokenLimit `json:"perModel,omitempty"`
}

// TokenLimit is a token bucket counted in model tokens: tokens per period,
// with up to burst tokens saved up.
type TokenLimit struct {
	// tokens is the number of model tokens allowed per period, from 1 to
	// 1000000000000.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000000
	Tokens int64 `json:"tokens"`

	TokenBucket `json:",inline"`
}

// ModelTokenLimit limits each model's tokens: tokens, period and burst apply
// to every model without an override, and overrides set a model's own limit.
// With overrides only, models without an override have no token limit.
// +kubebuilder:validation:XValidation:rule="has(self.tokens) || (has(self.overrides) && size(self.overrides) > 0)",message="perModel needs tokens (a token limit for every model), overrides (token limits for named models), or both"
// +kubebuilder:validation:XValidation:rule="!has(self.burst) || has(self.tokens)",message="perModel.burst is set without perModel.tokens; set tokens too, or move the burst into an override"
type ModelTokenLimit struct {
	// tokens is the number of model tokens allowed per period for each
	// model without an override, from 1 to 1000000000000. When unset, only
	// overridden models are limited.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000000
	Tokens int64 `json:"tokens,omitempty"`

	TokenBucket `json:",inline"`

	// overrides set the token limit of named models: at most 64, with
	// unique model names.
	// +optional
	// +listType=map
	// +listMapKey=model
	// +kubebuilder:validation:MaxItems=64
	Overrides []ModelTokenLimitOverride `json:"overrides,omitempty"`
}

// ModelTokenLimitOverride is the token limit of one named model.
type ModelTokenLimitOverride struct {
	// model is the model name as clients send it, for example
	// "meta-llama/Llama-3.1-8B-Instruct".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Model string `json:"model"`

	TokenLimit `json:",inline"`
}

// TokenEstimation says how a request's token reservation is estimated.
type TokenEstimation struct {
	// defaultMaxTokens is the output cap reserved for a request that sets
	// neither max_completion_tokens nor max_tokens, from 1 to 16777216.
	// Defaults to 1024.
	// +optional
	// +kubebuilder:default=1024
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16777216
	DefaultMaxTokens int64 `json:"defaultMaxTokens,omitempty"`

	// includeUsage, when true, adds stream_options.include_usage to
	// streaming requests so the upstream reports the tokens used in a final
	// chunk, which the data plane strips unless the client asked for it.
	// When false, streamed output is counted instead. Defaults to true.
	// +optional
	// +kubebuilder:default=true
	IncludeUsage *bool `json:"includeUsage,omitempty"`
}

// DeferredAdmissionBounds bound the requests held for tokens on one
// data-plane replica. A request that does not fit a bound is refused at once.
// +kubebuilder:validation:XValidation:rule="!has(self.maxHeld) || !has(self.maxHeldPerTenant) || self.maxHeldPerTenant <= self.maxHeld",message="maxHeldPerTenant must be at most maxHeld: one tenant cannot hold more requests than all tenants together",fieldPath=".maxHeldPerTenant"
type DeferredAdmissionBounds struct {
	// maxHeld is the most requests held across all tenants, from 1 to
	// 1048576 and at least maxHeldPerTenant. Defaults to 1024.
	// +optional
	// +kubebuilder:default=1024
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1048576
	MaxHeld int32 `json:"maxHeld,omitempty"`

	// maxHeldPerTenant is the most requests held for one tenant, from 1 to
	// 65536 and at most maxHeld. Defaults to 32.
	// +optional
	// +kubebuilder:default=32
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	MaxHeldPerTenant int32 `json:"maxHeldPerTenant,omitempty"`

	// maxWait is the longest time one request may be held for tokens, a
	// positive duration of at most 10m. Time spent in the fair queue counts
	// too: both waits end by the request's budget, the smaller of its
	// model's total timeout and the client's own deadline. Defaults to
	// "10s".
	// +optional
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (self.matches('^(([0-9]{1,5}([.][0-9]+)?h)|([0-9]{1,7}([.][0-9]+)?m)|([0-9]{1,9}([.][0-9]+)?s)|([0-9]{1,12}([.][0-9]+)?ms)|([0-9]{1,15}([.][0-9]+)?us)|([0-9]{1,18}([.][0-9]+)?ns)){1,6}$') && duration(self) > duration('0s') && duration(self) <= duration('10m'))",message="maxWait must be a positive duration of at most 10m, such as 10s"
	MaxWait Duration `json:"maxWait,omitzero"`
}
