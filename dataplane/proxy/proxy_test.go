package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNewPoolRejectsBadTargets(t *testing.T) {
	tests := []struct {
		name    string
		targets []Target
		wantErr string
	}{
		{name: "empty", targets: nil, wantErr: "no backends"},
		{name: "no name", targets: []Target{{URL: "http://a"}}, wantErr: "backends[0].name is empty"},
		{name: "duplicate", targets: []Target{{Name: "a", URL: "http://a"}, {Name: "a", URL: "http://b"}}, wantErr: `backends[1].name "a" is a duplicate`},
		{name: "relative url", targets: []Target{{Name: "a", URL: "/x"}}, wantErr: "backends[0].url"},
		{name: "bad scheme", targets: []Target{{Name: "a", URL: "ftp://h"}}, wantErr: "not an absolute http(s) URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewPool(tc.targets, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("NewPool() error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestPick(t *testing.T) {
	targets := []Target{{Name: "a", URL: "http://a"}, {Name: "b", URL: "http://b"}, {Name: "c", URL: "http://c"}}
	tests := []struct {
		name      string
		exhausted map[string]time.Duration // backend -> retry-after
		picks     int
		want      []string // names picked in order; "" means none
		wantRetry time.Duration
	}{
		{name: "round robin", picks: 4, want: []string{"a", "b", "c", "a"}},
		{name: "skips exhausted", exhausted: map[string]time.Duration{"b": time.Second}, picks: 3, want: []string{"a", "c", "c"}},
		{name: "all exhausted gives shortest retry", picks: 1, want: []string{""}, wantRetry: 200 * time.Millisecond,
			exhausted: map[string]time.Duration{"a": time.Second, "b": 200 * time.Millisecond, "c": 3 * time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPool(targets, Options{})
			if err != nil {
				t.Fatal(err)
			}
			take := func(name string) (bool, time.Duration) {
				retry, full := tc.exhausted[name]
				return !full, retry
			}
			for i, want := range tc.want {
				b, retry := p.Pick(take)
				got := ""
				if b != nil {
					got = b.Name()
				}
				if got != want {
					t.Errorf("pick %d = %q, want %q", i, got, want)
				}
				if b == nil && retry != tc.wantRetry {
					t.Errorf("pick %d retry = %v, want %v", i, retry, tc.wantRetry)
				}
			}
		})
	}
}

func TestPickFollowsWeights(t *testing.T) {
	tests := []struct {
		name    string
		weights []int
		picks   int
		want    []int // picks per backend
	}{
		{name: "3:1", weights: []int{3, 1}, picks: 8, want: []int{6, 2}},
		{name: "zero means 1", weights: []int{0, 1, 2}, picks: 8, want: []int{2, 2, 4}},
		{name: "huge weights are scaled", weights: []int{1 << 20, 1 << 20}, picks: 10, want: []int{5, 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var targets []Target
			for i, w := range tc.weights {
				targets = append(targets, Target{Name: string(rune('a' + i)), URL: "http://x", Weight: w})
			}
			p, err := NewPool(targets, Options{})
			if err != nil {
				t.Fatal(err)
			}
			got := make([]int, len(targets))
			for range tc.picks {
				b, _ := p.Pick(nil)
				got[b.Name()[0]-'a']++
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("picks per backend = %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestBackendProxiesAndReportsErrors(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.URL.Path+" via "+strings.Join(r.Header["X-Forwarded-For"], "|")) // a failure shows in the body the test checks
	}))
	defer up.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()

	var gotErr error
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	p, err := NewPool([]Target{{Name: "up", URL: up.URL + "/base"}, {Name: "dead", URL: deadURL}}, Options{
		Transport: tr,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			gotErr = err
			w.WriteHeader(http.StatusBadGateway)
		},
	})
	if err != nil {
		t.Fatal(err)
	}

	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
	req.RemoteAddr = "198.51.100.7:4321"
	req.Header.Set("X-Forwarded-For", "203.0.113.9") // set by a client: not trusted, replaced
	p.Backends()[0].ServeHTTP(rec, req)
	if want := "/base/v1/models via 198.51.100.7"; rec.Code != 200 || rec.Body.String() != want {
		t.Errorf("proxied answer = %d %q, want 200 %q: the joined path and X-Forwarded-For holding only the peer", rec.Code, rec.Body, want)
	}

	rec = httptest.NewRecorder()
	p.Backends()[1].ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	var opErr interface{ Timeout() bool }
	if rec.Code != http.StatusBadGateway || gotErr == nil || errors.As(gotErr, &opErr) && opErr.Timeout() {
		t.Errorf("dead backend: status %d, error %v; want 502 through the ErrorHandler with a non-timeout error", rec.Code, gotErr)
	}
}

// memoryBody is a request body held in memory, as the data plane's server
// buffers it.
type memoryBody struct{ rd *bytes.Reader }

func (b memoryBody) Read(p []byte) (int, error)    { return b.rd.Read(p) }
func (b memoryBody) Close() error                  { return nil }
func (b memoryBody) BufferedReader() *bytes.Reader { return b.rd }

// countingConn counts the Write calls (system calls) made on a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int32
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

func TestBufferedBodyIsSentWithTheHeaders(t *testing.T) {
	const payload = `{"model":"m","messages":[]}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}))
	defer up.Close()
	var writes atomic.Int32
	tr := NewTransport()
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: &writes}, nil
	}
	defer tr.CloseIdleConnections()
	p, err := NewPool([]Target{{Name: "up", URL: up.URL}}, Options{Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		body       io.ReadCloser
		wantWrites int32
	}{
		// The headers and the body leave in one write, so the upstream
		// reads the request in one piece.
		{name: "buffered body", body: memoryBody{rd: bytes.NewReader([]byte(payload))}, wantWrites: 1},
		// A body still arriving from the client: net/http flushes the
		// headers first, so the upstream can start before the body is in.
		{name: "streamed body", body: io.NopCloser(struct{ io.Reader }{strings.NewReader(payload)}), wantWrites: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", tc.body)
			req.ContentLength = int64(len(payload))
			rec := httptest.NewRecorder()
			writes.Store(0)
			p.Backends()[0].ServeHTTP(rec, req)
			if rec.Code != http.StatusOK || rec.Body.String() != payload {
				t.Fatalf("proxied answer = %d %q, want 200 echoing %q", rec.Code, rec.Body, payload)
			}
			if got := writes.Load(); got != tc.wantWrites {
				t.Errorf("the request went upstream in %d writes, want %d", got, tc.wantWrites)
			}
		})
	}
}
