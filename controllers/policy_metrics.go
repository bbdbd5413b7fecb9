package controllers

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
)

// PolicyReadyMetricName is the gauge the FairQueuePolicyNotRendered alert of
// config/prometheus reads: 1 when a policy's Ready condition is True, 0 when
// it is False, labelled with the policy and the condition's reason.
const PolicyReadyMetricName = "fairqueue_policy_ready"

// policyListTimeout bounds one scrape's list of policies from the cache.
const policyListTimeout = 5 * time.Second

// policyCollector reports every policy's Ready condition at scrape time, read
// from the manager's cache, so it never disagrees with the status.
type policyCollector struct {
	reader client.Reader
	ready  *prometheus.Desc
}

// NewPolicyCollector returns a collector of the fairqueue_policy_ready gauge
// that lists FairQueuePolicies through reader (the manager's cached client)
// on every scrape. Register it on controller-runtime's metrics.Registry.
func NewPolicyCollector(reader client.Reader) prometheus.Collector {
	return &policyCollector{
		reader: reader,
		ready: prometheus.NewDesc(PolicyReadyMetricName,
			"Whether the FairQueuePolicy is rendered (1) or cannot be rendered (0), by the Ready condition's reason.",
			[]string{"namespace", "policy", "reason"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *policyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.ready }

// Collect implements prometheus.Collector. A policy without a Ready
// condition yet is left out; a failed list reports an invalid metric, which
// the registry turns into a scrape error rather than a silent gap.
func (c *policyCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), policyListTimeout)
	defer cancel()
	var list fqv1alpha1.FairQueuePolicyList
	if err := c.reader.List(ctx, &list); err != nil {
		ch <- prometheus.NewInvalidMetric(c.ready, err)
		return
	}
	for i := range list.Items {
		p := &list.Items[i]
		cond := meta.FindStatusCondition(p.Status.Conditions, fqv1alpha1.ConditionReady)
		if cond == nil || cond.Status == metav1.ConditionUnknown {
			continue
		}
		v := 0.0
		if cond.Status == metav1.ConditionTrue {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, v, p.Namespace, p.Name, cond.Reason)
	}
}
