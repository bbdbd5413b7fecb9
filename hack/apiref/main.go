// Command apiref rewrites the API reference section of README.md from the
// generated FairQueuePolicy CRD. Run it through `make docs`.
package main

import (
	"fmt"
	"os"

	"github.com/fairqueue/fairqueue/internal/apiref"
)

func main() {
	if err := run("config/crd/bases/fairqueue.dev_fairqueuepolicies.yaml", "README.md"); err != nil {
		fmt.Fprintln(os.Stderr, "apiref:", err)
		os.Exit(1)
	}
}

func run(crdPath, readmePath string) error {
	table, err := apiref.FromCRDFile(crdPath)
	if err != nil {
		return err
	}
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		return err
	}
	out, err := apiref.Replace(string(readme), table)
	if err != nil {
		return err
	}
	return os.WriteFile(readmePath, []byte(out), 0o644)
}
