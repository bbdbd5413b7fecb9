package server

import (
	"testing"
	"time"
)

func TestRetryAndResetFormatting(t *testing.T) {
	tests := []struct {
		d           time.Duration
		wantSeconds int64
		wantMS      int64
		wantReset   string
	}{
		{d: 0, wantSeconds: 0, wantMS: 0, wantReset: "0s"},
		{d: time.Nanosecond, wantSeconds: 1, wantMS: 1, wantReset: "1ms"},
		{d: 999 * time.Millisecond, wantSeconds: 1, wantMS: 999, wantReset: "999ms"},
		{d: time.Second, wantSeconds: 1, wantMS: 1000, wantReset: "1s"},
		{d: 1500*time.Millisecond + time.Microsecond, wantSeconds: 2, wantMS: 1501, wantReset: "1.501s"},
		{d: 6 * time.Minute, wantSeconds: 360, wantMS: 360000, wantReset: "6m0s"},
	}
	for _, tc := range tests {
		if got := ceilDiv(tc.d, time.Second); got != tc.wantSeconds {
			t.Errorf("Retry-After for %v = %d, want %d (whole seconds, rounded up)", tc.d, got, tc.wantSeconds)
		}
		if got := ceilDiv(tc.d, time.Millisecond); got != tc.wantMS {
			t.Errorf("retry-after-ms for %v = %d, want %d", tc.d, got, tc.wantMS)
		}
		if got := formatReset(tc.d); got != tc.wantReset {
			t.Errorf("x-ratelimit-reset for %v = %q, want %q", tc.d, got, tc.wantReset)
		}
	}
}
