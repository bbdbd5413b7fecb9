// Package testutil holds small helpers shared by the tests of several
// packages. It depends on the standard library only.
package testutil

import (
	"bytes"
	"net"
	"sync"
	"testing"
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
// just now, for a server the test starts itself (often in another process,
// which cannot be handed a listener). The port is only reserved while
// FreeAddr runs, so another process may take it before the server binds it;
// tests accept that small race. It fails the test if no port can be had.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatalf("freeing %s for the test: %v", addr, err)
	}
	return addr
}
