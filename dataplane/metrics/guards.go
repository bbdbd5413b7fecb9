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

package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairqueue/fairqueue/dataplane/metrics/collector"
)

// Names of the metrics that show the data plane protecting itself from
// hostile or broken peers.
const (
	// BodyBufferedBytesName is the gauge of request-body bytes held in memory now.
	BodyBufferedBytesName = "fairqueue_request_body_buffered_bytes"
	// BodyRefusedName counts requests refused while their body was read, by reason.
	BodyRefusedName = "fairqueue_request_body_refused_total"
	// UpstreamResponseErrorsName counts upstream responses that broke off
	// while their body was relayed, by backend and by what the client got.
	UpstreamResponseErrorsName = "fairqueue_upstream_response_errors_total"
)

// BodyRefusal is why a request body was refused: a label value of BodyRefusedName.
type BodyRefusal int

// Reasons a request body is refused.
const (
	// BodyTooLarge is a body over --max-body-bytes (413).
	BodyTooLarge BodyRefusal = iota
	// BodyBufferFull is a body that would take the replica past
	// --max-buffered-body-bytes (503).
	BodyBufferFull
	// BodyTimeout is a body not received within --body-read-timeout (408).
	BodyTimeout
	numBodyRefusals
)

// bodyRefusalLabels are the label values of BodyRefusal, in order.
var bodyRefusalLabels = [numBodyRefusals]string{"too_large", "buffer_full", "timeout"}

// String returns the label value.
func (r BodyRefusal) String() string {
	if r >= 0 && r < numBodyRefusals {
		return bodyRefusalLabels[r]
	}
	return unknownLabel
}

// Outcomes of an upstream response that broke off mid-body: label values of
// UpstreamResponseErrorsName.
const (
	// UpstreamBadGateway: nothing had reached the client yet, so it was
	// answered 502.
	UpstreamBadGateway = "bad_gateway"
	// UpstreamAborted: part of the response had reached the client, so
	// its connection (or stream) was aborted.
	UpstreamAborted = "aborted"
)

// Guards holds the collectors of the data plane's self-protection: body
// bounds and upstream responses cut short. Backend names, from the config,
// are the only free label values.
type Guards struct {
	bodyRefused [numBodyRefusals]prometheus.Counter
	upstream    *prometheus.CounterVec
}

// NewGuards creates the collectors and registers them on reg; buffered
// reports the request-body bytes held now. It fails when one is already
// registered there.
func NewGuards(reg prometheus.Registerer, buffered func() int64) (*Guards, error) {
	g := &Guards{
		upstream: collector.CounterVec(UpstreamResponseErrorsName, "Upstream responses that broke off while relayed, by backend and outcome (bad_gateway: answered 502; aborted: cut short at the client).",
			"backend", "outcome"),
	}
	refused := collector.CounterVec(BodyRefusedName, "Requests refused while their body was read, by reason (too_large, buffer_full, timeout).", "reason")
	for r := range numBodyRefusals {
		g.bodyRefused[r] = refused.WithLabelValues(r.String())
	}
	gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: BodyBufferedBytesName,
		Help: "Request-body bytes buffered in memory now, across all requests.",
	}, func() float64 { return float64(buffered()) })
	if err := registerAll(reg, "data-plane guard metrics", "NewGuards", refused, g.upstream, gauge); err != nil {
		return nil, err
	}
	return g, nil
}

// BodyRefused counts one refused request body.
func (g *Guards) BodyRefused(r BodyRefusal) {
	if r >= 0 && r < numBodyRefusals {
		g.bodyRefused[r].Inc()
	}
}

// UpstreamResponseError counts one upstream response that broke off, with
// outcome UpstreamBadGateway or UpstreamAborted.
func (g *Guards) UpstreamResponseError(backend, outcome string) {
	g.upstream.WithLabelValues(backend, outcome).Inc()
}
