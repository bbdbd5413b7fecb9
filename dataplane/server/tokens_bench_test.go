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

package server

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/usage"
	"github.com/fairqueue/fairqueue/internal/fakeupstream"
)

// benchWords make up the benchmark's prompts.
var benchWords = strings.Fields(`the fair queue gives every tenant of a shared API its weighted share when limits
are exhausted; token budgets reserve an estimate of prompt and output tokens and settle what the
response used, so a tenant sending large prompts cannot take more than its share. Numbers like 42,
3.14159 and identifiers such as user_1234 or gpt-4o-mini tokenize differently from prose.`)

// BenchmarkReservationError sends chat requests for three model families
// through the data plane with deferred admission on (a budget far from
// exhausted) to the fake upstream, which reports usage by its own counting
// rule and answers 60% of the output cap (or 200 tokens without one). It
// reports, per model, the median and p90 of reserved/settled tokens (the
// reservation's overestimate, mostly the unused output cap) and of the prompt
// estimate's relative error against the upstream's prompt_tokens.
func BenchmarkReservationError(b *testing.B) {
	up := httptest.NewServer(fakeupstream.New(fakeupstream.Options{CompletionFraction: 0.6, CompletionTokens: 200}))
	b.Cleanup(up.Close)
	cfg := baseConfig(up.URL)
	cfg.DeferredAdmission = &config.DeferredAdmission{
		TokenLimits: config.TokenLimits{PerModel: &config.ModelLimits{
			Default: &config.Limit{Tokens: 1 << 40, Period: dur(time.Minute), Burst: 1 << 40},
		}},
		Estimation: config.DefaultTokenEstimation(),
		Bounds:     config.DefaultDeferredBounds(),
	}
	front := benchServer(b, cfg)
	ct := &http.Transport{}
	b.Cleanup(ct.CloseIdleConnections)
	client := &http.Client{Transport: ct, Timeout: 30 * time.Second}
	est := usage.NewEstimator(config.DefaultMaxTokensReserved)

	models := []string{"gpt-4o", "llama-3.1-8b-instruct", "mistral-7b-instruct"}
	rng := rand.New(rand.NewPCG(1, 2))
	ratios := make(map[string][]float64, len(models))
	promptErr := make(map[string][]float64, len(models))
	b.ResetTimer()
	for i := range b.N {
		model := models[i%len(models)]
		words := make([]string, 10+rng.IntN(400))
		for j := range words {
			words[j] = benchWords[rng.IntN(len(benchWords))]
		}
		msg, _ := json.Marshal(strings.Join(words, " "))
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":%s}]}`, model, msg)
		if rng.IntN(2) == 0 {
			body = fmt.Sprintf(`{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":%s}]}`, model, 64+rng.IntN(449), msg)
		}
		e := est.Estimate(model, []byte(body))
		resp, err := client.Post(front+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		data, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d, err %v: %s", resp.StatusCode, err, data)
		}
		var doc struct {
			Usage struct {
				Prompt int64 `json:"prompt_tokens"`
				Total  int64 `json:"total_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(data, &doc); err != nil || doc.Usage.Total <= 0 {
			b.Fatalf("no usage in %s: %v", data, err)
		}
		ratios[model] = append(ratios[model], float64(e.Total())/float64(doc.Usage.Total))
		promptErr[model] = append(promptErr[model], abs(float64(e.Prompt-doc.Usage.Prompt))/float64(doc.Usage.Prompt))
	}
	b.StopTimer()
	for _, m := range models {
		if len(ratios[m]) == 0 {
			continue
		}
		short := strings.SplitN(m, "-", 2)[0]
		b.ReportMetric(quantile(ratios[m], 0.5), short+"-reserved/settled-p50")
		b.ReportMetric(quantile(ratios[m], 0.9), short+"-reserved/settled-p90")
		b.ReportMetric(quantile(promptErr[m], 0.5), short+"-prompt-err-p50")
		b.ReportMetric(quantile(promptErr[m], 0.9), short+"-prompt-err-p90")
	}
}

// quantile returns the q-quantile of vs (nearest rank); vs is sorted in place.
func quantile(vs []float64, q float64) float64 {
	slices.Sort(vs)
	i := int(q*float64(len(vs)-1) + 0.5)
	return vs[i]
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}
