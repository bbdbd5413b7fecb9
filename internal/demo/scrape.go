package demo

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fairqueue/fairqueue/dataplane/reload"
)

// Bounds of what scrape reads.
const (
	// maxMetricsBody bounds a scraped /metrics page.
	maxMetricsBody = 8 << 20
	// maxHashes bounds the config hashes kept from one page.
	maxHashes = 8
)

// Loaded reports whether the replica reports a config hash other than old.
func (c *DataPlaneCounts) Loaded(old string) bool {
	for _, h := range c.ConfigHashes {
		if h != "" && h != old {
			return true
		}
	}
	return false
}

// DataPlaneCounts is what one data-plane replica's /metrics reports.
type DataPlaneCounts struct {
	// Admitted counts requests that passed the model limit
	// (rate_limit_decisions_total{dimension="model",outcome="allowed"}):
	// every admitted request passes it exactly once.
	Admitted float64
	// Grants counts queued requests admitted (rate_limit_fair_queue_grants_total).
	Grants float64
	// QueueRefused counts queue refusals (rate_limit_fair_queue_refused_total).
	QueueRefused float64
	// TokensSettled counts the tokens settled on the model token limit
	// (rate_limit_tokens_settled_total{limit_type="model_tokens"}).
	TokensSettled float64
	// DeferredRefused counts requests deferred admission refused
	// (rate_limit_deferred_refused_total).
	DeferredRefused float64
	// ConfigHashes are the hash labels of fairqueue_config_info series at 1:
	// the loaded config's hash.
	ConfigHashes []string
}

// scrape reads and parses the /metrics page at url.
func scrape(ctx context.Context, client *http.Client, url string) (*DataPlaneCounts, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }() // read-only: a close error loses nothing
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: HTTP %d", url, resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, maxMetricsBody))
	if err != nil {
		return nil, fmt.Errorf("parsing the metrics of %s: %w", url, err)
	}
	c := &DataPlaneCounts{}
	for _, m := range families["rate_limit_decisions_total"].GetMetric() {
		if label(m, "dimension") == "model" && label(m, "outcome") == "allowed" {
			c.Admitted += m.GetCounter().GetValue()
		}
	}
	for _, m := range families["rate_limit_fair_queue_grants_total"].GetMetric() {
		c.Grants += m.GetCounter().GetValue()
	}
	for _, m := range families["rate_limit_fair_queue_refused_total"].GetMetric() {
		c.QueueRefused += m.GetCounter().GetValue()
	}
	for _, m := range families["rate_limit_tokens_settled_total"].GetMetric() {
		if label(m, "limit_type") == "model_tokens" {
			c.TokensSettled += m.GetCounter().GetValue()
		}
	}
	for _, m := range families["rate_limit_deferred_refused_total"].GetMetric() {
		c.DeferredRefused += m.GetCounter().GetValue()
	}
	for _, m := range families[reload.ConfigInfoName].GetMetric() {
		if m.GetGauge().GetValue() == 1 && len(c.ConfigHashes) < maxHashes {
			c.ConfigHashes = append(c.ConfigHashes, label(m, "hash"))
		}
	}
	return c, nil
}

// label returns the value of the label called name, or "".
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
