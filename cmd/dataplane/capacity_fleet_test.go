package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/internal/redistest"
	"github.com/fairqueue/fairqueue/internal/testbin"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// These tests run capacity mode the way a fleet runs it: several data-plane
// binaries (testbin) on one real redis-server, one backend whose maxInFlight
// the fleet shares, and a backend that counts the requests it holds at once,
// which is the number a user relies on.

// fleetBackend is an upstream that counts the requests it holds at once and
// their peak. A request holds for X-Hold-Ms milliseconds, or, with X-Gate,
// until that gate opens or its client leaves.
type fleetBackend struct {
	srv  *httptest.Server
	cur  atomic.Int64
	peak atomic.Int64

	mu    sync.Mutex
	gates map[string]chan struct{} // closed by openGate, then replaced
}

func newFleetBackend(t *testing.T) *fleetBackend {
	t.Helper()
	b := &fleetBackend{gates: map[string]chan struct{}{}}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := b.cur.Add(1)
		defer b.cur.Add(-1)
		for p := b.peak.Load(); n > p && !b.peak.CompareAndSwap(p, n); p = b.peak.Load() {
		}
		hold := time.Duration(0)
		if ms, err := strconv.Atoi(r.Header.Get("X-Hold-Ms")); err == nil {
			hold = time.Duration(ms) * time.Millisecond
		}
		var gate chan struct{}
		if name := r.Header.Get("X-Gate"); name != "" {
			hold = 30 * time.Second
			gate = b.gate(name)
		}
		timer := time.NewTimer(hold)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-gate:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(b.srv.Close)
	t.Cleanup(b.openGates) // before Close, which waits for the requests
	return b
}

// gate returns the named gate.
func (b *fleetBackend) gate(name string) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.gates[name]
	if g == nil {
		g = make(chan struct{})
		b.gates[name] = g
	}
	return g
}

// openGate lets every request so far held by the named gate finish; later
// ones wait for the next openGate.
func (b *fleetBackend) openGate(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if g := b.gates[name]; g != nil {
		close(g)
		delete(b.gates, name)
	}
}

// openGates opens every gate.
func (b *fleetBackend) openGates() {
	b.mu.Lock()
	names := make([]string, 0, len(b.gates))
	for name := range b.gates {
		names = append(names, name)
	}
	b.mu.Unlock()
	for _, name := range names {
		b.openGate(name)
	}
}

// fleetReplica is one data-plane process.
type fleetReplica struct {
	proc    *testbin.Process
	traffic string
	ops     string // its metrics listener
}

// startCapacityFleet starts replicas data planes on one Redis in capacity
// mode: backend b1 at up with maxInFlight, fair queuing by API key with
// maxWait, and the store failing as mode says.
func startCapacityFleet(t *testing.T, rs *redistest.Server, up string, replicas, maxInFlight int, maxWait time.Duration, mode config.FailureMode) []*fleetReplica {
	t.Helper()
	return startCapacityFleetWith(t, rs, up, replicas, maxInFlight, maxWait, mode, nil)
}

