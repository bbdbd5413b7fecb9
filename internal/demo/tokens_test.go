package demo

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/yaml"
	testingclock "k8s.io/utils/clock/testing"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/internal/fakeupstream"
	"github.com/fairqueue/fairqueue/internal/loadgen"
)

func TestOptionsDefaultsAndScenario(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
		check   func(t *testing.T, o Options)
	}{{
		name: "the default is the shares scenario",
		check: func(t *testing.T, o Options) {
			sc := o.scenario()
			if o.Scenario != ScenarioShares || sc.tokens || !reflect.DeepEqual(sc.tenants, Tenants) || sc.weightsAfter == nil {
				t.Errorf("scenario %q %+v, want shares with Tenants and a weight change", o.Scenario, sc)
			}
		},
	}, {
		name: "tokens scenario with its defaults",
		opts: Options{Scenario: ScenarioTokens},
		check: func(t *testing.T, o Options) {
			sc := o.scenario()
			if o.Cost != CostTokens || o.TokensPerPeriod != 20000 || !sc.tokens || sc.weightsAfter != nil ||
				!reflect.DeepEqual(sc.tenants, TokenTenants) || !reflect.DeepEqual(sc.weights, []float64{1, 1, 1}) {
				t.Errorf("options %+v scenario %+v, want cost Tokens, 20000 tokens, TokenTenants at weight 1 and no change", o, sc)
			}
		},
	}, {
		name: "negative control", opts: Options{Scenario: ScenarioTokens, Cost: CostRequests},
		check: func(t *testing.T, o Options) {
			if o.Cost != CostRequests {
				t.Errorf("cost %q, want Requests", o.Cost)
			}
		},
	},
		{name: "unknown scenario", opts: Options{Scenario: "bytes"}, wantErr: `scenario "bytes": give shares, tokens, bands or fleet`},
		{name: "unknown cost", opts: Options{Scenario: ScenarioTokens, Cost: "Bytes"}, wantErr: `cost "Bytes": give Tokens or Requests`},
		{name: "token limit below two large requests", opts: Options{Scenario: ScenarioTokens, TokensPerPeriod: 1000}, wantErr: "tokens per period 1000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.RepoDir = t.TempDir()
			err := o.defaults()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, o)
		})
	}
}

// TestTokenTenantsDiffer10x checks the scenario's premise: acme's requests
// carry prompts ten times larger than the others'.
func TestTokenTenantsDiffer10x(t *testing.T) {
	if TokenTenants[0].PromptBytes != 10*TokenTenants[1].PromptBytes || TokenTenants[1].PromptBytes != TokenTenants[2].PromptBytes {
		t.Errorf("prompt bytes %d, %d, %d: want the first ten times the others", TokenTenants[0].PromptBytes, TokenTenants[1].PromptBytes, TokenTenants[2].PromptBytes)
	}
	if !TokenTenants[2].Stream {
		t.Error("no tenant streams: the usage chunk path goes undemonstrated")
	}
	if reserve := TokenTenants[0].PromptBytes/4 + TokenTenants[0].MaxTokens; reserve > maxReservation {
		t.Errorf("acme reserves about %d tokens, above maxReservation %d", reserve, maxReservation)
	}
}

// tokenPolicy mirrors the FairQueuePolicy fields of issue #13 that the token
// scenario sets (as helper tapi's API types spell them: perModel holds
// tokens, period and burst like rateLimits.perModel), so a misspelt field
// fails here whether or not the API types have them yet.
type tokenPolicy struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		RateLimits struct {
			PerModel struct {
				Requests int64  `json:"requests"`
				Period   string `json:"period"`
				Burst    int64  `json:"burst"`
			} `json:"perModel"`
		} `json:"rateLimits"`
		FairQueuing struct {
			Enabled         bool              `json:"enabled"`
			TenantDimension string            `json:"tenantDimension"`
			DefaultWeight   int               `json:"defaultWeight"`
			Cost            string            `json:"cost"`
			Bounds          map[string]string `json:"bounds"`
		} `json:"fairQueuing"`
		DeferredAdmission struct {
			Enabled     bool `json:"enabled"`
			TokenLimits struct {
				PerAPIKey *tokenLimit `json:"perAPIKey"`
				PerUser   *tokenLimit `json:"perUser"`
				PerTeam   *tokenLimit `json:"perTeam"`
				PerModel  *struct {
					tokenLimit `json:",inline"`
					Overrides  []any `json:"overrides"`
				} `json:"perModel"`
			} `json:"tokenLimits"`
			Estimation struct {
				DefaultMaxTokens int64 `json:"defaultMaxTokens"`
				IncludeUsage     bool  `json:"includeUsage"`
			} `json:"estimation"`
			Bounds struct {
				MaxHeld          int32  `json:"maxHeld"`
				MaxHeldPerTenant int32  `json:"maxHeldPerTenant"`
				MaxWait          string `json:"maxWait"`
			} `json:"bounds"`
		} `json:"deferredAdmission"`
		Timeouts map[string]any      `json:"timeouts"`
		Backends []map[string]string `json:"backends"`
	} `json:"spec"`
}

