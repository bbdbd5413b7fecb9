package cli

import (
	"bytes"
	"errors"
	"testing"
)

func TestPrintError(t *testing.T) {
	var b bytes.Buffer
	PrintError(&b, "dataplane", errors.New("--config: no such file"))
	if got, want := b.String(), "dataplane: error: --config: no such file\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
