package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/identity"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func h(v string) string { return identity.Hash(testKey, v) }

func dur(d time.Duration) Duration { return Duration{d} }

// validConfig returns a config that sets every field, with lists deliberately
// out of order.
func validConfig() *Config {
	return &Config{
		APIVersion: APIVersion,
		Kind:       Kind,
		Policy:     PolicyRef{Namespace: "team-a", Name: "llm", Generation: 3},
		HashKeySecret: HashKeySecret{
			Namespace: "team-a", Name: "llm-hash-key", Key: "key",
			Fingerprint: KeyFingerprint(testKey),
		},
		Identity: Identity{
			APIKeyHeaders: []string{"Authorization", "x-api-key"},
			UserHeader:    "x-user", TeamHeader: "x-team", NoTeamValue: "none",
			TrustHeaders: true, ModelHeader: "x-model",
			KeyRegistry: &KeyRegistry{Enforce: true, Entries: []KeyRegistryEntry{
				{APIKeyHash: h("key-2"), UserHash: h("bob")},
				{APIKeyHash: h("key-1"), UserHash: h("alice"), TeamHash: h("research")},
			}},
		},
		RateLimits: RateLimits{
			Global:     &Limit{Requests: 1000, Period: dur(time.Second), Burst: 2000},
			PerClient:  &Limit{Requests: 100, Period: dur(time.Second), Burst: 100},
			PerAPIKey:  &Limit{Requests: 10, Period: dur(time.Second), Burst: 10},
			PerUser:    &Limit{Requests: 10, Period: dur(time.Second), Burst: 10},
			PerTeam:    &Limit{Requests: 50, Period: dur(time.Minute), Burst: 50},
			PerBackend: &Limit{Requests: 200, Period: dur(time.Second), Burst: 200},
			PerModel: &ModelLimits{
				Default: &Limit{Requests: 5, Period: dur(time.Second), Burst: 5},
				Overrides: []ModelOverride{
					{Model: "llama-70b", Limit: Limit{Requests: 1, Period: dur(time.Second), Burst: 1}},
					{Model: "gpt-small", Limit: Limit{Requests: 20, Period: dur(time.Second), Burst: 40}},
				},
			},
		},
		FairQueuing: FairQueuing{
			Enabled: true, TenantDimension: identity.DimensionUser, DefaultWeight: 1,
			Weights: []Weight{{TenantHash: h("bob"), Weight: 1}, {TenantHash: h("alice"), Weight: 3, Band: "interactive"}},
			Bounds:  DefaultBounds(),
			// Highest first: the order is meaning, not to be sorted.
			Bands:             []Band{{Name: "interactive"}, {Name: "standard"}, {Name: "batch", MinShare: 0.05}},
			DefaultBand:       "standard",
			RequestBandHeader: "x-fair-queue-band",
		},
		Timeouts: Timeouts{
			RequestTotal: dur(60 * time.Second),
			Models:       []ModelTimeout{{Model: "llama-70b", Total: dur(2 * time.Minute)}, {Model: "gpt-small", Total: dur(10 * time.Second)}},
		},
		Backends: []Backend{{Name: "vllm-b", URL: "http://vllm-b:8000", Weight: 1}, {Name: "vllm-a", URL: "https://vllm-a.example:8443/v1", Weight: 3}},
	}
}

func TestValidateAcceptsValidConfigs(t *testing.T) {
	minimal := &Config{
		APIVersion:    APIVersion,
		Kind:          Kind,
		Policy:        PolicyRef{Namespace: "ns", Name: "p"},
		HashKeySecret: HashKeySecret{Namespace: "ns", Name: "p-hash-key", Key: "key", Fingerprint: KeyFingerprint(testKey)},
		Identity:      Identity{APIKeyHeaders: []string{"Authorization"}},
		FairQueuing:   FairQueuing{TenantDimension: identity.DimensionAPIKey, DefaultWeight: 1, Bounds: DefaultBounds()},
	}
	for name, c := range map[string]*Config{"full": validConfig(), "minimal": minimal} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v, want nil", name, err)
		}
	}
}

