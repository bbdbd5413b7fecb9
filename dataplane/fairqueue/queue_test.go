package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/internal/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// waitResult is the outcome of one Wait call run in a goroutine.
type waitResult struct {
	res Result
	err error
}

// startWait runs q.Wait in a goroutine and waits until the request is queued
// or answered, so the caller knows it arrived before anything it does next.
func startWait(t *testing.T, ctx context.Context, q *Queue, r Request) <-chan waitResult {
	t.Helper()
	ch := make(chan waitResult, 1)
	depth, _ := q.Stats()
	go func() {
		res, err := q.Wait(ctx, r)
		ch <- waitResult{res, err}
	}()
	// A refusal wakes nothing the queue's condition variable would see, so
	// poll (a synchronisation point, not timing logic) until the request is
	// queued or answered.
	for deadline := time.Now().Add(testTimeout); ; time.Sleep(50 * time.Microsecond) {
		if d, _ := q.Stats(); d > depth || len(ch) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("request neither queued nor answered within %v", testTimeout)
		}
	}
	q.waitIdle(t)
	return ch
}

func mustPending(t *testing.T, ch <-chan waitResult) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("Wait returned early: %+v, %v", r.res, r.err)
	default:
	}
}

// fakeBucket is a token bucket with burst 1 on a fake clock.
type fakeBucket struct {
	mu       sync.Mutex
	clk      *clocktesting.FakeClock
	interval time.Duration
	avail    time.Time
}

func (b *fakeBucket) take() (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clk.Now()
	if !now.Before(b.avail) {
		b.avail = now.Add(b.interval)
		return true, 0
	}
	return false, b.avail.Sub(now)
}

func (b *fakeBucket) attempt() (bool, time.Duration, error) {
	ok, ra := b.take()
	return ok, ra, nil
}

// attemptThen returns an Attempt on b that, when it passes, calls granted
// with mu held.
func (b *fakeBucket) attemptThen(mu *sync.Mutex, granted func()) Attempt {
	return func() (bool, time.Duration, error) {
		ok, ra := b.take()
		if ok {
			mu.Lock()
			granted()
			mu.Unlock()
		}
		return ok, ra, nil
	}
}

func TestQueueAdmitsAfterRetryAfter(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{}, Weights{}, nil)
	defer q.Close()
	b := &fakeBucket{clk: clk, interval: time.Second, avail: epoch.Add(100 * time.Millisecond)}

	ch := startWait(t, context.Background(), q, Request{Tenant: "a", Dimension: "user", LimitKeys: lk("model:m"), RetryAfter: 100 * time.Millisecond, Attempt: b.attempt})
	if !q.HasWaiters(LimitKey{Key: "model:m"}) || q.HasWaiters(LimitKey{Key: "model:other"}) {
		t.Errorf("HasWaiters does not reflect the queued request")
	}
	clk.Step(99 * time.Millisecond)
	q.waitIdle(t)
	mustPending(t, ch)
	clk.Step(time.Millisecond)
	r := recv(t, ch)
	if r.err != nil || !r.res.Admitted {
		t.Fatalf("want admitted, got %+v, %v", r.res, r.err)
	}
	want := Result{Admitted: true, Position: 1, Waited: 100 * time.Millisecond, Estimate: 100 * time.Millisecond, RetryAfter: 100 * time.Millisecond}
	if r.res != want {
		t.Errorf("result = %+v, want %+v", r.res, want)
	}
	if q.HasWaiters(LimitKey{Key: "model:m"}) {
		t.Errorf("HasWaiters still true after admission")
	}
	if d, n := q.Stats(); d != 0 || n != 0 {
		t.Errorf("Stats = %d, %d after admission, want 0, 0", d, n)
	}
}

