//go:build linux

package main

import (
	"fmt"
	"syscall"
)

// raiseFileLimit lets this process and its children (the proxies and the
// load generator inherit it) hold n open files.
func raiseFileLimit(n uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("bench: rlimit: %w", err)
	}
	if lim.Cur >= n {
		return lim.Cur, nil
	}
	want := syscall.Rlimit{Cur: n, Max: max(n, lim.Max)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		// Not root: as far as the hard limit goes.
		want = syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
		if err2 := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err2 != nil {
			return lim.Cur, fmt.Errorf("bench: rlimit: %w", err)
		}
	}
	return want.Cur, nil
}