func TestValidateNamesEveryBadField(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []string // substrings, each must appear in the joined error
	}{
		{"apiVersion", func(c *Config) { c.APIVersion = "v1" }, []string{`apiVersion: must be "fairqueue.dev/v1alpha1", got "v1"`}},
		{"kind", func(c *Config) { c.Kind = "ConfigMap" }, []string{`kind: must be "DataPlaneConfig", got "ConfigMap"`}},
		{"policy fields", func(c *Config) { c.Policy = PolicyRef{Namespace: "", Name: "Bad_Name", Generation: -1} }, []string{
			"policy.namespace: must not be empty", `policy.name: must be a lowercase DNS name, got "Bad_Name"`, "policy.generation: must be >= 0, got -1",
		}},
		{"hash key secret", func(c *Config) {
			c.HashKeySecret = HashKeySecret{Namespace: "ns", Name: "", Key: "", Fingerprint: "xyz"}
		}, []string{
			"hashKeySecret.name: must not be empty", "hashKeySecret.key: must name", `hashKeySecret.fingerprint: must be 16 lowercase hex digits`,
		}},
		{"no api key headers", func(c *Config) { c.Identity.APIKeyHeaders = nil }, []string{"identity.apiKeyHeaders: must list at least one header"}},
		{"bad and duplicate api key header", func(c *Config) { c.Identity.APIKeyHeaders = []string{"x-api-key", "bad header", "X-API-Key"} }, []string{
			`identity.apiKeyHeaders[1]: must be a header name`, `identity.apiKeyHeaders[2]: duplicates identity.apiKeyHeaders[0] ("X-API-Key")`,
		}},
		{"bad identity headers", func(c *Config) {
			c.Identity.UserHeader, c.Identity.TeamHeader, c.Identity.ModelHeader = "x:user", "x team", "x\nmodel"
		}, []string{"identity.userHeader: must be a header name", "identity.teamHeader: must be a header name", "identity.modelHeader: must be a header name"}},
		{"bad client deadline header", func(c *Config) { c.Timeouts.ClientDeadlineHeader = "x deadline" }, []string{
			"timeouts.clientDeadlineHeader: must be a header name",
		}},
		{"registry entries", func(c *Config) {
			c.Identity.KeyRegistry.Entries = []KeyRegistryEntry{
				{APIKeyHash: "sk-raw-key", UserHash: "alice", TeamHash: strings.ToUpper(h("t"))},
				{APIKeyHash: h("k")}, {APIKeyHash: h("k")},
			}
		}, []string{
			"identity.keyRegistry.entries[0].apiKeyHash: must be a 64-digit lowercase hex HMAC-SHA256, got a value of 10 characters",
			"identity.keyRegistry.entries[0].userHash: must be a 64-digit", "identity.keyRegistry.entries[0].teamHash: must be a 64-digit",
			"identity.keyRegistry.entries[2].apiKeyHash: duplicates identity.keyRegistry.entries[1]",
		}},
		{"limit fields", func(c *Config) { c.RateLimits.Global = &Limit{Requests: 0, Period: dur(-time.Second), Burst: 0} }, []string{
			"rateLimits.global.requests: must be >= 1, got 0", "rateLimits.global.period: must be > 0, got -1s", "rateLimits.global.burst: must be >= 1, got 0",
		}},
		{"every limit dimension is checked", func(c *Config) {
			bad := &Limit{Requests: 1, Period: dur(time.Second)}
			rl := &c.RateLimits
			rl.PerClient, rl.PerAPIKey, rl.PerUser, rl.PerTeam, rl.PerBackend = bad, bad, bad, bad, bad
			rl.PerModel.Default = bad
		}, []string{
			"rateLimits.perClient.burst", "rateLimits.perAPIKey.burst", "rateLimits.perUser.burst",
			"rateLimits.perTeam.burst", "rateLimits.perBackend.burst", "rateLimits.perModel.default.burst",
		}},
		{"empty per-model limits", func(c *Config) { c.RateLimits.PerModel = &ModelLimits{} }, []string{
			"rateLimits.perModel: must set a default or at least one override",
		}},
		{"model overrides", func(c *Config) {
			c.RateLimits.PerModel.Overrides = []ModelOverride{
				{Model: "", Limit: Limit{Requests: 1, Period: dur(time.Second), Burst: 1}},
				{Model: "m", Limit: Limit{Requests: 1, Period: dur(time.Second), Burst: 1}},
				{Model: "m", Limit: Limit{Requests: -1, Period: dur(time.Second), Burst: 1}},
			}
		}, []string{
			`rateLimits.perModel.overrides[0].model: must name a model, got ""`,
			`rateLimits.perModel.overrides[2].model: duplicates rateLimits.perModel.overrides[1] ("m")`,
			"rateLimits.perModel.overrides[2].limit.requests: must be >= 1, got -1",
		}},
		{"unknown-model action", func(c *Config) { c.RateLimits.PerModel.UnknownModel = UnknownModel{Action: "Skip"} }, []string{
			`rateLimits.perModel.unknownModel.action: must be "Refuse" or "Charge", got "Skip"`,
		}},
		{"unknown model refused with a chargeAs", func(c *Config) {
			c.RateLimits.PerModel.UnknownModel = UnknownModel{ChargeAs: "m"}
		}, []string{`rateLimits.perModel.unknownModel.chargeAs: is set but action is "Refuse"`}},
		{"unknown model charged without chargeAs", func(c *Config) {
			c.RateLimits.PerModel.UnknownModel = UnknownModel{Action: UnknownModelCharge}
		}, []string{`rateLimits.perModel.unknownModel.chargeAs: must name a model, got ""`}},
		{"unknown model charged to a model without a limit", func(c *Config) {
			c.RateLimits.PerModel = &ModelLimits{
				Overrides:    []ModelOverride{{Model: "big", Limit: Limit{Requests: 1, Period: dur(time.Second), Burst: 1}}},
				UnknownModel: UnknownModel{Action: UnknownModelCharge, ChargeAs: "small"},
			}
		}, []string{`rateLimits.perModel.unknownModel.chargeAs: names "small", which has no limit`}},
		{"tenant dimension", func(c *Config) { c.FairQueuing.TenantDimension = "org" }, []string{
			`fairQueuing.tenantDimension: must be one of "user", "apiKey" or "team", got "org"`,
		}},
		{"default weight", func(c *Config) { c.FairQueuing.DefaultWeight = 0 }, []string{"fairQueuing.defaultWeight: must be in [1, 1000], got 0"}},
		{"weights", func(c *Config) {
			c.FairQueuing.Weights = []Weight{{TenantHash: "alice", Weight: 1}, {TenantHash: h("b"), Weight: 1001}, {TenantHash: h("b"), Weight: 2}}
		}, []string{
			"fairQueuing.weights[0].tenantHash: must be a 64-digit lowercase hex HMAC-SHA256, got a value of 5 characters",
			"fairQueuing.weights[1].weight: must be in [1, 1000], got 1001",
			"fairQueuing.weights[2].tenantHash: duplicates fairQueuing.weights[1]",
		}},
		{"bands", func(c *Config) {
			c.FairQueuing.Bands = []Band{{Name: "interactive"}, {Name: ""}, {Name: "interactive", MinShare: 1}, {Name: "batch", MinShare: -0.1}, {Name: "nan", MinShare: math.NaN()}}
			c.FairQueuing.DefaultBand = "standard"
			c.FairQueuing.RequestBandHeader = "x band"
			c.FairQueuing.Weights[0].Band = "gold"
			c.FairQueuing.Weights[1].Band = ""
		}, []string{
			`fairQueuing.bands[1].name: must not be empty`,
			`fairQueuing.bands[2].name: duplicates fairQueuing.bands[0] ("interactive")`,
			`fairQueuing.bands[2].minShare: must be in [0, 1), got 1`,
			`fairQueuing.bands[3].minShare: must be in [0, 1), got -0.1`,
			`fairQueuing.bands[4].minShare: must be in [0, 1), got NaN`,
			`fairQueuing.bands: minShare must sum to less than 1, got NaN`,
			`fairQueuing.defaultBand: names band "standard", which is not in fairQueuing.bands`,
			`fairQueuing.requestBandHeader: must be a header name`,
			`fairQueuing.weights[0].band: names band "gold", which is not in fairQueuing.bands`,
		}},
		{"more than MaxBands bands, with shares summing to 1", func(c *Config) {
			c.FairQueuing.Bands = nil
			for i := range MaxBands + 1 {
				c.FairQueuing.Bands = append(c.FairQueuing.Bands, Band{Name: fmt.Sprintf("b%d", i), MinShare: 0.125})
			}
			c.FairQueuing.DefaultBand, c.FairQueuing.Weights[1].Band = "b0", "b8"
		}, []string{"fairQueuing.bands: must list at most 8 bands, got 9", "fairQueuing.bands: minShare must sum to less than 1, got 1.125"}},
		{"bands without a default band", func(c *Config) { c.FairQueuing.DefaultBand = "" }, []string{
			"fairQueuing.defaultBand: must name the band of tenants without one when bands are set",
		}},
		{"band references without bands", func(c *Config) {
			c.FairQueuing.Bands = nil
			c.FairQueuing.DefaultBand, c.FairQueuing.Weights[0].Band = "a", "b"
		}, []string{
			`fairQueuing.defaultBand: names band "a" but fairQueuing.bands is empty`,
			`fairQueuing.weights[0].band: names band "b" but fairQueuing.bands is empty`,
			`fairQueuing.weights[1].band: names band "interactive" but fairQueuing.bands is empty`,
		}},
		{"bounds out of range", func(c *Config) {
			c.FairQueuing.Bounds = Bounds{MaxQueueDepthPerTenant: 0, MaxTotalQueued: 0, MaxTenants: -1, MaxInFlight: 0, MaxWait: dur(0)}
		}, []string{
			"fairQueuing.bounds.maxQueueDepthPerTenant: must be >= 1, got 0",
			"fairQueuing.bounds.maxTotalQueued: must be >= 1, got 0",
			"fairQueuing.bounds.maxTenants: must be >= 1, got -1",
			"fairQueuing.bounds.maxInFlight: must be >= 1, got 0",
			"fairQueuing.bounds.maxWait: must be > 0, got 0s",
		}},
		{"timeouts", func(c *Config) {
			c.Timeouts = Timeouts{RequestTotal: dur(-time.Second), Models: []ModelTimeout{{Model: "m", Total: dur(0)}, {Model: "m", Total: dur(time.Second)}}}
		}, []string{
			"timeouts.requestTotal: must be >= 0 (0 means no total timeout), got -1s",
			"timeouts.models[0].total: must be > 0, got 0s",
			`timeouts.models[1].model: duplicates timeouts.models[0] ("m")`,
		}},
		{"backends", func(c *Config) {
			c.Backends = []Backend{
				{Name: "", URL: "ftp://a", Weight: 1},
				{Name: "b", URL: "http://", Weight: 1},
				{Name: "b", URL: "http://b", Weight: 1},
				{Name: "c", URL: "http://c", Weight: 0},
				{Name: "d", URL: "://", Weight: 1001},
			}
		}, []string{
			`backends[0].name: must not be empty`, `backends[0].url: scheme must be http or https, got "ftp"`,
			`backends[1].url: must have a host`, `backends[2].name: duplicates backends[1] ("b")`,
			`backends[3].weight: must be in [1, 1000], got 0`,
			`backends[4].url: must be an absolute http or https URL`, `backends[4].weight: must be in [1, 1000], got 1001`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(c)
			wantValidateErrors(t, c, tt.want)
			if _, err := Marshal(c); err == nil {
				t.Error("Marshal of an invalid config succeeded; it must refuse to render")
			}
		})
	}
}