// startCapacityFleetWith is startCapacityFleet with the config edited by
// edit, if not nil, before it is written.
func startCapacityFleetWith(t *testing.T, rs *redistest.Server, up string, replicas, maxInFlight int, maxWait time.Duration, mode config.FailureMode, edit func(*config.Config)) []*fleetReplica {
	t.Helper()
	c := validConfig()
	c.Backends[0].URL = up
	c.Capacity = &config.Capacity{Backends: []config.BackendCapacity{{Name: c.Backends[0].Name, MaxInFlight: int32(maxInFlight)}}}
	c.FairQueuing.Enabled = true
	c.FairQueuing.TenantDimension = identity.DimensionAPIKey
	c.FairQueuing.Bounds.MaxWait = config.Duration{Duration: maxWait}
	c.Store = &config.Store{Type: config.StoreRedis, Redis: &config.RedisStore{
		Addresses: []string{rs.Addr()}, Mode: config.RedisStandalone,
		Timeout: config.Duration{Duration: 100 * time.Millisecond}, FailureMode: mode,
	}}
	if edit != nil {
		edit(c)
	}
	data, err := config.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	// A fleet that used this Redis before: no warm-up of the leases but
	// after Redis loses its data (TestCapacityFleetRedisRestarted).
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer func() { _ = rc.Close() }()
	if err := rc.Set(context.Background(), "fq:{ns/llm}:capacity-gen", "established|0", 0).Err(); err != nil {
		t.Fatal(err)
	}
	bin := testbin.Build(t, "./cmd/dataplane")
	cfg, keyFile := write(t, "c.json", data), write(t, "k", key)
	out := make([]*fleetReplica, replicas)
	for i := range out {
		traffic, ops := testutil.FreeAddr(t), testutil.FreeAddr(t)
		p := testbin.Start(t, bin, testbin.Options{
			Args: []string{"--hash-key-file", keyFile, "--config", cfg, "--store-replicas", strconv.Itoa(replicas),
				"--listen", traffic, "--metrics-listen", ops, "--shutdown-grace", "1s", "--shutdown-delay", "0s", "--pod-name", "replica-" + strconv.Itoa(i)},
			Ready: testbin.HTTPReady("http://" + ops + "/readyz"),
		})
		out[i] = &fleetReplica{proc: p, traffic: traffic, ops: ops}
	}
	return out
}

// capacityFleet is a fleet test's Redis, backend, data planes (failing
// closed), a client of the Redis, and a context that bounds the test's
// calls.
type capacityFleet struct {
	rs   *redistest.Server
	up   *fleetBackend
	reps []*fleetReplica
	rc   *redis.Client
	ctx  context.Context
}

// newCapacityFleet starts a redis-server with redisArgs, the backend and
// replicas data planes sharing its maxInFlight, with maxWait.
func newCapacityFleet(t *testing.T, replicas, maxInFlight int, maxWait time.Duration, redisArgs ...string) *capacityFleet {
	t.Helper()
	f := &capacityFleet{rs: redistest.Start(t, redisArgs...), up: newFleetBackend(t)}
	f.reps = startCapacityFleet(t, f.rs, f.up.srv.URL, replicas, maxInFlight, maxWait, config.FailClosed)
	f.rc = redis.NewClient(&redis.Options{Addr: f.rs.Addr()})
	t.Cleanup(func() { _ = f.rc.Close() })
	var cancel context.CancelFunc
	f.ctx, cancel = context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return f
}

// waitQueued waits until r's fair queue holds one request (no bands are
// configured, so its depth is band "").
func waitQueued(t *testing.T, r *fleetReplica, what string) {
	t.Helper()
	waitMetrics(t, r.ops, what+" queued", `rate_limit_fair_queue_depth{band=""} 1`)
}

// fleetAnswer is what a client saw.
type fleetAnswer struct {
	code       int
	body       string
	retryAfter string
	// retryAfterMs is the Retry-After-Ms header, which OpenAI's clients
	// sleep exactly.
	retryAfterMs string
	took         time.Duration
	err          error
}

// fleetCall sends one request as tenant through r, holding hold at the
// backend, or until the named gate opens.
func fleetCall(ctx context.Context, r *fleetReplica, tenant string, hold time.Duration, gate string) fleetAnswer {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.traffic+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
	req.Header.Set("Authorization", "Bearer sk-"+tenant)
	req.Header.Set("X-Hold-Ms", strconv.Itoa(int(hold.Milliseconds())))
	if gate != "" {
		req.Header.Set("X-Gate", gate)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fleetAnswer{err: err, took: time.Since(start)}
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return fleetAnswer{code: resp.StatusCode, body: string(b), retryAfter: resp.Header.Get("Retry-After"),
		retryAfterMs: resp.Header.Get("Retry-After-Ms"), took: time.Since(start)}
}

// leases counts backend b1's leases in Redis.
func leases(t *testing.T, rc *redis.Client) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := rc.ZCard(ctx, "fq:{ns/llm}:capacity:b1").Result()
	if err != nil {
		t.Fatalf("counting the leases in Redis: %v", err)
	}
	return n
}

