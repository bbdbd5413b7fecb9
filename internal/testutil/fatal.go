package testutil

import (
	"fmt"
	"runtime"
	"testing"
)

// FatalRecorder is a testing.TB for the tests of helpers that fail a test:
// Fatalf records the message in Msg and ends the goroutine as testing.T
// does, without failing the real test. Run the helper in its own goroutine;
// everything else goes to the embedded TB.
type FatalRecorder struct {
	testing.TB
	// Msg is the message of the last Fatalf.
	Msg string
}

// Helper does nothing: the recorder has no stack to mark.
func (f *FatalRecorder) Helper() {}

// Fatalf records the message and ends the calling goroutine.
func (f *FatalRecorder) Fatalf(format string, args ...any) {
	f.Msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
