package loadgen

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestFirstTokenSkipsRoleOnlyEvents(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name   string
		writes []string
		want   int // index of the write at which the first token arrives; -1 none
	}{
		{"role chunk then text", []string{"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n", "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n"}, 1},
		{"text split across writes", []string{"data: {\"choices\":[{\"delta\":{\"cont", "ent\":\"Hi\"}}]}\n", "\n"}, 1},
		{"completion text", []string{"data: {\"choices\":[{\"text\": \"x\"}]}\n\n"}, 0},
		{"only done", []string{": keepalive\n\n", "data: [DONE]\n\n"}, -1},
		{"usage chunk only", []string{"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3}}\n\n"}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(t0)
			f := &firstToken{clk: clk}
			for i, w := range tc.writes {
				clk.SetTime(t0.Add(time.Duration(i+1) * time.Second))
				if n, err := f.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			switch {
			case tc.want < 0 && !f.at.IsZero():
				t.Fatalf("first token at %v, want none", f.at.Sub(t0))
			case tc.want >= 0 && !f.at.Equal(t0.Add(time.Duration(tc.want+1)*time.Second)):
				t.Fatalf("first token at %v, want write %d", f.at.Sub(t0), tc.want)
			}
		})
	}
}

// TestTTFTOfStreamedAnswers runs the generator against a streaming server
// that sends a role-only event, waits, sends the first token, waits again
// and ends: the time to first token covers the first wait and not the
// second.
func TestTTFTOfStreamedAnswers(t *testing.T) {
	const beforeToken, afterToken = 60 * time.Millisecond, 120 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
		fl.Flush()
		time.Sleep(beforeToken)
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\n\n")
		fl.Flush()
		time.Sleep(afterToken)
		_, _ = io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	cfg := Config{
		Targets:        []string{srv.URL},
		Tenants:        []Tenant{{Name: "s", Rate: 10, Stream: true}},
		Duration:       500 * time.Millisecond,
		MaxOutstanding: 100,
		Timeout:        safety,
	}
	cfg.Default()
	ctx, cancel := context.WithTimeout(context.Background(), safety)
	defer cancel()
	s, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := s.Tenants[0]
	if ts.Admitted == 0 || ts.TTFTMS.Count != ts.Admitted {
		t.Fatalf("admitted %d, TTFT measured for %d: want every streamed answer", ts.Admitted, ts.TTFTMS.Count)
	}
	// Lower bounds only: the server's sleeps guarantee them on any machine.
	if ts.TTFTMS.P50 < float64(beforeToken.Milliseconds()) {
		t.Errorf("TTFT p50 %.1f ms, want at least the %v before the first token", ts.TTFTMS.P50, beforeToken)
	}
	if ts.AdmittedLatencyMS.P50 < float64((beforeToken + afterToken).Milliseconds()) {
		t.Errorf("latency p50 %.1f ms, want at least %v", ts.AdmittedLatencyMS.P50, beforeToken+afterToken)
	}
}

// TestTTFTSplitsQueueWait checks that a streamed answer's TTFT is split into
// the data plane's queue wait (its x-fair-queue-wait-ms header, 0 without
// one) and the rest, so that a benchmark can tell the gateway's share of a
// TTFT from the upstream server's.
func TestTTFTSplitsQueueWait(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	ts := &tenantState{admitted: make([]uint64, 1), refused: make([]uint64, 1), tokens: make([]uint64, 1)}
	for _, o := range []outcome{
		{status: 200, ttft: ms(100), hasTTFT: true, wait: ms(40), hasWait: true}, // queued 40 ms
		{status: 200, ttft: ms(30), hasTTFT: true},                               // not queued
		{status: 200, ttft: ms(20), hasTTFT: true, wait: ms(50), hasWait: true},  // a wait over the TTFT counts as all of it
		{status: 200, wait: ms(70), hasWait: true},                               // not streamed: no TTFT, no split
	} {
		ts.record(o, 0)
	}
	s := &ts.stats
	for _, tc := range []struct {
		name     string
		h        *histogram
		count    uint64
		p50, max time.Duration
	}{
		{"queued", &s.ttftQueued, 3, ms(20), ms(40)},
		{"after queue", &s.ttftAfterQueue, 3, ms(30), ms(60)},
	} {
		got := tc.h.summary()
		if got.Count != tc.count {
			t.Errorf("%s: %d observations, want %d (one per streamed answer)", tc.name, got.Count, tc.count)
		}
		if !near(got.P50, tc.p50) || !near(got.Max, tc.max) {
			t.Errorf("%s: p50 %.2f ms, max %.2f ms; want %v and %v", tc.name, got.P50, got.Max, tc.p50, tc.max)
		}
	}
}

// near reports whether ms is within the histogram's 1% of d.
func near(ms float64, d time.Duration) bool {
	want := float64(d) / float64(time.Millisecond)
	return ms >= want*0.99-0.01 && ms <= want*1.01+0.01
}