// pct returns the q-quantile of ds (sorted in place).
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// TestCapacityFleetSkewedRouting floods one replica with a heavy tenant's
// requests (12 clients, nine tenths of the traffic) while a light tenant
// sends one request at a time through another replica, on a backend whose
// maxInFlight of 4 the fleet shares. The backend never holds more than 4,
// and the light tenant is not starved: a waiter on one replica is woken by
// slots freed on another (the room channel), so it waits about a release or
// two, not for its own replica's timer.
func TestCapacityFleetSkewedRouting(t *testing.T) {
	const maxInFlight, hold = 4, 100 * time.Millisecond
	f := newCapacityFleet(t, 3, maxInFlight, 10*time.Second)
	up, fleet, rc, ctx := f.up, f.reps, f.rc, f.ctx
	heavy, light := fleet[0], fleet[1]

	const run = 5 * time.Second
	stopAt := time.Now().Add(run)
	var wg sync.WaitGroup
	var heavyOK, heavyOther atomic.Int64
	for range 12 {
		wg.Go(func() {
			for time.Now().Before(stopAt) {
				if a := fleetCall(ctx, heavy, "heavy", hold, ""); a.code == http.StatusOK {
					heavyOK.Add(1)
				} else {
					heavyOther.Add(1)
				}
			}
		})
	}
	var mu sync.Mutex
	var lightTook []time.Duration
	var lightBad []string
	wg.Go(func() {
		for time.Now().Before(stopAt) {
			a := fleetCall(ctx, light, "light", hold, "")
			mu.Lock()
			if a.code == http.StatusOK {
				lightTook = append(lightTook, a.took-hold)
			} else {
				lightBad = append(lightBad, fmt.Sprintf("%d %s %v", a.code, a.body, a.err))
			}
			mu.Unlock()
		}
	})
	testutil.WaitGroupWithin(t, 25*time.Second, "the clients", &wg)

	if p := up.peak.Load(); p > maxInFlight {
		t.Errorf("the backend held %d requests at once; the fleet's maxInFlight is %d", p, maxInFlight)
	}
	waits := slices.Clone(lightTook)
	t.Logf("heavy: %d ok, %d other; light: %d ok, %d other; light wait p50 %v p90 %v max %v; backend peak %d",
		heavyOK.Load(), heavyOther.Load(), len(lightTook), len(lightBad), pct(waits, 0.5), pct(waits, 0.9), pct(waits, 1), up.peak.Load())
	if len(lightBad) > 0 {
		t.Errorf("the light tenant was refused %d times, e.g. %s", len(lightBad), lightBad[0])
	}
	// Fair share is half the slots (two tenants backlogged); one request at
	// a time, the light tenant can use at most one. A release comes every
	// hold/maxInFlight = 25 ms; a light request waiting more than a few
	// hundred milliseconds at p50 waited for a timer, not for a slot.
	if n := len(lightTook); n < int(run/(hold+300*time.Millisecond)) {
		t.Errorf("the light tenant completed %d requests in %v; one at a time with %v each it should complete about %d", n, run, hold, int(run/(hold+25*time.Millisecond)))
	}
	if p50, most := pct(waits, 0.5), pct(waits, 1); p50 > 300*time.Millisecond || most > time.Second {
		t.Errorf("the light tenant's wait is %v at p50 and %v at most, with a slot freeing every %v across the fleet", p50, most, hold/maxInFlight)
	}
	testutil.Eventually(t, "every lease released", func() bool { return leases(t, rc) == 0 })
}

