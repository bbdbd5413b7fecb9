package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestPrintError(t *testing.T) {
	var b bytes.Buffer
	PrintError(&b, "dataplane", errors.New("--config: no such file"))
	if got, want := b.String(), "dataplane: error: --config: no such file\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// helperEnv makes the test binary run helperMain instead of the tests: Main
// must be tried in a process of its own, since it exits and signals kill.
const helperEnv = "FAIRQUEUE_CLI_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		helperMain(mode)
		return
	}
	os.Exit(m.Run())
}

// helperMain runs Main: it prints "up", waits for a signal, prints
// "draining", then finishes once stdin is closed, failing when mode says so.
func helperMain(mode string) {
	Main("helper", func(ctx context.Context) error {
		if mode == "impatient" {
			SecondSignalKills(ctx)
		}
		fmt.Println("up")
		<-ctx.Done()
		fmt.Println("draining")
		_, _ = io.Copy(io.Discard, os.Stdin)
		if mode == "fail" {
			return errors.New("the drain failed")
		}
		return nil
	})
}

func TestMainEndsTheContextOnASignalAndExitsAsExitDoes(t *testing.T) {
	for _, tc := range []struct {
		mode        string
		sig         syscall.Signal
		wantErr     string // how the process ended: "" for status 0
		wantStderr  string
		secondKills bool
	}{
		{mode: "clean", sig: syscall.SIGTERM},
		{mode: "clean", sig: syscall.SIGINT},
		{mode: "fail", sig: syscall.SIGTERM, wantErr: "exit status 1", wantStderr: "helper: error: the drain failed\n"},
		{mode: "impatient", sig: syscall.SIGTERM, wantErr: "signal: terminated", secondKills: true},
	} {
		t.Run(tc.mode+"/"+tc.sig.String(), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+tc.mode)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() }) // after a failure: the helper must not outlive the test
			done := make(chan error, 1)
			lines := make(chan string, 2)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
				done <- cmd.Wait()
			}()
			expect := func(want string) {
				t.Helper()
				select {
				case l := <-lines:
					if l != want {
						t.Fatalf("the helper printed %q, want %q", l, want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("the helper did not print %q within 10s", want)
				}
			}
			expect("up")
			_ = cmd.Process.Signal(tc.sig)
			expect("draining")
			// A second signal: swallowed while the helper drains, or
			// (repeated, as SecondSignalKills acts right after the first)
			// its end.
			_ = cmd.Process.Signal(tc.sig)
			var waitErr error
			if tc.secondKills {
				tick := time.NewTicker(50 * time.Millisecond)
				defer tick.Stop()
				deadline := time.After(10 * time.Second)
			loop:
				for {
					select {
					case waitErr = <-done:
						break loop
					case <-tick.C:
						_ = cmd.Process.Signal(tc.sig)
					case <-deadline:
						t.Fatal("repeated signals did not end the helper within 10s")
					}
				}
			} else {
				_ = stdin.Close() // the drain ends
				select {
				case waitErr = <-done:
				case <-time.After(10 * time.Second):
					t.Fatal("the helper did not end within 10s of its drain")
				}
			}
			var got string
			if waitErr != nil {
				got = waitErr.Error()
			}
			if got != tc.wantErr {
				t.Errorf("the helper ended with %q, want %q (stderr %q)", got, tc.wantErr, stderr.String())
			}
			if stderr.String() != tc.wantStderr {
				t.Errorf("stderr = %q, want %q", stderr.String(), tc.wantStderr)
			}
		})
	}
}
