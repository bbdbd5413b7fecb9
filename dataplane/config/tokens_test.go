package config

import (
	"bytes"
	"reflect"
	"testing"
	"time"
)

// tokenConfig returns validConfig with deferred admission on, every token
// limit set, the model overrides out of order, and token-weighted fair
// queuing.
func tokenConfig() *Config {
	c := validConfig()
	c.FairQueuing.Cost = CostTokens
	c.DeferredAdmission = &DeferredAdmission{
		TokenLimits: TokenLimits{
			PerAPIKey: &Limit{Tokens: 20000, Period: dur(time.Minute), Burst: 40000},
			PerUser:   &Limit{Tokens: 10000, Period: dur(time.Minute), Burst: 10000},
			PerTeam:   &Limit{Tokens: 50000, Period: dur(time.Minute), Burst: 50000},
			PerModel: &ModelLimits{
				Default: &Limit{Tokens: 100000, Period: dur(time.Minute), Burst: 100000},
				Overrides: []ModelOverride{
					{Model: "llama-70b", Limit: Limit{Tokens: 30000, Period: dur(time.Minute), Burst: 30000}},
					{Model: "gpt-small", Limit: Limit{Tokens: 500000, Period: dur(time.Minute), Burst: 500000}},
				},
			},
		},
		Estimation: DefaultTokenEstimation(),
		Bounds:     DefaultDeferredBounds(),
	}
	return c
}