// TestCapacityFleetKilledReplicaSlotsComeBackByExpiry SIGKILLs a replica
// holding every slot of the backend while a request waits on another
// replica: the dead replica's leases expire within the TTL (3 s) of its last
// renewal (at most a renewal period before the kill), and the waiter is
// admitted then, not before, and not much later.
func TestCapacityFleetKilledReplicaSlotsComeBackByExpiry(t *testing.T) {
	const maxInFlight = 3
	f := newCapacityFleet(t, 2, maxInFlight, 15*time.Second)
	up, fleet, rc, ctx := f.up, f.reps, f.rc, f.ctx
	doomed, live := fleet[0], fleet[1]

	for range maxInFlight {
		go fleetCall(ctx, doomed, "heavy", 0, "g")
	}
	testutil.Eventually(t, "the doomed replica holding every slot", func() bool {
		return up.cur.Load() == maxInFlight && leases(t, rc) == maxInFlight
	})
	waiter := make(chan fleetAnswer, 1)
	go func() { waiter <- fleetCall(ctx, live, "light", 0, "") }()
	waitQueued(t, live, "the waiter on the live replica")
	select {
	case a := <-waiter:
		t.Fatalf("the waiter was answered while every slot was held: %d %s %v", a.code, a.body, a.err)
	default:
	}
	killed := time.Now()
	if err := doomed.proc.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-doomed.proc.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the killed replica did not exit")
	}
	if n := leases(t, rc); n != maxInFlight {
		t.Fatalf("leases right after the kill: %d; the dead replica's %d stay until they expire", n, maxInFlight)
	}
	var a fleetAnswer
	select {
	case a = <-waiter:
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter was not answered within 15 s of the kill")
	}
	after := time.Since(killed)
	t.Logf("waiter admitted %v after the kill (lease TTL 3 s, renewals every 1 s)", after)
	if a.code != http.StatusOK {
		t.Fatalf("the waiter: %d %s %v; want 200 once the dead replica's slots expire", a.code, a.body, a.err)
	}
	// Renewed at most 1 s before the kill, a lease lives 3 s more: the
	// slots cannot come back sooner than 2 s after it, and the sweep that
	// wakes the waiter runs within a renewal period of their expiry.
	if after < 1500*time.Millisecond || after > 3*time.Second+time.Second+1500*time.Millisecond {
		t.Errorf("the waiter was admitted %v after the kill; the dead replica's slots come back 2 to 4 s after it", after)
	}
	testutil.Eventually(t, "every lease released", func() bool { return leases(t, rc) == 0 })
}

// hold sends n gated requests as tenant through r and waits until the
// backend holds want requests in all; their answers arrive on the channel
// once the gate opens.
func hold(t *testing.T, ctx context.Context, up *fleetBackend, r *fleetReplica, tenant, gate string, n int, want int64) <-chan fleetAnswer {
	t.Helper()
	out := make(chan fleetAnswer, n)
	for range n {
		go func() { out <- fleetCall(ctx, r, tenant, 0, gate) }()
	}
	testutil.Eventually(t, fmt.Sprintf("%d requests at the backend", want), func() bool { return up.cur.Load() == want })
	return out
}

// rush has 4 clients send requests of 50 ms through r for d, at once, and
// checks that the backend never held more than maxInFlight meanwhile (nor
// before). It returns the answers' status codes, counted, and checks that
// every refusal carries a Retry-After.
func rush(t *testing.T, ctx context.Context, up *fleetBackend, r *fleetReplica, d time.Duration, maxInFlight int64, what string) map[int]int {
	t.Helper()
	var mu sync.Mutex
	codes := map[int]int{}
	var bad []string
	start := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for time.Since(start) < d {
				a := fleetCall(ctx, r, "light", 50*time.Millisecond, "")
				mu.Lock()
				codes[a.code]++
				if a.code != http.StatusOK && a.retryAfter == "" {
					bad = append(bad, fmt.Sprintf("%d %s", a.code, a.body))
				}
				mu.Unlock()
			}
		})
	}
	testutil.WaitGroupWithin(t, d+30*time.Second, "the clients "+what, &wg)
	t.Logf("%s: answers by status %v", what, codes)
	if p := up.peak.Load(); p > maxInFlight {
		t.Errorf("the backend held %d requests at once %s; maxInFlight is %d", p, what, maxInFlight)
	}
	if len(bad) > 0 {
		t.Errorf("%d refusals %s without a Retry-After, e.g. %s", len(bad), what, bad[0])
	}
	return codes
}

