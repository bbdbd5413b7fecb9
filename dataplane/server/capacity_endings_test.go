package server

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// queuedCapacity is capacity mode with one slot, fair queuing on, tenants
// from X-User, a maxWait of an hour and a total timeout of a minute, on the
// harness's fake clock.
func queuedCapacity(c *config.Config) {
	withCapacity(1, func(c *config.Config) {
		c.Identity.TrustHeaders = true
		c.FairQueuing.Enabled = true
		c.FairQueuing.Bounds.MaxWait = dur(time.Hour)
		c.Timeouts.RequestTotal = dur(time.Minute)
	})(c)
}

// queueDepth is the number of requests waiting in the fair queue.
func (hs *harness) queueDepth() int {
	fq, _ := hs.srv.admit.Queues()
	d, _ := fq.Stats()
	return d
}

// exactlyIdle waits until the backend has no request in flight, then
// checks the count stays exactly 0: no slot leaked, none released twice.
func (hs *harness) exactlyIdle(what string) {
	hs.t.Helper()
	stats := hs.srv.rt.Load().capacity.tracker.Stats
	testutil.Eventually(hs.t, what+": every slot released", func() bool {
		for _, st := range stats() {
			if st.InFlight > 0 {
				return false
			}
		}
		return true
	})
	for _, st := range stats() {
		if st.InFlight != 0 {
			hs.t.Errorf("%s: %s has %d in flight, want exactly 0", what, st.Backend, st.InFlight)
		}
	}
}

