package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// packagePath matches a package directory as architecture.md names one.
var packagePath = regexp.MustCompile(`\b((?:dataplane|cmd|internal|api|controllers|hack)(?:/[a-z0-9-]+)*)\b`)

// TestArchitectureNamesRealPackages keeps architecture.md's map of the code
// true: every package path it names exists, and every data-plane package is
// in its layout, so a package added or moved is added or moved there too.
func TestArchitectureNamesRealPackages(t *testing.T) {
	raw, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for _, m := range packagePath.FindAllStringSubmatch(text, -1) {
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
			t.Errorf("architecture.md names %s, which does not exist", m[1])
		}
	}
	_, layout, ok := strings.Cut(text, "## Layout")
	if !ok {
		t.Fatal("architecture.md has no Layout section")
	}
	err = filepath.WalkDir(filepath.Join(root, "dataplane"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.Contains(path, "testdata") {
			return err
		}
		pkg, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg = filepath.ToSlash(pkg)
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(pkg) + `\s`).MatchString(layout) {
			t.Errorf("package %s is not in architecture.md's layout: add it, and the concept it owns", pkg)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
