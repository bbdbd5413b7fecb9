package server

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// settleBody is the streamed request of the settlement tests: a prompt
// estimate of a few tokens and an output cap of 50.
const settleBody = `{"model":"m","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"count to ten"}]}`

// tokenEvent is one streamed chunk holding one output token: " fair" is one
// token in every tokenizer the data plane counts with.
const tokenEvent = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" fair"},"finish_reason":null}]}` + "\n\n"

// streamingUpstream streams tokens chunks, each flushed on its own, then
// ends the way end says: nil finishes the stream normally with a usage chunk
// reporting reported tokens (prompt 7, the rest completion) and [DONE].
func streamingUpstream(tokens int, end func(w http.ResponseWriter, r *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for range tokens {
			if _, err := io.WriteString(w, tokenEvent); err != nil {
				return
			}
			if err := http.NewResponseController(w).Flush(); err != nil {
				return
			}
		}
		if end != nil {
			end(w, r)
			return
		}
		_, _ = io.WriteString(w, `data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":`+
			strconv.Itoa(tokens)+`,"total_tokens":`+strconv.Itoa(7+tokens)+`}}`+"\n\ndata: [DONE]\n\n")
	})
}

// untilClientGone holds the stream open until the data plane drops the
// upstream request (its client left or its timeout ran out), bounded so a
// bug cannot hang the test.
func untilClientGone(_ http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(20 * time.Second):
	}
}

// readTokens reads n token events of a streamed response, failing the test
// on an error before them.
func readTokens(t *testing.T, br *bufio.Reader, n int) {
	t.Helper()
	for seen := 0; seen < n; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended after %d of %d token events: %v", seen, n, err)
		}
		if strings.Contains(line, `"content":" fair"`) {
			seen++
		}
	}
}

// histogramCount returns the sample count of the histogram name in reg.
func histogramCount(t *testing.T, reg prometheus.Gatherer, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var n uint64
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
			return n
		}
	}
	return 0
}

// charged waits until one request has settled and returns the tokens it
// was charged.
func (hs *harness) charged() int64 {
	hs.t.Helper()
	testutil.Eventually(hs.t, "the request to settle", func() bool {
		return histogramCount(hs.t, hs.reg, metrics.TokensEstimateRatioName) >= 1
	})
	if n := histogramCount(hs.t, hs.reg, metrics.TokensEstimateRatioName); n != 1 {
		hs.t.Errorf("%d settlements of one request, want exactly one", n)
	}
	return int64(metricValue(hs.t, hs.reg, metrics.TokensSettledName, map[string]string{"limit_type": "model_tokens"}))
}

// promptEstimate is the data plane's prompt estimate of settleBody.
func (hs *harness) promptEstimate() int64 {
	return hs.srv.rt.Load().tokens.estimator.Estimate("m", []byte(settleBody)).Prompt
}

// settleConfig is a token budget large enough for every request, and a total
// timeout of a minute on the harness's fake clock.
func settleConfig(c *config.Config) {
	tokenBudget(100000, time.Second)(c)
	c.Timeouts.RequestTotal = dur(time.Minute)
}

