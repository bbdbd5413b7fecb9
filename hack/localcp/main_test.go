package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestPrepareDir(t *testing.T) {
	tests := []struct {
		name      string
		setup     func(t *testing.T, path string)
		wantErr   bool
		keepsRoot bool
	}{
		{name: "absent directory is created and removed", setup: func(*testing.T, string) {}},
		{name: "empty directory is emptied and kept", keepsRoot: true, setup: func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "directory with files is refused", wantErr: true, keepsRoot: true, setup: func(t *testing.T, path string) {
			if err := os.MkdirAll(path, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(path, "precious"), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state")
			tc.setup(t, path)
			dir, cleanup, err := prepareDir(path)
			if tc.wantErr {
				if err == nil {
					t.Fatal("prepareDir accepted a directory it would empty on exit")
				}
				if _, err := os.Stat(filepath.Join(path, "precious")); err != nil {
					t.Errorf("existing file touched: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// What the control plane writes must be gone after cleanup.
			if err := os.MkdirAll(filepath.Join(dir, "etcd", "member"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := cleanup(); err != nil {
				t.Fatal(err)
			}
			entries, err := os.ReadDir(path)
			switch {
			case tc.keepsRoot && (err != nil || len(entries) != 0):
				t.Errorf("after cleanup: %d entries, %v; want an empty directory", len(entries), err)
			case !tc.keepsRoot && !errors.Is(err, os.ErrNotExist):
				t.Errorf("directory still present after cleanup (%v)", err)
			}
		})
	}

	t.Run("default is a fresh temporary directory", func(t *testing.T) {
		dir, cleanup, err := prepareDir("")
		if err != nil {
			t.Fatal(err)
		}
		if err := cleanup(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("temporary directory %s left behind (%v)", dir, err)
		}
	})
}

// tick steps fc by one period once the health loop waits on its ticker, and
// waits for the check that tick triggers.
func tick(t *testing.T, fc *clocktesting.FakeClock, every time.Duration, checked <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !fc.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("health loop does not wait on its ticker")
		}
		runtime.Gosched()
	}
	fc.Step(every)
	select {
	case <-checked:
	case <-time.After(10 * time.Second):
		t.Fatal("no health check after a tick")
	}
}

func TestWatchHealth(t *testing.T) {
	const every = 5 * time.Second
	tests := []struct {
		name    string
		results []error // one per tick; the test cancels after the last
		wantErr bool
	}{
		{name: "healthy until cancelled", results: []error{nil, nil, nil}},
		{name: "two failures in a row are tolerated", results: []error{errors.New("x"), errors.New("x"), nil, errors.New("x"), errors.New("x")}},
		{name: "three failures in a row stop it", results: []error{nil, errors.New("x"), errors.New("x"), errors.New("x")}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fc := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			checked := make(chan struct{}, 1)
			n := 0
			done := make(chan error, 1)
			go func() {
				done <- watchHealth(ctx, fc, every, func(context.Context) error {
					err := tc.results[n]
					n++
					checked <- struct{}{}
					return err
				})
			}()
			for range tc.results {
				tick(t, fc, every, checked)
			}
			if !tc.wantErr {
				cancel()
			}
			select {
			case err := <-done:
				if (err != nil) != tc.wantErr {
					t.Errorf("watchHealth() = %v, want error: %v", err, tc.wantErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("watchHealth did not return")
			}
		})
	}
}