func TestQueueRefusals(t *testing.T) {
	never := func() (bool, time.Duration, error) { return false, time.Hour, nil }
	// fillOverflow queues one request each for 100 more tenants: with the
	// table full, they fill every overflow queue.
	fillOverflow := func(t *testing.T, q *Queue) []<-chan waitResult {
		var chs []<-chan waitResult
		for i := range 100 {
			chs = append(chs, startWait(t, context.Background(), q, Request{Tenant: fmt.Sprintf("flood-%d", i), Dimension: "user", RetryAfter: time.Second, Attempt: never}))
		}
		return chs
	}
	cases := []struct {
		name   string
		bounds Bounds
		setup  func(t *testing.T, q *Queue) []<-chan waitResult
		req    Request
		want   Reason
		// wantPos and wantRetryAfter are the refused request's position and
		// Retry-After hint; wantFirst is how the request queued first ends.
		wantPos        int
		wantRetryAfter time.Duration
		wantFirst      Reason
		wantRefusals   int
	}{
		{
			name:    "tenant queue full",
			bounds:  Bounds{MaxQueueDepthPerTenant: 1},
			req:     Request{Tenant: "a", RetryAfter: 10 * time.Millisecond, Interval: 100 * time.Millisecond},
			want:    ReasonTenantQueueFull,
			wantPos: 2,
			// The queue frees when its head is admitted, at its Retry-After.
			wantRetryAfter: time.Second, wantFirst: ReasonShutdown, wantRefusals: 1,
		},
		{
			name:    "tenant queue full, room after the request's budget",
			bounds:  Bounds{MaxQueueDepthPerTenant: 1},
			req:     Request{Tenant: "a", RetryAfter: 10 * time.Millisecond, Deadline: epoch.Add(500 * time.Millisecond)},
			want:    ReasonTenantQueueFull,
			wantPos: 2,
			// Never more than the budget: the head is expected only at 1s.
			wantRetryAfter: 500 * time.Millisecond, wantFirst: ReasonShutdown, wantRefusals: 1,
		},
		{
			name:    "queue full",
			bounds:  Bounds{MaxTotalQueued: 1},
			req:     Request{Tenant: "b", RetryAfter: 10 * time.Millisecond, Interval: 100 * time.Millisecond},
			want:    ReasonQueueFull,
			wantPos: 2,
			// The next grant is expected one refill interval from now.
			wantRetryAfter: 100 * time.Millisecond, wantFirst: ReasonShutdown, wantRefusals: 1,
		},
		{
			name:    "tenant table and its overflow queues full",
			bounds:  Bounds{MaxTenants: 1, MaxQueueDepthPerTenant: 1},
			setup:   fillOverflow,
			req:     Request{Tenant: "b", RetryAfter: 10 * time.Millisecond, Interval: 100 * time.Millisecond},
			want:    ReasonTenantTableFull,
			wantPos: 34, // second in an overflow queue, 17 queues active
			// The shorter queue of the hand frees when its head is admitted,
			// expected at its Retry-After (1s). Seven floods refused before
			// on that queue were promised the next places, 1ms apart (their
			// interval is unknown); this request is told the place after
			// them.
			wantRetryAfter: time.Second + 7*time.Millisecond, wantFirst: ReasonShutdown, wantRefusals: 1 + 100 - overflowQueues,
		},
		{
			name:           "retry-after does not fit the request deadline",
			req:            Request{Tenant: "b", RetryAfter: time.Second, Deadline: epoch.Add(time.Second)},
			want:           ReasonWaitExceedsBudget,
			wantPos:        2,
			wantRetryAfter: time.Second, wantFirst: ReasonShutdown, wantRefusals: 1,
		},
		{
			name: "disabled",
			setup: func(_ *testing.T, q *Queue) []<-chan waitResult {
				q.Disable()
				return nil
			},
			req:     Request{Tenant: "b", RetryAfter: time.Second},
			want:    ReasonDisabled,
			wantPos: 0, wantRetryAfter: time.Second,
			// Disable answers the queued request too.
			wantFirst: ReasonDisabled, wantRefusals: 2,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(epoch)
			obs := &recordingObserver{}
			q := New(clk, tc.bounds, Weights{}, obs)
			defer q.Close()
			first := startWait(t, context.Background(), q, Request{Tenant: "a", Dimension: "user", RetryAfter: time.Second, Attempt: never})
			var others []<-chan waitResult
			if tc.setup != nil {
				others = tc.setup(t, q)
			}
			tc.req.Attempt, tc.req.Dimension = never, "user"
			res, err := waitNow(t, context.Background(), q, tc.req)
			if err != nil || res.Admitted || res.Reason != tc.want || res.Position != tc.wantPos || res.RetryAfter != tc.wantRetryAfter {
				t.Fatalf("got %+v, %v; want reason %q at position %d with Retry-After %v", res, err, tc.want, tc.wantPos, tc.wantRetryAfter)
			}
			if tc.want != ReasonDisabled {
				mustPending(t, first)
			}
			q.Close()
			if r := recv(t, first); r.res.Reason != tc.wantFirst {
				t.Errorf("request queued first ended with %+v, want %q", r.res, tc.wantFirst)
			}
			for _, ch := range others {
				recv(t, ch)
			}
			// Every waiter has returned, so every refusal has been observed.
			if got := obs.refused(tc.want); got != tc.wantRefusals {
				t.Errorf("observer saw %d refusals with %q, want %d", got, tc.want, tc.wantRefusals)
			}
		})
	}
}

