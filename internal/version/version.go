// Package version tells what build a fairqueue binary is: the main module's
// version and the VCS revision it was built from. Both come from the values
// the linker stamps (make build and the images pass them) and, where none was
// stamped, from the build information the Go toolchain embeds. The images
// need the stamp: their build context has no .git, so the toolchain records
// no revision there. Every binary answers --version with Line, so a bug
// report can name the exact build.
package version

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// Info is what a binary knows about its own build.
type Info struct {
	// Version is the main module's version: a tag (v0.5.0), a pseudo-version
	// stamped from the VCS, or "devel" for a build without either.
	Version string `json:"version"`
	// Revision is the VCS commit; empty when the build recorded none
	// (go install module@version, or -buildvcs=false).
	Revision string `json:"revision,omitempty"`
	// Dirty is whether the working tree had uncommitted changes.
	Dirty bool `json:"dirty,omitempty"`
	// GoVersion is the toolchain that built the binary; Platform, its
	// GOOS/GOARCH.
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Stamped by the linker, as the Makefile and the Dockerfiles do:
//
//	go build -ldflags "-X github.com/fairqueue/fairqueue/internal/version.version=v0.5.0 \
//	  -X github.com/fairqueue/fairqueue/internal/version.revision=1a2b3c4d" ./cmd/dataplane
//
// Empty unless stamped.
var (
	version  string
	revision string
)

// Get reads the running binary's build: the stamped version and revision,
// else its build information's.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return FromBuildInfo(bi).stamped(version, revision)
}

// stamped returns i with the version and revision stamped at link time in
// place of the build information's; an empty stamp keeps i's. A revision
// other than the one the toolchain recorded drops i's dirty flag, which
// belonged to that one.
func (i Info) stamped(version, revision string) Info {
	if version != "" {
		i.Version = version
	}
	if revision != "" && revision != i.Revision {
		i.Revision, i.Dirty = revision, false
	}
	return i
}

// FromBuildInfo extracts an Info from bi, which may be nil (a binary built
// without module support).
func FromBuildInfo(bi *debug.BuildInfo) Info {
	i := Info{Version: "devel", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		return i
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		i.Version = v
	}
	if bi.GoVersion != "" {
		i.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.modified":
			i.Dirty = s.Value == "true"
		}
	}
	return i
}

// String formats i on one line, such as
// "v0.5.0 (revision 1a2b3c4, dirty; go1.26.7 linux/amd64)".
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Version)
	b.WriteString(" (revision ")
	b.WriteString(cmp.Or(i.Revision, "unknown"))
	if i.Dirty {
		b.WriteString(", dirty")
	}
	fmt.Fprintf(&b, "; %s %s)", i.GoVersion, i.Platform)
	return b.String()
}

// Line is what binary prints for --version: its name and its build.
func Line(binary string) string {
	return binary + " " + Get().String()
}

// Requested reports whether args ask for the version: --version (or
// -version) before any "--". The binaries built on the standard flag package
// check it before parsing, so --version answers even beside other flags and
// never reaches a flag's environment-variable fallback.
func Requested(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--version", "-version", "--version=true", "-version=true":
			return true
		}
	}
	return false
}

// PrintIfRequested writes binary's Line to w and returns true when args ask
// for the version; main then returns without running anything else.
func PrintIfRequested(w io.Writer, binary string, args []string) bool {
	if !Requested(args) {
		return false
	}
	_, _ = fmt.Fprintln(w, Line(binary))
	return true
}

// AddFlag lists --version among fs's flags, for its usage message and so
// that parsing accepts it; Requested answers it before parsing.
func AddFlag(fs *flag.FlagSet) {
	fs.Bool("version", false, "print the version (module version, VCS revision) and exit")
}
