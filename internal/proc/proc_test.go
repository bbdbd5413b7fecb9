package proc

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func shell(t *testing.T, script string) *exec.Cmd {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH")
	}
	return exec.Command(sh, "-c", script)
}

func TestStartReadyAndStopGracefully(t *testing.T) {
	dir := t.TempDir()
	// Ready once it wrote the file; exits 0 on SIGTERM.
	cmd := shell(t, `trap 'exit 0' TERM; touch `+dir+`/ready; while :; do sleep 0.02; done`)
	var polls int
	p, err := StartReady(cmd, func() bool {
		polls++
		_, err := os.Stat(filepath.Join(dir, "ready"))
		return err == nil
	}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if polls == 0 || p.Exited() {
		t.Fatalf("StartReady returned after %d polls, exited %v: want a running, ready process", polls, p.Exited())
	}
	if err := p.Stop(); err != nil {
		t.Errorf("Stop = %v, want the clean exit of the SIGTERM trap", err)
	}
	if !p.Exited() {
		t.Error("the process still runs after Stop")
	}
}

func TestStartReadyFails(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		within       time.Duration
		want         string
	}{
		{"exits first", "exit 3", time.Minute, "exited before it was ready (exit status 3)"},
		{"never ready", "trap 'exit 0' TERM; while :; do sleep 0.02; done", 100 * time.Millisecond, "was not ready within 100ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			p, err := StartReady(shell(t, tc.script), func() bool { return false }, tc.within)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("StartReady = %v, %v; want an error containing %q", p, err, tc.want)
			}
			// An exit is seen at once, not at the deadline.
			if took := time.Since(start); took > 30*time.Second {
				t.Errorf("StartReady took %v to give up", took)
			}
		})
	}
}

func TestHTTPReadyWantsA200(t *testing.T) {
	var code atomic.Int32
	code.Store(http.StatusServiceUnavailable)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(int(code.Load())) }))
	defer srv.Close()
	ready := HTTPReady(srv.URL)
	if ready() {
		t.Error("ready on a 503")
	}
	code.Store(http.StatusOK)
	if !ready() {
		t.Error("not ready on a 200")
	}
	srv.Close()
	if ready() {
		t.Error("ready with nothing listening")
	}
}

func TestFreeAddrCanBeListenedOn(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("FreeAddr() = %q, want a 127.0.0.1 address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on FreeAddr()'s %s: %v", addr, err)
	}
	_ = ln.Close() // nothing was accepted
}

func TestStopSaysHowTheProcessEnded(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		started      string // printed once its trap is set
		want         string // "" for a clean stop
	}{
		{"clean exit on SIGTERM", "trap 'exit 0' TERM; echo up; while :; do sleep 0.02; done", "up", ""},
		{"exit 3 on SIGTERM", "trap 'exit 3' TERM; echo up; while :; do sleep 0.02; done", "up", "sh exited with exit status 3 after SIGTERM (see LOG)"},
		{"deaf to SIGTERM", "trap '' TERM; echo up; while :; do sleep 0.02; done", "up", "sh did not exit within 200ms of SIGTERM and was killed (see LOG)"},
		{"exited 4 before", "echo up; exit 4", "up", "sh had already exited: exit status 4 (see LOG)"},
		{"exited 0 before", "echo up", "up", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "sh.log")
			p, err := StartWith(shell(t, tc.script), Options{LogPath: log, Group: true, Grace: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			err = p.WaitReady(func() bool {
				b, _ := os.ReadFile(log) // empty until it printed
				return string(b) == tc.started+"\n"
			}, 10*time.Second)
			if err != nil && !strings.Contains(err.Error(), "exited before it was ready") {
				t.Fatal(err)
			}
			if strings.HasPrefix(tc.name, "exited") {
				select {
				case <-p.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("the script still runs 10s after it printed its last line")
				}
			}
			var got string
			if err := p.Stop(); err != nil {
				got = err.Error()
			}
			if want := strings.ReplaceAll(tc.want, "LOG", log); got != want {
				t.Errorf("Stop = %q, want %q", got, want)
			}
			if !p.Exited() {
				t.Error("the process still runs after Stop")
			}
		})
	}
}

func TestStartWithLogPathWritesOutputAndNamesIt(t *testing.T) {
	log := filepath.Join(t.TempDir(), "greeter.log")
	p, err := StartWith(shell(t, "echo hello; echo oops >&2; exit 2"), Options{Name: "greeter", LogPath: log})
	if err != nil {
		t.Fatal(err)
	}
	err = p.WaitReady(func() bool { return false }, 10*time.Second)
	if want := "greeter exited before it was ready (exit status 2) (see " + log + ")"; err == nil || err.Error() != want {
		t.Errorf("WaitReady = %v, want %q", err, want)
	}
	if b, err := os.ReadFile(log); err != nil || string(b) != "hello\noops\n" {
		t.Errorf("the log holds %q (%v), want stdout and stderr", b, err)
	}
	if _, err := StartWith(exec.Command("/nonexistent/greeter"), Options{LogPath: filepath.Join(t.TempDir(), "missing", "x.log")}); err == nil || !strings.Contains(err.Error(), "creating the log of greeter") {
		t.Errorf("StartWith with a log in a missing directory = %v, want the log named", err)
	}
}
