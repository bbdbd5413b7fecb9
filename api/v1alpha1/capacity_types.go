/*
Copyright 2026 The fairqueue Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

// The defaults of capacity live in dataplane/config (DefaultMetricsPath,
// DefaultSaturationInterval, DefaultSaturationStaleAfter and
// DefaultSaturationTimeout); test/api checks the markers below against them.

// Capacity is admission against what the backends can take (SPEC 6b): how
// many requests each backend runs at once, and optionally when its own
// metrics say it is saturated.
type Capacity struct {
	// backends set the capacity of named backends of spec.backends: from 1
	// to 32, each naming a backend once. A backend without an entry is
	// never saturated: capacity does not limit it. When every backend a
	// request may go to is saturated, a request with an identity waits in
	// the fair queue (limit_type capacity) until a response's end frees a
	// slot; without an identity, or with fair queuing off, it is refused at
	// once with 429.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Backends []BackendCapacity `json:"backends"`
}

// BackendCapacity is the capacity of one backend.
type BackendCapacity struct {
	// name is the name of a backend in spec.backends.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// maxInFlight is the most requests at the backend at once, from 1 to
	// 100000, counted from dispatch to the response's end (complete,
	// broken or cancelled). For vLLM, its max_num_seqs plus a small margin
	// (for example 256 + 8), so that the server's own waiting queue stays
	// short and the fair queue, not the server, decides who goes next. It
	// alone decides while the saturation metrics are stale or absent.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	MaxInFlight int32 `json:"maxInFlight"`

	// saturation reads the backend's own Prometheus metrics: the backend is
	// saturated while a fresh signal is over its max, even below
	// maxInFlight. When unset, maxInFlight alone decides.
	// +optional
	Saturation *Saturation `json:"saturation,omitempty"`
}

// Saturation says where a backend's metrics are read, how often, and which
// gauges mark it saturated. The rules on metricsPath and metricsURL are the
// object's, so that a refusal never echoes a value that may hold a token.
// +kubebuilder:validation:XValidation:rule="!(has(self.metricsPath) && has(self.metricsURL))",message="set metricsPath or metricsURL, not both: metricsPath is read from the backend's url, metricsURL from another address"
// +kubebuilder:validation:XValidation:rule="!has(self.interval) || !has(self.staleAfter) || !self.interval.matches('^(([0-9]{1,5}([.][0-9]+)?h)|([0-9]{1,7}([.][0-9]+)?m)|([0-9]{1,9}([.][0-9]+)?s)|([0-9]{1,12}([.][0-9]+)?ms)|([0-9]{1,15}([.][0-9]+)?us)|([0-9]{1,18}([.][0-9]+)?ns)){1,6}$') || !self.staleAfter.matches('^(([0-9]{1,5}([.][0-9]+)?h)|([0-9]{1,7}([.][0-9]+)?m)|([0-9]{1,9}([.][0-9]+)?s)|([0-9]{1,12}([.][0-9]+)?ms)|([0-9]{1,15}([.][0-9]+)?us)|([0-9]{1,18}([.][0-9]+)?ns)){1,6}$') || duration(self.staleAfter) > duration(self.interval)",message="staleAfter must be longer than interval (staleAfter defaults to 1s): metrics go stale only when polls fail; set staleAfter to about 4 times interval",fieldPath=".staleAfter"
// +kubebuilder:validation:XValidation:rule="!has(self.metricsURL) || (isURL(self.metricsURL) && url(self.metricsURL).getScheme() in ['http', 'https'] && size(url(self.metricsURL).getHostname()) != 0)",message="metricsURL must be an absolute http or https URL, such as http://vllm-a.models.svc:8000/metrics",fieldPath=".metricsURL"
// +kubebuilder:validation:XValidation:rule="!has(self.metricsURL) || !self.metricsURL.matches('^[^/?#]*//[^/?#]*@')",message="metricsURL must not hold credentials (user:password@): a policy is readable by everyone who can read the namespace's policies",fieldPath=".metricsURL"
// +kubebuilder:validation:XValidation:rule="!has(self.metricsPath) || self.metricsPath.matches('^/[^?#[:space:]]*$')",message="metricsPath must be an absolute path such as /metrics, without spaces, query (?...) or fragment (#...)",fieldPath=".metricsPath"
type Saturation struct {
	// metricsPath is the path of the backend's Prometheus metrics, appended
	// to its url as a request's path is, such as "/metrics": an absolute
	// path without query or fragment, at most 256 characters. Set it or
	// metricsURL, not both. When neither is set, the path is "/metrics".
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	MetricsPath string `json:"metricsPath,omitempty"`

	// metricsURL is the absolute http or https URL of the backend's
	// Prometheus metrics, for when they are served at another address than
	// its url (another port or a sidecar), without credentials. Set it or
	// metricsPath, not both.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	MetricsURL string `json:"metricsURL,omitempty"`

	// interval is the time between two polls of the metrics, from 50ms to
	// 1m. A poll that takes longer delays the next one: polls of one
	// backend never overlap. Defaults to "250ms".
	// +optional
	// +kubebuilder:default="250ms"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (self.matches('^(([0-9]{1,5}([.][0-9]+)?h)|([0-9]{1,7}([.][0-9]+)?m)|([0-9]{1,9}([.][0-9]+)?s)|([0-9]{1,12}([.][0-9]+)?ms)|([0-9]{1,15}([.][0-9]+)?us)|([0-9]{1,18}([.][0-9]+)?ns)){1,6}$') && duration(self) >= duration('50ms') && duration(self) <= duration('1m'))",message="interval must be a duration from 50ms to 1m, such as 250ms"
	Interval Duration `json:"interval,omitzero"`

	// staleAfter is how old the last successful poll may be before its
	// values are ignored: stale metrics mean maxInFlight alone decides
	// (counted and logged), so a backend whose metrics endpoint fails is
	// neither trusted nor shut out. Longer than interval, at most 10m.
	// Defaults to "1s".
	// +optional
	// +kubebuilder:default="1s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (self.matches('^(([0-9]{1,5}([.][0-9]+)?h)|([0-9]{1,7}([.][0-9]+)?m)|([0-9]{1,9}([.][0-9]+)?s)|([0-9]{1,12}([.][0-9]+)?ms)|([0-9]{1,15}([.][0-9]+)?us)|([0-9]{1,18}([.][0-9]+)?ns)){1,6}$') && duration(self) > duration('0s') && duration(self) <= duration('10m'))",message="staleAfter must be a positive duration of at most 10m, such as 1s"
	StaleAfter Duration `json:"staleAfter,omitzero"`

	// timeout bounds one poll, a positive duration of at most 10s; a poll
	// that times out or fails leaves the last values to go stale.
	// Defaults to "200ms".
	// +optional
	// +kubebuilder:default="200ms"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (self.matches('^(([0-9]{1,5}([.][0-9]+)?h)|([0-9]{1,7}([.][0-9]+)?m)|([0-9]{1,9}([.][0-9]+)?s)|([0-9]{1,12}([.][0-9]+)?ms)|([0-9]{1,15}([.][0-9]+)?us)|([0-9]{1,18}([.][0-9]+)?ns)){1,6}$') && duration(self) > duration('0s') && duration(self) <= duration('10s'))",message="timeout must be a positive duration of at most 10s, such as 200ms"
	Timeout Duration `json:"timeout,omitzero"`

	// signals are the gauges that mark the backend saturated, from 1 to 16:
	// it is saturated while any signal's value is over its max. For vLLM,
	// vllm:num_requests_waiting (max 0 to 4: requests in its own queue) and
	// vllm:kv_cache_usage_perc (max about 0.9: a fraction from 0 to 1).
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Signals []SaturationSignal `json:"signals"`
}

// SaturationSignal is one gauge of a backend's metrics with its threshold.
type SaturationSignal struct {
	// metric is the Prometheus metric name of a gauge, such as
	// "vllm:num_requests_waiting": letters, digits, '_' and ':', not
	// starting with a digit, at most 256 characters. When the metric has
	// several series (one per model or engine, say), the largest value
	// counts. A metric missing from the backend's metrics counts as stale.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[a-zA-Z_:][a-zA-Z0-9_:]*$`
	Metric string `json:"metric"`

	// max is the largest value at which the backend still takes requests,
	// a number from 0 such as 4 or 0.9: the backend is saturated while the
	// metric's value is greater than max. With max 0 on a waiting-queue
	// gauge, one waiting request saturates it.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000000
	Max float64 `json:"max"`
}
