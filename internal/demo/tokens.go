package demo

import (
	"fmt"
	"time"
)

// Scenarios of Options.Scenario.
const (
	// ScenarioShares is the default scenario: a request limit, three
	// tenants at weights 1:1:3, a weight change midway.
	ScenarioShares = "shares"
	// ScenarioTokens limits the model in tokens, with deferred admission
	// and token-weighted fair queuing, for three tenants at equal weight,
	// one of which sends prompts ten times larger.
	ScenarioTokens = "tokens"
	// ScenarioFleet runs three replicas in process sharing one model limit
	// in Redis, with skewed routing and a Redis outage (see fleet.go).
	ScenarioFleet = "fleet"
	// ScenarioBands puts an interactive tenant in a priority band above a
	// flooding batch tenant (see bands.go).
	ScenarioBands = "bands"
)

// Costs of Options.Cost, the token scenario's fairQueuing.cost.
const (
	// CostTokens charges a tenant's virtual time by its tokens.
	CostTokens = "Tokens"
	// CostRequests charges one per request: the negative control, under
	// which the tenant with large prompts gets more tokens.
	CostRequests = "Requests"
)

// TokenPeriod is the period of the token scenario's model token limit.
const TokenPeriod = 10 * time.Second

// TokenTenants are the token scenario's clients, all at weight 1: acme sends
// prompts of 4000 bytes, ten times those of globex and initech, and initech
// streams its answers. Each offers several times its fair share of the
// default capacity (2 x 20000 tokens per 10s), so all stay backlogged.
var TokenTenants = []Tenant{
	{Name: "acme", APIKey: "sk-demo-acme-00000000000000000000", Rate: 6, PromptBytes: 4000, MaxTokens: 100},
	{Name: "globex", APIKey: "sk-demo-globex-000000000000000000", Rate: 30, PromptBytes: 400, MaxTokens: 100},
	{Name: "initech", APIKey: "sk-demo-initech-00000000000000000", Rate: 30, PromptBytes: 400, MaxTokens: 100, Stream: true},
}

// maxReservation is about the largest reservation of a token scenario
// request (acme's 4000-byte prompt and 100 output tokens), so a limit below
// twice it is refused as too small to share.
const maxReservation = 1200

// completionFraction is the share of max_tokens the fake upstream's answers
// use in the token scenario, so reservations (which count the whole cap)
// are settled down to the real usage.
const completionFraction = "0.5"

// scenario is what differs between the scenarios.
type scenario struct {
	tenants []Tenant
	// weights hold from the start; weightsAfter once the Secret is patched,
	// nil when the scenario changes no weight.
	weights, weightsAfter []float64
	// tokens makes the shares those of settled tokens, not of requests.
	tokens bool
	// upstreamArgs are extra flags of the fake upstream.
	upstreamArgs []string
	// bands is the bands scenario, whose shares are expected from the
	// bands, not the weights; capacity is its model limit of all replicas.
	bands    bool
	capacity float64
}

// scenario returns the scenario o names.
func (o *Options) scenario() scenario {
	if o.Scenario == ScenarioTokens {
		w := make([]float64, len(TokenTenants))
		for i := range w {
			w[i] = 1
		}
		return scenario{tenants: TokenTenants, weights: w, tokens: true,
			upstreamArgs: []string{"--completion-fraction", completionFraction, "--chunk-interval", "2ms"}}
	}
	if o.Scenario == ScenarioBands {
		replicas := Replicas
		if o.Standalone {
			replicas = 1
		}
		capacity := float64(o.PerModel * replicas)
		tenants := bandTenants(capacity, time.Duration(float64(o.Duration)*FloodAt).Round(time.Second))
		return scenario{tenants: tenants, weights: []float64{1, 1}, bands: true, capacity: capacity}
	}
	return scenario{tenants: Tenants, weights: WeightsBefore, weightsAfter: WeightsAfter}
}

// tokenManifests returns the token scenario's FairQueuePolicy: the model is
// limited to tokensPerPeriod tokens per TokenPeriod per replica, with a
// quarter of that as burst; a request the token budget refuses is held
// (deferred admission) until the bucket holds its reservation, for at most
// 10s; fair queuing with API keys as tenants, all at weight 1, charges each
// tenant cost. The request limit is far above what the tenants send, so
// only tokens bind.
func tokenManifests(backendURL string, tokensPerPeriod int, cost string) []byte {
	return fmt.Appendf(nil, `apiVersion: fairqueue.dev/v1alpha1
kind: FairQueuePolicy
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  rateLimits:
    perModel: {requests: 500, period: 1s, burst: 500}
  fairQueuing:
    enabled: true
    tenantDimension: apiKey
    defaultWeight: 1
    cost: %[3]s
    bounds: {maxQueueDepthPerTenant: 32, maxInFlight: 8, maxWait: 5s}
  deferredAdmission:
    enabled: true
    tokenLimits:
      perModel: {tokens: %[4]d, period: %[5]s, burst: %[6]d}
    estimation: {defaultMaxTokens: 256, includeUsage: true}
    bounds: {maxHeld: 256, maxHeldPerTenant: 32, maxWait: 10s}
  timeouts:
    request:
      default: {total: 30s}
  backends:
  - name: fakeupstream
    url: %[7]s
`, PolicyName, Namespace, cost, tokensPerPeriod, TokenPeriod, tokensPerPeriod/4, backendURL)
}
