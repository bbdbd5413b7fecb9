package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDockerfilesBuildFromTheirContext checks what can be checked without a
// Docker engine: each image builds its own command, ends on distroless as a
// non-root user, and the .dockerignore keeps every directory of the module
// that the command imports in the build context.
func TestDockerfilesBuildFromTheirContext(t *testing.T) {
	root := repoRoot(t)
	allowed := dockerContextDirs(t, filepath.Join(root, ".dockerignore"))
	for _, name := range []string{"manager", "dataplane"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(root, "Dockerfile."+name))
			if err != nil {
				t.Fatal(err)
			}
			var froms, users []string
			for _, line := range strings.Split(string(data), "\n") {
				fields := strings.Fields(line)
				if len(fields) < 2 {
					continue
				}
				switch fields[0] {
				case "FROM":
					froms = append(froms, fields[len(fields)-1])
					if fields[len(fields)-2] == "AS" {
						froms[len(froms)-1] = fields[len(fields)-3]
					}
				case "USER":
					users = append(users, fields[1])
				}
			}
			if len(froms) == 0 || froms[len(froms)-1] != "gcr.io/distroless/static:nonroot" {
				t.Errorf("final stage FROM %v, want gcr.io/distroless/static:nonroot", froms)
			}
			if len(users) == 0 || users[len(users)-1] != "65532:65532" {
				t.Errorf("USER %v, want 65532:65532 last", users)
			}
			if !strings.Contains(string(data), "./cmd/"+name+"\n") {
				t.Errorf("Dockerfile.%s does not build ./cmd/%s", name, name)
			}

			// Every directory of this module the binary is built from must
			// be in the build context.
			cmd := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", "./cmd/"+name)
			cmd.Dir = root
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list ./cmd/%s: %v", name, err)
			}
			for _, dir := range strings.Fields(string(out)) {
				rel, err := filepath.Rel(root, dir)
				if err != nil {
					t.Fatal(err)
				}
				top := strings.Split(filepath.ToSlash(rel), "/")[0]
				if !allowed[top] {
					t.Errorf("./cmd/%s imports %s, but .dockerignore leaves %s/ out of the build context", name, rel, top)
				}
			}
		})
	}
}

// dockerContextDirs reads a .dockerignore written as "ignore everything,
// then re-include" and returns the re-included top-level names.
func dockerContextDirs(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // read-only: a close error loses nothing
	allowed := map[string]bool{}
	sawStar := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "*":
			sawStar = true
		case strings.HasPrefix(line, "!"):
			allowed[strings.TrimSuffix(strings.TrimPrefix(line, "!"), "/")] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !sawStar {
		t.Fatal(".dockerignore does not start from '*': the build context would carry bin/ and other local files")
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if !allowed[f] {
			t.Errorf(".dockerignore leaves %s out of the build context", f)
		}
	}
	return allowed
}
