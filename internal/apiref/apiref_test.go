package apiref

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const crdPath = "../../config/crd/bases/fairqueue.dev_fairqueuepolicies.yaml"

// TestREADMEMatchesCRD fails when a field, default or validation rule changes
// without `make docs`, so the README never documents an API the server does
// not enforce.
func TestREADMEMatchesCRD(t *testing.T) {
	table, err := FromCRDFile(crdPath)
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Replace(string(readme), table)
	if err != nil {
		t.Fatal(err)
	}
	if want != string(readme) {
		t.Fatal("README.md API reference is stale: run `make docs` and commit README.md")
	}
}

func TestTableCoversTheSpec(t *testing.T) {
	table, err := FromCRDFile(crdPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{
		"`spec.fairQueuing.bounds.maxWait`",
		"`spec.fairQueuing.weights[].identity`",
		"`spec.rateLimits.perModel`",
		"`spec.backends[].url`",
		"`status.observedGeneration`",
	} {
		if !strings.Contains(table, field) {
			t.Errorf("reference table lacks %s", field)
		}
	}
	if !strings.Contains(table, "| `spec.fairQueuing.bounds.maxQueueDepthPerTenant` | integer | `32` |") {
		t.Errorf("maxQueueDepthPerTenant row lacks its type and SPEC default 32:\n%s", table)
	}
}

func TestReplaceNeedsMarkers(t *testing.T) {
	if _, err := Replace("# no markers here\n", "x"); err == nil {
		t.Fatal("Replace without markers must fail")
	}
	got, err := Replace("a\n"+Begin+"\nold\n"+End+"\nb\n", "new\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "a\n" + Begin + "\nnew\n" + End + "\nb\n"; got != want {
		t.Fatalf("Replace = %q, want %q", got, want)
	}
}
