package reload

import (
	"context"
	"errors"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/utils/clock"
)

// errWatcherStopped is returned when fsnotify closes its channels, which it
// does only when the watcher is closed under a source still running.
var errWatcherStopped = errors.New("the file watcher stopped unexpectedly")

// debouncedWatch is the loop of the sources that read files: it reads once,
// then again after each burst of relevant events (one debounce after the
// first event of the burst) and every resync period while idle, so a file
// written in several steps is read once, whole, and an event the kernel
// lost is caught up within a resync.
type debouncedWatch struct {
	clk              clock.Clock
	debounce, resync time.Duration
	// changed reports whether ev may change what read delivers, and logs
	// it; it is not called for the events of a burst already pending.
	changed func(ev fsnotify.Event) bool
	// failed logs an error of the watcher. The files are read again one
	// debounce later, since an overflowed event queue loses events.
	failed func(err error)
	// read reads the files and delivers them when they changed.
	read func()
}

// run reads once and loops on w's events until ctx ends.
func (d debouncedWatch) run(ctx context.Context, w *fsnotify.Watcher) error {
	d.read()
	// One timer serves both purposes: armed with the resync period while
	// idle, re-armed with the debounce delay by the first event of a burst.
	timer := d.clk.NewTimer(d.resync)
	defer timer.Stop()
	pending := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errWatcherStopped
			}
			if pending || !d.changed(ev) {
				continue
			}
			pending = true
			resetTimer(timer, d.debounce)
		case err, ok := <-w.Errors:
			if !ok {
				return errWatcherStopped
			}
			d.failed(err)
			pending = true
			resetTimer(timer, d.debounce)
		case <-timer.C():
			pending = false
			d.read()
			timer.Reset(d.resync)
		}
	}
}

// resetTimer re-arms t for d, discarding a tick that fired but was not read.
func resetTimer(t clock.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C():
		default:
		}
	}
	t.Reset(d)
}