func TestQueueDeadlineExceeded(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{}, Weights{}, nil)
	defer q.Close()
	refuse := func() (bool, time.Duration, error) { return false, 30 * time.Millisecond, nil }
	// The head keeps being refused, so the request behind it never gets a
	// turn and its 50ms budget runs out while queued.
	startWait(t, context.Background(), q, Request{Tenant: "a", Attempt: refuse})
	ch := startWait(t, context.Background(), q, Request{Tenant: "a", Attempt: refuse, Deadline: epoch.Add(50 * time.Millisecond), Interval: 30 * time.Millisecond})
	for range 49 {
		clk.Step(time.Millisecond)
		q.waitIdle(t)
	}
	mustPending(t, ch)
	clk.Step(time.Millisecond)
	r := recv(t, ch)
	if r.err != nil || r.res.Reason != ReasonDeadlineExceeded || r.res.Waited != 50*time.Millisecond || r.res.Position != 2 {
		t.Fatalf("got %+v, %v; want deadline_exceeded after exactly 50ms at position 2", r.res, r.err)
	}
	// It is told when its own place would be granted: the head is tried
	// again at 60ms, and its place is one 30ms grant after the head's.
	if r.res.RetryAfter != 40*time.Millisecond {
		t.Errorf("told %v, want 40ms (10ms to the head's next try plus one grant)", r.res.RetryAfter)
	}
}

func TestQueueRequeueBeyondBudget(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{MaxWait: 100 * time.Millisecond}, Weights{}, nil)
	defer q.Close()
	attempts := 0
	refuse := func() (bool, time.Duration, error) { attempts++; return false, 60 * time.Millisecond, nil }
	ch := startWait(t, context.Background(), q, Request{Tenant: "a", Attempt: refuse, RetryAfter: 10 * time.Millisecond})
	clk.Step(10 * time.Millisecond) // attempt 1 fails: ready again at 70ms
	q.waitIdle(t)
	mustPending(t, ch)
	clk.Step(60 * time.Millisecond) // attempt 2 fails: 130ms is past the 100ms budget
	r := recv(t, ch)
	if r.res.Reason != ReasonWaitExceedsBudget || attempts != 2 || r.res.RetryAfter != 60*time.Millisecond {
		t.Fatalf("got %+v after %d attempts; want wait_exceeds_budget after 2", r.res, attempts)
	}
}

func TestQueueCancellation(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{}, Weights{}, nil)
	defer q.Close()
	refuse := func() (bool, time.Duration, error) { return false, time.Second, nil }
	ctx, cancel := context.WithCancel(context.Background())
	head := startWait(t, context.Background(), q, Request{Tenant: "a", LimitKeys: lk("k"), RetryAfter: time.Second, Attempt: refuse})
	ch := startWait(t, ctx, q, Request{Tenant: "a", LimitKeys: lk("k2"), RetryAfter: time.Second, Attempt: refuse})
	cancel()
	r := recv(t, ch)
	if !errors.Is(r.err, context.Canceled) || r.res.Admitted || r.res.Position != 2 {
		t.Fatalf("got %+v, %v; want context.Canceled at position 2", r.res, r.err)
	}
	if q.HasWaiters(LimitKey{Key: "k2"}) {
		t.Errorf("cancelled request still counted as a waiter")
	}
	if d, _ := q.Stats(); d != 1 {
		t.Errorf("depth %d after cancellation, want 1", d)
	}
	mustPending(t, head)
}

func TestQueueAttemptError(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{}, Weights{}, nil)
	defer q.Close()
	errStore := errors.New("limiter store unavailable")
	ch := startWait(t, context.Background(), q, Request{Tenant: "a", Attempt: func() (bool, time.Duration, error) { return false, 0, errStore }, RetryAfter: time.Millisecond})
	clk.Step(time.Millisecond)
	r := recv(t, ch)
	if !errors.Is(r.err, errStore) || r.res.Admitted {
		t.Fatalf("got %+v, %v; want the store error", r.res, r.err)
	}
	if d, n := q.Stats(); d != 0 || n != 0 {
		t.Errorf("Stats = %d, %d after the error", d, n)
	}
}

