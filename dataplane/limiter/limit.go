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

package limiter

import (
	"fmt"
	"time"
)

// Dimension names one of the rate-limit dimensions of SPEC section 2: the
// seven request-count dimensions and the four token dimensions of SPEC
// section 6, whose buckets hold LLM tokens rather than requests.
type Dimension uint8

const (
	// DimensionGlobal is the single bucket shared by every request, checked before authentication.
	DimensionGlobal Dimension = iota
	// DimensionClient is keyed by client address and checked before authentication.
	DimensionClient
	// DimensionAPIKey is keyed by the hashed API key.
	DimensionAPIKey
	// DimensionUser is keyed by the hashed user id.
	DimensionUser
	// DimensionTeam is keyed by the hashed team id.
	DimensionTeam
	// DimensionModel is keyed by model name and may be overridden per model.
	DimensionModel
	// DimensionBackend is keyed by backend name and charged at dispatch.
	DimensionBackend
	// DimensionAPIKeyTokens is the token budget keyed by the hashed API key.
	DimensionAPIKeyTokens
	// DimensionUserTokens is the token budget keyed by the hashed user id.
	DimensionUserTokens
	// DimensionTeamTokens is the token budget keyed by the hashed team id.
	DimensionTeamTokens
	// DimensionModelTokens is the token budget keyed by model name and may be
	// overridden per model.
	DimensionModelTokens

	// NumDimensions is the number of dimensions; valid values are below it.
	NumDimensions = int(DimensionModelTokens) + 1
)

// tokenOffset maps an identity dimension (api_key..model) to its token
// dimension (api_key_tokens..model_tokens).
const tokenOffset = DimensionAPIKeyTokens - DimensionAPIKey

var dimensionNames = [NumDimensions]string{
	DimensionGlobal:  "global",
	DimensionClient:  "client",
	DimensionAPIKey:  "api_key",
	DimensionUser:    "user",
	DimensionTeam:    "team",
	DimensionModel:   "model",
	DimensionBackend: "backend",

	DimensionAPIKeyTokens: "api_key_tokens",
	DimensionUserTokens:   "user_tokens",
	DimensionTeamTokens:   "team_tokens",
	DimensionModelTokens:  "model_tokens",
}

// String returns the SPEC limit_type of d ("global", "client", "api_key",
// "user", "team", "model", "backend", "api_key_tokens", "user_tokens",
// "team_tokens" or "model_tokens").
func (d Dimension) String() string {
	if int(d) < NumDimensions {
		return dimensionNames[d]
	}
	return fmt.Sprintf("Dimension(%d)", uint8(d))
}

// Queueable reports whether a refusal by d may be held in a fair queue: only
// the identity-bearing dimensions api_key, user, team and model are.
func (d Dimension) Queueable() bool {
	return d >= DimensionAPIKey && d <= DimensionModel
}

// Tokens reports whether d is one of the four token dimensions, whose
// buckets are charged a request's token count rather than one.
func (d Dimension) Tokens() bool {
	return d >= DimensionAPIKeyTokens && d <= DimensionModelTokens
}

// Limit is one token bucket's shape: Requests tokens are added every Period,
// up to Burst tokens held at once. For a token dimension a bucket token is
// one LLM token, so Requests is the tokens allowed per Period.
type Limit struct {
	// Requests is the number of tokens added per Period (requests, or LLM
	// tokens for a token dimension). Must be positive.
	Requests int64
	// Period is the refill period. Must be positive.
	Period time.Duration
	// Burst is the bucket capacity; 0 means Requests.
	Burst int64
}

// Validate reports what is wrong with l, if anything.
func (l Limit) Validate() error {
	switch {
	case l.Requests <= 0:
		return fmt.Errorf("requests must be positive, got %d", l.Requests)
	case l.Period <= 0:
		return fmt.Errorf("period must be positive, got %s", l.Period)
	case l.Burst < 0:
		return fmt.Errorf("burst must be zero (meaning requests) or positive, got %d", l.Burst)
	}
	return nil
}

// capacity returns the bucket size: Burst, or Requests when Burst is 0.
func (l Limit) capacity() int64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return l.Requests
}

// interval returns the time that refills one token, never less than 1ns.
// Integer division rounds down, so a bucket may admit at most one extra
// request per 2^63 ns of error: far below anything observable.
func (l Limit) interval() int64 {
	iv := int64(l.Period) / l.Requests
	if iv < 1 {
		iv = 1
	}
	return iv
}

// Config holds the limit of every dimension; a nil limit switches that
// dimension off.
type Config struct {
	// Global is the one bucket every request shares, checked before authentication.
	Global *Limit
	// Client is per client address, checked before authentication.
	Client *Limit
	// APIKey is per hashed API key.
	APIKey *Limit
	// User is per hashed user id.
	User *Limit
	// Team is per hashed team id.
	Team *Limit
	// Model is per model name, unless ModelOverrides names the model.
	Model *Limit
	// Backend is per backend name, charged at dispatch.
	Backend *Limit
	// ModelOverrides replaces Model for the named models. An override applies
	// even when Model is nil.
	ModelOverrides map[string]Limit

	// APIKeyTokens is the token budget per hashed API key (Requests = tokens per Period).
	APIKeyTokens *Limit
	// UserTokens is the token budget per hashed user id.
	UserTokens *Limit
	// TeamTokens is the token budget per hashed team id.
	TeamTokens *Limit
	// ModelTokens is the token budget per model name, unless
	// ModelTokenOverrides names the model.
	ModelTokens *Limit
	// ModelTokenOverrides replaces ModelTokens for the named models. An
	// override applies even when ModelTokens is nil.
	ModelTokenOverrides map[string]Limit
}

// Validate reports the first invalid limit in c, naming its dimension.
func (c Config) Validate() error {
	for d, l := range c.limits() {
		if l == nil {
			continue
		}
		if err := l.Validate(); err != nil {
			return fmt.Errorf("limit %s: %w", Dimension(d), err)
		}
	}
	for model, l := range c.ModelOverrides {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("limit model override %q: %w", model, err)
		}
	}
	for model, l := range c.ModelTokenOverrides {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("limit %s override %q: %w", DimensionModelTokens, model, err)
		}
	}
	return nil
}

func (c Config) limits() [NumDimensions]*Limit {
	return [NumDimensions]*Limit{
		DimensionGlobal:  c.Global,
		DimensionClient:  c.Client,
		DimensionAPIKey:  c.APIKey,
		DimensionUser:    c.User,
		DimensionTeam:    c.Team,
		DimensionModel:   c.Model,
		DimensionBackend: c.Backend,

		DimensionAPIKeyTokens: c.APIKeyTokens,
		DimensionUserTokens:   c.UserTokens,
		DimensionTeamTokens:   c.TeamTokens,
		DimensionModelTokens:  c.ModelTokens,
	}
}