// answers waits for n answers on ch, each within limit of the call.
func answers(t *testing.T, ch <-chan fleetAnswer, n int, limit time.Duration, what string) []fleetAnswer {
	t.Helper()
	var out []fleetAnswer
	for range n {
		select {
		case a := <-ch:
			out = append(out, a)
		case <-time.After(limit):
			t.Fatalf("%s: %d of %d answered within %v", what, len(out), n, limit)
		}
	}
	return out
}

// TestCapacityFleetFrozenRedis freezes redis-server (SIGSTOP) for longer
// than a lease lives unrenewed (4 s, TTL 3 s) while one replica's requests
// hold every slot and a request waits on another. One held request ends
// during the freeze, two run through it. Failing closed: the held request
// completes; the waiter and new requests are refused 503 store_unavailable
// within their budget, not stuck; once Redis runs again, with clients
// asking on the other replica at once, the backend never holds more than
// maxInFlight (the two leases that expired during the freeze are still
// requests at the backend), and the fleet's count comes back to exactly
// the slots held.
func TestCapacityFleetFrozenRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("freezes redis-server for seconds")
	}
	const maxInFlight = 3
	f := newCapacityFleet(t, 2, maxInFlight, 10*time.Second)
	rs, up, fleet, rc, ctx := f.rs, f.up, f.reps, f.rc, f.ctx
	a, b := fleet[0], fleet[1]

	long := hold(t, ctx, up, a, "heavy", "long", 2, 2)
	short := hold(t, ctx, up, a, "heavy", "short", 1, 3)
	waiter := make(chan fleetAnswer, 1)
	go func() { waiter <- fleetCall(ctx, b, "light", 0, "") }()
	waitQueued(t, b, "the waiter on b")
	if err := rs.Pause(); err != nil {
		t.Fatal(err)
	}
	frozen, frozeAt := true, time.Now()
	defer func() {
		if frozen {
			_ = rs.Resume()
		}
	}()
	up.openGate("short")
	if h := answers(t, short, 1, 5*time.Second, "a held request ending while Redis is frozen")[0]; h.code != http.StatusOK {
		t.Errorf("a held request ending while Redis is frozen: %d %s %v", h.code, h.body, h.err)
	}
	w := answers(t, waiter, 1, 5*time.Second, "the waiter while Redis is frozen")[0]
	t.Logf("waiter: %d in %v, Retry-After %q: %s", w.code, w.took, w.retryAfter, w.body)
	if w.code != http.StatusServiceUnavailable || !strings.Contains(w.body, "store_unavailable") || w.retryAfter == "" {
		t.Errorf("the waiter while Redis is frozen, failing closed: %d %s (Retry-After %q); want 503 store_unavailable with a Retry-After", w.code, w.body, w.retryAfter)
	}
	for _, r := range fleet {
		n := fleetCall(ctx, r, "light", 0, "")
		if n.code != http.StatusServiceUnavailable || n.took > 2*time.Second {
			t.Errorf("a new request while Redis is frozen: %d in %v %s; want 503 store_unavailable at once", n.code, n.took, n.body)
		}
	}
	time.Sleep(4*time.Second - time.Since(frozeAt)) // past the lease TTL: the long requests' leases expire
	if err := rs.Resume(); err != nil {
		t.Fatal(err)
	}
	frozen = false
	if codes := rush(t, ctx, up, b, 5*time.Second, maxInFlight, "after the thaw"); codes[http.StatusOK] == 0 {
		t.Error("nothing admitted in the 5 s after the thaw")
	}
	testutil.EventuallyWithin(t, 10*time.Second, "the two long requests' leases, and only those", func() bool { return leases(t, rc) == 2 })
	up.openGate("long")
	answers(t, long, 2, 5*time.Second, "the long requests")
	testutil.Eventually(t, "every lease released", func() bool { return leases(t, rc) == 0 })
}

