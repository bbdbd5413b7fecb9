// Command apiref rewrites the FairQueuePolicy field table of docs/reference.md
// from the generated CRD. Run it through `make docs`.
package main

import (
	"fmt"
	"os"

	"github.com/fairqueue/fairqueue/internal/apiref"
)

func main() {
	if err := run("config/crd/bases/fairqueue.dev_fairqueuepolicies.yaml", "docs/reference.md"); err != nil {
		fmt.Fprintln(os.Stderr, "apiref:", err)
		os.Exit(1)
	}
}

func run(crdPath, docPath string) error {
	table, err := apiref.FromCRDFile(crdPath)
	if err != nil {
		return err
	}
	doc, err := os.ReadFile(docPath)
	if err != nil {
		return err
	}
	out, err := apiref.Replace(string(doc), table)
	if err != nil {
		return fmt.Errorf("%s: %w", docPath, err)
	}
	return os.WriteFile(docPath, []byte(out), 0o644)
}
