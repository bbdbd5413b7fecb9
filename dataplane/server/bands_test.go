package server

import (
	"context"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/internal/fakeupstream"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// Priority bands over HTTP (SPEC section 5, "Priority bands"): every test
// runs the real server on a fake clock in front of a per-model limit of one
// request per grantEvery, so each step of the clock frees exactly one grant
// and shares are counted, not timed.

const (
	grantEvery = 100 * time.Millisecond
	// bandHeader is the policy's request band header in these tests.
	bandHeader = "X-Priority-Band"
)

// bandTenant is one tenant of a banded config: a user, its weight, and its
// band ("" for the default band, batch).
type bandTenant struct {
	user   string
	weight int32
	band   string
}

// withBands configures two bands, interactive and batch (batch with
// minShare, and the default), the request band header, and a per-model
// limit of one request per grantEvery that every request shares.
func withBands(minShare float64, tenants ...bandTenant) func(*config.Config) {
	return func(c *config.Config) {
		c.Identity.TrustHeaders = true
		c.RateLimits.PerModel = &config.ModelLimits{Default: limit(1, 1, grantEvery)}
		fq := &c.FairQueuing
		fq.Enabled = true
		fq.Bounds.MaxWait = dur(10 * time.Minute)
		fq.Bands = []config.Band{{Name: "interactive"}, {Name: "batch", MinShare: minShare}}
		fq.DefaultBand = "batch"
		fq.RequestBandHeader = bandHeader
		for _, tn := range tenants {
			fq.Weights = append(fq.Weights, config.Weight{TenantHash: h(tn.user), Weight: tn.weight, Band: tn.band})
		}
	}
}

// loop is a closed loop of clients of one tenant: each sends its next
// request as soon as the previous one is answered, so the tenant stays
// backlogged.
type loop struct {
	admitted, refused atomic.Int64
	// wrongBand counts admitted responses that waited without carrying
	// x-fair-queue-band: want.
	wrongBand atomic.Int64
}

// flood starts clients closed-loop clients sending with header until ctx
// ends; wg tracks them.
func (hs *harness) flood(ctx context.Context, wg *sync.WaitGroup, clients int, header map[string]string, want string) *loop {
	l := &loop{}
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				r := <-hs.start(ctx, `{"model":"llama"}`, header)
				switch {
				case r.err != nil:
				case r.resp.StatusCode == http.StatusOK:
					l.admitted.Add(1)
					if r.resp.Header.Get(headerQueueWaitMS) != "" && r.resp.Header.Get(headerQueueBand) != want {
						l.wrongBand.Add(1)
					}
				default:
					l.refused.Add(1)
				}
			}
		}()
	}
	return l
}

// probes are single requests of one tenant, sent one at a time at chosen
// instants, whose waits are recorded.
type probes struct {
	hs      *harness
	header  map[string]string
	want    string
	mu      sync.Mutex
	waits   []time.Duration
	bad     []string
	sent    atomic.Int64
	done    atomic.Int64
	granted atomic.Int64
}

// send sends one probe in the background.
func (p *probes) send(ctx context.Context) {
	p.sent.Add(1)
	ch := p.hs.start(ctx, `{"model":"llama"}`, p.header)
	go func() {
		defer p.done.Add(1)
		r := <-ch
		p.mu.Lock()
		defer p.mu.Unlock()
		switch {
		case r.err != nil:
			p.bad = append(p.bad, r.err.Error())
		case r.resp.StatusCode != http.StatusOK:
			p.bad = append(p.bad, "status "+strconv.Itoa(r.resp.StatusCode)+": "+r.body)
		default:
			ms, err := strconv.ParseInt(r.resp.Header.Get(headerQueueWaitMS), 10, 64)
			if err != nil {
				p.bad = append(p.bad, "no x-fair-queue-wait-ms on a request that had to wait")
			}
			if got := r.resp.Header.Get(headerQueueBand); got != p.want {
				p.bad = append(p.bad, "x-fair-queue-band "+strconv.Quote(got)+", want "+strconv.Quote(p.want))
			}
			p.waits = append(p.waits, time.Duration(ms)*time.Millisecond)
			p.granted.Add(1)
		}
	}()
}

func (p *probes) pending() int { return int(p.sent.Load() - p.done.Load()) }

// answered waits until every probe is answered, fails the test if one went
// wrong, and returns their waits.
func (p *probes) answered(t *testing.T) []time.Duration {
	t.Helper()
	testutil.Eventually(t, "every probe answered", func() bool { return p.pending() == 0 })
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.bad) > 0 {
		t.Fatalf("%d of %d requests of %v went wrong, first: %s", len(p.bad), p.sent.Load(), p.header, p.bad[0])
	}
	return slices.Clone(p.waits)
}

