package execs

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

func TestTgidOf(t *testing.T) {
	// Hold this thread, so the goroutine below gets another one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tids := make(chan int)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		tids <- unix.Gettid()
		<-stop
	}()
	thread := <-tids
	if thread == os.Getpid() {
		t.Skip("the locked goroutine runs on the main thread; no other thread to look up")
	}
	for _, tid := range []int{os.Getpid(), thread} {
		if got, err := tgidOf(tid); err != nil || got != os.Getpid() {
			t.Errorf("tgidOf(%d) = %d, %v; want %d", tid, got, err, os.Getpid())
		}
	}
	if _, err := tgidOf(1 << 30); err == nil {
		t.Error("tgidOf of a pid that cannot exist: no error")
	}
}
