package fairqueue

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// simBucket is a token bucket with burst 1 that refills one token every
// interval: the shared limit every backlogged tenant competes for.
type simBucket struct {
	interval int64
	avail    int64 // time the next token is available
}

// take returns whether a token was taken at now, or the Retry-After.
func (b *simBucket) take(now int64) (bool, int64) {
	if now >= b.avail {
		b.avail = now + b.interval
		return true, 0
	}
	return false, b.avail - now
}

// sim drives the scheduling core the way the Queue does, but single-threaded
// and on a virtual clock: grant, run the attempt against the bucket at once,
// complete, and jump to the next wake-up.
type sim struct {
	t        testing.TB
	s        *sched
	now      int64
	bucket   *simBucket
	key      []LimitKey
	admitted func(w *waiter) // called before the node is recycled
	refused  func(w *waiter)
	attempt  func(w *waiter) (bool, int64) // nil: take from bucket
	attempts int
}

func newSim(t testing.TB, b Bounds, w Weights, interval time.Duration) *sim {
	m := &sim{t: t, s: newSched(b, w), bucket: &simBucket{interval: int64(interval)}, key: lk("model:m")}
	m.s.onDone = func(w *waiter) {
		if m.refused != nil {
			m.refused(w)
		}
		m.s.release(w)
	}
	return m
}

// arrive offers a fresh request of tenant at the current time the way the
// admission glue would: if the key has waiters it queues behind them (no
// barging), otherwise it tries the bucket and queues only when refused. It
// returns true when the request was admitted or queued.
func (m *sim) arrive(tenant string) (admittedNow bool, w *waiter, reason Reason) {
	ra := int64(0)
	if !m.s.hasWaiters(m.key[0]) {
		ok, r := m.bucket.take(m.now)
		if ok {
			return true, nil, ""
		}
		ra = r
	}
	w, reason, _, _ = m.s.enqueue(m.now, &arrival{tenant: tenant, dim: "user", keys: m.key, deadline: noDeadline, retryAfter: time.Duration(ra), cost: 1})
	return false, w, reason
}

// runUntil processes every grant due now, then advances to the next wake-up,
// until pred returns true (checked after each admission and before each
// advance) or nothing is left to do.
func (m *sim) runUntil(pred func() bool) {
	for {
		if m.grantDue(pred) || pred() {
			return
		}
		wake, ok := m.s.nextWake()
		if !ok {
			return
		}
		m.now = wake
	}
}

// runTo processes every grant due up to and including time end, leaving
// the clock at the last wake-up before end.
func (m *sim) runTo(end int64) {
	never := func() bool { return false }
	for {
		m.grantDue(never)
		wake, ok := m.s.nextWake()
		if !ok || wake > end {
			return
		}
		m.now = wake
	}
}

// grantDue grants and attempts every waiter due now, until pred returns true
// after an admission, which it reports.
func (m *sim) grantDue(pred func() bool) bool {
	for w := m.s.next(m.now); w != nil; w = m.s.next(m.now) {
		m.attempts++
		var ok bool
		var ra int64
		if m.attempt != nil {
			ok, ra = m.attempt(w)
		} else {
			ok, ra = m.bucket.take(m.now)
		}
		switch m.s.complete(m.now, w, ok, ra, nil) {
		case outcomeAdmitted:
			if m.admitted != nil {
				m.admitted(w)
			}
			m.s.release(w)
			if pred() {
				return true
			}
		case outcomeRefused:
			if m.refused != nil {
				m.refused(w)
			}
			m.s.release(w)
		}
	}
	return false
}

// fairnessReport checks admitted counts against weights: each share within
// tol (relative) of weight/sum, Jain's index over share/weight, and the worst
// lag observed during the run.
type fairnessReport struct {
	shares  []float64
	jain    float64
	maxLag  float64
	grants  int
	weights []int
}

func (r fairnessReport) check(tol, minJain, maxLag float64) error {
	sum := 0
	for _, w := range r.weights {
		sum += w
	}
	for i, w := range r.weights {
		want := float64(w) / float64(sum)
		if d := math.Abs(r.shares[i]-want) / want; d > tol {
			return fmt.Errorf("tenant %d (weight %d): share %.4f, want %.4f (relative error %.3f > %.3f)", i, w, r.shares[i], want, d, tol)
		}
	}
	if r.jain < minJain {
		return fmt.Errorf("Jain's index %.4f < %.4f", r.jain, minJain)
	}
	if r.maxLag > maxLag {
		return fmt.Errorf("worst lag %.2f grants > %.2f", r.maxLag, maxLag)
	}
	return nil
}

// newReport tracks grants per tenant index as they happen.
type reportBuilder struct {
	weights []int
	sumW    int
	counts  []int
	n       int
	maxLag  float64
}

func newReportBuilder(weights []int) *reportBuilder {
	b := &reportBuilder{weights: weights, counts: make([]int, len(weights))}
	for _, w := range weights {
		b.sumW += w
	}
	return b
}

func (b *reportBuilder) grant(i int) {
	b.counts[i]++
	b.n++
	for j, w := range b.weights {
		lag := math.Abs(float64(b.n)*float64(w)/float64(b.sumW) - float64(b.counts[j]))
		b.maxLag = max(b.maxLag, lag)
	}
}

func (b *reportBuilder) report() fairnessReport {
	r := fairnessReport{weights: b.weights, grants: b.n, maxLag: b.maxLag, shares: make([]float64, len(b.weights))}
	var sx, sxx float64
	for i, c := range b.counts {
		r.shares[i] = float64(c) / float64(b.n)
		x := r.shares[i] / float64(b.weights[i])
		sx += x
		sxx += x * x
	}
	r.jain = sx * sx / (float64(len(b.weights)) * sxx)
	return r
}

func tenantName(i int) string { return fmt.Sprintf("tenant-%03d", i) }

// lk returns limit keys of kind 0 named by keys.
func lk(keys ...string) []LimitKey {
	out := make([]LimitKey, len(keys))
	for i, k := range keys {
		out[i] = LimitKey{Key: k}
	}
	return out
}
