package reload

import "context"

// Sink receives what a Source reads. Reloader implements it.
type Sink interface {
	// Update offers the raw config bytes read from source; the sink decides
	// whether they are new and valid.
	Update(source string, data []byte) error
	// Reject reports that source holds no usable config, for example a
	// ConfigMap without the config key.
	Reject(source string, err error)
}

// Source watches one place a config can come from and hands every version it
// sees to a Sink, in order, from one goroutine.
type Source interface {
	// Run reads the config once, then watches for changes until ctx ends.
	// It returns nil when ctx ends, or an error when it cannot watch at all.
	Run(ctx context.Context, sink Sink) error
	// String names the source for logs, such as "file /etc/fq/config.json".
	String() string
}