func TestQueueDisableAnswersEveryWaiter(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{}, Weights{}, nil)
	defer q.Close()
	refuse := func() (bool, time.Duration, error) { return false, time.Second, nil }
	var chs []<-chan waitResult
	for _, tn := range []string{"a", "a", "b"} {
		chs = append(chs, startWait(t, context.Background(), q, Request{Tenant: tn, RetryAfter: time.Second, Attempt: refuse}))
	}
	q.Disable()
	for i, ch := range chs {
		if r := recv(t, ch); r.res.Reason != ReasonDisabled || r.err != nil {
			t.Errorf("waiter %d: got %+v, %v; want disabled", i, r.res, r.err)
		}
	}
	q.Enable()
	ch := startWait(t, context.Background(), q, Request{Tenant: "a", RetryAfter: time.Second, Attempt: refuse})
	mustPending(t, ch)
	q.Close()
	if r := recv(t, ch); r.res.Reason != ReasonShutdown {
		t.Errorf("after Close: %+v, want shutdown", r.res)
	}
	if res, _ := waitNow(t, context.Background(), q, Request{Tenant: "a", Attempt: refuse}); res.Reason != ReasonShutdown {
		t.Errorf("Wait after Close: %+v, want shutdown", res)
	}
}

// TestQueueWeightedFairness runs the weights 1,2,5 case through the real
// Queue with concurrent waiters: attempts on the shared key must reach the
// limiter in fair order, so each tenant's lag stays within 2 grants.
func TestQueueWeightedFairness(t *testing.T) {
	ws := []int{1, 2, 5}
	const perTenant, grants = 600, 800
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{MaxQueueDepthPerTenant: perTenant, MaxTotalQueued: 3 * perTenant, MaxWait: time.Hour}, weightsFor(ws), nil)
	b := &fakeBucket{clk: clk, interval: time.Millisecond, avail: epoch.Add(time.Millisecond)}
	rb := newReportBuilder(ws)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range ws {
		attempt := b.attemptThen(&mu, func() { rb.grant(i) })
		for range perTenant {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := q.Wait(context.Background(), Request{Tenant: tenantName(i), LimitKeys: lk("model:m"), RetryAfter: time.Millisecond, Attempt: attempt}); err != nil {
					t.Errorf("Wait for tenant %s: %v", tenantName(i), err)
				}
			}()
		}
	}
	q.waitUntil(t, func() bool { return q.s.depth == len(ws)*perTenant })
	for step := 0; ; step++ {
		if step > 10*grants {
			q.Close()
			mu.Lock()
			n := rb.n
			mu.Unlock()
			t.Fatalf("only %d grants after %d clock steps, want %d", n, step, grants)
		}
		q.waitIdle(t)
		mu.Lock()
		n := rb.n
		mu.Unlock()
		if n >= grants {
			break
		}
		clk.Step(time.Millisecond)
	}
	q.Close()
	testutil.WaitGroupWithin(t, testTimeout, "the waiters", &wg)
	r := rb.report()
	t.Logf("grants %d shares %v maxLag %.2f", r.grants, r.shares, r.maxLag)
	if err := r.check(0.03, 0.99, 2); err != nil {
		t.Error(err)
	}
}

// recordingObserver counts Observer events.
type recordingObserver struct {
	mu      sync.Mutex
	refusal map[Reason]int
	grants  int
}

func (o *recordingObserver) QueueChanged(int, int) {}

func (o *recordingObserver) BandQueueChanged(string, int) {}

func (o *recordingObserver) Granted(string, string, string, time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.grants++
}

func (o *recordingObserver) Refused(_, _, _ string, r Reason) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.refusal == nil {
		o.refusal = map[Reason]int{}
	}
	o.refusal[r]++
}

func (o *recordingObserver) refused(r Reason) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.refusal[r]
}

func TestQueueUsesContextDeadline(t *testing.T) {
	// Context deadlines run on the real clock, so start the fake one at the
	// real time.
	clk := clocktesting.NewFakeClock(time.Now())
	q := New(clk, Bounds{MaxWait: 10 * time.Hour}, Weights{}, nil)
	defer q.Close()
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(time.Hour))
	defer cancel()
	never := func() (bool, time.Duration, error) { return false, time.Hour, nil }
	res, err := waitNow(t, ctx, q, Request{Tenant: "a", RetryAfter: 2 * time.Hour, Attempt: never})
	if err != nil || res.Reason != ReasonWaitExceedsBudget {
		t.Fatalf("got %+v, %v; want wait_exceeds_budget from the context deadline", res, err)
	}
}

