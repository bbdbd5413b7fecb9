package version

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairqueue/fairqueue/internal/gobuild"
)

// The linker flags that stamp a build, as the Makefile and the Dockerfiles
// write them: renaming the variables breaks them silently, so this test
// builds a real command with them.
const (
	stampVersion  = "-X " + gobuild.Module + "/internal/version.version="
	stampRevision = "-X " + gobuild.Module + "/internal/version.revision="
)

func TestImagesAndMakeBuildStampTheVersion(t *testing.T) {
	root, err := gobuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string][]string{
		"Dockerfile.dataplane": {"ARG VERSION\n", "ARG REVISION\n", stampVersion + "${VERSION}", stampRevision + "${REVISION}"},
		"Dockerfile.manager":   {"ARG VERSION\n", "ARG REVISION\n", stampVersion + "${VERSION}", stampRevision + "${REVISION}"},
		"Makefile":             {"VERSION_PKG = " + gobuild.Module + "/internal/version\n", "-X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).revision=$(REVISION)", "--build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION)"},
	} {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(string(data), w) {
				t.Errorf("%s lacks %q: its binaries would print no version or revision", file, w)
			}
		}
	}
}

func TestAStampedBuildWithoutVCSPrintsTheStamp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a command")
	}
	root, err := gobuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// As in an image: no VCS information, only the stamp.
	bin := filepath.Join(t.TempDir(), "fakeupstream")
	flags := []string{"-buildvcs=false", "-ldflags=" + stampVersion + "v9.8.7 " + stampRevision + "0123abcd"}
	if err := gobuild.Build(context.Background(), root, bin, flags, "./cmd/fakeupstream"); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("fakeupstream --version: %v\n%s", err, out)
	}
	if want := "fakeupstream v9.8.7 (revision 0123abcd; "; !strings.HasPrefix(string(out), want) {
		t.Errorf("fakeupstream --version printed %q, want it to start with %q", out, want)
	}
}
