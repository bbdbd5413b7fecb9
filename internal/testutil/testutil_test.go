package testutil

import (
	"net"
	"strings"
	"sync"
	"testing"
)

func TestSyncBufferConcurrentWritesAndReads(t *testing.T) {
	var b SyncBuffer
	const writers, lines = 4, 100
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range lines {
				_, _ = b.Write([]byte("x\n")) // never fails
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := strings.Count(b.String(), "x\n"); got != writers*lines {
		t.Errorf("buffer holds %d lines, want %d", got, writers*lines)
	}
}

func TestFreeAddrCanBeListenedOn(t *testing.T) {
	addr := FreeAddr(t)
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("FreeAddr() = %q, want a 127.0.0.1 address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on FreeAddr()'s %s: %v", addr, err)
	}
	_ = ln.Close() // nothing was accepted
}
