package fairqueue

import (
	"fmt"
	"slices"
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

// TestTenantTableStaysBounded checks that remembering idle tenants cannot grow
// memory with the number of distinct tenants seen: idle tenants are evicted
// least recently active first.
func TestTenantTableStaysBounded(t *testing.T) {
	const maxTenants = 8
	// Tenants arrive one maxWait apart, so each idle one may be evicted.
	m := newSim(t, Bounds{MaxTenants: maxTenants, MaxWait: time.Millisecond}, Weights{Default: 1}, time.Millisecond)
	for i := range 1000 {
		// Each tenant is granted once and goes idle.
		m.now += int64(time.Millisecond)
		if _, reason, _, _ := m.s.enqueue(m.now, &arrival{tenant: tenantName(i), dim: "user", keys: m.key, deadline: noDeadline, cost: 1}); reason != "" {
			t.Fatalf("tenant %d refused: %s", i, reason)
		}
		m.runUntil(func() bool { return m.s.depth == 0 })
		if n := len(m.s.tenants); n > maxTenants {
			t.Fatalf("after %d tenants, %d kept; bound is MaxTenants=%d", i+1, n, maxTenants)
		}
	}
	if m.s.active != 0 {
		t.Fatalf("%d queues active with nothing queued", m.s.active)
	}
	// The table holds the most recent tenants, oldest idle first.
	var got []string
	for tn := m.s.idle.front(); tn != nil; tn = tn.inIdle.nextElem() {
		got = append(got, tn.key)
	}
	var want []string
	for i := 1000 - maxTenants; i < 1000; i++ {
		want = append(want, tenantName(i))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("idle tenants %v, want the %d most recent %v", got, maxTenants, want)
	}
}

// TestFreshKeyFloodDoesNotLockOutEstablishedTenants churns 100,000 fresh
// tenant keys, ten times faster than the shared limit grants, through a table
// of 1024 tenants, while an established tenant sends one request at a time
// with 50ms between an answer and its next request. The established tenant
// keeps its queue (its idle entry is not evicted within maxWait), is never
// refused tenant_table_full and gets a tenant's share; the flood shares the
// overflow queues; the table never exceeds its bound.
func TestFreshKeyFloodDoesNotLockOutEstablishedTenants(t *testing.T) {
	const (
		freshKeys = 100_000
		arrival   = 100 * time.Microsecond // flood: 10 keys per grant
		think     = 50 * time.Millisecond
	)
	m := newSim(t, Bounds{MaxWait: 5 * time.Second}, Weights{Default: 1}, time.Millisecond)
	refused := map[string]map[Reason]int{"alice": {}, "flood": {}}
	admitted := map[string]int{}
	who := func(tenant string) string {
		if tenant == "alice" {
			return "alice"
		}
		return "flood"
	}
	aliceNext := int64(0) // when alice sends her next request; -1 while one is out
	m.admitted = func(w *waiter) {
		admitted[who(w.tenant)]++
		if w.tenant == "alice" {
			aliceNext = m.now + int64(think)
		}
	}
	m.refused = func(w *waiter) {
		refused[who(w.tenant)][w.reason]++
		if w.tenant == "alice" {
			aliceNext = m.now + int64(think)
		}
	}
	offer := func(tenant string) {
		ok, w, reason := m.arrive(tenant)
		switch {
		case ok:
			admitted[who(tenant)]++
			if tenant == "alice" {
				aliceNext = m.now + int64(think)
			}
		case w == nil:
			refused[who(tenant)][reason]++
			if tenant == "alice" {
				aliceNext = m.now + int64(think)
			}
		}
	}
	maxTable := 0
	for i := 0; i < freshKeys; i++ {
		m.now = int64(i) * int64(arrival)
		if aliceNext >= 0 && aliceNext <= m.now {
			aliceNext = -1
			offer("alice")
		}
		offer(fmt.Sprintf("fresh-%06d", i))
		end := m.now + int64(arrival)
		m.runUntil(func() bool {
			wake, ok := m.s.nextWake()
			return !ok || wake >= end
		})
		maxTable = max(maxTable, len(m.s.tenants))
	}
	t.Logf("alice admitted %d, refused %v; flood admitted %d, refused %v; largest table %d",
		admitted["alice"], refused["alice"], admitted["flood"], refused["flood"], maxTable)
	if n := refused["alice"][ReasonTenantTableFull]; n != 0 {
		t.Errorf("the established tenant was refused tenant_table_full %d times", n)
	}
	// 10s of flood; alice alone would get one request per 50ms think time
	// plus its wait; with ~1040 queues sharing 1000 grants/s she still gets
	// about one grant per second of queueing.
	if admitted["alice"] < 5 {
		t.Errorf("the established tenant was admitted %d times in 10s, want at least 5", admitted["alice"])
	}
	if maxTable > DefaultMaxTenants {
		t.Errorf("tenant table reached %d, bound %d", maxTable, DefaultMaxTenants)
	}
	if refused["flood"][ReasonTenantTableFull] == 0 {
		t.Errorf("the flood was never refused tenant_table_full: the test did not fill the table")
	}
}

func TestReweightKeepsOrder(t *testing.T) {
	s := newSched(Bounds{MaxWait: time.Hour}, Weights{Default: 1})
	var order []*waiter
	for range 3 {
		order = append(order, enq(t, s, 0, "a", 0, "k"))
		enq(t, s, 0, "b", 0, "k")
	}
	s.setWeights(Weights{Default: 1, ByTenant: map[string]int{"a": 100}}, 0)
	// With a weight of 100, a's three waiters go first and in FIFO order.
	for i, want := range order {
		w := s.next(0)
		if w != want {
			t.Fatalf("grant %d: got tenant %s, want a's waiter %d in order", i, w.tenant, i)
		}
		s.complete(0, w, true, 0, nil)
	}
	if s.depth != 3 || s.active != 1 {
		t.Errorf("b's waiters lost by reweighting: depth %d", s.depth)
	}
}
