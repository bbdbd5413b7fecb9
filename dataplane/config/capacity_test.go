package config

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// capacityConfig is validConfig (backends vllm-b, vllm-a) with capacity on
// both, listed out of order, one of them read from its metrics.
func capacityConfig() *Config {
	c := validConfig()
	c.Capacity = &Capacity{Backends: []BackendCapacity{
		{Name: "vllm-b", MaxInFlight: 16},
		{Name: "vllm-a", MaxInFlight: 264, Saturation: &Saturation{
			MetricsURL: "https://vllm-a.example:8443/v1/metrics",
			Interval:   dur(DefaultSaturationInterval),
			StaleAfter: dur(DefaultSaturationStaleAfter),
			Timeout:    dur(DefaultSaturationTimeout),
			Signals:    []Signal{{Metric: "vllm:num_requests_waiting", Max: 4}, {Metric: "vllm:kv_cache_usage_perc", Max: 0.9}},
		}},
	}}
	return c
}

// TestCapacityConfigShape pins the JSON the data plane reads: backends
// sorted by name, durations as strings, signals in the policy's order and
// fractional thresholds as JSON numbers.
func TestCapacityConfigShape(t *testing.T) {
	data, err := Marshal(capacityConfig())
	if err != nil {
		t.Fatal(err)
	}
	want := `  "capacity": {
    "backends": [
      {
        "name": "vllm-a",
        "maxInFlight": 264,
        "saturation": {
          "metricsURL": "https://vllm-a.example:8443/v1/metrics",
          "interval": "250ms",
          "staleAfter": "1s",
          "timeout": "200ms",
          "signals": [
            {
              "metric": "vllm:num_requests_waiting",
              "max": 4
            },
            {
              "metric": "vllm:kv_cache_usage_perc",
              "max": 0.9
            }
          ]
        }
      },
      {
        "name": "vllm-b",
        "maxInFlight": 16
      }
    ]
  }
}
`
	if !strings.HasSuffix(string(data), want) {
		t.Errorf("Marshal ends with\n%s\nwant\n%s", data[max(0, len(data)-len(want)-200):], want)
	}
	c, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse(Marshal(c)) = %v", err)
	}
	again, err := Marshal(c)
	if err != nil || !bytes.Equal(again, data) {
		t.Errorf("the capacity section does not round-trip (err %v):\n%s", err, again)
	}
}

// TestCapacityOffKeepsBytes: a config without capacity encodes no capacity
// key, so every existing ConfigMap keeps its bytes and hash.
func TestCapacityOffKeepsBytes(t *testing.T) {
	data, err := Marshal(validConfig())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(`"capacity"`)) {
		t.Errorf("a config without capacity renders it:\n%s", data)
	}
}