// holderUpstream answers the request of user "holder" with hold and every
// other request at once, after telling arrived who came.
func holderUpstream(arrived chan<- string, hold http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		user := r.Header.Get("X-User")
		arrived <- user
		if user == "holder" {
			hold(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	}
}

// streamThen streams two token events and, once proceed is closed, ends as
// end says (nil: the rest of a complete stream).
func streamThen(proceed <-chan struct{}, end func(http.ResponseWriter)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for range 2 {
			_, _ = io.WriteString(w, tokenEvent)
			_ = http.NewResponseController(w).Flush()
		}
		select {
		case <-proceed:
		case <-r.Context().Done():
			return
		case <-time.After(20 * time.Second):
			return
		}
		if end != nil {
			end(w)
			return
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
}

// TestCapacityEveryEndingReleasesAndGrantsTheWaiter holds the one slot
// with a request that ends in each way a response can end, while another
// tenant waits in the fair queue: each ending frees the slot exactly once,
// the waiter is granted and answered, and the count returns to exactly 0.
func TestCapacityEveryEndingReleasesAndGrantsTheWaiter(t *testing.T) {
	tests := []struct {
		name string
		// hold is the upstream's handling of the holder's request; it
		// ends the response once proceed is closed.
		hold func(proceed <-chan struct{}) http.HandlerFunc
		// holder sends the holder's request and returns once it has ended.
		// It is told when the waiter queues (queued) and closes proceed.
		holder func(t *testing.T, hs *harness, queued <-chan struct{}, proceed chan<- struct{})
		// beforeWaiter, if set, runs once the holder is at the upstream.
		beforeWaiter func(hs *harness)
	}{
		{
			name:   "complete response",
			hold:   answerAfter(http.StatusOK),
			holder: expectStatus(http.StatusOK),
		},
		{
			name:   "complete stream",
			hold:   func(proceed <-chan struct{}) http.HandlerFunc { return streamThen(proceed, nil) },
			holder: readStream(true),
		},
		{
			name: "upstream breaks mid-stream",
			hold: func(proceed <-chan struct{}) http.HandlerFunc {
				return streamThen(proceed, func(http.ResponseWriter) { panic(http.ErrAbortHandler) })
			},
			holder: readStream(false),
		},
		{
			name: "client disconnects mid-stream",
			hold: func(proceed <-chan struct{}) http.HandlerFunc { return streamThen(proceed, nil) },
			holder: func(t *testing.T, hs *harness, queued <-chan struct{}, proceed chan<- struct{}) {
				defer close(proceed)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.front.URL+"/v1/chat/completions", strings.NewReader(settleBody))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("X-User", "holder")
				resp, err := hs.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				readTokens(t, bufio.NewReader(resp.Body), 2)
				<-queued
				cancel() // the client hangs up, the upstream still streaming
				_ = resp.Body.Close()
			},
		},
		{
			name:   "upstream refuses with a 503",
			hold:   answerAfter(http.StatusServiceUnavailable),
			holder: expectStatus(http.StatusServiceUnavailable),
		},
		{
			name: "total timeout ends a hung request",
			hold: func(proceed <-chan struct{}) http.HandlerFunc {
				return func(_ http.ResponseWriter, r *http.Request) {
					select {
					case <-r.Context().Done():
					case <-proceed: // the subtest's end
					}
				}
			},
			// The holder's total timeout is set once it is at the upstream;
			// the waiter arrives 40s later, so the holder's minute ends 40s
			// before the waiter's budget does.
			beforeWaiter: func(hs *harness) { hs.clk.Step(40 * time.Second) },
			holder: func(t *testing.T, hs *harness, queued <-chan struct{}, proceed chan<- struct{}) {
				defer close(proceed)
				go func() {
					<-queued
					hs.clk.Step(20 * time.Second)
				}()
				resp := hs.do(capBody, map[string]string{"X-User": "holder"})
				if body := readAll(t, resp); resp.StatusCode != http.StatusGatewayTimeout {
					t.Errorf("holder: %d %s, want 504", resp.StatusCode, body)
				}
			},
		},
		{
			name: "panic in the forwarding path",
			hold: func(proceed <-chan struct{}) http.HandlerFunc { return streamThen(proceed, nil) },
			holder: func(t *testing.T, hs *harness, queued <-chan struct{}, proceed chan<- struct{}) {
				// A writer that panics on the stream's end, as a bug in the
				// forwarding path would, called as net/http calls it.
				w := &panicOnWrite{ResponseRecorder: httptest.NewRecorder(), marker: "[DONE]"}
				r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(settleBody))
				r.Header.Set("X-User", "holder")
				go func() { <-queued; close(proceed) }()
				defer func() {
					if v := recover(); v != "forwarding path bug" {
						t.Errorf("recovered %v, want the forwarding path's panic", v)
					}
				}()
				hs.srv.ServeHTTP(w, r)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			arrived := make(chan string, 4)
			proceed := make(chan struct{})
			hs := newHarness(t, holderUpstream(arrived, tc.hold(proceed)), queuedCapacity)
			queued := make(chan struct{})
			holderDone := make(chan struct{})
			go func() {
				defer close(holderDone)
				tc.holder(t, hs, queued, proceed)
			}()
			if who := recvWithin(t, "the holder at the upstream", arrived); who != "holder" {
				t.Fatalf("%s reached the upstream first", who)
			}
			if tc.beforeWaiter != nil {
				tc.beforeWaiter(hs)
			}
			waiter := make(chan int, 1)
			go func() {
				resp := hs.do(capBody, map[string]string{"X-User": "waiter"})
				readAll(t, resp)
				waiter <- resp.StatusCode
			}()
			testutil.Eventually(t, "the waiter queues for the slot", func() bool { return hs.queueDepth() == 1 })
			if n := hs.inFlight(); n != 1 {
				t.Errorf("in flight while the holder runs = %d, want 1", n)
			}
			close(queued)
			select {
			case who := <-arrived:
				if who != "waiter" {
					t.Errorf("%s reached the upstream, want the waiter", who)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter was not granted when the holder's response ended")
			}
			if code := recvWithin(t, "the waiter's response", waiter); code != http.StatusOK {
				t.Errorf("waiter: %d, want 200", code)
			}
			recvWithin(t, "the holder's end", holderDone)
			hs.exactlyIdle(tc.name)
		})
	}
}

// answerAfter is an upstream that answers status once proceed is closed.
func answerAfter(status int) func(<-chan struct{}) http.HandlerFunc {
	return func(proceed <-chan struct{}) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			<-proceed
			w.WriteHeader(status)
			_, _ = w.Write([]byte(`{"ok":true}`))
		}
	}
}

