package testbin

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fairqueue/fairqueue/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(Main(m)) }

func TestBuildOncePerProcessAndStartWhenReady(t *testing.T) {
	bin := Build(t, "./cmd/fakeupstream")
	info, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if again := Build(t, "./cmd/fakeupstream"); again != bin {
		t.Errorf("second Build = %s, want the first's %s", again, bin)
	}
	if again, _ := os.Stat(bin); !again.ModTime().Equal(info.ModTime()) {
		t.Error("the second Build rebuilt the binary")
	}

	addr := testutil.FreeAddr(t)
	p := Start(t, bin, Options{Args: []string{"--listen", addr}, Ready: HTTPReady("http://" + addr + "/v1/models")})
	if p.Exited() {
		t.Fatal("the process exited after it was ready")
	}
	if err := p.Stop(); err != nil {
		t.Errorf("Stop after SIGTERM: %v, want a clean exit", err)
	}
	if !strings.Contains(p.Output.String(), "listening on "+addr) {
		t.Errorf("output %q lacks the listen line", p.Output.String())
	}
}

func TestLineReady(t *testing.T) {
	p := &Process{Output: &testutil.SyncBuffer{}}
	ready := LineReady("ready")
	for _, w := range []string{"starting\n", "not ready\n", "ready"} {
		_, _ = p.Output.Write([]byte(w))
		if ready(p) {
			t.Fatalf("ready after %q", p.Output.String())
		}
	}
	_, _ = p.Output.Write([]byte("\n"))
	if !ready(p) {
		t.Fatalf("not ready after %q", p.Output.String())
	}
}

// runFunc is an M running f.
type runFunc func() int

func (f runFunc) Run() int { return f() }

func TestMainRemovesTheBinaries(t *testing.T) {
	var bin string
	code := Main(runFunc(func() int { bin = Build(t, "./cmd/fakeupstream"); return 0 })).Run()
	if code != 0 {
		t.Errorf("Run() = %d, want the tests' 0", code)
	}
	if _, err := os.Stat(filepath.Dir(filepath.Dir(bin))); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the binaries' directory is still there after Run: %v", err)
	}
}

func TestStartFailsWithTheOutputWhenTheProcessExitsBeforeReady(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH")
	}
	ft := &testutil.FatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(ft, sh, Options{Args: []string{"-c", "echo boom; exit 3"}, Ready: func(*Process) bool { return false }})
	}()
	select {
	case <-done:
	case <-time.After(DefaultReadyWithin + 10*time.Second):
		t.Fatal("Start did not give up on a process that exited")
	}
	if !strings.Contains(ft.Msg, "exited before it was ready") || !strings.Contains(ft.Msg, "boom") {
		t.Errorf("failure %q does not say the process exited and show its output", ft.Msg)
	}
}
