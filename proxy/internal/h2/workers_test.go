package h2

import (
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// runJob starts f on h and waits for it to end.
func runJob(h *Workers, f func()) {
	done := make(chan struct{})
	h.Start(func() {
		defer close(done)
		f()
	})
	<-done
}

// TestH2Workers: jobs run on at most max workers, which are reused; a
// panic ends with its job, and the worker goes on; once stopped, the
// workers end and jobs run on goroutines of their own.
func TestH2Workers(t *testing.T) {
	before := runtime.NumGoroutine()
	h := NewWorkers(3, slog.New(slog.DiscardHandler))
	var ran atomic.Int32
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 5 {
		wg.Go(func() {
			runJob(h, func() {
				ran.Add(1)
				<-release
			})
		})
	}
	time.Sleep(50 * time.Millisecond) // three on workers, two inline
	close(release)
	wg.Wait()
	if ran.Load() != 5 {
		t.Fatalf("%d jobs ran, want 5", ran.Load())
	}
	h.mu.Lock()
	n := h.n
	h.mu.Unlock()
	if n != 3 {
		t.Errorf("%d workers started, want the limit, 3", n)
	}
	for range 20 { // sequential jobs reuse the idle workers
		runJob(h, func() { ran.Add(1) })
	}
	h.mu.Lock()
	n = h.n
	h.mu.Unlock()
	if n != 3 {
		t.Errorf("%d workers after sequential jobs, want 3", n)
	}

	runJob(h, func() { panic(http.ErrAbortHandler) })
	runJob(h, func() { ran.Add(1) })
	h.mu.Lock()
	n = h.n
	h.mu.Unlock()
	if n != 3 || ran.Load() != 26 {
		t.Errorf("after a panic: %d workers, %d jobs ran; want 3, 26", n, ran.Load())
	}

	h.Stop()
	runJob(h, func() { ran.Add(1) })
	if ran.Load() != 27 {
		t.Errorf("%d jobs ran, want 27", ran.Load())
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before {
		t.Errorf("%d goroutines after stop, want %d", g, before)
	}
}

// TestH2WorkersIdle: a worker without a job for the idle time ends, and a
// later job starts one again.
func TestH2WorkersIdle(t *testing.T) {
	before := runtime.NumGoroutine()
	h := NewWorkers(4, slog.New(slog.DiscardHandler))
	h.idle = 50 * time.Millisecond
	defer h.Stop()
	running := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.n
	}
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 4 {
		wg.Go(func() { runJob(h, func() { <-release }) })
	}
	for deadline := time.Now().Add(5 * time.Second); running() < 4 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := running(); n != 4 {
		t.Fatalf("%d workers running during the burst, want 4", n)
	}
	close(release)
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for (running() > 0 || runtime.NumGoroutine() > before) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n, g := running(), runtime.NumGoroutine(); n != 0 || g > before {
		t.Fatalf("after the idle time: %d workers running, %d goroutines (%d before); want 0 and no more than before", n, g, before)
	}
	h.idle = time.Hour // no worker runs to read it
	ran := false
	runJob(h, func() { ran = true })
	if !ran || running() != 1 {
		t.Errorf("a job after the workers ended: ran %v, %d workers running; want true, 1", ran, running())
	}
}
