package proxy

import (
	"strings"
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
