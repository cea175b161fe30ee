//go:build linux

package netns

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// NS is a network namespace with only loopback. Its methods are safe for
// concurrent use.
type NS struct {
	f *os.File // the namespace's handle, from /proc/thread-self/ns/net
}

// New makes a network namespace and brings its loopback interface up.
func New() (*NS, error) {
	type made struct {
		f   *os.File
		err error
	}
	done := make(chan made, 1)
	go func() {
		runtime.LockOSThread()
		defer leave()()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- made{err: fmt.Errorf("netns: new: unshare: %w", err)}
			return
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			done <- made{err: fmt.Errorf("netns: new: %w", err)}
			return
		}
		if err := loopbackUp(); err != nil {
			f.Close()
			done <- made{err: fmt.Errorf("netns: new: %w", err)}
			return
		}
		done <- made{f: f}
	}()
	m := <-done
	if m.err != nil {
		return nil, m.err
	}
	return &NS{f: m.f}, nil
}

// leave, called on a locked thread before it changes namespace, returns
// the function that takes it back: it returns the thread to the scheduler
// once it is back in the namespace it came from, and otherwise leaves it
// locked, so that it ends with its goroutine. (Ending is not enough on its
// own: the process's main thread cannot end, and would stay parked in the
// namespace.)
func leave() func() {
	origin, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return func() {}
	}
	return func() {
		defer origin.Close()
		if unix.Setns(int(origin.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}
}

// loopbackUp sets IFF_UP on lo, in the calling thread's namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback up: socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: get flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: set flags: %w", err)
	}
	return nil
}

// Do runs f on an OS thread inside the namespace and returns its error.
// Listeners and connections f opens, and processes f starts (exec.Cmd's
// Start), are the namespace's. Goroutines f starts run outside it: open
// sockets in f itself, not in them.
func (n *NS) Do(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer leave()()
		if err := unix.Setns(int(n.f.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("netns: enter: %w", err)
			return
		}
		done <- f()
	}()
	return <-done
}

// Close releases n's handle on the namespace.
func (n *NS) Close() error {
	if err := n.f.Close(); err != nil {
		return fmt.Errorf("netns: close: %w", err)
	}
	return nil
}
