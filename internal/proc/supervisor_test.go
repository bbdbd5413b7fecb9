package proc_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/internal/proc"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

func lookSh(t *testing.T) string {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH")
	}
	return sh
}

// startsChild starts a process through sup whose own child (a sleep) would
// outlive it if its process group were not killed, and returns the process
// and the child's pid. The trap is set before the pid file is written, so
// once the test has the pid a SIGTERM meets the trap, not sh's default.
func startsChild(t *testing.T, ctx context.Context, sup *proc.Supervisor, name, onTerm string) (*proc.Process, string) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	p, err := sup.Start(ctx, name, lookSh(t), "-c", `trap '`+onTerm+`' TERM; sleep 60 & echo $! > `+pidFile+`; while :; do sleep 0.05; done`)
	if err != nil {
		t.Fatal(err)
	}
	var pid string
	testutil.EventuallyWithin(t, 10*time.Second, name+" starts its child", func() bool {
		b, _ := os.ReadFile(pidFile) // absent until the process writes it
		pid = strings.TrimSpace(string(b))
		return pid != ""
	})
	return p, pid
}

// diesWithItsGroup waits until the process pid is gone (or a zombie).
// SIGKILL is delivered asynchronously, so it gets a moment.
func diesWithItsGroup(t *testing.T, pid string) {
	t.Helper()
	testutil.EventuallyWithin(t, 5*time.Second, "the child "+pid+" dies with its process group", func() bool {
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		return err != nil || strings.Contains(string(b), ") Z")
	})
}

func TestSupervisorStopAllStopsProcessGroups(t *testing.T) {
	dir := t.TempDir()
	sup := proc.NewSupervisor(dir, 5*time.Second)
	ctx := context.Background()
	clean, err := sup.Start(ctx, "clean", lookSh(t), "-c", `trap 'exit 0' TERM; echo started; while :; do sleep 0.05; done`)
	if err != nil {
		t.Fatal(err)
	}
	parent, childPid := startsChild(t, ctx, sup, "parent", "exit 3")
	testutil.EventuallyWithin(t, 10*time.Second, "clean logs its start", func() bool {
		b, _ := os.ReadFile(clean.LogPath()) // empty until it printed
		return string(b) == "started\n"
	})
	if want := filepath.Join(dir, "clean.log"); clean.LogPath() != want {
		t.Errorf("LogPath() = %q, want %q", clean.LogPath(), want)
	}

	err = sup.StopAll()
	want := "parent exited with exit status 3 after SIGTERM (see " + filepath.Join(dir, "parent.log") + ")"
	if err == nil || err.Error() != want {
		t.Errorf("StopAll error = %v, want only the parent's non-zero exit: %q", err, want)
	}
	for _, p := range []*proc.Process{clean, parent} {
		if !p.Exited() {
			t.Errorf("%s still runs after StopAll", p.Name())
		}
	}
	diesWithItsGroup(t, childPid)
}

func TestSupervisorContextStopsProcessGroups(t *testing.T) {
	sup := proc.NewSupervisor(t.TempDir(), 5*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, childPid := startsChild(t, ctx, sup, "parent", "exit 0")
	cancel()
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the process still runs 10s after its context ended")
	}
	diesWithItsGroup(t, childPid)
	if err := sup.StopAll(); err == nil || !strings.Contains(err.Error(), "had already exited: context canceled") {
		t.Errorf("StopAll after the context ended = %v, want the cancellation reported", err)
	}
}

func TestSupervisorIsBounded(t *testing.T) {
	sup := proc.NewSupervisor(t.TempDir(), time.Second)
	sh := lookSh(t)
	var err error
	for i := 0; err == nil; i++ {
		if i > 100 {
			t.Fatal("started 100 processes, want a bound")
		}
		var p *proc.Process
		if p, err = sup.Start(context.Background(), fmt.Sprintf("p%d", i), sh, "-c", "exit 0"); err == nil {
			select {
			case <-p.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("%s still runs 10s after it started, want it to exit at once", p.Name())
			}
		}
	}
	if !strings.Contains(err.Error(), "the most allowed") {
		t.Errorf("the first refused Start = %v, want the bound named", err)
	}
	if err := sup.StopAll(); err != nil {
		t.Errorf("StopAll of processes that exited 0 = %v, want nil", err)
	}
}
