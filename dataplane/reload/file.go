package reload

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// Defaults for FileOptions fields left zero.
const (
	// DefaultDebounce is how long a FileSource waits after the first change
	// event before reading, so a file written in several steps is read once,
	// whole.
	DefaultDebounce = 100 * time.Millisecond
	// DefaultResync is how often a FileSource re-reads the file even without
	// an event, a safety net for events the kernel did not deliver.
	DefaultResync = time.Minute
)

// kubeletDataLink is the symlink the kubelet swaps atomically when it updates
// a mounted ConfigMap; the mounted file is a symlink through it.
const kubeletDataLink = "..data"

// FileOptions configures a FileSource.
type FileOptions struct {
	// Logger receives watch problems; a zero Logger discards them.
	Logger logr.Logger
	// Clock times the debounce and resync; nil means the real clock.
	Clock clock.Clock
	// Debounce is the delay between a change event and the read; zero means
	// DefaultDebounce.
	Debounce time.Duration
	// Resync is the period of reads made without an event; zero means
	// DefaultResync.
	Resync time.Duration
}

// FileSource watches one config file. It watches the file's directory, not
// the file, so it sees every way a file is replaced: an in-place write, a
// rename over it, a delete then recreate, and the kubelet's atomic swap of
// the ..data symlink of a mounted ConfigMap. Identical content is delivered
// once; a missing or empty file keeps the config in force.
type FileSource struct {
	path     string
	log      logr.Logger
	clk      clock.Clock
	debounce time.Duration
	resync   time.Duration

	lastHash string // hash of the last bytes delivered
}

var _ Source = (*FileSource)(nil)

// NewFileSource returns a Source reading path.
func NewFileSource(path string, opts FileOptions) *FileSource {
	f := &FileSource{path: filepath.Clean(path), log: opts.Logger, clk: opts.Clock, debounce: opts.Debounce, resync: opts.Resync}
	if f.clk == nil {
		f.clk = clock.RealClock{}
	}
	if f.debounce <= 0 {
		f.debounce = DefaultDebounce
	}
	if f.resync <= 0 {
		f.resync = DefaultResync
	}
	return f
}

// String implements Source.
func (f *FileSource) String() string { return "file " + f.path }

// Run implements Source. It fails at once when the file's directory cannot
// be watched.
func (f *FileSource) Run(ctx context.Context, sink Sink) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %s: %w", f.path, err)
	}
	defer func() { _ = w.Close() }() // only releases the inotify descriptor: nothing to report
	dir, base := filepath.Dir(f.path), filepath.Base(f.path)
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watching directory %s of --config: %w; the directory must exist", dir, err)
	}
	return debouncedWatch{
		clk: f.clk, debounce: f.debounce, resync: f.resync,
		changed: func(ev fsnotify.Event) bool {
			if name := filepath.Base(ev.Name); name != base && name != kubeletDataLink {
				return false
			}
			f.log.V(2).Info("Config file changed", "path", f.path, "event", ev.Op.String())
			return true
		},
		failed: func(err error) { f.log.Error(err, "Watching the config file", "path", f.path) },
		read:   func() { f.read(sink) },
	}.run(ctx, w)
}

// read delivers the file's content to sink if it changed since the last
// delivery.
func (f *FileSource) read(sink Sink) {
	data, err := os.ReadFile(f.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Between a delete and the recreate, or before the first mount: not
		// a bad config, just none yet.
		f.log.V(1).Info("Config file missing, keeping the config in force", "path", f.path)
		return
	case err != nil:
		sink.Reject(f.String(), fmt.Errorf("reading the config file: %w", err))
		return
	case len(data) == 0:
		// Truncated by a writer that has not written yet; its write raises
		// another event. An empty file is never a config.
		f.log.V(1).Info("Config file empty, keeping the config in force", "path", f.path)
		return
	}
	hash := config.Hash(data)
	if hash == f.lastHash {
		return
	}
	f.lastHash = hash
	_ = sink.Update(f.String(), data) // the sink logs and counts refusals
}
