package identity

import (
	"strings"
	"testing"
)

func TestTenant(t *testing.T) {
	all := Set{APIKey: "k", User: "u", Team: "t"}
	cases := []struct {
		name      string
		set       Set
		preferred Dimension
		wantKey   string
		wantUsed  Dimension
		wantOK    bool
	}{
		{"preferred user present", all, DimensionUser, "u", DimensionUser, true},
		{"preferred api key present", all, DimensionAPIKey, "k", DimensionAPIKey, true},
		{"preferred team present", all, DimensionTeam, "t", DimensionTeam, true},
		{"team missing falls back to user first", Set{APIKey: "k", User: "u"}, DimensionTeam, "u", DimensionUser, true},
		{"api key missing falls back to user first", Set{User: "u", Team: "t"}, DimensionAPIKey, "u", DimensionUser, true},
		{"user missing falls back to team before api key", Set{APIKey: "k", Team: "t"}, DimensionUser, "t", DimensionTeam, true},
		{"only an api key", Set{APIKey: "k"}, DimensionUser, "k", DimensionAPIKey, true},
		{"only an api key, team preferred", Set{APIKey: "k"}, DimensionTeam, "k", DimensionAPIKey, true},
		{"unknown preference uses the fallback order", Set{APIKey: "k", Team: "t"}, Dimension("org"), "t", DimensionTeam, true},
		{"no identity is not queueable", Set{}, DimensionUser, "", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key, used, ok := tc.set.Tenant(tc.preferred)
			if key != tc.wantKey || used != tc.wantUsed || ok != tc.wantOK {
				t.Fatalf("Tenant(%q) = %q, %q, %v; want %q, %q, %v", tc.preferred, key, used, ok, tc.wantKey, tc.wantUsed, tc.wantOK)
			}
		})
	}
}

func TestParseDimension(t *testing.T) {
	cases := []struct {
		in      string
		want    Dimension
		wantErr bool
	}{
		{"user", DimensionUser, false},
		{"apiKey", DimensionAPIKey, false},
		{"team", DimensionTeam, false},
		{"", DimensionUser, false},
		{"api_key", "", true},
		{"User", "", true},
	}
	for _, tc := range cases {
		got, err := ParseDimension(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ParseDimension(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), `"apiKey"`) {
			t.Errorf("error %q does not say which values are valid", err)
		}
	}
}
