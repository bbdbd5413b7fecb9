package fairqueue

import "testing"

// TestWeightClamp checks that a weight below 1 counts as 1 and one above
// MaxWeight as MaxWeight.
func TestWeightClamp(t *testing.T) {
	w := Weights{Default: 0, ByTenant: map[string]int{"neg": -3, "huge": 1 << 30, "three": 3}}
	cases := map[string]int{"other": 1, "neg": 1, "huge": MaxWeight, "three": 3}
	for tenant, want := range cases {
		if got := w.Of(tenant); got != want {
			t.Errorf("Of(%q) = %d, want %d", tenant, got, want)
		}
	}
}
