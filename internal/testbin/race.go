//go:build race

package testbin

// raceEnabled: this process was built with -race, so the binaries it builds
// are too.
const raceEnabled = true