func TestCapacityValidateNamesEveryBadField(t *testing.T) {
	sat := func(mod func(*Saturation)) *Saturation {
		s := &Saturation{MetricsURL: "http://vllm-b:8000/metrics", Interval: dur(time.Second), StaleAfter: dur(4 * time.Second), Timeout: dur(time.Second),
			Signals: []Signal{{Metric: "vllm:num_requests_waiting", Max: 0}}}
		mod(s)
		return s
	}
	tests := []struct {
		name     string
		backends []BackendCapacity
		want     []string
	}{
		{"no backends", nil, []string{"capacity.backends: must list at least one backend"}},
		{"unknown backend", []BackendCapacity{{Name: "vllm-c", MaxInFlight: 1}},
			[]string{`capacity.backends[0].name: is "vllm-c", which is not in backends`}},
		{"duplicate backend", []BackendCapacity{{Name: "vllm-a", MaxInFlight: 1}, {Name: "vllm-a", MaxInFlight: 2}},
			[]string{`capacity.backends[1].name: duplicates capacity.backends[0] ("vllm-a")`}},
		{"maxInFlight zero", []BackendCapacity{{Name: "vllm-a"}},
			[]string{"capacity.backends[0].maxInFlight: must be >= 1, got 0"}},
		{"metricsURL without scheme", []BackendCapacity{{Name: "vllm-a", MaxInFlight: 1, Saturation: sat(func(s *Saturation) { s.MetricsURL = "/metrics" })}},
			[]string{`capacity.backends[0].saturation.metricsURL: scheme must be http or https, got ""`}},
		{"metricsURL without host", []BackendCapacity{{Name: "vllm-a", MaxInFlight: 1, Saturation: sat(func(s *Saturation) { s.MetricsURL = "http:///metrics" })}},
			[]string{"capacity.backends[0].saturation.metricsURL: must have a host"}},
		{"metricsURL that does not parse, never quoted", []BackendCapacity{{Name: "vllm-a", MaxInFlight: 1, Saturation: sat(func(s *Saturation) { s.MetricsURL = "http://u:secret@h:99999999999/%zz" })}},
			[]string{"capacity.backends[0].saturation.metricsURL: must be an absolute http or https URL, got a value of 33 characters that does not parse"}},
		{"zero durations", []BackendCapacity{{Name: "vllm-a", MaxInFlight: 1, Saturation: sat(func(s *Saturation) { s.Interval, s.StaleAfter, s.Timeout = dur(0), dur(0), dur(-1) })}},
			[]string{"saturation.interval: must be > 0", "saturation.staleAfter: must be > 0", "saturation.timeout: must be > 0"}},
		{"no signals", []BackendCapacity{{Name: "vllm-a", MaxInFlight: 1, Saturation: sat(func(s *Saturation) { s.Signals = nil })}},
			[]string{"capacity.backends[0].saturation.signals: must list at least one signal"}},
		{"bad metric names", []BackendCapacity{{Name: "vllm-a", MaxInFlight: 1, Saturation: sat(func(s *Saturation) {
			s.Signals = []Signal{{Metric: ""}, {Metric: "0waiting"}, {Metric: "vllm-waiting"}}
		})}}, []string{"signals[0].metric: must be a Prometheus metric name", `signals[1].metric: must be a Prometheus metric name (letters, digits, '_' and ':', not starting with a digit), got "0waiting"`, `signals[2].metric: must be a Prometheus metric name`}},
		{"max not finite", []BackendCapacity{{Name: "vllm-a", MaxInFlight: 1, Saturation: sat(func(s *Saturation) {
			s.Signals = []Signal{{Metric: "a", Max: math.NaN()}, {Metric: "b", Max: math.Inf(1)}}
		})}}, []string{"signals[0].max: must be a finite number, got NaN", "signals[1].max: must be a finite number, got +Inf"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			c.Capacity = &Capacity{Backends: tt.backends}
			wantValidateErrors(t, c, tt.want)
			if strings.Contains(c.Validate().Error(), "secret") {
				t.Errorf("Validate quotes a metrics URL: %v", c.Validate())
			}
		})
	}
}

// TestCapacityValidateLeavesPolicyRulesToTheCRD: what the data plane can
// run is accepted even where the policy's rules are stricter (staleAfter
// not above interval, a timeout above the interval, max 0 or negative,
// metric names with colons).
func TestCapacityValidateLeavesPolicyRulesToTheCRD(t *testing.T) {
	c := capacityConfig()
	s := c.Capacity.Backends[1].Saturation
	s.Interval, s.StaleAfter, s.Timeout = dur(time.Minute), dur(time.Millisecond), dur(time.Hour)
	s.Signals = append(s.Signals, Signal{Metric: "_:a:b_9", Max: -1}, Signal{Metric: "x", Max: 0})
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() = %v, want nil", err)
	}
}

// TestSignalSaturatedAboveMax pins the comparison: max is the largest value
// at which a backend still takes requests.
func TestSignalSaturatedAboveMax(t *testing.T) {
	for _, tt := range []struct {
		max, value float64
		want       bool
	}{
		{4, 3, false}, {4, 4, false}, {4, 4.5, true},
		{0, 0, false}, {0, 1, true},
		{0.9, 0.9, false}, {0.9, 0.91, true},
	} {
		s := Signal{Metric: "m", Max: tt.max}
		if got := s.Saturated(tt.value); got != tt.want {
			t.Errorf("Signal{Max: %v}.Saturated(%v) = %v, want %v", tt.max, tt.value, got, tt.want)
		}
	}
}

func TestCapacityBackend(t *testing.T) {
	c := capacityConfig()
	if b := c.Capacity.Backend("vllm-a"); b == nil || b.MaxInFlight != 264 {
		t.Errorf("Backend(vllm-a) = %+v, want the entry with maxInFlight 264", b)
	}
	if b := c.Capacity.Backend("vllm-c"); b != nil {
		t.Errorf("Backend(vllm-c) = %+v, want nil for a backend without capacity", b)
	}
	var off *Capacity
	if b := off.Backend("vllm-a"); b != nil {
		t.Errorf("nil Capacity: Backend = %+v, want nil", b)
	}
}

func TestCapacityDeepCopyIsIndependent(t *testing.T) {
	c := capacityConfig()
	d := c.DeepCopy()
	d.Capacity.Backends[0].MaxInFlight = 7
	d.Capacity.Backends[1].Saturation.Signals[0].Max = 7
	d.Capacity.Backends[1].Saturation.MetricsURL = "http://changed"
	if !reflect.DeepEqual(c, capacityConfig()) {
		t.Error("mutating the copy changed the original")
	}
}
