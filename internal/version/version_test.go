package version

import (
	"flag"
	"io"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{{
		name: "a tagged build from a clean tree",
		bi: &debug.BuildInfo{GoVersion: "go1.26.7", Main: debug.Module{Path: "github.com/fairqueue/fairqueue", Version: "v0.5.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "1a2b3c4d"}, {Key: "vcs.modified", Value: "false"}}},
		want: "v0.5.0 (revision 1a2b3c4d; go1.26.7 ",
	}, {
		name: "a local build with uncommitted changes",
		bi: &debug.BuildInfo{GoVersion: "go1.26.7", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "1a2b3c4d"}, {Key: "vcs.modified", Value: "true"}}},
		want: "devel (revision 1a2b3c4d, dirty; go1.26.7 ",
	}, {
		name: "go install module@version: no VCS stamp",
		bi:   &debug.BuildInfo{GoVersion: "go1.26.7", Main: debug.Module{Version: "v0.5.0"}},
		want: "v0.5.0 (revision unknown; go1.26.7 ",
	}, {
		name: "no build information at all",
		want: "devel (revision unknown; go",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := FromBuildInfo(tc.bi).String()
			if !strings.HasPrefix(got, tc.want) || !strings.HasSuffix(got, ")") {
				t.Errorf("got %q, want it to start with %q", got, tc.want)
			}
		})
	}
}

func TestStampTakesPrecedenceOverBuildInfo(t *testing.T) {
	vcs := &debug.BuildInfo{GoVersion: "go1.26.7", Main: debug.Module{Version: "v0.0.0-20261202000000-1a2b3c4d5e6f+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "1a2b3c4d"}, {Key: "vcs.modified", Value: "true"}}}
	image := &debug.BuildInfo{GoVersion: "go1.26.7", Main: debug.Module{Version: "(devel)"}} // no .git in the context
	for _, tc := range []struct {
		name              string
		bi                *debug.BuildInfo
		version, revision string
		want              string
	}{
		{"nothing stamped: the build information", vcs, "", "", "v0.0.0-20261202000000-1a2b3c4d5e6f+dirty (revision 1a2b3c4d, dirty; "},
		{"an image build: only the stamp knows", image, "v0.5.0", "9f8e7d6c", "v0.5.0 (revision 9f8e7d6c; "},
		{"an image build of an untagged tree", image, "", "9f8e7d6c", "devel (revision 9f8e7d6c; "},
		{"the same revision stamped keeps the dirty flag", vcs, "v0.5.0", "1a2b3c4d", "v0.5.0 (revision 1a2b3c4d, dirty; "},
		{"another revision stamped drops it", vcs, "", "9f8e7d6c", "v0.0.0-20261202000000-1a2b3c4d5e6f+dirty (revision 9f8e7d6c; "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FromBuildInfo(tc.bi).stamped(tc.version, tc.revision).String(); !strings.HasPrefix(got, tc.want) {
				t.Errorf("got %q, want it to start with %q", got, tc.want)
			}
		})
	}
}

func TestLineNamesTheBinary(t *testing.T) {
	if got := Line("manager"); !strings.HasPrefix(got, "manager ") || !strings.Contains(got, "(revision ") {
		t.Errorf("Line(manager) = %q", got)
	}
}

func TestRequested(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--version"}, true},
		{[]string{"-version"}, true},
		{[]string{"--listen", ":1", "--version"}, true},
		{[]string{"--version=true"}, true},
		{[]string{"--", "--version"}, false},
		{[]string{"--versions"}, false},
		{nil, false},
	} {
		if got := Requested(tc.args); got != tc.want {
			t.Errorf("Requested(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

func TestAddFlagIsListedAndAccepted(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	AddFlag(fs)
	if err := fs.Parse([]string{"--version"}); err != nil {
		t.Fatal(err)
	}
	if fs.Lookup("version") == nil {
		t.Error("--version is not registered")
	}
}

func TestPrintIfRequested(t *testing.T) {
	var b strings.Builder
	if PrintIfRequested(&b, "fqload", []string{"--target", "http://x"}) || b.Len() != 0 {
		t.Errorf("printed %q without --version", b.String())
	}
	if !PrintIfRequested(&b, "fqload", []string{"--version"}) || !strings.HasPrefix(b.String(), "fqload ") || !strings.HasSuffix(b.String(), ")\n") {
		t.Errorf("--version printed %q", b.String())
	}
}
