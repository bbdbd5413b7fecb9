package fairqueue

import (
	"testing"
	"time"
)

// TestIntermittentTenantKeepsItsShare drives the pattern the end-to-end demo
// exposed: a heavy tenant whose queue empties after almost every grant (it
// arrives a little faster than its share, one request at a time) competes with
// two backlogged tenants for one shared bucket. A tenant that goes idle must
// come back with the virtual finish tag it earned, not at the scheduler's
// virtual time, or it wins every token while the virtual time stands still.
func TestIntermittentTenantKeepsItsShare(t *testing.T) {
	const interval = 20 * time.Millisecond // 50 tokens/s shared
	tenants := []struct {
		name   string
		weight int
		period time.Duration // arrival spacing
	}{
		{"a", 1, time.Second / 75},
		{"b", 1, time.Second / 30},
		{"c", 3, time.Second / 45}, // share 30/s: queue often empty
	}
	weights := Weights{Default: 1, ByTenant: map[string]int{"c": 3}}
	m := newSim(t, Bounds{MaxWait: time.Hour}, weights, interval)
	idx := map[string]int{}
	ws := make([]int, len(tenants))
	next := make([]int64, len(tenants))
	for i, tn := range tenants {
		idx[tn.name], ws[i] = i, tn.weight
	}
	rb := newReportBuilder(ws)
	warm := int64(2 * time.Second)
	m.admitted = func(w *waiter) {
		if m.now >= warm {
			rb.grant(idx[w.tenant])
		}
	}
	end := int64(30 * time.Second)
	for m.now < end {
		// Everything due now: arrivals first, then grants.
		for i, tn := range tenants {
			for next[i] <= m.now {
				if ok, _, _ := m.arrive(tn.name); ok && m.now >= warm {
					rb.grant(i)
				}
				next[i] += int64(tn.period)
			}
		}
		for w := m.s.next(m.now); w != nil; w = m.s.next(m.now) {
			ok, ra := m.bucket.take(m.now)
			if m.s.complete(m.now, w, ok, ra, nil) == outcomeAdmitted {
				m.admitted(w)
			}
			if w.state == stateDone {
				m.s.release(w)
			}
		}
		wake := next[0]
		for _, n := range next[1:] {
			wake = min(wake, n)
		}
		if at, ok := m.s.nextWake(); ok && at < wake {
			wake = at
		}
		m.now = max(wake, m.now+1)
	}
	r := rb.report()
	t.Logf("shares a=%.3f b=%.3f c=%.3f over %d grants", r.shares[0], r.shares[1], r.shares[2], r.grants)
	if err := r.check(0.01, 0.99, 2); err != nil {
		t.Error(err)
	}
}

// TestIdleTagsStayBounded checks that remembering idle tenants' finish tags
// cannot grow memory with the number of distinct tenants seen.
func TestIdleTagsStayBounded(t *testing.T) {
	const maxTenants = 8
	m := newSim(t, Bounds{MaxTenants: maxTenants, MaxWait: time.Hour}, Weights{Default: 1}, time.Millisecond)
	for i := range 1000 {
		// Each tenant is granted once and leaves ahead of the virtual time.
		m.now += int64(time.Millisecond)
		if _, reason, _, _ := m.s.enqueue(m.now, tenantName(i), "user", m.key, noDeadline, 0); reason != "" {
			t.Fatalf("tenant %d refused: %s", i, reason)
		}
		m.runUntil(func() bool { return m.s.depth == 0 })
		if n := len(m.s.idle); n > maxTenants {
			t.Fatalf("after %d tenants, %d idle tags kept; bound is MaxTenants=%d", i+1, n, maxTenants)
		}
	}
	if len(m.s.idle) == 0 {
		t.Fatal("no idle tag was kept: the tenants did not leave ahead of the virtual time")
	}
	if len(m.s.tenants) != 0 {
		t.Fatalf("%d tenants still tracked with empty queues", len(m.s.tenants))
	}
}