// wantValidateErrors checks that c.Validate reports exactly the errors in
// want, one a line, each found by substring.
func wantValidateErrors(t *testing.T, c *Config, want []string) {
	t.Helper()
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want an error")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not contain %q; got:\n%v", w, err)
		}
	}
	if got := strings.Count(err.Error(), "\n") + 1; got != len(want) {
		t.Errorf("got %d errors, want %d:\n%v", got, len(want), err)
	}
}

func TestValidateNeverEchoesRawIdentities(t *testing.T) {
	c := validConfig()
	c.FairQueuing.Weights = []Weight{{TenantHash: "sk-live-secret", Weight: 1}}
	c.Identity.KeyRegistry.Entries = []KeyRegistryEntry{{APIKeyHash: "sk-live-secret", UserHash: "alice@example.com"}}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want an error")
	}
	for _, raw := range []string{"sk-live-secret", "alice@example.com"} {
		if strings.Contains(err.Error(), raw) {
			t.Errorf("error echoes the raw value %q: %v", raw, err)
		}
	}
}

func TestParseIsStrict(t *testing.T) {
	valid, err := Marshal(validConfig())
	if err != nil {
		t.Fatal(err)
	}
	replace := func(from, to string) []byte {
		if !bytes.Contains(valid, []byte(from)) {
			t.Fatalf("test setup: %q not in the marshalled config", from)
		}
		return bytes.Replace(valid, []byte(from), []byte(to), 1)
	}
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"unknown top-level field", replace(`"kind": "DataPlaneConfig",`, `"kind": "DataPlaneConfig", "extra": 1,`), `unknown field "extra"`},
		{"unknown nested field", replace(`"maxInFlight": 8,`, `"maxInFlight": 8, "maxInflight": 9,`), `unknown field "fairQueuing.bounds.maxInflight"`},
		{"duplicate field", replace(`"maxInFlight": 8,`, `"maxInFlight": 8, "maxInFlight": 9,`), `duplicate field "fairQueuing.bounds.maxInFlight"`},
		{"trailing data", append(bytes.Clone(valid), []byte(`{}`)...), "after top-level value"},
		{"wrong type names the field", replace(`"maxInFlight": 8`, `"maxInFlight": "8"`), "fairQueuing.bounds.maxInFlight"},
		{"bad duration", replace(`"maxWait": "5s"`, `"maxWait": "5 seconds"`), `invalid duration "5 seconds"`},
		{"duration as number", replace(`"maxWait": "5s"`, `"maxWait": 5`), `duration must be a string`},
		{"bad value names the field", replace(`"maxInFlight": 8`, `"maxInFlight": 0`), "fairQueuing.bounds.maxInFlight: must be >= 1, got 0"},
		{"not JSON", []byte("apiVersion: v1"), "decoding DataPlaneConfig"},
		{"empty", nil, "decoding DataPlaneConfig"},
		{"too large", append(bytes.Clone(valid), bytes.Repeat([]byte(" "), MaxSize)...), "larger than the 1048576 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(tt.data)
			if err == nil {
				t.Fatalf("Parse() = %+v, nil; want an error containing %q", c, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse() error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestMarshalIsCanonical(t *testing.T) {
	c := validConfig()
	before := c.DeepCopy()
	a, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, before) {
		t.Error("Marshal modified its argument")
	}
	if !bytes.HasSuffix(a, []byte("}\n")) {
		t.Errorf("canonical form must end in a newline: %q", a[len(a)-5:])
	}

	// The same content with every list in another order gives the same bytes.
	r := validConfig()
	reg := r.Identity.KeyRegistry.Entries
	reg[0], reg[1] = reg[1], reg[0]
	w := r.FairQueuing.Weights
	w[0], w[1] = w[1], w[0]
	o := r.RateLimits.PerModel.Overrides
	o[0], o[1] = o[1], o[0]
	m := r.Timeouts.Models
	m[0], m[1] = m[1], m[0]
	b, err := Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("reordered lists changed the bytes:\n%s\nvs\n%s", a, b)
	}
	if Hash(a) != Hash(b) {
		t.Error("equal bytes must hash equal")
	}

	// Backends keep the policy's order: it is not a set.
	var doc struct{ Backends []Backend }
	if err := json.Unmarshal(a, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Backends[0].Name != "vllm-b" {
		t.Errorf("backends were reordered: %+v", doc.Backends)
	}

	// Sorted lists come out sorted.
	parsed, err := Parse(a)
	if err != nil {
		t.Fatalf("Parse(Marshal(c)) = %v", err)
	}
	if ws := parsed.FairQueuing.Weights; ws[0].TenantHash > ws[1].TenantHash {
		t.Errorf("weights not sorted by hash: %+v", ws)
	}
}

func TestRoundTrip(t *testing.T) {
	for name, c := range map[string]*Config{"full": validConfig()} {
		data, err := Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Parse(data)
		if err != nil {
			t.Fatalf("%s: Parse(Marshal(c)) = %v", name, err)
		}
		want := c.DeepCopy()
		want.normalize()
		if !reflect.DeepEqual(p, want) {
			t.Errorf("%s: round trip changed the config:\n got %+v\nwant %+v", name, p, want)
		}
		again, err := Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, again) {
			t.Errorf("%s: Marshal(Parse(b)) != b", name)
		}
	}
}

func TestHash(t *testing.T) {
	a := Hash([]byte("a"))
	if len(a) != 16 {
		t.Errorf("Hash length = %d, want 16", len(a))
	}
	// sha256("a") = ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb
	if a != "ca978112ca1bbdca" {
		t.Errorf("Hash(a) = %s", a)
	}
	if Hash([]byte("b")) == a {
		t.Error("different content must hash differently")
	}
}

func TestKeyFingerprint(t *testing.T) {
	fp := KeyFingerprint(testKey)
	if len(fp) != 16 || fp != identity.Hash(testKey, fingerprintMessage)[:16] {
		t.Errorf("KeyFingerprint = %q", fp)
	}
	if KeyFingerprint([]byte("another key")) == fp {
		t.Error("different keys must have different fingerprints")
	}
}

func TestDeepCopyIsIndependent(t *testing.T) {
	c := validConfig()
	d := c.DeepCopy()
	d.Identity.APIKeyHeaders[0] = "changed"
	d.Identity.KeyRegistry.Entries[0].UserHash = "changed"
	d.RateLimits.Global.Requests = 7
	d.RateLimits.PerModel.Default.Burst = 7
	d.RateLimits.PerModel.Overrides[0].Model = "changed"
	d.FairQueuing.Weights[0].Weight = 7
	d.Timeouts.Models[0].Model = "changed"
	d.Backends[0].Name = "changed"
	if !reflect.DeepEqual(c, validConfig()) {
		t.Error("mutating the copy changed the original")
	}
}

func TestDurationJSON(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{`"1s"`, time.Second, false},
		{`"1m30s"`, 90 * time.Second, false},
		{`"250ms"`, 250 * time.Millisecond, false},
		{`"1"`, 0, true},
		{`1000`, 0, true},
		{`null`, 0, true},
	}
	for _, tt := range tests {
		var d Duration
		err := json.Unmarshal([]byte(tt.in), &d)
		if (err != nil) != tt.wantErr || d.Duration != tt.want {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v, error %v", tt.in, d.Duration, err, tt.want, tt.wantErr)
		}
	}
	out, err := json.Marshal(dur(1500 * time.Millisecond))
	if err != nil || string(out) != `"1.5s"` {
		t.Errorf("Marshal(1.5s) = %s, %v", out, err)
	}
}

