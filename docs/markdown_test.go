// Package docs holds no code: its tests keep README.md and docs/*.md true to
// the tree (links, metric names, runbook entries).
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository root, seen from this package's directory.
const root = ".."

// markdownFiles returns every Markdown file of the repository outside bin/,
// .git and node_modules, as paths relative to the package directory.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "bin", ".git", "node_modules", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("found only %d Markdown files under %s: %v", len(files), root, files)
	}
	return files
}

var (
	heading  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	fence    = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	link     = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	htmlID   = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	inLink   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// doc is one Markdown file: its prose lines (fenced code removed) and the
// anchors its headings get on GitHub.
type doc struct {
	lines   []string // prose, with line numbers kept: fenced lines are blank
	anchors map[string]bool
}

func readDoc(t *testing.T, path string) doc {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := doc{anchors: map[string]bool{}}
	seen := map[string]int{}
	inFence := false
	for line := range strings.SplitSeq(string(raw), "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			d.lines = append(d.lines, "")
			continue
		}
		if inFence {
			d.lines = append(d.lines, "")
			continue
		}
		d.lines = append(d.lines, line)
		if m := heading.FindStringSubmatch(line); m != nil {
			slug := slugify(m[2])
			if n := seen[slug]; n > 0 {
				d.anchors[slug+"-"+strconv.Itoa(n)] = true
			} else {
				d.anchors[slug] = true
			}
			seen[slug]++
		}
		for _, m := range htmlID.FindAllStringSubmatch(line, -1) {
			d.anchors[m[1]] = true
		}
	}
	return d
}

// slugify is GitHub's heading anchor: the text without Markdown link
// targets, lower case, every character but letters, digits, '-', '_' and
// spaces dropped, spaces turned into '-'.
func slugify(text string) string {
	text = inLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// links returns the targets of the inline links of d's prose, with the line
// each is on; links inside code spans are not links.
func (d doc) links() (targets []string, lines []int) {
	for i, line := range d.lines {
		line = codeSpan.ReplaceAllStringFunc(line, func(s string) string {
			// A code span inside a link's text ([`x`](y)) leaves the link.
			return "code"
		})
		for _, m := range link.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
			lines = append(lines, i+1)
		}
	}
	return targets, lines
}
