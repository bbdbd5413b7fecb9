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
