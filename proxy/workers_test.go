package proxy

import (
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestH2Workers: jobs run on at most max workers, which are reused; a
// panic is raised again on the caller's goroutine; once stopped, the
// workers end and jobs run on their callers' goroutines.
func TestH2Workers(t *testing.T) {
	before := runtime.NumGoroutine()
	h := newH2Workers(3, slog.New(slog.DiscardHandler))
	var ran atomic.Int32
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 5 {
		wg.Go(func() {
			h.serve(func() {
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
		h.serve(func() { ran.Add(1) })
	}
	h.mu.Lock()
	n = h.n
	h.mu.Unlock()
	if n != 3 {
		t.Errorf("%d workers after sequential jobs, want 3", n)
	}

	got := func() (v any) {
		defer func() { v = recover() }()
		h.serve(func() { panic(http.ErrAbortHandler) })
		return nil
	}()
	if got != http.ErrAbortHandler {
		t.Errorf("panic on the caller's goroutine = %v, want http.ErrAbortHandler", got)
	}

	h.stop()
	h.serve(func() { ran.Add(1) })
	if ran.Load() != 26 {
		t.Errorf("%d jobs ran, want 26", ran.Load())
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before {
		t.Errorf("%d goroutines after stop, want %d", g, before)
	}
}