func TestTokenConfigRoundTrips(t *testing.T) {
	c := tokenConfig()
	data, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"cost": "Tokens"`,
		`"deferredAdmission": {`,
		`"perAPIKey": {
        "tokens": 20000,
        "period": "1m0s",
        "burst": 40000
      }`,
		`"estimation": {
      "defaultMaxTokens": 1024,
      "includeUsage": true
    }`,
		`"bounds": {
      "maxHeld": 1024,
      "maxHeldPerTenant": 32,
      "maxWait": "10s"
    }`,
	} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("rendered config lacks %s:\n%s", want, data)
		}
	}
	got, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse(Marshal(c)) = %v", err)
	}
	if o := got.DeferredAdmission.TokenLimits.PerModel.Overrides; o[0].Model != "gpt-small" || o[1].Model != "llama-70b" {
		t.Errorf("model token overrides not sorted by model: %+v", o)
	}
	want := c.DeepCopy()
	want.normalize()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip changed the config:\n got %+v\nwant %+v", got.DeferredAdmission, want.DeferredAdmission)
	}
	if !got.FairQueuing.TokensCost() {
		t.Error("TokensCost() = false for cost Tokens")
	}

	// The same overrides in another order give the same bytes.
	r := tokenConfig()
	o := r.DeferredAdmission.TokenLimits.PerModel.Overrides
	o[0], o[1] = o[1], o[0]
	if b, err := Marshal(r); err != nil || !bytes.Equal(b, data) {
		t.Errorf("reordered model token overrides changed the bytes (err %v)", err)
	}
}

// TestTokenFieldsOffKeepBytes pins that a config without deferred admission
// and with the default cost encodes exactly as before these fields existed,
// so every existing ConfigMap keeps its bytes and hash.
func TestTokenFieldsOffKeepBytes(t *testing.T) {
	c := validConfig()
	data, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, absent := range []string{`"deferredAdmission"`, `"cost"`} {
		if bytes.Contains(data, []byte(absent)) {
			t.Errorf("a config without token fields renders %s:\n%s", absent, data)
		}
	}
	c.FairQueuing.Cost = ""
	if c.FairQueuing.TokensCost() {
		t.Error("TokensCost() = true for an empty cost")
	}
}

func TestTokenValidateNamesEveryBadField(t *testing.T) {
	tl := func(tokens int64, period time.Duration, burst int64) Limit {
		return Limit{Tokens: tokens, Period: dur(period), Burst: burst}
	}
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []string
	}{
		{"token limits", func(c *Config) {
			l := tl(0, 0, -1)
			c.DeferredAdmission.TokenLimits.PerAPIKey = &l
		}, []string{
			"deferredAdmission.tokenLimits.perAPIKey.tokens: must be >= 1, got 0",
			"deferredAdmission.tokenLimits.perAPIKey.period: must be > 0, got 0s",
			"deferredAdmission.tokenLimits.perAPIKey.burst: must be >= 1, got -1",
		}},
		{"empty perModel", func(c *Config) { c.DeferredAdmission.TokenLimits.PerModel = &ModelLimits{} }, []string{
			"deferredAdmission.tokenLimits.perModel: must set a default or at least one override, or be omitted",
		}},
		{"model overrides", func(c *Config) {
			c.DeferredAdmission.TokenLimits.PerModel.Overrides = []ModelOverride{
				{Model: "", Limit: tl(1, time.Second, 1)},
				{Model: "m", Limit: tl(1, time.Second, 1)},
				{Model: "m", Limit: tl(1, time.Second, 0)},
			}
		}, []string{
			`deferredAdmission.tokenLimits.perModel.overrides[0].model: must name a model, got ""`,
			`deferredAdmission.tokenLimits.perModel.overrides[2].model: duplicates deferredAdmission.tokenLimits.perModel.overrides[1] ("m")`,
			"deferredAdmission.tokenLimits.perModel.overrides[2].limit.burst: must be >= 1, got 0",
		}},
		{"estimation", func(c *Config) { c.DeferredAdmission.Estimation.DefaultMaxTokens = 0 }, []string{
			"deferredAdmission.estimation.defaultMaxTokens: must be >= 1, got 0",
		}},
		{"bounds out of range", func(c *Config) {
			c.DeferredAdmission.Bounds = DeferredBounds{MaxHeld: 0, MaxHeldPerTenant: -1, MaxWait: dur(0)}
		}, []string{
			"deferredAdmission.bounds.maxHeld: must be >= 1, got 0",
			"deferredAdmission.bounds.maxHeldPerTenant: must be >= 1, got -1",
			"deferredAdmission.bounds.maxWait: must be > 0, got 0s",
		}},
		{"unknown cost", func(c *Config) { c.FairQueuing.Cost = "Bytes" }, []string{
			`fairQueuing.cost: must be "Requests" or "Tokens", got "Bytes"`,
		}},
		{"token cost without deferred admission", func(c *Config) { c.DeferredAdmission = nil }, []string{
			`fairQueuing.cost: is "Tokens" but deferredAdmission is off: token-weighted fairness charges the reservation that deferred admission estimates`,
		}},
		{"token limit too slow for Redis", func(c *Config) {
			c.Store = redisConfig().Store
			c.DeferredAdmission.TokenLimits.PerUser = &Limit{Tokens: 1, Period: dur(24 * time.Hour), Burst: 1000}
		}, []string{"deferredAdmission.tokenLimits.perUser: takes 24000h0m0s to refill completely (burst x period / tokens), longer than the Redis store's"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tokenConfig()
			tt.mutate(c)
			wantValidateErrors(t, c, tt.want)
		})
	}
}

func TestTokenValidateAcceptsNearMisses(t *testing.T) {
	for name, mutate := range map[string]func(c *Config){
		"cost Requests without deferred admission": func(c *Config) { c.DeferredAdmission = nil; c.FairQueuing.Cost = CostRequests },
		"per-tenant holds equal to the total": func(c *Config) {
			c.DeferredAdmission.Bounds.MaxHeld, c.DeferredAdmission.Bounds.MaxHeldPerTenant = 1, 1
		},
		"overrides only":         func(c *Config) { c.DeferredAdmission.TokenLimits.PerModel.Default = nil },
		"no token limits at all": func(c *Config) { c.DeferredAdmission.TokenLimits = TokenLimits{} },
		"burst below tokens":     func(c *Config) { c.DeferredAdmission.TokenLimits.PerUser.Burst = 1 },
		"Redis with a day's token refill": func(c *Config) {
			c.Store = redisConfig().Store
			c.DeferredAdmission.TokenLimits.PerUser.Period = dur(24 * time.Hour)
		},
	} {
		c := tokenConfig()
		mutate(c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v, want nil", name, err)
		}
	}
}

func TestTokenDeepCopyIsIndependent(t *testing.T) {
	c := tokenConfig()
	d := c.DeepCopy()
	da := d.DeferredAdmission
	da.TokenLimits.PerAPIKey.Tokens = 7
	da.TokenLimits.PerUser.Burst = 7
	da.TokenLimits.PerTeam.Tokens = 7
	da.TokenLimits.PerModel.Default.Tokens = 7
	da.TokenLimits.PerModel.Overrides[0].Model = "changed"
	da.Bounds.MaxHeld = 7
	if !reflect.DeepEqual(c, tokenConfig()) {
		t.Error("mutating the copy changed the original")
	}
}
