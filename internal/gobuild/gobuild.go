// Package gobuild finds the repository and builds its commands with the go
// tool, for the tests that run a real binary (through internal/testbin) and
// for the demo and the local control plane. It depends on the standard
// library only, so a command can use it without linking package testing.
package gobuild

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Module is the import path of the repository's main module.
const Module = "github.com/fairqueue/fairqueue"

// RepoRoot returns the directory of the fairqueue module's go.mod at or above
// the working directory (go test runs in the package's folder).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && isModule(data) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("the fairqueue repository (go.mod of " + Module + ") is not at or above the working directory: run from inside the clone")
		}
		dir = parent
	}
}

func isModule(gomod []byte) bool {
	return strings.HasPrefix(string(gomod), "module "+Module+"\n")
}

// Build builds the main packages pkgs, given relative to the repository root
// ("./cmd/dataplane"), with `go build` run in root, adding flags (such as
// -race) before the packages. out is the binary's path for one package, or a
// directory ending in a path separator for several.
func Build(ctx context.Context, root, out string, flags []string, pkgs ...string) error {
	args := append(append([]string{"build", "-o", out}, flags...), pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), root, err, o)
	}
	return nil
}