// percentile returns the q-quantile (0 < q <= 1) of ds by the nearest rank.
func percentile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[max(int(math.Ceil(q*float64(len(s))))-1, 0)]
}

// stepGrants steps the fake clock by one grant interval ticks times, after
// each step waiting until the grant was answered and every flooding client
// is queued again (backlog requests queued with no probe in flight). Every
// probeEvery-th tick (0: never), a probe is sent first, at a varying
// instant within the interval, so that probe waits sample every phase of
// the grant cycle. grants reports the grants answered so far.
func (hs *harness) stepGrants(ctx context.Context, ticks, backlog, probeEvery int, p *probes, grants func() int64) {
	hs.t.Helper()
	fq := hs.srv.rt.Load().fairQueue()
	start := grants()
	for k := range ticks {
		if probeEvery > 0 && k%probeEvery == 0 {
			offset := time.Duration(k*37%10) * grantEvery / 10
			hs.clk.Step(offset)
			p.send(ctx)
			hs.queued(backlog + p.pending())
			hs.clk.Step(grantEvery - offset)
		} else {
			hs.clk.Step(grantEvery)
		}
		want := start + int64(k) + 1
		testutil.Eventually(hs.t, "one grant answered and the backlog restored", func() bool {
			depth, _ := fq.Stats()
			return grants() == want && depth == backlog+p.pending() && fq.Settled()
		})
	}
}

// TestBandsHighBandTakesWhatItAsks: a high band offered half the limit
// while a low band floods gets every request it asks for, each within one
// grant interval, and the low band gets the rest (issue #21's HTTP targets:
// shares within 2%, the high band's p99 wait at most one interval + 10%).
func TestBandsHighBandTakesWhatItAsks(t *testing.T) {
	const (
		floodClients = 4
		ticks        = 200
	)
	hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}),
		withBands(0.2, bandTenant{"hi", 1, "interactive"}, bandTenant{"lo", 1, ""}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	lo := hs.flood(ctx, &wg, floodClients, map[string]string{"X-User": "lo"}, "batch")
	hi := &probes{hs: hs, header: map[string]string{"X-User": "hi"}, want: "interactive"}
	hs.queued(floodClients)
	base := lo.admitted.Load()
	hs.stepGrants(ctx, ticks, floodClients, 2, hi, func() int64 { return lo.admitted.Load() - base + hi.granted.Load() })
	waits := hi.answered(t)
	cancel()
	testutil.WaitGroupWithin(t, 10*time.Second, "the flooding clients to stop", &wg)

	asked, got := hi.sent.Load(), hi.granted.Load()
	loShare := float64(ticks-int(got)) / ticks
	p50, p99, worst := percentile(waits, 0.5), percentile(waits, 0.99), slices.Max(waits)
	t.Logf("high band offered 50%%: granted %d of %d asked (%.1f%%); low band %.3f of %d grants; high-band wait p50 %v p99 %v max %v (grant interval %v)",
		got, asked, 100*float64(got)/float64(asked), loShare, ticks, p50, p99, worst, grantEvery)
	if got != asked {
		t.Errorf("the high band got %d of the %d requests it asked for, want all", got, asked)
	}
	if math.Abs(loShare-0.5) > 0.02 {
		t.Errorf("the low band got %.3f of the grants, want the rest, 0.5, within 2%%", loShare)
	}
	if limit := grantEvery + grantEvery/10; p99 > limit {
		t.Errorf("the high band's p99 wait under a low-band flood is %v, want at most one grant interval + 10%% (%v)", p99, limit)
	}
	if n := lo.wrongBand.Load(); n > 0 {
		t.Errorf("%d low-band responses lacked x-fair-queue-band: batch", n)
	}
}

