package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// withCapacity gives the config's one backend maxInFlight slots.
func withCapacity(maxInFlight int32, more func(*config.Config)) func(*config.Config) {
	return func(c *config.Config) {
		c.Capacity = &config.Capacity{Backends: []config.BackendCapacity{{Name: c.Backends[0].Name, MaxInFlight: maxInFlight}}}
		if more != nil {
			more(c)
		}
	}
}

// inFlight returns the tracker's count for the one backend.
func (hs *harness) inFlight() int {
	rt := hs.srv.rt.Load()
	for _, st := range rt.capacity.tracker.Stats() {
		return st.InFlight
	}
	return -1
}

const capBody = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

func TestCapacitySlotReleasedOnEveryEnding(t *testing.T) {
	arrived := make(chan struct{}, 1)
	// stop ends a hung upstream handler when its subtest ends, should the
	// cancellation not reach it first.
	var stop chan struct{}
	hang := func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}
	tests := []struct {
		name     string
		upstream http.HandlerFunc
		mutate   func(*config.Config)
		client   func(t *testing.T, hs *harness)
	}{
		{
			name:     "complete response",
			upstream: func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"ok":true}`)) },
			client: func(t *testing.T, hs *harness) {
				resp := hs.do(capBody, nil)
				if body := readAll(t, resp); resp.StatusCode != http.StatusOK {
					t.Errorf("status %d %s, want 200", resp.StatusCode, body)
				}
			},
		},
		{
			name: "upstream breaks off mid-body",
			upstream: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = w.Write([]byte("data: x\n\n"))
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler)
			},
			client: func(t *testing.T, hs *harness) {
				resp := hs.do(capBody, nil)
				_, _ = readAllErr(resp)
			},
		},
		{
			name: "client gone before the answer",
			upstream: func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				hang(w, r)
			},
			client: func(t *testing.T, hs *harness) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.front.URL+"/v1/chat/completions", strings.NewReader(capBody))
				go func() {
					select {
					case <-arrived:
					case <-time.After(10 * time.Second):
					}
					cancel()
				}()
				if resp, err := hs.client.Do(req); err == nil {
					_ = resp.Body.Close()
				}
			},
		},
		{
			name: "total timeout ends a hung backend's request",
			upstream: func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				hang(w, r)
			},
			mutate: func(c *config.Config) { c.Timeouts.RequestTotal = dur(time.Minute) },
			client: func(t *testing.T, hs *harness) {
				done := make(chan int, 1)
				go func() {
					resp := hs.do(capBody, nil)
					_ = resp.Body.Close()
					done <- resp.StatusCode
				}()
				select {
				case <-arrived:
				case <-time.After(10 * time.Second):
					t.Fatal("the request never reached the upstream")
				}
				// The hung backend's slot stays taken until the timeout.
				if n := hs.inFlight(); n != 1 {
					t.Errorf("in flight while the backend hangs = %d, want 1", n)
				}
				testutil.Eventually(t, "the total timeout's timer is set", func() bool { return hs.clk.HasWaiters() })
				hs.clk.Step(time.Minute)
				select {
				case code := <-done:
					if code != http.StatusGatewayTimeout {
						t.Errorf("status %d, want 504", code)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the total timeout did not end the request")
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stop = make(chan struct{})
			hs := newHarness(t, tt.upstream, withCapacity(1, tt.mutate))
			t.Cleanup(func() { close(stop) }) // before the harness closes
			tt.client(t, hs)
			testutil.Eventually(t, "the slot is released", func() bool { return hs.inFlight() == 0 })
		})
	}
}

// readAllErr reads and closes resp's body, returning a read error (a broken
// response) instead of failing.
func readAllErr(resp *http.Response) (string, error) {
	defer func() { _ = resp.Body.Close() }()
	var b strings.Builder
	buf := make([]byte, 512)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String(), err
		}
	}
}

func TestCapacityRefusalWithoutQueueing(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	hs := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	}), withCapacity(1, nil)) // fair queuing off
	first := make(chan int, 1)
	go func() {
		resp := hs.do(capBody, map[string]string{"X-User": "alice"})
		readAll(t, resp)
		first <- resp.StatusCode
	}()
	<-arrived
	if got := gaugeValue(t, hs, "fairqueue_backend_in_flight"); got != 1 {
		t.Errorf("fairqueue_backend_in_flight = %v while one request is at the backend, want 1", got)
	}
	if got := gaugeValue(t, hs, "fairqueue_backend_saturated"); got != 1 {
		t.Errorf("fairqueue_backend_saturated = %v at maxInFlight, want 1", got)
	}
	resp := hs.do(capBody, map[string]string{"X-User": "bob"})
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, `"limit_type":"capacity"`) {
		t.Errorf("second request: %d %s, want 429 limit_type capacity", resp.StatusCode, body)
	}
	if resp.Header.Get("Retry-After") == "" || resp.Header.Get("retry-after-ms") == "" {
		t.Errorf("429 without Retry-After / retry-after-ms: %v", resp.Header)
	}
	close(release)
	if code := <-first; code != http.StatusOK {
		t.Errorf("first request: %d, want 200", code)
	}
	testutil.Eventually(t, "the slot is released", func() bool { return hs.inFlight() == 0 })
	if resp := hs.do(capBody, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("after the release: %d, want 200", resp.StatusCode)
	} else {
		readAll(t, resp)
	}
}

func TestCapacityWaiterGrantedWhenSlotFrees(t *testing.T) {
	hs, arrived, release := capacityWaitHarness(t)
	type answer struct {
		code int
		pos  string
	}
	answers := make(chan answer, 2)
	send := func(user string) {
		resp := hs.do(capBody, map[string]string{"X-User": user})
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Logf("%s: %d %s", user, resp.StatusCode, body)
		}
		answers <- answer{resp.StatusCode, resp.Header.Get("x-fair-queue-position")}
	}
	go send("alice")
	<-arrived
	go send("bob")
	testutil.Eventually(t, "bob waits in the fair queue", func() bool {
		select {
		case a := <-answers:
			t.Fatalf("bob answered %d before alice's slot freed", a.code)
		default:
		}
		fq, _ := hs.srv.admit.Queues()
		d, _ := fq.Stats()
		return d == 1
	})
	release <- struct{}{} // alice's response ends: her slot wakes bob's wait
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not granted when the slot freed")
	}
	release <- struct{}{}
	got := map[bool]int{}
	for range 2 {
		a := <-answers
		if a.code != http.StatusOK {
			t.Errorf("status %d, want 200", a.code)
		}
		got[a.pos != ""]++
	}
	if got[true] != 1 {
		t.Errorf("responses with x-fair-queue-position: %d, want 1 (the one that waited)", got[true])
	}
	testutil.Eventually(t, "every slot is released", func() bool { return hs.inFlight() == 0 })
}

// gaugeValue returns the value of the one series of the named metric.
func gaugeValue(t *testing.T, hs *harness, name string) float64 {
	t.Helper()
	mfs, err := hs.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s with one series not found", name)
	return 0
}
