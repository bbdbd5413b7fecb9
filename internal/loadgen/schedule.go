package loadgen

import (
	"time"
)

// arrivals is one tenant's open-loop arrival schedule: request k is due at
// offset from + k/rate after the run starts, for every such offset before
// until. The schedule depends only on the clock, never on responses, so a
// slow server cannot slow the offered load.
type arrivals struct {
	rate  float64
	from  time.Duration
	until time.Duration
	// next is the sequence number of the next arrival to fire.
	next int64
}

// newArrivals returns the schedule of a tenant sending rate requests per
// second from offset from until offset until.
func newArrivals(rate float64, from, until time.Duration) *arrivals {
	return &arrivals{rate: rate, from: from, until: until}
}

// at returns the offset of arrival k.
func (a *arrivals) at(k int64) time.Duration {
	return a.from + time.Duration(float64(k)*float64(time.Second)/a.rate)
}

// due returns the offset of the next arrival and whether there is one.
func (a *arrivals) due() (time.Duration, bool) {
	at := a.at(a.next)
	return at, at < a.until
}
