// Package testutil holds small helpers shared by the tests of several
// packages. It depends on the standard library and internal/proc only.
package testutil

import (
	"bytes"
	"sync"
	"testing"

	"github.com/fairqueue/fairqueue/internal/proc"
)

// SyncBuffer is a bytes.Buffer that is safe to write from one goroutine
// (a child process's output copier, a logger) while another reads it: use it
// as a command's Stdout or Stderr, or as a logger's output, and read it with
// String at any time. The zero value is an empty buffer ready to use; it must
// not be copied after first use.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to the buffer; it never fails.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns a copy of everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// FreeAddr returns a loopback address ("127.0.0.1:port") whose port was free
// just now (see proc.FreeAddr), for a server the test starts itself, often
// in another process. It fails the test if no port can be had.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := proc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// WeightedShares returns each weight's fraction of their sum: the share of a
// resource each backlogged tenant is owed under weighted fair queuing, which
// the fairness tests and the demos measure against.
func WeightedShares[W int | float64](weights []W) []float64 {
	var sum W
	for _, w := range weights {
		sum += w
	}
	out := make([]float64, len(weights))
	for i, w := range weights {
		out[i] = float64(w) / float64(sum)
	}
	return out
}
