package reload

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/internal/testutil"
)

const testDebounce = 100 * time.Millisecond

// runFileSource starts a FileSource on path with a fake clock and a resync
// period so long that only change events can trigger a read.
func runFileSource(t *testing.T, path string) (*recordingSink, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Now())
	sink := runSource(t, NewFileSource(path, FileOptions{Clock: clk, Debounce: testDebounce, Resync: 24 * time.Hour}))
	// Run has read the file once and armed its timer when the clock has a waiter.
	testutil.Eventually(t, "the source to start", func() bool { return clk.HasWaiters() })
	return sink, clk
}

// waitUpdate steps the fake clock past the debounce until the sink's last
// update equals want.
func waitUpdate(t *testing.T, sink *recordingSink, clk *clocktesting.FakeClock, want []byte) {
	t.Helper()
	testutil.Eventually(t, "the update to "+firstLine(want), func() bool {
		clk.Step(testDebounce)
		u, _ := sink.snapshot()
		return len(u) > 0 && bytes.Equal(u[len(u)-1], want)
	})
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// kubeletMount lays out dir the way the kubelet mounts a ConfigMap volume:
// the file is a symlink through ..data to a timestamped directory.
type kubeletMount struct {
	t   *testing.T
	dir string
	n   int
}

func (m *kubeletMount) publish(data []byte) {
	t := m.t
	m.n++
	ts := filepath.Join(m.dir, "..2026_11_30_00_00_0"+string(rune('0'+m.n)))
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ts, "config.json"), data)
	tmp := filepath.Join(m.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	old, _ := os.Readlink(filepath.Join(m.dir, kubeletDataLink))
	if err := os.Rename(tmp, filepath.Join(m.dir, kubeletDataLink)); err != nil {
		t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(m.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(m.dir, "config.json")
	if _, err := os.Lstat(link); os.IsNotExist(err) {
		if err := os.Symlink(filepath.Join(kubeletDataLink, "config.json"), link); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFileSourceDetectsEveryUpdatePattern(t *testing.T) {
	v1, v2 := render(t, 1, 2), render(t, 2, 3)
	tests := []struct {
		name  string
		setup func(t *testing.T, dir, path string) func(data []byte)
	}{
		{"in-place write", func(t *testing.T, dir, path string) func([]byte) {
			writeFile(t, path, v1)
			return func(data []byte) { writeFile(t, path, data) }
		}},
		{"rename over", func(t *testing.T, dir, path string) func([]byte) {
			writeFile(t, path, v1)
			return func(data []byte) {
				tmp := filepath.Join(dir, ".config.json.tmp")
				writeFile(t, tmp, data)
				if err := os.Rename(tmp, path); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"delete then recreate", func(t *testing.T, dir, path string) func([]byte) {
			writeFile(t, path, v1)
			return func(data []byte) {
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				writeFile(t, path, data)
			}
		}},
		{"kubelet ..data symlink swap", func(t *testing.T, dir, path string) func([]byte) {
			m := &kubeletMount{t: t, dir: dir}
			m.publish(v1)
			return m.publish
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "config.json")
			update := tc.setup(t, dir, path)
			sink, clk := runFileSource(t, path)
			if u, _ := sink.snapshot(); len(u) != 1 || !bytes.Equal(u[0], v1) {
				t.Fatalf("initial read delivered %d updates, want exactly v1", len(u))
			}
			update(v2)
			waitUpdate(t, sink, clk, v2)
			update(v1)
			waitUpdate(t, sink, clk, v1)
			u, rejects := sink.snapshot()
			if len(rejects) > 0 {
				t.Errorf("Reject called %d times (%v); a replaced file is never an error", len(rejects), rejects)
			}
			// Each version is delivered once: v1, v2, v1.
			if len(u) != 3 {
				t.Errorf("delivered %d updates, want 3 (v1, v2, v1): duplicates were not suppressed", len(u))
			}
		})
	}
}

func TestFileSourceEndsAtTheLastVersion(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	versions := [][]byte{render(t, 1, 1), render(t, 2, 2), render(t, 3, 3)}
	writeFile(t, path, versions[0])
	sink, clk := runFileSource(t, path)
	// Edit back and forth quickly, sometimes within one debounce window,
	// sometimes across one; end at versions[1].
	for i := range 20 {
		writeFile(t, path, versions[i%3])
		if i%4 == 0 {
			clk.Step(testDebounce)
		}
	}
	writeFile(t, path, versions[1])
	waitUpdate(t, sink, clk, versions[1])
	// Nothing later overrides it: a few more debounce periods change nothing.
	for range 5 {
		clk.Step(testDebounce)
	}
	u, _ := sink.snapshot()
	if !bytes.Equal(u[len(u)-1], versions[1]) {
		t.Errorf("last delivered %s, want the last written version %s", firstLine(u[len(u)-1]), firstLine(versions[1]))
	}
}

func TestFileSourceWaitsForAMissingFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	sink, clk := runFileSource(t, path)
	if u, r := sink.snapshot(); len(u)+len(r) != 0 {
		t.Fatalf("a missing file delivered %d updates and %d rejections, want none", len(u), len(r))
	}
	v1 := render(t, 1, 1)
	writeFile(t, path, v1)
	waitUpdate(t, sink, clk, v1)
}

func TestFileSourceResyncsWithoutEvents(t *testing.T) {
	// The watched file is a symlink into a directory that is not watched,
	// so changing the target raises no event: only the resync sees it.
	dir, elsewhere := t.TempDir(), t.TempDir()
	path, target := filepath.Join(dir, "config.json"), filepath.Join(elsewhere, "real.json")
	v1, v2 := render(t, 1, 1), render(t, 2, 2)
	writeFile(t, target, v1)
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	sink := runSource(t, NewFileSource(path, FileOptions{Clock: clk, Debounce: testDebounce, Resync: time.Minute}))
	testutil.Eventually(t, "the source to start", clk.HasWaiters)
	waitNotified(t, sink, "the initial read")
	writeFile(t, target, v2)
	// Just short of the resync period no timer of the source fires (a fake
	// clock fires only what is due), so nothing can be on its way: the
	// resync timer is still pending and only the initial read was delivered.
	clk.Step(time.Minute - time.Nanosecond)
	if u, _ := sink.snapshot(); len(u) != 1 || !clk.HasWaiters() {
		t.Fatalf("before the resync period: %d updates, resync pending %v; want 1 and true", len(u), clk.HasWaiters())
	}
	clk.Step(time.Nanosecond)
	waitNotified(t, sink, "the resync")
	if u, _ := sink.snapshot(); len(u) != 2 || !bytes.Equal(u[1], v2) {
		t.Errorf("after one resync period: %d updates, want v1 then v2", len(u))
	}
}

func TestFileSourceFailsWithoutItsDirectory(t *testing.T) {
	src := NewFileSource(filepath.Join(t.TempDir(), "missing", "config.json"), FileOptions{})
	err := src.Run(context.Background(), newRecordingSink())
	if err == nil || !strings.Contains(err.Error(), "the directory must exist") {
		t.Errorf("Run() = %v, want an error saying the directory must exist", err)
	}
}
