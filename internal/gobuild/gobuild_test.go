package gobuild

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRepoRootHoldsTheModule(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "gobuild", "gobuild.go")); err != nil {
		t.Errorf("RepoRoot() = %s, which does not hold this package: %v", root, err)
	}
}

func TestBuildNamesWhatFailed(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	err = Build(context.Background(), root, filepath.Join(t.TempDir(), "x"), nil, "./cmd/no-such-command")
	if err == nil || !strings.Contains(err.Error(), "go build -o") || !strings.Contains(err.Error(), "no-such-command") {
		t.Errorf("Build of a missing package: %v, want an error naming the command and the go tool's output", err)
	}
}
