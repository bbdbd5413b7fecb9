package config

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestPreviousReleaseConfigLoads: testdata/previous-release.json was rendered
// by the release before request and token limits shared one Limit type, with
// every section set. A ConfigMap the previous operator wrote must load in
// this data plane, and what this operator writes must be byte for byte what
// the previous data plane (whose Parse is strict) reads.
func TestPreviousReleaseConfigLoads(t *testing.T) {
	golden, err := os.ReadFile("testdata/previous-release.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(golden)
	if err != nil {
		t.Fatalf("Parse(previous release's config) = %v", err)
	}
	if c.DeferredAdmission == nil || c.DeferredAdmission.TokenLimits.PerUser.Tokens == 0 ||
		c.RateLimits.PerUser.Requests == 0 || c.RateLimits.PerModel.UnknownModel.Action != UnknownModelCharge || !c.Store.IsRedis() {
		t.Fatalf("the golden config lost a section on Parse: %+v", c)
	}
	data, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, golden) {
		t.Errorf("Marshal(Parse(previous release's config)) differs from it:\n%s", data)
	}
}

// TestLimitUnitIsStrict: request and token limits share Limit, but each
// still refuses the other's rate key, as the separate types did.
func TestLimitUnitIsStrict(t *testing.T) {
	golden, err := os.ReadFile("testdata/previous-release.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ from, to, want string }{
		{`"tokens": 20000`, `"requests": 20000`, "deferredAdmission.tokenLimits.perAPIKey.requests: is set in a limit of tokens"},
		{`"requests": 1000`, `"tokens": 1000`, "rateLimits.global.tokens: is set in a limit of requests"},
	} {
		data := bytes.Replace(golden, []byte(tt.from), []byte(tt.to), 1)
		if bytes.Equal(data, golden) {
			t.Fatalf("the golden config has no %s", tt.from)
		}
		if _, err := Parse(data); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse with %s = %v, want an error containing %q", tt.to, err, tt.want)
		}
	}
}
