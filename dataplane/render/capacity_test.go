package render

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/config"
)

// TestRenderWithoutCapacityKeepsBytes: a policy without spec.capacity
// renders no capacity key, so every existing ConfigMap keeps its bytes.
func TestRenderWithoutCapacityKeepsBytes(t *testing.T) {
	r, c := renderParsed(t, unitPolicy())
	if c.Capacity != nil || bytes.Contains(r.Data, []byte(`"capacity"`)) {
		t.Errorf("a policy without capacity renders one:\n%s", r.Data)
	}
}

// TestRenderCapacity checks that every default is resolved into the config
// and that the metrics URL is the backend's url joined with the path, as
// the proxy joins a request's path.
func TestRenderCapacity(t *testing.T) {
	sig := []fqv1alpha1.SaturationSignal{{Metric: "vllm:num_requests_waiting", Max: 4}, {Metric: "vllm:kv_cache_usage_perc", Max: 0.9}}
	wantSig := []config.Signal{{Metric: "vllm:num_requests_waiting", Max: 4}, {Metric: "vllm:kv_cache_usage_perc", Max: 0.9}}
	defaults := func(url string) *config.Saturation {
		return &config.Saturation{
			MetricsURL: url,
			Interval:   config.Duration{Duration: config.DefaultSaturationInterval},
			StaleAfter: config.Duration{Duration: config.DefaultSaturationStaleAfter},
			Timeout:    config.Duration{Duration: config.DefaultSaturationTimeout},
			Signals:    wantSig,
		}
	}
	tests := []struct {
		name       string
		backendURL string
		saturation *fqv1alpha1.Saturation
		want       *config.Saturation
	}{
		{name: "maxInFlight only", backendURL: "http://vllm:8000"},
		{name: "every default", backendURL: "http://vllm:8000",
			saturation: &fqv1alpha1.Saturation{Signals: sig}, want: defaults("http://vllm:8000/metrics")},
		{name: "path on a base url with a path", backendURL: "http://gw.models.svc/vllm-a/",
			saturation: &fqv1alpha1.Saturation{MetricsPath: "/stats/prometheus", Signals: sig}, want: defaults("http://gw.models.svc/vllm-a/stats/prometheus")},
		{name: "metrics at another address", backendURL: "http://vllm:8000",
			saturation: &fqv1alpha1.Saturation{MetricsURL: "http://vllm-sidecar:9090/metrics", Signals: sig}, want: defaults("http://vllm-sidecar:9090/metrics")},
		{name: "every field set", backendURL: "https://vllm:8443",
			saturation: &fqv1alpha1.Saturation{MetricsPath: "/metrics", Interval: "100ms", StaleAfter: "2s", Timeout: "50ms", Signals: sig},
			want: &config.Saturation{MetricsURL: "https://vllm:8443/metrics", Interval: config.Duration{Duration: 100 * time.Millisecond},
				StaleAfter: config.Duration{Duration: 2 * time.Second}, Timeout: config.Duration{Duration: 50 * time.Millisecond}, Signals: wantSig}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := unitPolicy()
			p.Spec.Backends = []fqv1alpha1.Backend{{Name: "vllm", URL: tt.backendURL}, {Name: "api", URL: "https://api.example"}}
			p.Spec.Capacity = &fqv1alpha1.Capacity{Backends: []fqv1alpha1.BackendCapacity{{Name: "vllm", MaxInFlight: 264, Saturation: tt.saturation}}}
			_, c := renderParsed(t, p)
			want := &config.Capacity{Backends: []config.BackendCapacity{{Name: "vllm", MaxInFlight: 264, Saturation: tt.want}}}
			if !reflect.DeepEqual(c.Capacity, want) {
				t.Errorf("rendered capacity\n%+v\nwant\n%+v", describeCapacity(c.Capacity), describeCapacity(want))
			}
		})
	}
}

// TestRenderCapacityRendersWithFairQueuingOff: capacity applies without
// fair queuing too (a saturated backend then refuses at once), so it is
// rendered whatever fairQueuing says.
func TestRenderCapacityRendersWithFairQueuingOff(t *testing.T) {
	p := unitPolicy()
	p.Spec.FairQueuing.Enabled = false
	p.Spec.Capacity = &fqv1alpha1.Capacity{Backends: []fqv1alpha1.BackendCapacity{{Name: "vllm", MaxInFlight: 8}}}
	_, c := renderParsed(t, p)
	if c.Capacity.Backend("vllm") == nil {
		t.Errorf("capacity not rendered with fair queuing off: %+v", c.Capacity)
	}
}

// TestRenderCapacityUnknownBackend: the API server refuses a capacity entry
// naming no backend; an object built without it fails to render with the
// field named rather than rendering a URL with no host.
func TestRenderCapacityUnknownBackend(t *testing.T) {
	p := unitPolicy()
	p.Spec.Capacity = &fqv1alpha1.Capacity{Backends: []fqv1alpha1.BackendCapacity{{Name: "vllm-x", MaxInFlight: 8,
		Saturation: &fqv1alpha1.Saturation{Signals: []fqv1alpha1.SaturationSignal{{Metric: "m", Max: 1}}}}}}
	_, err := Render(Input{Policy: p, HashKey: unitKey, HashKeySecret: "llm-hash-key", Secrets: unitSecrets()})
	var re *Error
	if !errors.As(err, &re) || re.Reason != fqv1alpha1.ReasonInvalid || !strings.Contains(err.Error(), `capacity.backends[0].name: is "vllm-x", which is not in backends`) {
		t.Errorf("Render = %v, want an Invalid error naming capacity.backends[0].name", err)
	}
}

func describeCapacity(c *config.Capacity) string {
	if c == nil {
		return "nil"
	}
	var b strings.Builder
	for _, e := range c.Backends {
		b.WriteString(e.Name)
		if s := e.Saturation; s != nil {
			b.WriteString(" " + s.MetricsURL + " " + s.Interval.String() + " " + s.StaleAfter.String() + " " + s.Timeout.String())
		}
		b.WriteString("; ")
	}
	return b.String()
}