// expectStatus is a holder that lets the upstream answer once the waiter
// queued and expects status.
func expectStatus(status int) func(*testing.T, *harness, <-chan struct{}, chan<- struct{}) {
	return func(t *testing.T, hs *harness, queued <-chan struct{}, proceed chan<- struct{}) {
		go func() { <-queued; close(proceed) }()
		resp := hs.do(capBody, map[string]string{"X-User": "holder"})
		if body := readAll(t, resp); resp.StatusCode != status {
			t.Errorf("holder: %d %s, want %d", resp.StatusCode, body, status)
		}
	}
}

// readStream is a holder that reads two events of a stream, lets the
// upstream end it once the waiter queued, and expects it complete or
// broken.
func readStream(complete bool) func(*testing.T, *harness, <-chan struct{}, chan<- struct{}) {
	return func(t *testing.T, hs *harness, queued <-chan struct{}, proceed chan<- struct{}) {
		resp := hs.do(settleBody, map[string]string{"X-User": "holder"})
		defer func() { _ = resp.Body.Close() }()
		br := bufio.NewReader(resp.Body)
		readTokens(t, br, 2)
		<-queued
		close(proceed)
		rest, err := io.ReadAll(br)
		switch {
		case complete && (err != nil || !strings.Contains(string(rest), "[DONE]")):
			t.Errorf("holder's stream: %q, %v; want it complete", rest, err)
		case !complete && err == nil:
			t.Error("the holder read a broken stream as complete")
		}
	}
}

// panicOnWrite is a client connection whose writer panics on a write
// holding marker.
type panicOnWrite struct {
	*httptest.ResponseRecorder
	marker string
}

func (w *panicOnWrite) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.marker) {
		panic("forwarding path bug")
	}
	return w.ResponseRecorder.Write(p)
}

func (w *panicOnWrite) Unwrap() http.ResponseWriter { return w.ResponseRecorder }

// TestCapacityAClientCancellingWhileQueuedTakesNoSlot: a request that
// leaves while it waits for a slot leaves the queue at once, holds nothing
// and frees nothing; the next waiter is granted when the holder ends.
func TestCapacityAClientCancellingWhileQueuedTakesNoSlot(t *testing.T) {
	arrived := make(chan string, 4)
	proceed := make(chan struct{})
	hs := newHarness(t, holderUpstream(arrived, func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-proceed:
		case <-time.After(20 * time.Second):
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	}), queuedCapacity)
	holder := make(chan int, 1)
	go func() {
		resp := hs.do(capBody, map[string]string{"X-User": "holder"})
		readAll(t, resp)
		holder <- resp.StatusCode
	}()
	recvWithin(t, "the holder at the upstream", arrived)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.front.URL+"/v1/chat/completions", strings.NewReader(capBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-User", "leaver")
	left := make(chan error, 1)
	go func() {
		resp, err := hs.client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		left <- err
	}()
	testutil.Eventually(t, "the leaver queues", func() bool { return hs.queueDepth() == 1 })
	cancel()
	if err := recvWithin(t, "the leaver's end", left); err == nil {
		t.Error("the cancelled request was answered")
	}
	testutil.Eventually(t, "the leaver leaves the queue", func() bool { return hs.queueDepth() == 0 })
	if n := hs.inFlight(); n != 1 {
		t.Errorf("in flight after the queued client left = %d, want the holder's 1", n)
	}

	waiter := make(chan int, 1)
	go func() {
		resp := hs.do(capBody, map[string]string{"X-User": "waiter"})
		readAll(t, resp)
		waiter <- resp.StatusCode
	}()
	testutil.Eventually(t, "the waiter queues", func() bool { return hs.queueDepth() == 1 })
	close(proceed)
	if code := recvWithin(t, "the holder's response", holder); code != http.StatusOK {
		t.Errorf("holder: %d, want 200", code)
	}
	if code := recvWithin(t, "the waiter's response", waiter); code != http.StatusOK {
		t.Errorf("waiter: %d, want 200", code)
	}
	if who := recvWithin(t, "the waiter at the upstream", arrived); who != "waiter" {
		t.Errorf("%s reached the upstream, want the waiter (the leaver must never)", who)
	}
	hs.exactlyIdle("after the leaver")
}