// TestBandsMinShare: with the high band offered twice the limit, the low
// band gets exactly its minShare (none without one) and the high band's
// tenants split the rest by weight.
func TestBandsMinShare(t *testing.T) {
	const (
		clients = 4
		grants  = 500
	)
	for _, tc := range []struct {
		name     string
		minShare float64
	}{{"minShare 0.1", 0.1}, {"no minShare", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), withBands(tc.minShare,
				bandTenant{"hi1", 1, "interactive"}, bandTenant{"hi3", 3, "interactive"}, bandTenant{"lo", 1, "batch"}))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var wg sync.WaitGroup
			hi1 := hs.flood(ctx, &wg, clients, map[string]string{"X-User": "hi1"}, "interactive")
			hi3 := hs.flood(ctx, &wg, clients, map[string]string{"X-User": "hi3"}, "interactive")
			lo := hs.flood(ctx, &wg, clients, map[string]string{"X-User": "lo"}, "batch")
			loops := []*loop{hi1, hi3, lo}
			hs.queued(3 * clients)
			base := make([]int64, len(loops))
			for i, l := range loops {
				base[i] = l.admitted.Load()
			}
			count := func(i int) int64 { return loops[i].admitted.Load() - base[i] }
			hs.stepGrants(ctx, grants, 3*clients, 0, &probes{}, func() int64 { return count(0) + count(1) + count(2) })
			cancel()
			testutil.WaitGroupWithin(t, 10*time.Second, "the flooding clients to stop", &wg)

			loShare := float64(count(2)) / grants
			high := float64(count(0) + count(1))
			hi3Share := float64(count(1)) / high
			t.Logf("high band offered 200%% (weights 1:3), low band minShare %v: low %.4f of %d grants; high band's split hi1 %.4f hi3 %.4f (weighted 0.25/0.75)",
				tc.minShare, loShare, grants, 1-hi3Share, hi3Share)
			if math.Abs(loShare-tc.minShare) > 0.02 {
				t.Errorf("the low band got %.4f of the grants, want its minShare %v within 2%%", loShare, tc.minShare)
			}
			if tc.minShare == 0 && count(2) != 0 {
				t.Errorf("the low band got %d grants without a minShare while the high band was backlogged, want 0", count(2))
			}
			if math.Abs(hi3Share/0.75-1) > 0.05 {
				t.Errorf("the weight-3 high tenant got %.4f of the high band's grants, want 0.75 within 5%%", hi3Share)
			}
			for i, l := range loops {
				if n := l.wrongBand.Load(); n > 0 {
					t.Errorf("tenant %d: %d responses carried the wrong x-fair-queue-band", i, n)
				}
				if n := l.refused.Load(); n > 0 {
					t.Errorf("tenant %d: %d requests refused; with a 10m maxWait every request waits its turn", i, n)
				}
			}
		})
	}
}

// TestBandHeaderLowersOnlyTheRequest: an interactive tenant's batch
// requests, lowered with the band header, flood the batch band without ever
// delaying the same tenant's interactive requests.
func TestBandHeaderLowersOnlyTheRequest(t *testing.T) {
	const (
		floodClients = 4
		ticks        = 100
	)
	hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}),
		withBands(0, bandTenant{"hi", 1, "interactive"}, bandTenant{"lo", 1, ""}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	hiBatch := hs.flood(ctx, &wg, floodClients, map[string]string{"X-User": "hi", bandHeader: "batch"}, "batch")
	lo := hs.flood(ctx, &wg, floodClients, map[string]string{"X-User": "lo"}, "batch")
	hi := &probes{hs: hs, header: map[string]string{"X-User": "hi"}, want: "interactive"}
	hs.queued(2 * floodClients)
	baseB, baseL := hiBatch.admitted.Load(), lo.admitted.Load()
	hs.stepGrants(ctx, ticks, 2*floodClients, 2, hi, func() int64 {
		return hiBatch.admitted.Load() - baseB + lo.admitted.Load() - baseL + hi.granted.Load()
	})
	waits := hi.answered(t)
	cancel()
	testutil.WaitGroupWithin(t, 10*time.Second, "the flooding clients to stop", &wg)

	batchOwn, batchLo := hiBatch.admitted.Load()-baseB, lo.admitted.Load()-baseL
	worst := slices.Max(waits)
	t.Logf("interactive tenant with its own batch flood: %d of %d interactive requests granted, wait p99 %v max %v; batch grants: its own %d, the batch tenant's %d",
		hi.granted.Load(), hi.sent.Load(), percentile(waits, 0.99), worst, batchOwn, batchLo)
	if hi.granted.Load() != hi.sent.Load() {
		t.Errorf("%d of %d interactive requests granted, want all", hi.granted.Load(), hi.sent.Load())
	}
	if worst > grantEvery {
		t.Errorf("an interactive request waited %v behind its own tenant's batch requests, want at most the grant interval %v", worst, grantEvery)
	}
	if n := hiBatch.wrongBand.Load() + lo.wrongBand.Load(); n > 0 {
		t.Errorf("%d batch-band responses lacked x-fair-queue-band: batch", n)
	}
	if batchOwn == 0 || batchLo == 0 {
		t.Errorf("the batch band's grants went %d to the lowered requests and %d to the batch tenant, want both served", batchOwn, batchLo)
	}
}

