// Package cli holds how every fairqueue binary ends on an error, so they all
// say it the same way: "<binary>: error: <message>" on stderr, exit status 1.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// Exit ends the process for err: nothing when err is nil, status 0 after
// -h/--help (flag.ErrHelp: the usage was printed), else the error as
// PrintError writes it and status 1.
func Exit(binary string, err error) {
	switch {
	case err == nil:
		return
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	}
	PrintError(os.Stderr, binary, err)
	os.Exit(1)
}

// PrintError writes err as every fairqueue binary reports a failure.
func PrintError(w io.Writer, binary string, err error) {
	_, _ = fmt.Fprintf(w, "%s: error: %v\n", binary, err)
}
