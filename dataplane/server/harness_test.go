package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/config/configtest"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/proxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var testKey = configtest.Key

// h hashes a raw identity the way the operator renders it.
func h(raw string) string { return identity.Hash(testKey, raw) }

func dur(d time.Duration) config.Duration { return config.Duration{Duration: d} }

// baseConfig is a valid config with one backend and no limits; tests add
// what they exercise.
func baseConfig(backendURL string) *config.Config {
	c := configtest.Valid(testKey, backendURL)
	c.Identity = config.Identity{
		APIKeyHeaders: []string{"Authorization", "X-Api-Key"},
		UserHeader:    "X-User", TeamHeader: "X-Team", NoTeamValue: "none",
	}
	return c
}

// harness runs the real Server behind an httptest listener, in front of a
// real upstream server, on a fake clock.
type harness struct {
	t      *testing.T
	clk    *testingclock.FakeClock
	srv    *Server
	front  *httptest.Server
	client *http.Client
	reg    *prometheus.Registry
}

// newHarness starts an upstream with handler, builds a config from
// baseConfig(upstream) changed by mutate, and serves it.
func newHarness(t *testing.T, upstream http.Handler, mutate func(*config.Config), opts ...func(*Options)) *harness {
	t.Helper()
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	cfg := baseConfig(up.URL)
	if mutate != nil {
		mutate(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config is invalid: %v", err)
	}
	hs := &harness{t: t, clk: testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), reg: prometheus.NewRegistry()}
	tr := proxy.NewTransport()
	t.Cleanup(tr.CloseIdleConnections)
	o := Options{Logger: testr.New(t), Clock: hs.clk, HashKey: testKey, Transport: tr,
		Registerer: hs.reg, Gatherer: hs.reg, MaxBodyBytes: 1 << 10}
	for _, f := range opts {
		f(&o)
	}
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Load(cfg, "testhash"); err != nil {
		t.Fatal(err)
	}
	hs.srv = srv
	hs.front = httptest.NewServer(srv)
	ct := &http.Transport{}
	// Every request is bounded in real time, so a bug that leaves one
	// unanswered fails the test instead of hanging it.
	hs.client = &http.Client{Transport: ct, Timeout: 30 * time.Second}
	t.Cleanup(func() {
		if rt := srv.rt.Load(); rt != nil {
			rt.close() // answers anything a failed test left queued
		}
		ct.CloseIdleConnections()
		hs.front.CloseClientConnections()
		hs.front.Close()
	})
	return hs
}

// do sends a chat completion for model with the given headers.
func (hs *harness) do(body string, header map[string]string) *http.Response {
	hs.t.Helper()
	req, err := http.NewRequest(http.MethodPost, hs.front.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		hs.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := hs.client.Do(req)
	if err != nil {
		hs.t.Fatal(err)
	}
	return resp
}

// readBody reads and closes resp's body.
func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer func() { _ = resp.Body.Close() }() // read-only: a close error loses nothing
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// decodedError is the JSON error body, decoded field by field.
type decodedError struct {
	Error struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Param   json.RawMessage `json:"param"`
		Code    string          `json:"code"`
		Details *struct {
			LimitType    string `json:"limit_type"`
			RetryAfterMS *int64 `json:"retry_after_ms"`
			FairQueue    *struct {
				TenantDimension string  `json:"tenant_dimension"`
				Reason          string  `json:"reason"`
				Position        *int    `json:"position"`
				WaitedMS        *int64  `json:"waited_ms"`
				Band            *string `json:"band"`
			} `json:"fair_queue"`
			Deferred *struct {
				Reason   string  `json:"reason"`
				WaitedMS *int64  `json:"waited_ms"`
				Tokens   int64   `json:"tokens"`
				Band     *string `json:"band"`
			} `json:"deferred"`
		} `json:"details"`
	} `json:"error"`
}

// requestIDPattern matches a request id the data plane generated.
var requestIDPattern = regexp.MustCompile(`^req_[0-9a-f]{32}$`)

func decodeError(t *testing.T, resp *http.Response) decodedError {
	t.Helper()
	body := readAll(t, resp)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type = %q, want application/json", ct)
	}
	var e decodedError
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("error body %q is not the documented shape: %v", body, err)
	}
	if e.Error.Message == "" || e.Error.Type == "" || e.Error.Code == "" {
		t.Errorf("error body %q lacks message, type or code", body)
	}
	if string(e.Error.Param) != "null" {
		t.Errorf("error body %q: param = %s, want null as OpenAI sends it", body, e.Error.Param)
	}
	if id := resp.Header.Get("X-Request-Id"); !requestIDPattern.MatchString(id) {
		t.Errorf("error response x-request-id = %q, want a generated req_ id", id)
	}
	if len(resp.Header.Values("X-Ratelimit-Limit-Requests")) == 0 && len(resp.Header.Values("X-Ratelimit-Limit-Tokens")) == 0 &&
		resp.StatusCode == http.StatusTooManyRequests {
		t.Errorf("429 without x-ratelimit-* headers: %s", body)
	}
	return e
}

func limit(requests, burst int64, period time.Duration) *config.Limit {
	return &config.Limit{Requests: requests, Burst: burst, Period: dur(period)}
}
