package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/internal/testutil"
)

// fetch sends GET url on a new keep-alive connection and returns the
// status, body and whether the server asked to close the connection.
func fetch(t *testing.T, url string) (status int, body string, closing bool, err error) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return 0, "", false, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Close, err
}

func TestShutdownDelayKeepsServingWhileUnready(t *testing.T) {
	const delay = 5 * time.Second
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer up.Close()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s, err := New(Options{HashKey: testKey, Clock: clk, ShutdownDelay: delay, Registerer: prometheus.NewRegistry(), Logger: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Load(baseConfig(up.URL), "h"); err != nil {
		t.Fatal(err)
	}
	tl, _ := net.Listen("tcp", "127.0.0.1:0")
	ol, _ := net.Listen("tcp", "127.0.0.1:0")
	traffic, ops := "http://"+tl.Addr().String()+"/v1/models", "http://"+ol.Addr().String()+"/readyz"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, tl, ol) }()
	defer cancel()

	if st, _, _, err := fetch(t, ops); st != http.StatusOK || err != nil {
		t.Fatalf("/readyz before shutdown = %d %v, want 200", st, err)
	}
	cancel() // SIGTERM
	testutil.Eventually(t, "readiness to fail", func() bool { st, _, _, _ := fetch(t, ops); return st == http.StatusServiceUnavailable })
	// Unready, yet a new connection is still accepted and served, and told
	// to close so the client reconnects to a replica that stays.
	st, body, closing, err := fetch(t, traffic)
	if err != nil || st != http.StatusOK || body != "ok" || !closing {
		t.Fatalf("during the shutdown delay a new request got %d %q (Connection: close %v, error %v), want 200 ok with Connection: close", st, body, closing, err)
	}
	// The delay passes on the fake clock; Run then drains and returns.
	var runErr error
	testutil.Eventually(t, "Run to return after the delay", func() bool {
		clk.Step(delay)
		select {
		case runErr = <-done:
			return true
		default:
			return false
		}
	})
	if runErr != nil {
		t.Errorf("Run() = %v, want nil", runErr)
	}
	if _, _, _, err := fetch(t, traffic); err == nil {
		t.Error("a request after the shutdown was served, want the connection refused")
	}
}

func TestReadyzNamesAFailingConfigSource(t *testing.T) {
	s, err := New(Options{HashKey: testKey, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Load(baseConfig("http://127.0.0.1:1"), "h"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.rt.Load().close)
	var failing error
	s.SetConfigSourceHealth(func() error { return failing })
	tests := []struct {
		name     string
		failing  error
		wantBody string
	}{
		{name: "healthy", wantBody: "ok\n"},
		{name: "source failing: still ready", failing: errors.New("config source failing for 45s (40 failures): connection refused"),
			wantBody: "ok: serving the last good config; config source failing for 45s (40 failures): connection refused\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			failing = tc.failing
			rec := httptest.NewRecorder()
			s.OpsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			if rec.Code != http.StatusOK || !strings.EqualFold(rec.Body.String(), tc.wantBody) {
				t.Errorf("/readyz = %d %q, want 200 %q", rec.Code, rec.Body, tc.wantBody)
			}
		})
	}
}
