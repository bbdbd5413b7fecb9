package fairqueue

import "time"

// spacingWeight is the EWMA weight (1/8) of a new grant-spacing sample.
const spacingWeight = 0.125

// statsWeight is the EWMA weight (1/64) of a new sample of the grant model's
// statistics: slower than spacingWeight, because a mix of sizes needs a
// longer window to show its mean and spread.
const statsWeight = 1.0 / 64

// grantSpacing measures the time between admissions while the queue is
// backlogged and fits the grant model to it. Every estimate the scheduler
// gives (positions, waits, Retry-After of refusals, holds) is in grants; this
// is where grants become time. The time to a grant that follows an empty
// queue is not a spacing and is not measured.
type grantSpacing struct {
	// ewma is the EWMA of the time between grants; 0 before any sample.
	ewma float64
	// stats are the statistics of the grant model (see model).
	stats grantStats
	// last is the time of the last grant; backlogged says whether waiters
	// remained after it, so the next grant's spacing is measured from it.
	last       int64
	backlogged bool
}

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

// admitted records a grant of cost c at now; backlogged says whether
// waiters remain after it. The grant is a sample when the queue stayed
// backlogged since the previous one.
func (g *grantSpacing) admitted(now int64, c uint64, backlogged bool) {
	if g.backlogged {
		dt := float64(now - g.last)
		if g.ewma == 0 {
			g.ewma = dt
		} else {
			g.ewma += spacingWeight * (dt - g.ewma)
		}
		if c != 1 || g.stats.set {
			g.stats.add(float64(c), dt)
		}
	}
	g.last, g.backlogged = now, backlogged
}

// emptied records that the queue ran empty: the time to the next grant is
// not a spacing.
func (g *grantSpacing) emptied() { g.backlogged = false }

// model returns the time a grant takes as alpha per grant plus beta per
// unit of its cost, and the mean cost of a grant, from the measured grants.
// A limit counting requests spaces grants evenly whatever their cost (beta
// 0); a limit charged by cost spaces them by cost (alpha 0). With equal
// costs the two cannot be told apart and need not be: alpha is the measured
// spacing. The statistics are kept from the first grant of a cost other than
// 1 on; until then every grant cost 1. ok is false before any measurement.
func (g *grantSpacing) model() (alpha, beta, meanCost float64, ok bool) {
	st := &g.stats
	if g.ewma <= 0 {
		return 0, 0, 0, false
	}
	if !st.set {
		return g.ewma, 0, 1, true
	}
	if v := st.cc - st.c*st.c; v > 1e-6*st.c*st.c {
		beta = (st.cdt - st.c*st.dt) / v
		alpha = st.dt - beta*st.c
		switch {
		case beta < 0:
			return st.dt, 0, st.c, true
		case alpha < 0:
			return 0, st.dt / st.c, st.c, true
		}
		return alpha, beta, st.c, true
	}
	return g.ewma, 0, st.c, true
}

// meanDt returns the mean time between measured grants: the grant model's
// once it keeps statistics, the spacing before.
func (g *grantSpacing) meanDt() float64 {
	if g.stats.set {
		return g.stats.dt
	}
	return g.ewma
}

// or returns the measured grant spacing, or interval (the contended
// bucket's refill interval) before any grant has been measured.
func (g *grantSpacing) or(interval time.Duration) float64 {
	if g.ewma > 0 {
		return g.ewma
	}
	return float64(max(interval, 0))
}

// untilNext returns the time from now to the next grant, expected sp after
// the last one while the queue is backlogged, sp from now otherwise.
func (g *grantSpacing) untilNext(now, sp int64) int64 {
	if g.backlogged {
		return g.last + sp - now
	}
	return sp
}