// TestEveryEndingSettles checks SPEC section 6: however a response ends, the
// request is charged exactly once, and a client cannot get around its token
// budget by disconnecting, cancelling or outlasting the timeout.
func TestEveryEndingSettles(t *testing.T) {
	// arrived tells a client the upstream has its request.
	arrived := make(chan struct{}, 1)
	tests := []struct {
		name   string
		tokens int // token events the upstream sends before end
		end    func(w http.ResponseWriter, r *http.Request)
		// client reads the response; hs.front answers it.
		client func(t *testing.T, hs *harness)
		// want is the tokens charged, given the prompt estimate.
		want func(prompt int64) int64
	}{
		{
			name: "complete stream: the reported usage", tokens: 10,
			client: func(t *testing.T, hs *harness) {
				resp := hs.do(settleBody, nil)
				if body := readAll(t, resp); resp.StatusCode != http.StatusOK || !strings.Contains(body, "[DONE]") {
					t.Errorf("status %d, body %q: want a whole stream", resp.StatusCode, body)
				}
			},
			want: func(int64) int64 { return 7 + 10 },
		},
		{
			name: "client reads 9 tokens and disconnects: prompt plus the 9 relayed", tokens: 9, end: untilClientGone,
			client: func(t *testing.T, hs *harness) {
				resp := hs.do(settleBody, nil)
				readTokens(t, bufio.NewReader(resp.Body), 9)
				_ = resp.Body.Close() // unread: the client's transport drops the connection
			},
			want: func(prompt int64) int64 { return prompt + 9 },
		},
		{
			name: "client cancels mid-stream: prompt plus the 3 relayed", tokens: 3, end: untilClientGone,
			client: func(t *testing.T, hs *harness) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.front.URL+"/v1/chat/completions", strings.NewReader(settleBody))
				if err != nil {
					t.Fatal(err)
				}
				resp, err := hs.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = resp.Body.Close() }()
				readTokens(t, bufio.NewReader(resp.Body), 3)
				cancel()
			},
			want: func(prompt int64) int64 { return prompt + 3 },
		},
		{
			name: "client cancels before the first token: the prompt estimate",
			end: func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				untilClientGone(w, r)
			},
			client: func(t *testing.T, hs *harness) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.front.URL+"/v1/chat/completions", strings.NewReader(settleBody))
				if err != nil {
					t.Fatal(err)
				}
				go func() {
					select {
					case <-arrived:
					case <-time.After(10 * time.Second):
					}
					cancel()
				}()
				if resp, err := hs.client.Do(req); err == nil {
					_ = resp.Body.Close()
					t.Errorf("status %d for a request cancelled before its answer", resp.StatusCode)
				}
			},
			want: func(prompt int64) int64 { return prompt },
		},
		{
			name: "upstream killed mid-stream: prompt plus the 6 relayed", tokens: 6,
			end: func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }, // the upstream's connection drops
			client: func(t *testing.T, hs *harness) {
				resp := hs.do(settleBody, nil)
				defer func() { _ = resp.Body.Close() }()
				br := bufio.NewReader(resp.Body)
				readTokens(t, br, 6)
				if _, err := io.ReadAll(br); err == nil {
					t.Error("the client read a broken stream as complete")
				}
			},
			want: func(prompt int64) int64 { return prompt + 6 },
		},
		{
			name: "total timeout mid-stream: prompt plus the 4 relayed", tokens: 4, end: untilClientGone,
			client: func(t *testing.T, hs *harness) {
				resp := hs.do(settleBody, nil)
				defer func() { _ = resp.Body.Close() }()
				br := bufio.NewReader(resp.Body)
				readTokens(t, br, 4)
				hs.clk.Step(2 * time.Minute)
				if _, err := io.ReadAll(br); err == nil {
					t.Error("the client read a stream cut by the timeout as complete")
				}
			},
			want: func(prompt int64) int64 { return prompt + 4 },
		},
		{
			name: "upstream breaks before any byte: 502, nothing charged",
			end:  func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) },
			client: func(t *testing.T, hs *harness) {
				resp := hs.do(settleBody, nil)
				readAll(t, resp)
				if resp.StatusCode != http.StatusBadGateway {
					t.Errorf("status %d, want 502", resp.StatusCode)
				}
			},
			want: func(int64) int64 { return 0 },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hs := newHarness(t, streamingUpstream(tc.tokens, tc.end), settleConfig)
			tc.client(t, hs)
			prompt := hs.promptEstimate()
			if got, want := hs.charged(), tc.want(prompt); got != want {
				t.Errorf("charged %d tokens, want %d (prompt estimate %d)", got, want, prompt)
			}
		})
	}
}

// panickingWriter is a client connection whose writer panics once the
// response holds panicAfter token events, as a bug in the forwarding path
// would.
type panickingWriter struct {
	*httptest.ResponseRecorder
	panicAfter int
}

func (w *panickingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseRecorder.Write(p)
	if strings.Count(w.Body.String(), `"content":" fair"`) >= w.panicAfter {
		panic("forwarding path bug")
	}
	return n, err
}

func (w *panickingWriter) Unwrap() http.ResponseWriter { return w.ResponseRecorder }

// TestPanicInForwardingSettles: a panic while the response is relayed
// settles the prompt estimate plus the output relayed before it, and the
// panic still reaches net/http.
func TestPanicInForwardingSettles(t *testing.T) {
	hs := newHarness(t, streamingUpstream(5, untilClientGone), settleConfig)
	w := &panickingWriter{ResponseRecorder: httptest.NewRecorder(), panicAfter: 5}
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(settleBody))
	func() {
		defer func() {
			if v := recover(); v != "forwarding path bug" {
				t.Errorf("recovered %v, want the forwarding path's panic", v)
			}
		}()
		hs.srv.ServeHTTP(w, r)
	}()
	prompt := hs.promptEstimate()
	if got, want := hs.charged(), prompt+5; got != want {
		t.Errorf("charged %d tokens, want %d (prompt estimate %d plus 5 relayed)", got, want, prompt)
	}
}
