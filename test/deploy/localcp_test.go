package deploy

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/internal/testbin"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// startupTimeout bounds how long the control plane may take to become ready
// on a loaded machine; it turns a hang into a failure.
const startupTimeout = 2 * time.Minute

// TestLocalControlPlaneStartsAndCleansUp runs hack/localcp as a user would:
// it must print a working kubeconfig and "ready", and on Ctrl-C stop etcd
// and kube-apiserver and remove every file it wrote.
func TestLocalControlPlaneStartsAndCleansUp(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the check for leftover processes reads /proc")
	}
	root := repoRoot(t)
	kc := kubectl(t, root)
	bin := testbin.Build(t, "./hack/localcp")
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "state")
	kubeconfig := filepath.Join(tmp, "kubeconfig")

	cmd := exec.Command(bin, "--dir", dir, "--kubeconfig", kubeconfig)
	cmd.Dir = root
	// A pipe of our own (not StdoutPipe) so that Wait can run while the
	// output is still being read.
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stdout.Close() }() // our read end: nothing to flush
	var stderr testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = stdoutW, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = stdoutW.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	finished := false
	t.Cleanup(func() {
		// Only reached with the process still running when the test failed.
		if !finished {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case err := <-exited:
				t.Logf("localcp exited after SIGINT: %v", err)
			case <-time.After(startupTimeout):
				_ = cmd.Process.Kill()
				t.Logf("localcp killed after ignoring SIGINT for %v: %v", startupTimeout, <-exited)
			}
		}
	})

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	printed := map[string]string{}
	timeout := time.After(startupTimeout)
wait:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("localcp exited before printing ready: %v\n%s", <-exited, stderr.String())
			}
			if line == "ready" {
				break wait
			}
			if k, v, ok := strings.Cut(line, ": "); ok {
				printed[k] = v
			}
		case <-timeout:
			t.Fatalf("localcp not ready after %v:\n%s", startupTimeout, stderr.String())
		}
	}

	if printed["kubeconfig"] != kubeconfig || !strings.HasPrefix(printed["server"], "https://127.0.0.1:") {
		t.Errorf("printed %v, want kubeconfig %s and a loopback https server", printed, kubeconfig)
	}
	out, err := exec.Command(kc, "--kubeconfig", kubeconfig, "get", "crd", "fairqueuepolicies.fairqueue.dev", "-o", "name").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "customresourcedefinition.apiextensions.k8s.io/fairqueuepolicies.fairqueue.dev" {
		t.Errorf("kubectl get crd with the printed kubeconfig: %v\n%s", err, out)
	}
	children := childProcesses(t, cmd.Process.Pid)
	if !equalSet(children, "etcd", "kube-apiserver") {
		t.Errorf("localcp runs %v, want etcd and kube-apiserver", children)
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		finished = true
		if err != nil {
			t.Errorf("localcp exited with %v after Ctrl-C, want success:\n%s", err, stderr.String())
		}
	case <-time.After(startupTimeout):
		t.Fatalf("localcp still running %v after Ctrl-C:\n%s", startupTimeout, stderr.String())
	}
	for pid, name := range children {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) still running after localcp exited", name, pid)
		}
	}
	for _, path := range []string{dir, kubeconfig} {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind after exit (stat: %v)", path, err)
		}
	}
}

// TestLocalControlPlaneExplainsMissingBinaries checks the message a user sees
// before `make envtest` has been run.
func TestLocalControlPlaneExplainsMissingBinaries(t *testing.T) {
	root := repoRoot(t)
	bin := testbin.Build(t, "./hack/localcp")
	dir := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(bin, "--assets", t.TempDir(), "--dir", dir)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("localcp without binaries: %v, want exit status 1\n%s", err, out)
	}
	if !strings.Contains(string(out), "run `make envtest`") {
		t.Errorf("output does not tell the user to run make envtest:\n%s", out)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state directory created although nothing started (stat: %v)", err)
	}
}

// childProcesses returns the direct children of pid, by pid, with their
// command names, read from /proc.
func childProcesses(t *testing.T, pid int) map[int]string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	children := map[int]string{}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// Format: pid (comm) state ppid ...; comm may hold spaces.
		s := string(stat)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 2 || fields[1] != strconv.Itoa(pid) {
			continue
		}
		children[child] = s[open+1 : end]
	}
	return children
}

func equalSet(m map[int]string, names ...string) bool {
	if len(m) != len(names) {
		return false
	}
	seen := map[string]bool{}
	for _, n := range m {
		seen[n] = true
	}
	for _, n := range names {
		if !seen[n] {
			return false
		}
	}
	return true
}