// TestCapacityFleetRedisRestarted kills redis-server while one replica's
// requests hold every slot and starts it again, empty, on the same
// address, while another replica's clients keep asking. The backend must
// never hold more than maxInFlight: the restarted Redis has lost the
// leases, and the holders' renewals put them back.
func TestCapacityFleetRedisRestarted(t *testing.T) {
	const maxInFlight = 2
	f := newCapacityFleet(t, 2, maxInFlight, 2*time.Second)
	rs, up, fleet, rc, ctx := f.rs, f.up, f.reps, f.rc, f.ctx
	a, b := fleet[0], fleet[1]

	held := hold(t, ctx, up, a, "heavy", "g", maxInFlight, maxInFlight)
	if err := rs.Kill(); err != nil {
		t.Fatal(err)
	}
	if d := fleetCall(ctx, b, "light", 0, ""); d.code != http.StatusServiceUnavailable || !strings.Contains(d.body, "store_unavailable") {
		t.Errorf("with Redis down, failing closed: %d %s; want 503 store_unavailable", d.code, d.body)
	}
	if err := rs.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	rush(t, ctx, up, b, 3*time.Second, maxInFlight, "after Redis restarted")
	if n := leases(t, rc); n != maxInFlight {
		t.Errorf("leases after the restart with %d requests held: %d", maxInFlight, n)
	}
	up.openGate("g")
	answers(t, held, maxInFlight, 5*time.Second, "held requests")
	testutil.Eventually(t, "every lease released", func() bool { return leases(t, rc) == 0 })
}

// setMaxmemory sets Redis's maxmemory: below what it uses, with noeviction,
// every write that may grow it is refused (OOM) while deletions still run;
// "0" lifts the limit.
func setMaxmemory(t *testing.T, rc *redis.Client, v string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rc.ConfigSet(ctx, "maxmemory", v).Err(); err != nil {
		t.Fatalf("CONFIG SET maxmemory %s: %v", v, err)
	}
}

