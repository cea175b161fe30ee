//go:build !linux

package daemon

// releaseStartupPages does nothing here.
func releaseStartupPages() {}