// TestQueueToSched pins the deadline conversion: no deadline and deadlines
// too far ahead to represent both mean "never", and nothing wraps negative
// (a wrapped deadline would refuse the request as already expired).
func TestQueueToSched(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{}, Weights{}, nil)
	defer q.Close()
	tests := []struct {
		name     string
		deadline time.Time
		want     int64
	}{
		{name: "zero time is no deadline", deadline: time.Time{}, want: noDeadline},
		{name: "one second ahead", deadline: epoch.Add(time.Second), want: int64(time.Second)},
		{name: "in the past", deadline: epoch.Add(-time.Second), want: -int64(time.Second)},
		{name: "beyond the Duration range saturates", deadline: epoch.AddDate(1000, 0, 0), want: noDeadline},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := q.toSched(tc.deadline); got != tc.want {
				t.Errorf("toSched(%v) = %d, want %d", tc.deadline, got, tc.want)
			}
		})
	}
}

func TestQueueHasWaitersAllocationFree(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{}, Weights{}, nil)
	defer q.Close()
	keys := lk("user:x", "model:m")
	if a := testing.AllocsPerRun(100, func() { q.HasWaitersAny(keys) }); a != 0 {
		t.Errorf("HasWaitersAny allocates %.1f times per call", a)
	}
}

// BenchmarkHasWaiters measures the no-barging check every fresh request makes.
func BenchmarkHasWaiters(b *testing.B) {
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{}, Weights{}, nil)
	defer q.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			q.HasWaiters(LimitKey{Key: "model:m"})
		}
	})
}

// TestQueueReconfigureKeepsWaiters: tightened bounds refuse new arrivals but
// keep every waiter, and new weights apply to the next decision.
func TestQueueReconfigureKeepsWaiters(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{}, Weights{Default: 1}, nil)
	defer q.Close()
	b := &fakeBucket{clk: clk, interval: time.Millisecond, avail: epoch.Add(time.Millisecond)}
	var mu sync.Mutex
	var order []string
	attempt := func(tenant string) Attempt {
		return func() (bool, time.Duration, error) {
			ok, ra := b.take()
			if ok {
				mu.Lock()
				order = append(order, tenant)
				mu.Unlock()
			}
			return ok, ra, nil
		}
	}
	var chs []<-chan waitResult
	for _, tn := range []string{"a", "a", "b", "b"} {
		chs = append(chs, startWait(t, context.Background(), q, Request{Tenant: tn, LimitKeys: lk("m"), RetryAfter: time.Millisecond, Attempt: attempt(tn)}))
	}
	q.SetBounds(Bounds{MaxTotalQueued: 2})
	if d, _ := q.Stats(); d != 4 {
		t.Fatalf("tightening bounds evicted waiters: depth %d", d)
	}
	if res, _ := waitNow(t, context.Background(), q, Request{Tenant: "c", RetryAfter: time.Millisecond, Attempt: attempt("c")}); res.Reason != ReasonQueueFull {
		t.Fatalf("new arrival after tightening: %+v, want queue_full", res)
	}
	q.SetWeights(Weights{Default: 1, ByTenant: map[string]int{"b": 100}})
	for range 4 {
		clk.Step(time.Millisecond)
		q.waitIdle(t)
	}
	for i, ch := range chs {
		if r := recv(t, ch); !r.res.Admitted {
			t.Errorf("waiter %d not admitted: %+v", i, r.res)
		}
	}
	if got := strings.Join(order, ""); got != "bbaa" {
		t.Errorf("admission order %q, want bbaa (b reweighted to 100 goes first)", got)
	}
}

// TestQueueAttemptPanicFreesSlot: a panicking attempt propagates its panic
// but leaves the queue, so requests sharing its key are still served.
func TestQueueAttemptPanicFreesSlot(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{}, Weights{}, nil)
	defer q.Close()
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		_, _ = q.Wait(context.Background(), Request{Tenant: "a", LimitKeys: lk("k"), Attempt: func() (bool, time.Duration, error) { panic("limiter bug") }}) // never returns: the attempt panics
	}()
	if p := recv(t, panicked); p != "limiter bug" {
		t.Fatalf("recovered %v, want the attempt's panic", p)
	}
	q.waitIdle(t)
	if q.HasWaiters(LimitKey{Key: "k"}) {
		t.Fatalf("panicked request still holds its key")
	}
	ok := func() (bool, time.Duration, error) { return true, 0, nil }
	if res, err := waitNow(t, context.Background(), q, Request{Tenant: "b", LimitKeys: lk("k"), Attempt: ok}); err != nil || !res.Admitted {
		t.Fatalf("request on the same key after the panic: %+v, %v", res, err)
	}
}