func FuzzParse(f *testing.F) {
	valid, err := Marshal(validConfig())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"apiVersion":"fairqueue.dev/v1alpha1","kind":"DataPlaneConfig"}`))
	f.Add(bytes.Replace(valid, []byte(`"5s"`), []byte(`"-5s"`), 1))
	tokens, err := Marshal(tokenConfig())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tokens)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		out, err := Marshal(c)
		if err != nil {
			t.Fatalf("Marshal of a parsed config failed: %v", err)
		}
		c2, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(Marshal(Parse(data))) failed: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v", c, c2)
		}
		out2, err := Marshal(c2)
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("canonical form is not stable: %v\n%s\n%s", err, out, out2)
		}
	})
}

// largeConfig is a config at the API's limits: 1024 weights, 1000 registry
// entries and 64 model overrides and timeouts.
func largeConfig() *Config {
	c := validConfig()
	c.FairQueuing.Weights = nil
	for i := range 1024 {
		c.FairQueuing.Weights = append(c.FairQueuing.Weights, Weight{TenantHash: h("tenant-" + strconv.Itoa(i)), Weight: int32(i%MaxWeight + 1)})
	}
	c.Identity.KeyRegistry.Entries = nil
	for i := range 1000 {
		c.Identity.KeyRegistry.Entries = append(c.Identity.KeyRegistry.Entries, KeyRegistryEntry{
			APIKeyHash: h("key-" + strconv.Itoa(i)), UserHash: h("user-" + strconv.Itoa(i)), TeamHash: h("team"),
		})
	}
	c.RateLimits.PerModel.Overrides = nil
	c.Timeouts.Models = nil
	for i := range 64 {
		m := "model-" + strconv.Itoa(i)
		c.RateLimits.PerModel.Overrides = append(c.RateLimits.PerModel.Overrides, ModelOverride{Model: m, Limit: Limit{Requests: 1, Period: dur(time.Second), Burst: 1}})
		c.Timeouts.Models = append(c.Timeouts.Models, ModelTimeout{Model: m, Total: dur(time.Minute)})
	}
	return c
}

// BenchmarkParse measures a data-plane reload of a config at the API's limits.
func BenchmarkParse(b *testing.B) {
	data, err := Marshal(largeConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMarshal measures the operator's canonical encoding of the same.
func BenchmarkMarshal(b *testing.B) {
	c := largeConfig()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Marshal(c); err != nil {
			b.Fatal(err)
		}
	}
}

// TestValidateLeavesPolicyRulesToTheCRD: the rules a policy author must
// follow are the CRD's, which the API server and `dataplane --policy` apply
// to the policy (test/api checks both against one table). Validate checks
// only what the data plane needs to run a config, so it has no second copy
// of them to keep in step.
func TestValidateLeavesPolicyRulesToTheCRD(t *testing.T) {
	c := validConfig()
	c.Identity.UserHeader, c.Identity.TeamHeader = "Authorization", "authorization"
	c.FairQueuing.Bounds = Bounds{MaxQueueDepthPerTenant: 100, MaxTotalQueued: 10, MaxTenants: 1 << 20, MaxInFlight: 5000, MaxWait: dur(time.Hour)}
	c.Backends[0].URL = "http://user:pw@b:8000/v1?x=1"
	c.Store = redisConfig().Store
	c.Store.Redis.Addresses, c.Store.Redis.DB, c.Store.Redis.Timeout = []string{"a:1", "b:1"}, 16, dur(time.Minute)
	// The highest band setting a share, a band header naming a credential
	// header and a band name that is no DNS label are the CRD's to refuse.
	c.FairQueuing.Bands = []Band{{Name: "Gold Tier", MinShare: 0.5}, {Name: "interactive", MinShare: 0.2}}
	c.FairQueuing.DefaultBand, c.FairQueuing.RequestBandHeader = "interactive", "Authorization"
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() = %v, want nil: these are policy rules the CRD enforces", err)
	}
}
