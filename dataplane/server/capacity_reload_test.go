package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// capacityReload is a harness in capacity mode whose upstream answers each
// request once release is sent a value, and a way to load the same config
// with other capacity settings.
type capacityReload struct {
	*harness
	arrived chan string
	release chan struct{}
	url     string
}

func newCapacityReload(t *testing.T, maxInFlight int32) *capacityReload {
	cr := &capacityReload{arrived: make(chan string, 8), release: make(chan struct{}, 8)}
	up := func(w http.ResponseWriter, r *http.Request) {
		cr.arrived <- r.Header.Get("X-User")
		select {
		case <-cr.release:
		case <-r.Context().Done():
			return
		case <-time.After(20 * time.Second):
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	}
	cr.harness = newHarness(t, http.HandlerFunc(up), func(c *config.Config) {
		cr.url = c.Backends[0].URL
		queuedCapacity(c)
		c.Capacity.Backends[0].MaxInFlight = maxInFlight
	})
	return cr
}

// reload loads the harness's config with capacity changed by mutate.
func (cr *capacityReload) reload(hash string, mutate func(*config.Config)) {
	cr.t.Helper()
	cfg := baseConfig(cr.url)
	queuedCapacity(cfg)
	mutate(cfg)
	if err := cr.srv.Load(cfg, hash); err != nil {
		cr.t.Fatal(err)
	}
}

// send starts a request of user; an empty user has no identity.
func (cr *capacityReload) send(user string) <-chan result {
	h := map[string]string{}
	if user != "" {
		h["X-User"] = user
	}
	return cr.start(context.Background(), capBody, h)
}

// at waits for user's request at the upstream.
func (cr *capacityReload) at(user string) {
	cr.t.Helper()
	select {
	case got := <-cr.arrived:
		if got != user {
			cr.t.Fatalf("%q reached the upstream, want %q", got, user)
		}
	case <-time.After(10 * time.Second):
		cr.t.Fatalf("%q never reached the upstream", user)
	}
}

// ok receives a result and checks it is a 200.
func (cr *capacityReload) ok(what string, c <-chan result) {
	cr.t.Helper()
	if r := recvResult(cr.t, c); r.err != nil || r.resp.StatusCode != http.StatusOK {
		cr.t.Errorf("%s: %+v", what, r)
	}
}

// refusedForCapacity sends a request without identity, which capacity
// refuses at once when every slot is taken, and checks it was.
func (cr *capacityReload) refusedForCapacity(what string) {
	cr.t.Helper()
	r := recvResult(cr.t, cr.send(""))
	if r.err != nil || r.resp.StatusCode != http.StatusTooManyRequests {
		cr.t.Fatalf("%s: a request without identity got %+v, want 429 capacity", what, r)
	}
}

// TestCapacityReloadKeepsInFlightAndWaiters changes maxInFlight on a live
// data plane (SPEC 8: nothing accepted is lost, tightened bounds never
// strand a waiter).
func TestCapacityReloadKeepsInFlightAndWaiters(t *testing.T) {
	t.Run("lowering maxInFlight below in flight admits no one until below it", func(t *testing.T) {
		cr := newCapacityReload(t, 2)
		alice := cr.send("alice")
		cr.at("alice")
		bob := cr.send("bob")
		cr.at("bob")
		carol := cr.send("carol")
		cr.queued(1)
		cr.reload("lowered", func(c *config.Config) { c.Capacity.Backends[0].MaxInFlight = 1 })
		if st := cr.srv.rt.Load().capacity.tracker.Stats()[0]; st.InFlight != 2 || st.MaxInFlight != 1 {
			t.Fatalf("after the reload: %d in flight of %d, want the 2 kept of the new 1", st.InFlight, st.MaxInFlight)
		}
		cr.queued(1) // carol still waits
		cr.release <- struct{}{}
		cr.ok("the first holder", firstOf(alice, bob))
		cr.queued(1) // 1 in flight of 1: carol still waits
		if n := cr.inFlight(); n != 1 {
			t.Fatalf("in flight = %d, want 1", n)
		}
		cr.refusedForCapacity("at 1 of 1")
		cr.release <- struct{}{}
		cr.at("carol")
		cr.release <- struct{}{}
		cr.ok("carol", carol)
		cr.exactlyIdle("after the lowered maxInFlight")
		drain(alice, bob)
	})
	t.Run("raising maxInFlight wakes a waiter at once", func(t *testing.T) {
		cr := newCapacityReload(t, 1)
		alice := cr.send("alice")
		cr.at("alice")
		bob := cr.send("bob")
		cr.queued(1)
		cr.reload("raised", func(c *config.Config) { c.Capacity.Backends[0].MaxInFlight = 2 })
		cr.at("bob") // alice still holds her slot
		if n := cr.inFlight(); n != 2 {
			t.Fatalf("in flight = %d, want 2", n)
		}
		cr.release <- struct{}{}
		cr.release <- struct{}{}
		cr.ok("alice", alice)
		cr.ok("bob", bob)
		cr.exactlyIdle("after the raised maxInFlight")
	})
	t.Run("adding saturation signals keeps in flight and the waiter", func(t *testing.T) {
		m := newMetricsEndpoint(t, "low")
		cr := newCapacityReload(t, 1)
		alice := cr.send("alice")
		cr.at("alice")
		bob := cr.send("bob")
		cr.queued(1)
		cr.reload("signals", func(c *config.Config) {
			c.Capacity.Backends[0].Saturation = &config.Saturation{
				MetricsURL: m.srv.URL + "/metrics", Interval: dur(time.Second), Timeout: dur(200 * time.Millisecond),
				StaleAfter: dur(3 * time.Second), Signals: []config.Signal{{Metric: "vllm:num_requests_waiting", Max: 5}},
			}
		})
		cr.advanceUntil("the new signal read", cr.signalRead(0))
		if n := cr.inFlight(); n != 1 {
			t.Fatalf("in flight after the reload = %d, want alice's 1", n)
		}
		cr.queued(1)
		cr.release <- struct{}{}
		cr.ok("alice", alice)
		cr.at("bob")
		cr.release <- struct{}{}
		cr.ok("bob", bob)
		cr.exactlyIdle("after the signals were added")
	})
	t.Run("removing spec.capacity releases the waiters", func(t *testing.T) {
		cr := newCapacityReload(t, 1)
		alice := cr.send("alice")
		cr.at("alice")
		bob := cr.send("bob")
		cr.queued(1)
		cr.reload("removed", func(c *config.Config) { c.Capacity = nil })
		cr.at("bob") // no capacity bound any more: alice still at the backend
		cr.release <- struct{}{}
		cr.release <- struct{}{}
		cr.ok("alice", alice)
		cr.ok("bob", bob)
		// Both releases go to the kept tracker, which no longer bounds the
		// backend; nothing is refused for capacity.
		cr.ok("after the removal", cr.sendAndRelease(""))
	})
}

// sendAndRelease sends a request of user and lets the upstream answer it.
func (cr *capacityReload) sendAndRelease(user string) <-chan result {
	c := cr.send(user)
	cr.at(user)
	cr.release <- struct{}{}
	return c
}

// firstOf returns a channel with the first result of a or b.
func firstOf(a, b <-chan result) <-chan result {
	out := make(chan result, 1)
	select {
	case r := <-a:
		out <- r
	case r := <-b:
		out <- r
	case <-time.After(10 * time.Second):
		out <- result{err: context.DeadlineExceeded}
	}
	return out
}

// drain waits for the remaining results of cs, ignoring them.
func drain(cs ...<-chan result) {
	for _, c := range cs {
		select {
		case <-c:
		default:
		}
	}
}