// TestBandHeaderCannotRaise: a batch tenant naming a higher band, or a band
// that does not exist, stays in its own band, and the header is counted as
// ignored.
func TestBandHeaderCannotRaise(t *testing.T) {
	const floodClients = 4
	hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}),
		withBands(0, bandTenant{"hi", 1, "interactive"}, bandTenant{"lo", 1, ""}))
	floodCtx, stopFlood := context.WithCancel(context.Background())
	defer stopFlood()
	var wg sync.WaitGroup
	hi := hs.flood(floodCtx, &wg, floodClients, map[string]string{"X-User": "hi"}, "interactive")
	hs.queued(floodClients)
	raised := hs.start(context.Background(), `{"model":"llama"}`, map[string]string{"X-User": "lo", bandHeader: "interactive"})
	hs.queued(floodClients + 1)
	unknown := hs.start(context.Background(), `{"model":"llama"}`, map[string]string{"X-User": "lo", bandHeader: "platinum"})
	hs.queued(floodClients + 2)
	base := hi.admitted.Load()
	hs.stepGrants(floodCtx, 20, floodClients+2, 0, &probes{}, func() int64 { return hi.admitted.Load() - base })
	select {
	case r := <-raised:
		t.Fatalf("a batch request naming the interactive band was answered (%v) while the interactive band was backlogged", r.resp)
	case r := <-unknown:
		t.Fatalf("a batch request naming an unknown band was answered (%v) while the interactive band was backlogged", r.resp)
	default:
	}
	for reason, want := range map[string]float64{"raise": 1, "unknown": 1} {
		if got := metricValue(t, hs.reg, metrics.QueueBandIgnoredName, map[string]string{"reason": reason}); got != want {
			t.Errorf("%s{reason=%q} = %v, want %v", metrics.QueueBandIgnoredName, reason, got, want)
		}
	}
	stopFlood()
	testutil.WaitGroupWithin(t, 10*time.Second, "the flooding clients to stop", &wg)
	hs.queued(2)
	for _, ch := range []<-chan result{raised, unknown} { // in arrival order: one queue
		hs.clk.Step(grantEvery)
		r := wait(t, ch)
		if r.resp.StatusCode != http.StatusOK || r.resp.Header.Get(headerQueueBand) != "batch" {
			t.Errorf("status %d, x-fair-queue-band %q: want 200 in the tenant's own band, batch", r.resp.StatusCode, r.resp.Header.Get(headerQueueBand))
		}
	}
}

// TestBandSignals: a request that waited, admitted or refused, names its
// band in x-fair-queue-band and details.fair_queue.band; without bands
// neither appears, and a request admitted at once never carries it.
func TestBandSignals(t *testing.T) {
	for _, banded := range []bool{true, false} {
		t.Run("bands "+strconv.FormatBool(banded), func(t *testing.T) {
			hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), func(c *config.Config) {
				perUserQueueing(c)
				c.FairQueuing.Bounds.MaxQueueDepthPerTenant = 1
				if banded {
					withBands(0, bandTenant{"alice", 1, "interactive"})(c)
					c.RateLimits.PerModel = nil
				}
			})
			want := ""
			if banded {
				want = "interactive"
			}
			first := wait(t, hs.start(context.Background(), `{"model":"m"}`, alice))
			if first.resp.StatusCode != http.StatusOK {
				t.Fatalf("first request: status %d", first.resp.StatusCode)
			}
			if v := first.resp.Header.Values(headerQueueBand); len(v) > 0 {
				t.Errorf("a request admitted at once carries x-fair-queue-band %q", v)
			}
			queued := hs.start(context.Background(), `{"model":"m"}`, alice)
			hs.queued(1)
			refused := hs.do(`{"model":"m"}`, alice)
			if refused.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("status %d, want 429 tenant_queue_full", refused.StatusCode)
			}
			checkBandHeader(t, "refusal", refused.Header, want)
			e := decodeError(t, refused)
			fq := e.Error.Details.FairQueue
			if fq == nil || fq.Reason != "tenant_queue_full" {
				t.Fatalf("details.fair_queue = %+v, want a tenant_queue_full refusal", fq)
			}
			switch {
			case banded && (fq.Band == nil || *fq.Band != want):
				t.Errorf("details.fair_queue.band = %v, want %q", fq.Band, want)
			case !banded && fq.Band != nil:
				t.Errorf("details.fair_queue.band = %q without bands, want it absent", *fq.Band)
			}
			hs.clk.Step(time.Second)
			r := wait(t, queued)
			if r.resp.StatusCode != http.StatusOK {
				t.Fatalf("queued request: status %d", r.resp.StatusCode)
			}
			checkBandHeader(t, "admitted after waiting", r.resp.Header, want)
		})
	}
}

