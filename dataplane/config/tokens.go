package config

import "time"

// Cost is what one granted request charges its tenant's virtual time.
type Cost string

// Fair-queuing cost modes.
const (
	// CostRequests charges one unit per request. It is the default, also
	// when FairQueuing.Cost is empty.
	CostRequests Cost = "Requests"
	// CostTokens charges the request's token reservation at grant and
	// corrects it by the tokens actually used at settle. It needs
	// DeferredAdmission, which estimates the reservation.
	CostTokens Cost = "Tokens"
)

// Defaults of deferred admission, like the ones in types.go.
const (
	// DefaultTokenPeriod is the default Period of a token limit: token
	// budgets are usually counted per minute.
	DefaultTokenPeriod = time.Minute
	// DefaultMaxTokensReserved is the default output cap reserved for a
	// request that sets neither max_completion_tokens nor max_tokens.
	DefaultMaxTokensReserved = 1024
	// DefaultIncludeUsage is the default TokenEstimation.IncludeUsage.
	DefaultIncludeUsage = true
	// DefaultMaxHeld is the default bound on requests held across a replica.
	DefaultMaxHeld = 1024
	// DefaultMaxHeldPerTenant is the default bound on requests held for one
	// tenant.
	DefaultMaxHeldPerTenant = 32
	// DefaultMaxHoldWait is the default longest time a request may be held.
	DefaultMaxHoldWait = 10 * time.Second
)

// DeferredAdmission is the rendered token-budget mode (SPEC section 6): after
// the request-count check, a request reserves its estimated tokens from the
// token buckets and is held while they refill. A nil DeferredAdmission in
// Config means the mode is off.
type DeferredAdmission struct {
	// TokenLimits are the token buckets, each optional.
	TokenLimits TokenLimits `json:"tokenLimits"`
	// Estimation says how a request's reservation is estimated.
	Estimation TokenEstimation `json:"estimation"`
	// Bounds limit the held requests of one replica.
	Bounds DeferredBounds `json:"bounds"`
}

// TokenLimits holds the optional token buckets, one per dimension. Each is a
// Limit counting Tokens.
type TokenLimits struct {
	// PerAPIKey is one bucket per hashed API key.
	PerAPIKey *Limit `json:"perAPIKey,omitempty"`
	// PerUser is one bucket per hashed user id.
	PerUser *Limit `json:"perUser,omitempty"`
	// PerTeam is one bucket per hashed team id.
	PerTeam *Limit `json:"perTeam,omitempty"`
	// PerModel is one bucket per model name.
	PerModel *ModelLimits `json:"perModel,omitempty"`
}

// TokenEstimation says how a request's token reservation is estimated.
type TokenEstimation struct {
	// DefaultMaxTokens is the output cap reserved when a request sets
	// neither max_completion_tokens nor max_tokens.
	DefaultMaxTokens int64 `json:"defaultMaxTokens"`
	// IncludeUsage adds stream_options.include_usage to streaming requests
	// so the upstream reports the usage to settle.
	IncludeUsage bool `json:"includeUsage"`
}

// DeferredBounds are the hold limits of one data-plane replica.
type DeferredBounds struct {
	// MaxHeld bounds the requests held across the replica.
	MaxHeld int32 `json:"maxHeld"`
	// MaxHeldPerTenant bounds the requests held for one tenant.
	MaxHeldPerTenant int32 `json:"maxHeldPerTenant"`
	// MaxWait bounds the time one request may be held.
	MaxWait Duration `json:"maxWait"`
}

// DefaultDeferredBounds returns the hold bounds the spec prescribes when a
// policy sets none.
func DefaultDeferredBounds() DeferredBounds {
	return DeferredBounds{
		MaxHeld:          DefaultMaxHeld,
		MaxHeldPerTenant: DefaultMaxHeldPerTenant,
		MaxWait:          Duration{DefaultMaxHoldWait},
	}
}

// DefaultTokenEstimation returns the estimation settings the spec prescribes
// when a policy sets none.
func DefaultTokenEstimation() TokenEstimation {
	return TokenEstimation{DefaultMaxTokens: DefaultMaxTokensReserved, IncludeUsage: DefaultIncludeUsage}
}

// TokensCost reports whether the fair queue charges tokens (FairQueuing.Cost
// is CostTokens) rather than one unit per request.
func (f *FairQueuing) TokensCost() bool { return f.Cost == CostTokens }

func (d *DeferredAdmission) validate(errs *fieldErrors) {
	if d == nil {
		return
	}
	atLeastOne("deferredAdmission.estimation.defaultMaxTokens", d.Estimation.DefaultMaxTokens, errs)
	atLeastOne("deferredAdmission.bounds.maxHeld", int64(d.Bounds.MaxHeld), errs)
	atLeastOne("deferredAdmission.bounds.maxHeldPerTenant", int64(d.Bounds.MaxHeldPerTenant), errs)
	positive("deferredAdmission.bounds.maxWait", d.Bounds.MaxWait, errs)
}

// validateCost checks fairQueuing.cost against the rest of c: token cost needs
// deferred admission, which estimates the reservation it charges.
func (c *Config) validateCost(errs *fieldErrors) {
	switch c.FairQueuing.Cost {
	case "", CostRequests:
	case CostTokens:
		if c.DeferredAdmission == nil {
			errs.add("fairQueuing.cost", "is %q but deferredAdmission is off: token-weighted fairness charges the reservation that deferred admission estimates; enable deferredAdmission or use %q",
				CostTokens, CostRequests)
		}
	default:
		errs.add("fairQueuing.cost", "must be %q or %q, got %q", CostRequests, CostTokens, c.FairQueuing.Cost)
	}
}
