//go:build race

package proxy

// raceDetector: the tests run with the race detector, whose sync.Pool
// drops what it is given back.
const raceDetector = true
