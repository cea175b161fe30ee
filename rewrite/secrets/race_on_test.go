//go:build race

package secrets

// raceEnabled: the race detector makes sync.Pool drop entries, so
// allocation counts mean nothing under it.
const raceEnabled = true
