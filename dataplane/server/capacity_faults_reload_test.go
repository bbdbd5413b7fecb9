package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/fakeupstream"
)

// heldFake is a fake backend that holds each request until release is sent
// a value (or its client goes), counting what it has at once.
type heldFake struct {
	*fakeupstream.Upstream
	arrived chan string
	release chan struct{}
	url     string
}

func newHeldFake(t *testing.T) *heldFake {
	f := &heldFake{arrived: make(chan string, 8), release: make(chan struct{}, 8)}
	f.Upstream = fakeupstream.New(fakeupstream.Options{Hold: func(r *http.Request) {
		f.arrived <- r.Header.Get("X-User")
		select {
		case <-f.release:
		case <-r.Context().Done():
		}
	}})
	srv := httptest.NewServer(f.Upstream)
	t.Cleanup(func() {
		f.Close()
		srv.CloseClientConnections()
		srv.Close()
	})
	f.url = srv.URL
	return f
}

// twoBackends is capacity mode over backends b1 and b2 of one slot each.
func twoBackends(b1, b2 string, withB2 bool) *config.Config {
	c := baseConfig(b1)
	queuedCapacity(c)
	if withB2 {
		c.Backends = append(c.Backends, config.Backend{Name: "b2", URL: b2, Weight: 1})
		c.Capacity.Backends = append(c.Capacity.Backends, config.BackendCapacity{Name: "b2", MaxInFlight: 1})
	}
	return c
}

// TestCapacityReloadRemovingABackendWhileRequestsHoldAndWait: with both
// backends' slots held and a request waiting, a reload removes b2. The
// request held by b2 is answered and its slot released harmlessly; the
// waiter is not refused for the backend that went away: it keeps waiting,
// and is granted b1 when b1's holder ends.
func TestCapacityReloadRemovingABackendWhileRequestsHoldAndWait(t *testing.T) {
	f1, f2 := newHeldFake(t), newHeldFake(t)
	hs := newHarness(t, http.NotFoundHandler(), func(c *config.Config) {
		*c = *twoBackends(f1.url, f2.url, true)
	})
	first := hs.start(context.Background(), capBody, map[string]string{"X-User": "alice"})
	second := hs.start(context.Background(), capBody, map[string]string{"X-User": "bob"})
	var on1, on2 bool
	for range 2 {
		select {
		case <-f1.arrived:
			on1 = true
		case <-f2.arrived:
			on2 = true
		case <-time.After(10 * time.Second):
			t.Fatal("the holders did not reach the backends")
		}
	}
	if !on1 || !on2 {
		t.Fatalf("holders on b1 %v, b2 %v: want one on each", on1, on2)
	}
	waiter := hs.start(context.Background(), capBody, map[string]string{"X-User": "carol"})
	hs.queued(1)

	if err := hs.srv.Load(twoBackends(f1.url, f2.url, false), "without-b2"); err != nil {
		t.Fatal(err)
	}
	// b2 is gone and b1 full: the waiter still waits. (The removal wakes
	// it; before the fix its attempt took b2 as a backend without an
	// entry and it was answered a 429 for a per-backend limit.)
	hs.queued(1)
	hs.settled()
	select {
	case r := <-waiter:
		t.Fatalf("the waiter was answered when b2 was removed: %d %s", r.resp.StatusCode, r.body)
	default:
	}
	f2.release <- struct{}{} // the request at the removed b2 ends
	hs.queued(1)
	f1.release <- struct{}{} // b1's holder ends: the waiter takes b1
	select {
	case r := <-waiter:
		t.Fatalf("the waiter was answered %d %s instead of going to b1", r.resp.StatusCode, r.body)
	case who := <-f1.arrived:
		if who != "carol" {
			t.Errorf("%s reached b1, want the waiter", who)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not granted b1 when b1's holder ended")
	}
	f1.release <- struct{}{}
	for _, c := range []<-chan result{first, second, waiter} {
		if r := recvResult(t, c); r.err != nil || r.resp.StatusCode != http.StatusOK {
			t.Errorf("%+v, want 200", r)
		}
	}
	hs.exactlyIdle("after the removal")
	if p := f1.PeakInFlight(); p > 1 {
		t.Errorf("b1 had %d at once, over its maxInFlight 1", p)
	}
}

// TestCapacityAWaiterGoesToTheBackendsAReloadPutsInForce: one backend's
// slot is held and a request waits for it when a reload changes the pool.
// The waiter is not lost with the pool it arrived under: it is granted at
// once, and answered, by the backend the reload put in force, whether the
// reload replaced the backend (a rename or a new URL behind a new name) or
// added one beside it. The holder still ends normally.
func TestCapacityAWaiterGoesToTheBackendsAReloadPutsInForce(t *testing.T) {
	for _, tc := range []struct {
		name string
		keep bool // keep b1 beside the new backend
	}{
		{"replaced", false},
		{"added", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f1, f3 := newHeldFake(t), newHeldFake(t)
			hs := newHarness(t, http.NotFoundHandler(), func(c *config.Config) {
				*c = *twoBackends(f1.url, "", false)
			})
			holder := hs.start(context.Background(), capBody, map[string]string{"X-User": "alice"})
			select {
			case <-f1.arrived:
			case <-time.After(10 * time.Second):
				t.Fatal("the holder did not reach b1")
			}
			waiter := hs.start(context.Background(), capBody, map[string]string{"X-User": "bob"})
			hs.queued(1)

			next := twoBackends(f1.url, "", false)
			b3 := config.Backend{Name: "b3", URL: f3.url, Weight: 1}
			c3 := config.BackendCapacity{Name: "b3", MaxInFlight: 1}
			if tc.keep {
				next.Backends = append(next.Backends, b3)
				next.Capacity.Backends = append(next.Capacity.Backends, c3)
			} else {
				next.Backends = []config.Backend{b3}
				next.Capacity.Backends = []config.BackendCapacity{c3}
			}
			if err := hs.srv.Load(next, "b3"); err != nil {
				t.Fatal(err)
			}
			select {
			case who := <-f3.arrived:
				if who != "bob" {
					t.Errorf("%s reached b3, want the waiter", who)
				}
			case r := <-waiter:
				t.Fatalf("the waiter was answered %d %s instead of going to b3", r.resp.StatusCode, r.body)
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter was not granted b3 after the reload")
			}
			f3.release <- struct{}{}
			f1.release <- struct{}{}
			for who, c := range map[string]<-chan result{"holder": holder, "waiter": waiter} {
				if r := recvResult(t, c); r.err != nil || r.resp.StatusCode != http.StatusOK {
					t.Errorf("%s: %+v, want 200", who, r)
				}
			}
			hs.exactlyIdle("after the reload")
			if p := f3.PeakInFlight(); p > 1 {
				t.Errorf("b3 had %d at once, over its maxInFlight 1", p)
			}
		})
	}
}

