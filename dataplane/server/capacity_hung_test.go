package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// hungBackend is an upstream that never answers: a request stays until the
// data plane drops it (its total timeout, or its client went away).
func hungBackend(t *testing.T) *httptest.Server {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(func() {
		close(stop)
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

// inFlightOn returns the named backend's count.
func (hs *harness) inFlightOn(name string) int {
	for _, st := range hs.srv.rt.Load().capacity.tracker.Stats() {
		if st.Backend == name {
			return st.InFlight
		}
	}
	return -1
}

// TestCapacityAHungBackendHoldsItsSlotsUntilTheRequestEnds: a backend that
// never answers keeps its slot taken until the request's total timeout or
// its client ends it, then frees it exactly once; meanwhile requests go to
// the other backend and are answered.
func TestCapacityAHungBackendHoldsItsSlotsUntilTheRequestEnds(t *testing.T) {
	hung := hungBackend(t)
	hs := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"ok":true}`))
	}), func(c *config.Config) {
		c.Backends = append(c.Backends, config.Backend{Name: "hung", URL: hung.URL, Weight: 1})
		c.Capacity = &config.Capacity{Backends: []config.BackendCapacity{{Name: "b1", MaxInFlight: 1}, {Name: "hung", MaxInFlight: 1}}}
		c.Identity.TrustHeaders = true
		c.FairQueuing.Enabled = true
		c.Timeouts.RequestTotal = dur(time.Minute)
	})
	// onHung sends requests until one is held by the hung backend (the
	// pool's round-robin sends every other one there) and returns it.
	onHung := func(ctx context.Context) <-chan result {
		for range 4 {
			c := hs.start(ctx, capBody, map[string]string{"X-User": "alice"})
			testutil.Eventually(t, "the request answered or held", func() bool {
				if hs.inFlightOn("hung") == 1 {
					return true
				}
				select {
				case r := <-c:
					if r.err != nil || r.resp.StatusCode != http.StatusOK {
						t.Fatalf("a request for the healthy backend: %+v", r)
					}
					c = nil
					return true
				default:
					return false
				}
			})
			if c != nil {
				return c
			}
		}
		t.Fatal("no request reached the hung backend")
		return nil
	}

	t.Run("the total timeout frees the slot", func(t *testing.T) {
		held := onHung(t.Context())
		for i := range 5 {
			if r := recvResult(t, hs.start(t.Context(), capBody, map[string]string{"X-User": "bob"})); r.err != nil || r.resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d while a backend hangs: %+v, want the other backend's 200", i, r)
			}
		}
		if n := hs.inFlightOn("hung"); n != 1 {
			t.Fatalf("the hung backend's count = %d while its request waits, want 1", n)
		}
		hs.clk.Step(time.Minute)
		if r := recvResult(t, held); r.err != nil || r.resp.StatusCode != http.StatusGatewayTimeout {
			t.Fatalf("the hung request: %+v, want 504 at its total timeout", r)
		}
		hs.exactlyIdle("after the timeout")
	})
	t.Run("the client going away frees the slot", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		held := onHung(ctx)
		cancel()
		if r := recvResult(t, held); r.err == nil {
			t.Fatalf("the cancelled request was answered: %+v", r)
		}
		hs.exactlyIdle("after the client left")
	})
}

// TestCapacityAWaiterForAHungBackendIsRefusedAtItsMaxWait: with the only
// backend hung at maxInFlight, a waiter is answered 429 limit_type capacity
// with the queue's deadline_exceeded (SPEC 5, 6b) when its maxWait ends,
// and the hung request's slot is freed by its own timeout.
func TestCapacityAWaiterForAHungBackendIsRefusedAtItsMaxWait(t *testing.T) {
	hung := hungBackend(t)
	hs := newHarness(t, http.NotFoundHandler(), func(c *config.Config) {
		c.Backends[0].URL = hung.URL
		withCapacity(1, nil)(c)
		c.Identity.TrustHeaders = true
		c.FairQueuing.Enabled = true
		c.FairQueuing.Bounds.MaxWait = dur(5 * time.Second)
		c.Timeouts.RequestTotal = dur(time.Minute)
	})
	held := hs.start(t.Context(), capBody, map[string]string{"X-User": "alice"})
	testutil.Eventually(t, "the first request at the hung backend", func() bool { return hs.inFlight() == 1 })
	waiter := hs.start(t.Context(), capBody, map[string]string{"X-User": "bob"})
	hs.queued(1)
	hs.clk.Step(5 * time.Second)
	r := recvResult(t, waiter)
	if r.err != nil || r.resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the waiter at its maxWait: %+v, want 429", r)
	}
	var e decodedError
	if err := json.NewDecoder(strings.NewReader(r.body)).Decode(&e); err != nil || e.Error.Details == nil || e.Error.Details.FairQueue == nil {
		t.Fatalf("refusal body %q: %v", r.body, err)
	}
	if d := e.Error.Details; d.LimitType != "capacity" || d.FairQueue.Reason != "deadline_exceeded" || d.FairQueue.TenantDimension != "user" {
		t.Errorf("refusal details %+v %+v, want limit_type capacity, reason deadline_exceeded, tenant_dimension user", d, d.FairQueue)
	}
	if w := r.resp.Header.Get("X-Fair-Queue-Wait-Ms"); w != "5000" {
		t.Errorf("x-fair-queue-wait-ms = %q, want 5000", w)
	}
	if r.resp.Header.Get("Retry-After") == "" || r.resp.Header.Get("Retry-After-Ms") == "" {
		t.Errorf("429 without Retry-After / retry-after-ms: %v", r.resp.Header)
	}
	if n := hs.inFlight(); n != 1 {
		t.Errorf("in flight after the waiter's refusal = %d, want the hung request's 1", n)
	}
	hs.clk.Step(time.Minute)
	if r := recvResult(t, held); r.err != nil || r.resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("the hung request: %+v, want 504", r)
	}
	hs.exactlyIdle("after the hung request's timeout")
}
