package h2

import (
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"time"
)

// h2Workers runs HTTP/2 requests' handlers on long-lived goroutines. A
// goroutine started for every request has a small stack, grown, and
// copied, as the handler goes deeper (measured: a tenth of the proxy's
// time per HTTP/2 request); a worker's stack has grown once. A worker left
// without a job for idle ends, so a burst's workers do not outlive it.
type Workers struct {
	log  *slog.Logger
	jobs chan func()
	quit chan struct{}
	max  int
	idle time.Duration

	mu      sync.Mutex
	n       int  // workers running
	stopped bool // no new workers; quit is closed
}

// h2WorkerIdle is how long a worker waits for its next job before it ends.
const workerIdle = 10 * time.Second

func NewWorkers(max int, log *slog.Logger) *Workers {
	return &Workers{log: log, jobs: make(chan func()), quit: make(chan struct{}), max: max, idle: workerIdle}
}

// start runs f on an idle worker, on a new one, or, when all are busy and
// no more may start (or the pool is stopped), on a goroutine of its own.
// A panic of f's is logged (but for http.ErrAbortHandler) and ends there.
func (h *Workers) Start(f func()) {
	select {
	case h.jobs <- f:
		return
	default:
	}
	h.mu.Lock()
	worker := !h.stopped && h.n < h.max
	if worker {
		h.n++
	}
	h.mu.Unlock()
	if worker {
		go h.work(f)
	} else {
		go h.run(f)
	}
}

func (h *Workers) work(f func()) {
	idle := time.NewTimer(h.idle)
	defer idle.Stop()
	for {
		h.run(f)
		idle.Reset(h.idle)
		select {
		case f = <-h.jobs:
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

// run calls f; the stack of a panic other than http.ErrAbortHandler is
// logged here, where it happened.
func (h *Workers) run(f func()) {
	defer func() {
		if v := recover(); v != nil && v != http.ErrAbortHandler {
			buf := make([]byte, 64<<10)
			h.log.Error("proxy: handler panicked", "panic", v, "stack", string(buf[:runtime.Stack(buf, false)]))
		}
	}()
	f()
}

// stop ends the workers once they finish their jobs.
func (h *Workers) Stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopped {
		h.stopped = true
		close(h.quit)
	}
}