// TestCapacityBroughtBackByAReloadCountsTheRequestsStillHeld: a reload
// turns capacity off while a request holds the one slot, and the next turns
// it back on before that request ends. The backend's count still holds it:
// a new request waits for the slot instead of making two at the backend.
func TestCapacityBroughtBackByAReloadCountsTheRequestsStillHeld(t *testing.T) {
	f := newHeldFake(t)
	hs := newHarness(t, http.NotFoundHandler(), func(c *config.Config) { *c = *twoBackends(f.url, "", false) })
	holder := hs.start(context.Background(), capBody, map[string]string{"X-User": "alice"})
	recvWithin(t, "the holder at the backend", f.arrived)
	off := twoBackends(f.url, "", false)
	off.Capacity = nil
	if err := hs.srv.Load(off, "off"); err != nil {
		t.Fatal(err)
	}
	if err := hs.srv.Load(twoBackends(f.url, "", false), "on-again"); err != nil {
		t.Fatal(err)
	}
	if n := hs.inFlight(); n != 1 {
		t.Errorf("in flight once capacity is back = %d, want the holder's 1", n)
	}
	waiter := hs.start(context.Background(), capBody, map[string]string{"X-User": "bob"})
	hs.queued(1)
	f.release <- struct{}{}
	if who := recvWithin(t, "the waiter at the backend", f.arrived); who != "bob" {
		t.Errorf("%s reached the backend, want the waiter", who)
	}
	f.release <- struct{}{}
	for _, c := range []<-chan result{holder, waiter} {
		if r := recvResult(t, c); r.err != nil || r.resp.StatusCode != http.StatusOK {
			t.Errorf("%+v, want 200", r)
		}
	}
	hs.exactlyIdle("capacity back")
	if p := f.PeakInFlight(); p > 1 {
		t.Errorf("the backend had %d at once, over maxInFlight 1", p)
	}
}
