package chart

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		shares  Shares
		wantErr string
	}{
		{name: "valid", shares: Shares{Tenants: []Tenant{{Name: "a", Share: []float64{1}}}}},
		{name: "no tenant", shares: Shares{}, wantErr: "no tenant"},
		{name: "too many points", shares: Shares{Tenants: []Tenant{{Name: "a", Share: make([]float64, MaxPoints+1)}}}, wantErr: "at most 3600"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.shares.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
