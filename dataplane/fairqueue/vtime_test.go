package fairqueue

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// backlog enqueues depth waiters for each tenant of costs at now.
func backlog(t *testing.T, s *sched, costs map[string]int64, order []string, depth int) {
	t.Helper()
	for range depth {
		for _, tn := range order {
			if _, reason, _, _ := s.enqueue(0, arrival{tenant: tn, dim: "user", keys: lk("k"), deadline: noDeadline, cost: costs[tn]}); reason != "" {
				t.Fatalf("enqueue %s refused: %s", tn, reason)
			}
		}
	}
}

// grantSeq makes n grants at time 0 whose attempts all pass, re-enqueuing
// each admitted tenant's request so every tenant stays backlogged, and
// returns the tenants in grant order as a string of their names.
func grantSeq(t *testing.T, s *sched, costs map[string]int64, n int) string {
	t.Helper()
	return grantSeqAt(t, s, 0, costs, n)
}

// grantSeqAt is grantSeq at time now.
func grantSeqAt(t *testing.T, s *sched, now int64, costs map[string]int64, n int) string {
	t.Helper()
	var seq strings.Builder
	for range n {
		w := s.next(now)
		if w == nil {
			t.Fatalf("no grant with every tenant backlogged")
		}
		tn := w.tenant
		seq.WriteString(tn)
		s.complete(now, w, true, 0, nil)
		s.release(w)
		if _, reason, _, _ := s.enqueue(now, arrival{tenant: tn, dim: "user", keys: lk("k"), deadline: noDeadline, cost: costs[tn]}); reason != "" {
			t.Fatalf("re-enqueue %s refused: %s", tn, reason)
		}
	}
	return seq.String()
}

// TestAdjust: a settle correction moves the tenant's next grants by the
// delta in its strides, positive (it used more than it reserved: it waits
// longer) or negative (a refund: its turn comes sooner), but a refund never
// puts it more than one stride behind the virtual time, and a tenant the
// queue does not track is left alone.
func TestAdjust(t *testing.T) {
	cases := []struct {
		name   string
		costs  map[string]int64
		warm   int    // grants before the correction
		tenant string // adjusted tenant
		delta  int64
		want   string // the grants after it
	}{
		{name: "no correction", costs: map[string]int64{"a": 1, "b": 1}, warm: 4, tenant: "a", want: "abababab"},
		{name: "positive: b catches up 4 grants", costs: map[string]int64{"a": 1, "b": 1}, warm: 4, tenant: "a", delta: 4, want: "bbbbabab"},
		{name: "positive on b", costs: map[string]int64{"a": 1, "b": 1}, warm: 4, tenant: "b", delta: 2, want: "aaabab"},
		// After "abab" a and b finish 1 stride ahead of the virtual time.
		// A refund takes a to one stride behind it, no further: two grants
		// ahead of b, then a tie that a wins by arrival.
		{name: "refund bounded at one grant behind", costs: map[string]int64{"a": 1, "b": 1}, warm: 4, tenant: "a", delta: -1000, want: "aaababab"},
		{name: "refund above MaxCost bounded too", costs: map[string]int64{"a": 1, "b": 1}, warm: 4, tenant: "a", delta: -1 << 40, want: "aaababab"},
		{name: "untracked tenant", costs: map[string]int64{"a": 1, "b": 1}, warm: 4, tenant: "ghost", delta: 1000, want: "abababab"},
		// a reserves 10: b gets ten grants of 1 for each of a's.
		{name: "large reservation, no correction", costs: map[string]int64{"a": 10, "b": 1}, warm: 10, tenant: "a", want: "bbbbbbbbbbabbbbbbbbbba"},
		// a's grant used 1 of its 10: its next grant comes after two of
		// b's (b was one ahead), then ten again.
		{name: "large reservation refunded", costs: map[string]int64{"a": 10, "b": 1}, warm: 10, tenant: "a", delta: -9, want: "babbbbbbbbbbabbbbbbbbbb"},
		// a's grant used 19: b gets ten more grants first.
		{name: "large reservation exceeded", costs: map[string]int64{"a": 10, "b": 1}, warm: 10, tenant: "a", delta: 9, want: "bbbbbbbbbbbbbbbbbbbab"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSched(Bounds{}, Weights{Default: 1})
			backlog(t, s, tc.costs, []string{"a", "b"}, 2)
			warm := grantSeq(t, s, tc.costs, tc.warm)
			tenantsBefore := len(s.tenants)
			s.adjust(tc.tenant, tc.delta)
			if len(s.tenants) != tenantsBefore {
				t.Errorf("Adjust added a tenant")
			}
			if got := grantSeq(t, s, tc.costs, len(tc.want)); got != tc.want {
				t.Errorf("after %q and Adjust(%s, %d): grants %q, want %q", warm, tc.tenant, tc.delta, got, tc.want)
			}
		})
	}
}

