// Package testbin builds the repository's commands and runs them as child
// processes, for the tests that must exercise a real binary (its flags, exit
// status, signals). Each command is built once per test process, however
// many tests start it, and started with a readiness wait.
package testbin

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fairqueue/fairqueue/internal/gobuild"
)

// built holds, per package, the outcome of its one build in this process.
var (
	mu      sync.Mutex
	dir     string // created by the first Build, removed by Main's Run
	mainSet bool   // Main wrapped the test binary's TestMain
	builds  = map[string]*build{}
)

type build struct {
	once sync.Once
	path string
	err  error
}

// Build returns the path of the command pkg ("./cmd/dataplane", relative to
// the repository root) built for this test process: the first call builds it
// (with -race if the test binary has it), later calls, from any test, return
// the same binary. The binaries live in a temporary directory that Main
// removes when the tests end, so the package's TestMain must run them
// through Main.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	mu.Lock()
	if !mainSet {
		mu.Unlock()
		t.Fatal("testbin.Build needs the package's TestMain to run its tests through testbin.Main(m), which removes the binaries at the end")
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "fairqueue-testbin-") //nolint:usetesting // shared by every test of the process; Main removes it
		if err != nil {
			mu.Unlock()
			t.Fatalf("creating a directory for the test binaries: %v", err)
		}
		dir = d
	}
	b, ok := builds[pkg]
	if !ok {
		b = &build{}
		builds[pkg] = b
	}
	out := dir
	mu.Unlock()

	b.once.Do(func() {
		root, err := gobuild.RepoRoot()
		if err != nil {
			b.err = err
			return
		}
		// One directory per package, so two commands with the same base
		// name cannot overwrite each other.
		b.path = filepath.Join(out, strings.ReplaceAll(path.Clean(pkg), "/", "_"), path.Base(pkg))
		var flags []string
		if raceEnabled {
			flags = append(flags, "-race")
		}
		b.err = gobuild.Build(context.Background(), root, b.path, flags, pkg)
	})
	if b.err != nil {
		t.Fatalf("building %s: %v", pkg, b.err)
	}
	return b.path
}

// M is what TestMain runs: *testing.M, or a wrapper such as Main's result
// (goleak.VerifyTestMain takes one too).
type M interface{ Run() int }

// Main wraps m so that running it removes the binaries Build made. Use it as
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(testbin.Main(m)) }
//
// or os.Exit(testbin.Main(m).Run()).
func Main(m M) M {
	mu.Lock()
	defer mu.Unlock()
	mainSet = true
	return cleaning{m}
}

type cleaning struct{ m M }

func (c cleaning) Run() int {
	code := c.m.Run()
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(os.Stderr, "testbin: removing the test binaries: %v\n", err)
			code = max(code, 1)
		}
		dir = ""
		builds = map[string]*build{}
	}
	return code
}
