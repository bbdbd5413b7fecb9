package apiref

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const crdPath = "../../config/crd/bases/fairqueue.dev_fairqueuepolicies.yaml"

// TestReferenceMatchesCRD fails when a field, default or validation rule
// changes without `make docs`, so docs/reference.md never documents an API the
// server does not enforce.
func TestReferenceMatchesCRD(t *testing.T) {
	table, err := FromCRDFile(crdPath)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Replace(string(doc), table)
	if err != nil {
		t.Fatal(err)
	}
	if want != string(doc) {
		t.Fatal("docs/reference.md's FairQueuePolicy table is stale: run `make docs` and commit docs/reference.md")
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