// TestCapacityFleetRedisFull makes redis-server full (maxmemory below what
// it uses, noeviction) for 4 s (past the lease TTL) while one replica holds
// two slots and ends one of them. The release still removes its lease (a
// deletion is allowed when full); new requests are admitted on leases Redis
// counts, not refused (any refusal must be 503 store_unavailable with a
// Retry-After); and once memory is freed, with clients asking at once on
// the other replica, the backend never holds more than maxInFlight.
func TestCapacityFleetRedisFull(t *testing.T) {
	if testing.Short() {
		t.Skip("keeps redis-server full for seconds")
	}
	const maxInFlight = 2
	f := newCapacityFleet(t, 2, maxInFlight, 10*time.Second, "--maxmemory-policy", "noeviction")
	up, fleet, rc, ctx := f.up, f.reps, f.rc, f.ctx
	a, b := fleet[0], fleet[1]

	long := hold(t, ctx, up, a, "heavy", "long", 1, 1)
	short := hold(t, ctx, up, a, "heavy", "short", 1, 2)
	testutil.Eventually(t, "the replicas' heartbeats beating", func() bool {
		return rc.Exists(ctx, "fq:{ns/llm}:capacity-beat").Val() == 1
	})
	setMaxmemory(t, rc, "1") // far below what Redis uses: full
	fullAt := time.Now()
	freed := false
	free := func() {
		if !freed {
			freed = true
			setMaxmemory(t, rc, "0")
		}
	}
	defer free()
	up.openGate("short")
	if h := answers(t, short, 1, 5*time.Second, "a held request ending while Redis is full")[0]; h.code != http.StatusOK {
		t.Errorf("a held request ending while Redis is full: %d %s %v", h.code, h.body, h.err)
	}
	testutil.EventuallyWithin(t, 5*time.Second, "the ended request's lease removed though Redis is full", func() bool { return leases(t, rc) == 1 })
	// Redis lets a script write once it has written, and the slot scripts
	// and the beat start with a deletion, so slots are taken, counted and
	// renewed while Redis is full: with no rate limit to fail, requests
	// are admitted as before. A 503 would be a store marked down by failed
	// slot calls (before, by the beat going stale: see genScript).
	got := map[int]int{}
	for time.Since(fullAt) < 4*time.Second {
		for _, r := range fleet {
			n := fleetCall(ctx, r, "light", 0, "")
			got[n.code]++
			if n.code != http.StatusOK && (n.code != http.StatusServiceUnavailable || !strings.Contains(n.body, "store_unavailable") || n.retryAfter == "") {
				t.Errorf("a new request while Redis is full: %d in %v %s (Retry-After %q); want 200 or 503 store_unavailable with a Retry-After", n.code, n.took, n.body, n.retryAfter)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("new requests while Redis was full, by status: %v", got)
	if got[http.StatusServiceUnavailable] > 0 {
		t.Errorf("%d requests refused 503 while Redis was full and every lease could be renewed", got[http.StatusServiceUnavailable])
	}
	time.Sleep(4*time.Second - time.Since(fullAt)) // past the TTL: the long request's lease expires unrenewed
	free()
	if codes := rush(t, ctx, up, b, 5*time.Second, maxInFlight, "after Redis was freed"); codes[http.StatusOK] == 0 {
		t.Error("nothing admitted in the 5 s after Redis was freed")
	}
	testutil.EventuallyWithin(t, 10*time.Second, "the long request's lease, and only that", func() bool { return leases(t, rc) == 1 })
	up.openGate("long")
	answers(t, long, 1, 5*time.Second, "the long request")
	testutil.Eventually(t, "every lease released", func() bool { return leases(t, rc) == 0 })
}

// retryAfterMs returns a refusal's Retry-After-Ms, failing the test on
// anything but a 429 with one.
func retryAfterMs(t *testing.T, a fleetAnswer, what string) time.Duration {
	t.Helper()
	ms, err := strconv.Atoi(a.retryAfterMs)
	if a.code != http.StatusTooManyRequests || err != nil {
		t.Fatalf("%s: %d %s, Retry-After-Ms %q; want a 429 with one", what, a.code, a.body, a.retryAfterMs)
	}
	return time.Duration(ms) * time.Millisecond
}

// TestCapacityFleetRefusalsAreToldTheFleetsSpacing runs two replicas, fair
// queuing off (a request finding no slot is refused at once, told when to
// come back), on a backend of maxInFlight 4 whose requests take 1 s: b holds
// 3 and a 1. A slot freed on either replica can go to a client of either,
// so one frees every 1 s / 4 = 250 ms, and a refusal on either replica is
// told about that. Before, each divided by its own count: a, with one
// request, never half full by its own count, timed none and told the 50 ms
// prior (openai-node, sleeping exactly retry-after-ms, spent its two
// retries within 150 ms), and b told 1 s / 3.
func TestCapacityFleetRefusalsAreToldTheFleetsSpacing(t *testing.T) {
	const maxInFlight, took = 4, time.Second
	rs, up := redistest.Start(t), newFleetBackend(t)
	fleet := startCapacityFleetWith(t, rs, up.srv.URL, 2, maxInFlight, 10*time.Second, config.FailClosed,
		func(c *config.Config) { c.FairQueuing.Enabled = false })
	a, b := fleet[0], fleet[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The slots' time held, learned by both replicas: 3 on b, then 1 on a.
	timed := make(chan fleetAnswer, maxInFlight)
	for range 3 {
		go func() { timed <- fleetCall(ctx, b, "heavy", took, "") }()
	}
	testutil.Eventually(t, "b's 3 requests at the backend", func() bool { return up.cur.Load() == 3 })
	go func() { timed <- fleetCall(ctx, a, "light", took, "") }()
	for _, x := range answers(t, timed, maxInFlight, 10*time.Second, "the timed requests") {
		if x.code != http.StatusOK {
			t.Fatalf("a timed request: %d %s", x.code, x.body)
		}
	}

	held := hold(t, ctx, up, b, "heavy", "g", 3, 3)
	heldA := hold(t, ctx, up, a, "light", "g", 1, 4)
	toldA := retryAfterMs(t, fleetCall(ctx, a, "other", 0, ""), "a refusal on a")
	toldB := retryAfterMs(t, fleetCall(ctx, b, "other", 0, ""), "a refusal on b")
	t.Logf("with the fleet's 4 slots of %v held (1 on a, 3 on b): a refusal on a told %v, on b %v", took, toldA, toldB)
	// The slots measured 1 s and some milliseconds of the data plane's own
	// (an EWMA of 1.2 s would be a loaded machine's): a quarter of that.
	for _, c := range []struct {
		who  string
		told time.Duration
	}{{"a", toldA}, {"b", toldB}} {
		if c.told < took/maxInFlight || c.told > took*6/5/maxInFlight {
			t.Errorf("a refusal on %s told %v; want about %v, the fleet's %d slots of %v", c.who, c.told, took/maxInFlight, maxInFlight, took)
		}
	}
	up.openGate("g")
	answers(t, held, 3, 5*time.Second, "b's held requests")
	answers(t, heldA, 1, 5*time.Second, "a's held request")
}

// TestCapacityFleetRefusalInTheWarmUpIsToldItsEnd restarts redis-server
// empty while the fleet is idle: the first acquire starts a warm-up of one
// lease TTL (3 s) in which every acquire is refused. A refusal then is told
// the time left of it, so a client that sleeps exactly retry-after-ms (as
// OpenAI's do) is admitted at its first retry. Before, it was told the
// release spacing (the 50 ms prior here), and with openai-node's two retries
// 50 and 100 ms later it got a 429 in the end.
func TestCapacityFleetRefusalInTheWarmUpIsToldItsEnd(t *testing.T) {
	rs, up := redistest.Start(t), newFleetBackend(t)
	fleet := startCapacityFleetWith(t, rs, up.srv.URL, 2, 2, 10*time.Second, config.FailClosed,
		func(c *config.Config) { c.FairQueuing.Enabled = false })
	a := fleet[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if x := fleetCall(ctx, a, "light", 0, ""); x.code != http.StatusOK {
		t.Fatalf("before the restart: %d %s", x.code, x.body)
	}
	if err := rs.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := rs.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	var first fleetAnswer
	testutil.EventuallyWithin(t, 10*time.Second, "a refusal of the warm-up (429)", func() bool {
		first = fleetCall(ctx, a, "light", 0, "")
		return first.code == http.StatusTooManyRequests
	})
	told := retryAfterMs(t, first, "a refusal in the warm-up")
	var tries []string
	ok := false
	for range 2 { // openai-node's default retries
		time.Sleep(told)
		x := fleetCall(ctx, a, "light", 0, "")
		tries = append(tries, fmt.Sprintf("%d after %v", x.code, told))
		if x.code == http.StatusOK {
			ok = true
			break
		}
		told = retryAfterMs(t, x, "a refusal in the warm-up")
	}
	t.Logf("refused in the warm-up, told %s; retries: %v", first.retryAfterMs, tries)
	if !ok {
		t.Errorf("a client obeying retry-after-ms was refused on both its retries in the warm-up: told %s ms first, then %v", first.retryAfterMs, tries)
	}
	if told > 3*time.Second {
		t.Errorf("told %v in a warm-up of 3 s", told)
	}
}
