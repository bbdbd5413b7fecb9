package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRelativeLinksResolve fails on a relative link to a file that does not
// exist, or to an #anchor that no heading of the target file produces, in
// any Markdown file of the repository: moving a section must move its links.
func TestRelativeLinksResolve(t *testing.T) {
	docs := map[string]doc{}
	load := func(path string) doc {
		d, ok := docs[path]
		if !ok {
			d = readDoc(t, path)
			docs[path] = d
		}
		return d
	}
	checked := 0
	for _, file := range markdownFiles(t) {
		targets, lines := load(file).links()
		for i, target := range targets {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", file, lines[i], target, dest)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s:%d: link %q: an #anchor on a file that is not Markdown", file, lines[i], target)
				continue
			}
			if !load(dest).anchors[anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", file, lines[i], target, dest, anchor)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d relative links; is the link pattern still right?", checked)
	}
}

// TestSlugify pins the anchors GitHub gives the kinds of heading the docs use.
func TestSlugify(t *testing.T) {
	for heading, want := range map[string]string{
		"A five-minute tour":                 "a-five-minute-tour",
		"Status and `kubectl get`":           "status-and-kubectl-get",
		"A rendered config (`--config`)":     "a-rendered-config---config",
		"FairQueueConfigReloadFailing":       "fairqueueconfigreloadfailing",
		"The fleet store (Redis) and more":   "the-fleet-store-redis-and-more",
		"See [the docs](docs/x.md) for more": "see-the-docs-for-more",
	} {
		if got := slugify(heading); got != want {
			t.Errorf("slugify(%q) = %q, want %q", heading, got, want)
		}
	}
}

// TestREADMEStaysShort keeps the README an entry point; reference material
// belongs in docs/.
func TestREADMEStaysShort(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), "\n"); n >= 400 {
		t.Errorf("README.md has %d lines; keep it under 400 and move reference material into docs/", n)
	}
}
