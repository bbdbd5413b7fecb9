package server

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fairqueue/fairqueue/dataplane/metrics"
)

func TestUpstreamClosingMidResponse(t *testing.T) {
	tests := []struct {
		name        string
		sent        int // body bytes the upstream sends of the 256 KiB it declares
		wantStatus  int
		wantReadErr bool
		wantOutcome string
	}{
		{name: "nothing sent: 502", sent: 0, wantStatus: http.StatusBadGateway, wantOutcome: metrics.UpstreamBadGateway},
		{name: "a few bytes sent, none relayed: 502", sent: 300, wantStatus: http.StatusBadGateway, wantOutcome: metrics.UpstreamBadGateway},
		{name: "part sent: cut short", sent: 64 << 10, wantStatus: http.StatusOK, wantReadErr: true, wantOutcome: metrics.UpstreamAborted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hs := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				conn, buf, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("hijack: %v", err)
					return
				}
				defer func() { _ = conn.Close() }()
				_, _ = fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", 256<<10, strings.Repeat("x", tc.sent))
				_ = buf.Flush()
			}), nil)
			resp := hs.do(`{"model":"m"}`, nil)
			if tc.wantStatus == http.StatusBadGateway {
				e := decodeError(t, resp)
				if resp.StatusCode != http.StatusBadGateway || e.Error.Code != "bad_gateway" {
					t.Errorf("got %d %q, want 502 bad_gateway", resp.StatusCode, e.Error.Code)
				}
			} else {
				_, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != tc.wantStatus || err == nil {
					t.Errorf("got %d with body read error %v, want %d and a read error (the response is incomplete)", resp.StatusCode, err, tc.wantStatus)
				}
			}
			labels := map[string]string{"backend": "b1", "outcome": tc.wantOutcome}
			if got := metricValue(t, hs.reg, metrics.UpstreamResponseErrorsName, labels); got != 1 {
				t.Errorf("%s%v = %v, want 1", metrics.UpstreamResponseErrorsName, labels, got)
			}
		})
	}
}