// checkBandHeader checks x-fair-queue-band is want, or absent when want is "".
func checkBandHeader(t *testing.T, what string, h http.Header, want string) {
	t.Helper()
	got := h.Values(headerQueueBand)
	switch {
	case want == "" && len(got) > 0:
		t.Errorf("%s: x-fair-queue-band %q without bands, want none", what, got)
	case want != "" && (len(got) != 1 || got[0] != want):
		t.Errorf("%s: x-fair-queue-band %q, want %q", what, got, want)
	}
}

// TestBandOnTokenHolds: a request held for its tokens names the band it
// was held in, and only with bands.
func TestBandOnTokenHolds(t *testing.T) {
	for _, banded := range []bool{true, false} {
		t.Run("bands "+strconv.FormatBool(banded), func(t *testing.T) {
			hs := newHarness(t, fakeupstream.New(fakeupstream.Options{CompletionFraction: 0.01}),
				func(c *config.Config) {
					tokenBudget(600, 10*time.Second)(c)
					c.Identity.TrustHeaders = true
					c.FairQueuing.Enabled = true
					if banded {
						withBands(0)(c)
						c.RateLimits.PerModel = nil
					}
				})
			want := ""
			if banded {
				want = "batch"
			}
			bob := map[string]string{"X-User": "bob"}
			readAll(t, hs.do(`{"model":"m","max_tokens":500,"messages":[{"role":"user","content":"hi"}]}`, bob))
			held := hs.start(context.Background(), `{"model":"m","max_tokens":595,"messages":[{"role":"user","content":"hi"}]}`, bob)
			rt := hs.srv.rt.Load()
			testutil.Eventually(t, "the request to be held", func() bool {
				d, _ := rt.deferralQueue().Stats()
				w, _ := rt.admit.HeldAhead()
				return d+w == 1
			})
			hs.clk.Step(2 * time.Second)
			r := wait(t, held)
			if r.resp.StatusCode != http.StatusOK || r.resp.Header.Get("X-Fair-Queue-Deferred-Ms") == "" {
				t.Fatalf("status %d, x-fair-queue-deferred-ms %q: want 200 after a hold", r.resp.StatusCode, r.resp.Header.Get("X-Fair-Queue-Deferred-Ms"))
			}
			checkBandHeader(t, "admitted after a hold", r.resp.Header, want)
		})
	}
}

// TestBandsHighBandWaitRealClock measures the high band's wait under a
// low-band flood on the real clock, where the scheduler's wake-ups and the
// HTTP path take real time. It asserts the target (p99 at most one grant
// interval + 10%) only with FAIRQUEUE_TIMING_CHECKS=1: on a shared machine
// a descheduled goroutine can add more than that.
func TestBandsHighBandWaitRealClock(t *testing.T) {
	if os.Getenv("FAIRQUEUE_TIMING_CHECKS") != "1" {
		t.Skip("a real-clock timing measurement: set FAIRQUEUE_TIMING_CHECKS=1 to run it")
	}
	const (
		interval     = 50 * time.Millisecond
		floodClients = 8
		probesSent   = 100
	)
	hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), func(c *config.Config) {
		withBands(0, bandTenant{"hi", 1, "interactive"}, bandTenant{"lo", 1, ""})(c)
		c.RateLimits.PerModel = &config.ModelLimits{Default: limit(1, 1, interval)}
	}, func(o *Options) { o.Clock = clock.RealClock{} })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	lo := hs.flood(ctx, &wg, floodClients, map[string]string{"X-User": "lo"}, "batch")
	time.Sleep(10 * interval) // the flood backlogs
	hi := &probes{hs: hs, header: map[string]string{"X-User": "hi"}, want: "interactive"}
	tick := time.NewTicker(2*interval + interval/7) // offered under half the limit, at every phase
	defer tick.Stop()
	for range probesSent {
		<-tick.C
		hi.send(ctx)
	}
	waits := hi.answered(t)
	cancel()
	testutil.WaitGroupWithin(t, 10*time.Second, "the flooding clients to stop", &wg)
	p99 := percentile(waits, 0.99)
	t.Logf("real clock, grant interval %v, low band flooding (%d admitted): high-band wait p50 %v p99 %v max %v over %d requests",
		interval, lo.admitted.Load(), percentile(waits, 0.5), p99, slices.Max(waits), len(waits))
	if limit := interval + interval/10; p99 > limit {
		t.Errorf("high-band p99 wait %v, want at most one grant interval + 10%% (%v)", p99, limit)
	}
}
