package config

import (
	"testing"
	"time"
)

func TestTimeoutsSmallest(t *testing.T) {
	tests := []struct {
		name string
		t    Timeouts
		want time.Duration
	}{
		{name: "none", want: 0},
		{name: "default only", t: Timeouts{RequestTotal: Duration{time.Minute}}, want: time.Minute},
		{name: "a model below the default", t: Timeouts{RequestTotal: Duration{time.Minute}, Models: []ModelTimeout{{Model: "a", Total: Duration{2 * time.Minute}}, {Model: "b", Total: Duration{5 * time.Second}}}}, want: 5 * time.Second},
		{name: "models without a default", t: Timeouts{Models: []ModelTimeout{{Model: "a", Total: Duration{30 * time.Second}}}}, want: 30 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.t.Smallest(); got != tc.want {
				t.Errorf("Smallest() = %v, want %v", got, tc.want)
			}
		})
	}
}
