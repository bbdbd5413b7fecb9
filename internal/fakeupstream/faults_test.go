package fakeupstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/internal/testutil"
)

// TestFaults checks each fault as a client sees it over a real connection,
// and that the in-flight count returns to 0 after each.
func TestFaults(t *testing.T) {
	tests := []struct {
		name, fault, body string
		// check reads the response (or the error) as the client got it.
		check func(t *testing.T, resp *http.Response, err error)
	}{
		{"reset before any byte", FaultReset, `{"model":"m"}`, func(t *testing.T, _ *http.Response, err error) {
			if err == nil {
				t.Error("a reset request was answered")
			}
		}},
		{"whole answer cut in half", FaultBreak, `{"model":"m"}`, func(t *testing.T, resp *http.Response, err error) {
			if err != nil {
				t.Fatalf("the status did not arrive: %v", err)
			}
			defer func() { _ = resp.Body.Close() }()
			b, err := io.ReadAll(resp.Body)
			if err == nil || resp.ContentLength <= int64(len(b)) || len(b) == 0 {
				t.Errorf("read %d of %d bytes, err %v; want half, then an error", len(b), resp.ContentLength, err)
			}
		}},
		{"stream cut after its first chunk", FaultBreak, `{"model":"m","stream":true}`, func(t *testing.T, resp *http.Response, err error) {
			if err != nil {
				t.Fatalf("the status did not arrive: %v", err)
			}
			defer func() { _ = resp.Body.Close() }()
			br := bufio.NewReader(resp.Body)
			line, err := br.ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "data: ") {
				t.Fatalf("first line %q, %v; want a chunk", line, err)
			}
			rest, err := io.ReadAll(br)
			if err == nil || strings.Contains(string(rest), "[DONE]") {
				t.Errorf("rest %q, err %v: want the stream broken", rest, err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := New(Options{Chunks: 4})
			srv := httptest.NewServer(up)
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(tc.body))
			req.Header.Set(FaultHeader, tc.fault)
			resp, err := srv.Client().Do(req)
			tc.check(t, resp, err)
			testutil.Eventually(t, "the request counted out", func() bool { return up.InFlight() == 0 })
			if up.PeakInFlight() != 1 {
				t.Errorf("peak in flight %d, want 1", up.PeakInFlight())
			}
		})
	}
}

// TestHangUntilTheClientGoesOrClose: a hung request counts in flight until
// its client goes away; Close ends the others.
func TestHangUntilTheClientGoesOrClose(t *testing.T) {
	up := New(Options{})
	srv := httptest.NewServer(up)
	defer srv.Close()
	send := func(ctx context.Context) <-chan error {
		errc := make(chan error, 1)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{}`))
		req.Header.Set(FaultHeader, FaultHang)
		go func() {
			resp, err := srv.Client().Do(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			errc <- err
		}()
		return errc
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	left := send(ctx)
	kept := send(context.Background())
	testutil.Eventually(t, "both requests hang", func() bool { return up.InFlight() == 2 })
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Errorf("the client that left: %v", err)
	}
	testutil.Eventually(t, "the request whose client left counted out", func() bool { return up.InFlight() == 1 })
	up.Close()
	select {
	case err := <-kept:
		if err == nil {
			t.Error("a hung request was answered at Close")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the hung request")
	}
	testutil.Eventually(t, "every request counted out", func() bool { return up.InFlight() == 0 })
	if up.PeakInFlight() != 2 {
		t.Errorf("peak %d, want 2", up.PeakInFlight())
	}
}