// TestAdjustDuringAttempt: a correction that arrives while the tenant's next
// attempt runs (the settle of an earlier grant) survives that attempt's
// outcome, admitted or refused.
func TestAdjustDuringAttempt(t *testing.T) {
	costs := map[string]int64{"a": 1, "b": 1}
	cases := []struct {
		name     string
		admitted bool
		delta    int64
		want     string
	}{
		{name: "admitted, no correction", admitted: true, want: "babababa"},
		// a's attempt was granted at tag 3 and moved 4 later: b gets 3..7.
		{name: "admitted, a used 4 more", admitted: true, delta: 4, want: "bbbbbaba"},
		{name: "refused, no correction", want: "ababab"},
		{name: "refused, a used 4 more", delta: 4, want: "bbbbabab"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSched(Bounds{}, Weights{Default: 1})
			backlog(t, s, costs, []string{"a", "b"}, 2)
			grantSeq(t, s, costs, 4)
			w := s.next(0)
			if w == nil || w.tenant != "a" {
				t.Fatalf("want a granted, got %v", w)
			}
			s.adjust("a", tc.delta)
			now := int64(0)
			if tc.admitted {
				s.complete(now, w, true, 0, nil)
				s.release(w)
				s.enqueue(now, arrival{tenant: "a", dim: "user", keys: lk("k"), deadline: noDeadline, cost: 1})
			} else {
				// Refused for 1ms, during which b waits out a refusal too.
				s.complete(now, w, false, ms, nil)
				now = ms
			}
			if got := grantSeqAt(t, s, now, costs, len(tc.want)); got != tc.want {
				t.Errorf("grants %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSettledFairness: tenants whose reservations are systematically wrong
// (a reserves 10 and uses 1, or reserves 1 and uses 10) are corrected by
// Adjust after every grant, so the cost they actually used is shared by
// weight. Without the corrections (the negative control) the reservations
// decide. The limit counts requests, so only the queue's order decides.
func TestSettledFairness(t *testing.T) {
	cases := []struct {
		name             string
		reserve, use     []int64
		settle           bool
		fairInActualCost bool
	}{
		{name: "over-reserving tenant settled", reserve: []int64{10, 1}, use: []int64{1, 1}, settle: true, fairInActualCost: true},
		{name: "over-reserving tenant not settled", reserve: []int64{10, 1}, use: []int64{1, 1}},
		{name: "under-reserving tenant settled", reserve: []int64{1, 1}, use: []int64{10, 1}, settle: true, fairInActualCost: true},
		{name: "under-reserving tenant not settled", reserve: []int64{1, 1}, use: []int64{10, 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSched(Bounds{}, Weights{Default: 1})
			reserve := map[string]int64{tenantName(0): tc.reserve[0], tenantName(1): tc.reserve[1]}
			backlog(t, s, reserve, []string{tenantName(0), tenantName(1)}, 4)
			used := make([]float64, 2)
			for range 20000 {
				w := s.next(0)
				if w == nil {
					t.Fatalf("no grant with every tenant backlogged")
				}
				i := tenantIndex(t, w.tenant)
				s.complete(0, w, true, 0, nil)
				s.release(w)
				used[i] += float64(tc.use[i])
				if tc.settle {
					s.adjust(tenantName(i), tc.use[i]-tc.reserve[i])
				}
				s.enqueue(0, arrival{tenant: tenantName(i), dim: "user", keys: lk("k"), deadline: noDeadline, cost: tc.reserve[i]})
			}
			shares := []float64{used[0] / (used[0] + used[1]), used[1] / (used[0] + used[1])}
			t.Logf("actual cost used %v, shares %.4f", used, shares)
			err := within(shares, []float64{0.5, 0.5}, 0.05)
			switch {
			case tc.fairInActualCost && err != nil:
				t.Errorf("settled usage not fair: %v", err)
			case !tc.fairInActualCost && err == nil:
				t.Errorf("unsettled reservations gave fair usage; the workload cannot show what settling does")
			}
		})
	}
}

// TestLargestCost: at the largest cost and the smallest weight a grant's
// charge does not wrap the virtual time arithmetic, costs above MaxCost
// count as MaxCost, and a tenant that sat out (idle or waiting out a long
// Retry-After) while the virtual time advanced by more than 2^63 comes back
// at its turn instead of being taken for far ahead.
func TestLargestCost(t *testing.T) {
	t.Run("backlogged", func(t *testing.T) {
		cases := []struct {
			name    string
			costs   map[string]int64
			weights map[string]int
			want    string // repeated, in any phase
		}{
			{name: "both at MaxCost", costs: map[string]int64{"a": MaxCost, "b": MaxCost}, want: "ab"},
			{name: "above MaxCost counts as MaxCost", costs: map[string]int64{"a": 1 << 40, "b": MaxCost}, want: "ab"},
			{name: "half of MaxCost", costs: map[string]int64{"a": MaxCost, "b": MaxCost / 2}, want: "bba"},
			{name: "weights 1:3", costs: map[string]int64{"a": MaxCost, "b": MaxCost}, weights: map[string]int{"b": 3}, want: "bbba"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				s := newSched(Bounds{}, Weights{Default: 1, ByTenant: tc.weights})
				backlog(t, s, tc.costs, []string{"a", "b"}, 2)
				grantSeq(t, s, tc.costs, 4*len(tc.want)) // settle the phase
				got := grantSeq(t, s, tc.costs, 100*len(tc.want))
				// Any rotation of the pattern, repeated.
				if !strings.Contains(strings.Repeat(tc.want, 101), got) {
					t.Errorf("grants %q..., want %q repeated", got[:min(len(got), 40)], tc.want)
				}
			})
		}
	})
	// Two tenants alternating at MaxCost advance the virtual time by 2^60
	// every two grants; after n grants a tag left behind is n/2*2^60
	// behind, which wrap-around arithmetic alone would read as ahead when
	// n/2 % 16 > 8.
	for _, n := range []int{10, 18, 24, 30, 60} {
		t.Run(fmt.Sprintf("idle for %d grants", n), func(t *testing.T) {
			costs := map[string]int64{"a": MaxCost, "b": MaxCost, "c": 1}
			s := newSched(Bounds{}, Weights{Default: 1})
			backlog(t, s, map[string]int64{"c": 1}, []string{"c"}, 1)
			w := s.next(0)
			s.complete(0, w, true, 0, nil)
			s.release(w) // c is idle now
			backlog(t, s, costs, []string{"a", "b"}, 2)
			grantSeq(t, s, costs, n)
			backlog(t, s, costs, []string{"c"}, 1)
			if got := grantSeq(t, s, costs, 3); !strings.Contains(got[:2], "c") {
				t.Errorf("returning tenant not granted within 2 grants: %q", got)
			}
		})
		t.Run(fmt.Sprintf("pending for %d grants", n), func(t *testing.T) {
			costs := map[string]int64{"a": MaxCost, "b": MaxCost, "c": 1}
			s := newSched(Bounds{MaxWait: time.Hour}, Weights{Default: 1})
			if _, reason, _, _ := s.enqueue(0, arrival{tenant: "c", dim: "user", keys: lk("k"), deadline: noDeadline, retryAfter: time.Second, cost: 1}); reason != "" {
				t.Fatal(reason)
			}
			backlog(t, s, costs, []string{"a", "b"}, 2)
			grantSeq(t, s, costs, n) // at time 0: c waits out its Retry-After
			var got strings.Builder
			for range 2 {
				w := s.next(int64(time.Second))
				got.WriteString(w.tenant)
				s.complete(int64(time.Second), w, true, 0, nil)
				s.release(w)
			}
			if !strings.Contains(got.String(), "c") {
				t.Errorf("tenant back from its Retry-After not granted within 2 grants: %q", got.String())
			}
		})
	}
}

// TestQueueAdjust drives Adjust through the Queue shell on a fake clock: two
// tenants with three waiters each share a bucket granting one request every
// 10ms; a correction made while they wait changes the order of admission.
func TestQueueAdjust(t *testing.T) {
	cases := []struct {
		name   string
		tenant string
		delta  int64
		want   string
	}{
		{name: "no correction", tenant: "a", want: "ababab"},
		{name: "a used 3 more than reserved", tenant: "a", delta: 3, want: "bbbaaa"},
		{name: "b used 1 more than reserved", tenant: "b", delta: 1, want: "aababb"},
		// a is at the virtual time: a refund takes it one grant behind,
		// no further.
		{name: "refund bounded", tenant: "a", delta: -3, want: "aababb"},
		{name: "untracked tenant", tenant: "c", delta: 3, want: "ababab"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(epoch)
			q := New(clk, Bounds{MaxWait: time.Minute}, Weights{Default: 1}, nil)
			defer q.Close()
			b := &fakeBucket{clk: clk, interval: 10 * time.Millisecond, avail: epoch.Add(10 * time.Millisecond)}
			var mu sync.Mutex
			var order strings.Builder
			attempt := func(tenant string) Attempt {
				return b.attemptThen(&mu, func() { order.WriteString(tenant) })
			}
			var chs []<-chan waitResult
			for range 3 {
				for _, tn := range []string{"a", "b"} {
					chs = append(chs, startWait(t, context.Background(), q, Request{Tenant: tn, LimitKeys: lk("k"), RetryAfter: 10 * time.Millisecond, Attempt: attempt(tn), Cost: 1}))
				}
			}
			q.Adjust(tc.tenant, tc.delta)
			q.waitIdle(t)
			for range 6 {
				clk.Step(10 * time.Millisecond)
				q.waitIdle(t)
			}
			for _, ch := range chs {
				if r := recv(t, ch); r.err != nil || !r.res.Admitted {
					t.Fatalf("not admitted: %+v, %v", r.res, r.err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if got := order.String(); got != tc.want {
				t.Errorf("admitted %q, want %q", got, tc.want)
			}
		})
	}
}