type tokenLimit struct {
	Tokens int64  `json:"tokens"`
	Period string `json:"period"`
	Burst  int64  `json:"burst"`
}

func TestTokenManifests(t *testing.T) {
	for _, cost := range []string{CostTokens, CostRequests} {
		t.Run(cost, func(t *testing.T) {
			doc := tokenManifests("http://127.0.0.1:8000", 20000, cost)
			var p tokenPolicy
			if err := yaml.UnmarshalStrict(doc, &p); err != nil {
				t.Fatalf("the token policy does not decode strictly into the design's fields: %v\n%s", err, doc)
			}
			fq, da := p.Spec.FairQueuing, p.Spec.DeferredAdmission
			if p.Kind != "FairQueuePolicy" || p.Metadata.Name != PolicyName || !fq.Enabled || fq.TenantDimension != "apiKey" || fq.Cost != cost {
				t.Errorf("policy %+v, want fair queuing on API keys with cost %s", p, cost)
			}
			if m := da.TokenLimits.PerModel; !da.Enabled || m == nil || m.tokenLimit != (tokenLimit{Tokens: 20000, Period: "10s", Burst: 5000}) {
				t.Errorf("deferred admission %+v, want enabled with a model limit of 20000 tokens per 10s, burst 5000", da)
			}
			if !da.Estimation.IncludeUsage || da.Bounds.MaxWait != "10s" || da.Bounds.MaxHeldPerTenant != 32 {
				t.Errorf("estimation %+v bounds %+v, want includeUsage, maxWait 10s, 32 held per tenant", da.Estimation, da.Bounds)
			}
			// The request limit must not bind: it is far above what the
			// tenants offer together.
			offered := 0.0
			for _, tt := range TokenTenants {
				offered += tt.Rate
			}
			if float64(p.Spec.RateLimits.PerModel.Requests) < 2*offered {
				t.Errorf("request limit %d/s per replica binds against %.0f/s offered", p.Spec.RateLimits.PerModel.Requests, offered)
			}
			// Once the API types carry the token fields, the policy must
			// decode into them strictly too.
			spec, _ := reflect.TypeFor[fqv1alpha1.FairQueuePolicySpec]().FieldByName("DeferredAdmission")
			if spec.Name == "" {
				t.Skip("api/v1alpha1 has no spec.deferredAdmission yet (issue #13, helper tapi): checked against the design's fields only")
			}
			var typed fqv1alpha1.FairQueuePolicy
			if err := yaml.UnmarshalStrict(doc, &typed); err != nil {
				t.Errorf("the token policy does not decode strictly into the API types: %v", err)
			}
		})
	}
}

func TestObserverCountsTokens(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Unix(1000, 0))
	var next *http.Response
	obs := NewObserver(roundTripFunc(func(*http.Request) (*http.Response, error) { return next, nil }), clk, []string{"key-a", "key-b"})
	send := func(key string, readAll bool) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/v1/chat/completions", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := obs.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if readAll {
			_, _ = io.Copy(io.Discard, resp.Body) // an in-memory body
		}
		_ = resp.Body.Close() // an in-memory body
	}
	json := func(status int, body string, header ...string) *http.Response {
		return answer(status, body, append([]string{"Content-Type", "application/json"}, header...)...)
	}
	next = json(200, `{"usage":{"prompt_tokens":1000,"completion_tokens":50,"total_tokens":1050}}`, "x-fair-queue-deferred-ms", "900")
	send("key-a", true)
	next = answer(200, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":null}\n\n"+
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":50,\"total_tokens\":150}}\n\ndata: [DONE]\n\n",
		"Content-Type", "text/event-stream")
	send("key-b", true)
	// A stream the client gave up on before the usage chunk settles nothing
	// the client can see.
	next = answer(200, "data: {\"choices\":[],\"usage\":null}\n\n", "Content-Type", "text/event-stream")
	send("key-b", false)
	// A refusal's body is never counted as tokens, and a token limit's
	// refusal counts under its limit type.
	next = json(429, `{"error":{"details":{"limit_type":"model_tokens","retry_after_ms":800}},"usage":{"total_tokens":5}}`)
	send("key-a", true)

	got := obs.Window(0, Tick)
	if got[0].Tokens != 1050 || got[1].Tokens != 150 {
		t.Errorf("tokens %d and %d, want 1050 and 150", got[0].Tokens, got[1].Tokens)
	}
	if len(got[0].Held) != 1 || got[0].Held[0] != 900 || len(got[1].Held) != 0 {
		t.Errorf("held samples %v and %v, want [900] and none", got[0].Held, got[1].Held)
	}
	if n := got[0].Refused[reasonIndex("model_tokens")]; n != 1 {
		t.Errorf("model_tokens refusals %d, want 1 (refusals %v)", n, got[0].Refused)
	}
	if tokens := obs.Tokens(); len(tokens[0]) != 1 || tokens[0][0] != 1050 || tokens[1][0] != 150 {
		t.Errorf("Tokens() = %v, want [[1050] [150]]", tokens)
	}
}

