package config

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// The units a Limit counts, named as the JSON key of its rate.
const (
	unitRequests = "requests"
	unitTokens   = "tokens"
)

// eachLimit calls fn with every limit of c, request limits first, with its
// JSON path and unit.
func (c *Config) eachLimit(fn func(path, unit string, l *Limit)) {
	rl := &c.RateLimits
	for _, l := range []struct {
		path  string
		limit *Limit
	}{
		{"rateLimits.global", rl.Global}, {"rateLimits.perClient", rl.PerClient}, {"rateLimits.perAPIKey", rl.PerAPIKey},
		{"rateLimits.perUser", rl.PerUser}, {"rateLimits.perTeam", rl.PerTeam}, {"rateLimits.perBackend", rl.PerBackend},
	} {
		if l.limit != nil {
			fn(l.path, unitRequests, l.limit)
		}
	}
	if d := c.DeferredAdmission; d != nil {
		tl := &d.TokenLimits
		for _, l := range []struct {
			path  string
			limit *Limit
		}{
			{"deferredAdmission.tokenLimits.perAPIKey", tl.PerAPIKey},
			{"deferredAdmission.tokenLimits.perUser", tl.PerUser},
			{"deferredAdmission.tokenLimits.perTeam", tl.PerTeam},
		} {
			if l.limit != nil {
				fn(l.path, unitTokens, l.limit)
			}
		}
	}
	c.eachModelLimits(func(path, unit string, m *ModelLimits) {
		if m.Default != nil {
			fn(path+".default", unit, m.Default)
		}
		for i := range m.Overrides {
			fn(fmt.Sprintf("%s.overrides[%d].limit", path, i), unit, &m.Overrides[i].Limit)
		}
	})
}

// eachModelLimits calls fn with the per-model limits of requests and of
// tokens that c sets.
func (c *Config) eachModelLimits(fn func(path, unit string, m *ModelLimits)) {
	if m := c.RateLimits.PerModel; m != nil {
		fn("rateLimits.perModel", unitRequests, m)
	}
	if d := c.DeferredAdmission; d != nil && d.TokenLimits.PerModel != nil {
		fn("deferredAdmission.tokenLimits.perModel", unitTokens, d.TokenLimits.PerModel)
	}
}

// maxRate is the largest rate and burst a limit of unit may have.
func maxRate(unit string) int64 {
	if unit == unitTokens {
		return LimitTokens
	}
	return math.MaxInt64
}

func (l *Limit) validate(path, unit string, errs *fieldErrors) {
	rate, other, otherUnit := l.Requests, l.Tokens, unitTokens
	if unit == unitTokens {
		rate, other, otherUnit = l.Tokens, l.Requests, unitRequests
	}
	if other != 0 {
		errs.add(path+"."+otherUnit, "is set in a limit of %s; set %s instead", unit, unit)
	}
	inRange := func(field string, v int64) {
		switch limit := maxRate(unit); {
		case limit == math.MaxInt64 && v < 1:
			errs.add(path+"."+field, "must be >= 1, got %d", v)
		case limit != math.MaxInt64 && (v < 1 || v > limit):
			errs.add(path+"."+field, "must be in [1, %d], got %d", limit, v)
		}
	}
	inRange(unit, rate)
	if l.Period.Duration <= 0 {
		errs.add(path+".period", "must be > 0, got %s", l.Period)
	}
	inRange("burst", l.Burst)
}

func (m *ModelLimits) validate(path, unit string, errs *fieldErrors) {
	if m.Default == nil && len(m.Overrides) == 0 {
		errs.add(path, "must set a default or at least one override, or be omitted")
	}
	seen := map[string]int{}
	for i, o := range m.Overrides {
		p := fmt.Sprintf("%s.overrides[%d].model", path, i)
		validateModelName(p, o.Model, errs)
		if j, dup := seen[o.Model]; dup {
			errs.add(p, "duplicates %s.overrides[%d] (%q)", path, j, o.Model)
		} else {
			seen[o.Model] = i
		}
	}
	u := m.UnknownModel
	if unit == unitTokens {
		if u != (UnknownModel{}) {
			errs.add(path+".unknownModel", "is set on token limits; it applies to rateLimits.perModel only")
		}
		return
	}
	switch u.Action {
	case "", UnknownModelRefuse:
		if u.ChargeAs != "" {
			errs.add(path+".unknownModel.chargeAs", "is set but action is %q; set action %q or drop chargeAs", UnknownModelRefuse, UnknownModelCharge)
		}
	case UnknownModelCharge:
		validateModelName(path+".unknownModel.chargeAs", u.ChargeAs, errs)
		if _, overridden := seen[u.ChargeAs]; u.ChargeAs != "" && !overridden && m.Default == nil {
			errs.add(path+".unknownModel.chargeAs", "names %q, which has no limit: add an override for it or set %s.default", u.ChargeAs, path)
		}
	default:
		errs.add(path+".unknownModel.action", "must be %q or %q, got %q", UnknownModelRefuse, UnknownModelCharge, u.Action)
	}
}

// normalize sorts the overrides and turns an empty list into nil.
func (m *ModelLimits) normalize() {
	slices.SortFunc(m.Overrides, func(a, b ModelOverride) int { return strings.Compare(a.Model, b.Model) })
	m.Overrides = nilIfEmpty(m.Overrides)
}

// refillWindow is the time l's bucket takes to refill from empty, computed
// as the limiter does (a whole-nanosecond interval per unit), saturating.
func (l *Limit) refillWindow() time.Duration {
	rate := l.Rate()
	if rate < 1 || l.Period.Duration <= 0 {
		return 0
	}
	iv := max(int64(l.Period.Duration)/rate, 1)
	c := l.Burst
	if c < 1 {
		c = rate
	}
	if c > (1<<63-1)/iv {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(c * iv)
}
