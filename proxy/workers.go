package proxy

import (
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"time"
)

// h2Workers runs HTTP/2 requests' handlers on long-lived goroutines. The
// HTTP/2 server starts a goroutine for every request, whose small stack is
// grown, and copied, as the handler goes deeper (measured: a tenth of the
// proxy's time per HTTP/2 request); a worker's stack has grown once. The
// request's own goroutine waits for the worker, so nothing else changes:
// the handler runs once, to its end, before the server's goroutine
// returns, and a panic (http.ErrAbortHandler) is raised again there. A
// worker left without a job for idle ends, so a burst's workers do not
// outlive it.
type h2Workers struct {
	log  *slog.Logger
	jobs chan h2Job
	quit chan struct{}
	max  int
	idle time.Duration

	mu      sync.Mutex
	n       int  // workers running
	stopped bool // no new workers; quit is closed
}

// h2WorkerIdle is how long a worker waits for its next job before it ends.
const h2WorkerIdle = 10 * time.Second

type h2Job struct {
	f    func()
	done chan any // what f panicked with, or nil
}

func newH2Workers(max int, log *slog.Logger) *h2Workers {
	return &h2Workers{log: log, jobs: make(chan h2Job), quit: make(chan struct{}), max: max, idle: h2WorkerIdle}
}

// serve runs f on a worker, or on the calling goroutine when all are busy
// and no more may start, or the pool is stopped.
func (h *h2Workers) serve(f func()) {
	job := h2Job{f: f, done: make(chan any, 1)}
	select {
	case h.jobs <- job:
	default:
		h.mu.Lock()
		start := !h.stopped && h.n < h.max
		if start {
			h.n++
		}
		h.mu.Unlock()
		if !start {
			f()
			return
		}
		go h.work(job)
	}
	if v := <-job.done; v != nil {
		panic(v)
	}
}

func (h *h2Workers) work(job h2Job) {
	idle := time.NewTimer(h.idle)
	defer idle.Stop()
	for {
		job.done <- h.run(job.f)
		idle.Reset(h.idle)
		select {
		case job = <-h.jobs:
		case <-idle.C:
			h.mu.Lock()
			h.n--
			h.mu.Unlock()
			return
		case <-h.quit:
			return
		}
	}
}

// run calls f and returns what it panicked with, if anything; the stack of
// a panic other than http.ErrAbortHandler is logged here, where it
// happened.
func (h *h2Workers) run(f func()) (v any) {
	defer func() {
		if v = recover(); v != nil && v != http.ErrAbortHandler {
			buf := make([]byte, 64<<10)
			h.log.Error("proxy: handler panicked", "panic", v, "stack", string(buf[:runtime.Stack(buf, false)]))
		}
	}()
	f()
	return nil
}

// stop ends the workers once they finish their jobs.
func (h *h2Workers) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopped {
		h.stopped = true
		close(h.quit)
	}
}