func TestTokenReportAndChart(t *testing.T) {
	// acme settles one 1050-token answer a second, globex and initech seven
	// 150-token answers: equal tokens, a 1:7:7 request split.
	ticks := 100 // 10s
	series := func(every int, n uint64) []uint64 {
		s := make([]uint64, ticks)
		for k := 0; k < ticks; k += every {
			s[k] = n
		}
		return s
	}
	r := &Result{
		Scenario: ScenarioTokens, Cost: CostTokens, Tenants: TokenTenants, Duration: 10 * time.Second, PatchStart: -1,
		Admitted: [][]uint64{series(10, 1), series(10, 7), series(10, 7)},
		Tokens:   [][]uint64{series(10, 1050), series(10, 1050), series(10, 1050)},
		Summary: &loadgen.Summary{Tenants: []loadgen.TenantSummary{
			{Name: "acme", Sent: 60, Completed: 60, Admitted: 10, TokensSettled: 10500},
			{Name: "globex", Sent: 300, Completed: 300, Admitted: 70, TokensSettled: 10500},
			{Name: "initech", Sent: 300, Completed: 300, Admitted: 70, TokensSettled: 10500},
		}},
		DataPlanes: []DataPlaneCounts{{TokensSettled: 15000}, {TokensSettled: 16500}},
	}
	shares := r.TokenShares(Settle, r.Duration)
	for i, s := range shares {
		if math.Abs(s-1.0/3) > 1e-9 {
			t.Errorf("token share of %s = %v, want 1/3", TokenTenants[i].Name, s)
		}
	}
	var out bytes.Buffer
	r.WriteReport(&out)
	for _, want := range []string{
		"Settled tokens in the steady window 3s-10s (fairQueuing.cost Tokens)",
		"acme          1050      33.3%     33.3%         1.0           6.7%",
		"globex        1050      33.3%     33.3%         7.0          46.7%",
		"worst deviation from the weighted token share: 0.0%",
		"the answers reported 31500; the data planes settled 31500 on the model token limit",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	c := r.Chart()
	if len(c.Tenants) != 3 || len(c.Tenants[0].Share) != 10 || c.Tenants[0].Weighted[0] != 1.0/3 || !strings.Contains(c.Title, "tokens") {
		t.Errorf("chart %q with %d tenants, want token shares of 3 tenants over 10s at weighted 1/3", c.Title, len(c.Tenants))
	}
}

// TestTokenLoadAgainstTheFakeUpstream sends the token scenario's requests
// straight to the fake upstream through the observer: the live table's
// tokens and the load generator's settled tokens agree, and acme's requests
// count ten times the prompt tokens of the others'.
func TestTokenLoadAgainstTheFakeUpstream(t *testing.T) {
	up := httptest.NewServer(fakeupstream.New(fakeupstream.Options{CompletionFraction: 0.5}))
	defer up.Close()
	keys := make([]string, len(TokenTenants))
	tenants := make([]loadgen.Tenant, len(TokenTenants))
	for i, tt := range TokenTenants {
		keys[i] = tt.APIKey
		tenants[i] = loadgen.Tenant{Name: tt.Name, Rate: 1000, APIKey: tt.APIKey, PromptBytes: tt.PromptBytes, MaxTokens: tt.MaxTokens, Stream: tt.Stream}
	}
	transport := &http.Transport{Proxy: nil}
	defer transport.CloseIdleConnections()
	obs := NewObserver(transport, clk, keys)
	s, err := loadgen.Run(context.Background(), loadgen.Config{Targets: []string{up.URL}, Tenants: tenants, Duration: 3 * time.Millisecond,
		Client: &http.Client{Transport: obs}})
	if err != nil {
		t.Fatal(err)
	}
	window := obs.Window(0, time.Hour)
	for i, ts := range s.Tenants {
		if ts.Admitted != 3 || ts.AdmittedWithoutUsage != 0 || ts.TokensSettled == 0 {
			t.Errorf("%s: admitted %d, %d without usage, %d tokens; want 3 admitted, all with usage", ts.Name, ts.Admitted, ts.AdmittedWithoutUsage, ts.TokensSettled)
		}
		if window[i].Tokens != ts.TokensSettled {
			t.Errorf("%s: the observer counted %d tokens, the load generator %d", ts.Name, window[i].Tokens, ts.TokensSettled)
		}
		if want := uint64(3 * TokenTenants[i].MaxTokens / 2); ts.CompletionTokens != want {
			t.Errorf("%s: %d completion tokens, want %d (half of max_tokens, 3 answers)", ts.Name, ts.CompletionTokens, want)
		}
	}
	if acme, globex := s.Tenants[0].PromptTokens, s.Tenants[1].PromptTokens; acme != 10*globex {
		t.Errorf("acme's prompts counted %d tokens, want 10x globex's %d", acme, globex)
	}
}
