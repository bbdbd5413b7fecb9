package fairqueue

import "time"

// spacingWeight is the EWMA weight (1/8) of a new grant-spacing sample.
const spacingWeight = 0.125

// statsWeight is the EWMA weight (1/64) of a new sample of the grant model's
// statistics: slower than spacingWeight, because a mix of sizes needs a
// longer window to show its mean and spread.
const statsWeight = 1.0 / 64

// grantStats are EWMAs, over the grants measured while backlogged, of a
// grant's cost c, of c^2, of the time since the previous grant dt, and of
// c*dt: enough to fit dt = alpha + beta*c by least squares.
type grantStats struct {
	set            bool
	c, cc, dt, cdt float64
}

func (g *grantStats) add(c, dt float64) {
	if !g.set {
		*g = grantStats{set: true, c: c, cc: c * c, dt: dt, cdt: c * dt}
		return
	}
	g.c += statsWeight * (c - g.c)
	g.cc += statsWeight * (c*c - g.cc)
	g.dt += statsWeight * (dt - g.dt)
	g.cdt += statsWeight * (c*dt - g.cdt)
}

// grantModel returns the time a grant takes as alpha per grant plus beta per
// unit of its cost, and the mean cost of a grant, from the measured grants.
// A limit counting requests spaces grants evenly whatever their cost (beta
// 0); a limit charged by cost spaces them by cost (alpha 0). With equal
// costs the two cannot be told apart and need not be: alpha is the measured
// spacing. The statistics are kept from the first grant of a cost other than
// 1 on; until then every grant cost 1. ok is false before any measurement.
func (s *sched) grantModel() (alpha, beta, meanCost float64, ok bool) {
	g := &s.grants
	if s.spacing <= 0 {
		return 0, 0, 0, false
	}
	if !g.set {
		return s.spacing, 0, 1, true
	}
	if v := g.cc - g.c*g.c; v > 1e-6*g.c*g.c {
		beta = (g.cdt - g.c*g.dt) / v
		alpha = g.dt - beta*g.c
		switch {
		case beta < 0:
			return g.dt, 0, g.c, true
		case alpha < 0:
			return 0, g.dt / g.c, g.c, true
		}
		return alpha, beta, g.c, true
	}
	return s.spacing, 0, g.c, true
}

// spacingOr returns the measured grant spacing, or interval (the contended
// bucket's refill interval) before any grant has been measured.
func (s *sched) spacingOr(interval time.Duration) float64 {
	if s.spacing > 0 {
		return s.spacing
	}
	return float64(max(interval, 0))
}
