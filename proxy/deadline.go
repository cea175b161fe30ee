package proxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// deadlineWatch expires timed waits on connections: one timer for all of
// them, where a read deadline set and cleared around every request would
// cost two updates of the runtime's timers each time (measured: 4% of the
// proxy's time at 13,000 requests/s). A wait expires within tick of its
// due time: its connection's reads fail with a timeout from then on.
type deadlineWatch struct {
	epoch time.Time
	tick  time.Duration

	mu  sync.Mutex
	set map[*deadline]struct{}
	t   *time.Timer // nil while the set is empty
}

// deadline is one connection's timed wait.
type deadline struct {
	// due is when the wait ends, as deadlineWatch counts time (> 0), or
	// deadlineNone, deadlineExpired or a negative state of the owner's.
	due    atomic.Int64
	conn   net.Conn // the connection whose reads fail when the wait expires
	writes bool     // its writes fail too
}

const (
	deadlineNone    = 0
	deadlineExpired = -1 // expired by the watch: the connection is spent
)

// newDeadlineWatch returns a watch for waits of shortest or longer.
func newDeadlineWatch(shortest time.Duration) *deadlineWatch {
	return &deadlineWatch{epoch: time.Now(), tick: min(max(shortest/8, 5*time.Millisecond), time.Second)}
}

// at is when a wait of d that starts now ends; always > 0.
func (w *deadlineWatch) at(d time.Duration) int64 { return int64(time.Since(w.epoch) + d) }

// arm starts a wait of d on dl.
func (w *deadlineWatch) arm(dl *deadline, d time.Duration) { dl.due.Store(w.at(d)) }

// disarm ends dl's wait and reports whether the watch had expired it.
func (dl *deadline) disarm() (expired bool) { return dl.due.Swap(deadlineNone) == deadlineExpired }

func (w *deadlineWatch) add(dl *deadline) {
	w.mu.Lock()
	if w.set == nil {
		w.set = make(map[*deadline]struct{})
	}
	w.set[dl] = struct{}{}
	if w.t == nil {
		w.t = time.AfterFunc(w.tick, w.check)
	}
	w.mu.Unlock()
}

func (w *deadlineWatch) remove(dl *deadline) {
	w.mu.Lock()
	delete(w.set, dl)
	w.mu.Unlock()
}

// check expires the waits past due.
func (w *deadlineWatch) check() {
	now := int64(time.Since(w.epoch))
	var expired []*deadline
	w.mu.Lock()
	for dl := range w.set {
		if d := dl.due.Load(); d > 0 && now >= d && dl.due.CompareAndSwap(d, deadlineExpired) {
			expired = append(expired, dl)
		}
	}
	if len(w.set) > 0 {
		w.t.Reset(w.tick)
	} else {
		w.t = nil
	}
	w.mu.Unlock()
	for _, dl := range expired {
		if dl.writes {
			dl.conn.SetDeadline(time.Unix(1, 0))
		} else {
			dl.conn.SetReadDeadline(time.Unix(1, 0))
		}
	}
}

// stallWriter writes to a connection; a write that makes no progress for
// timeout (a peer that stopped reading) fails, and so does every later
// read and write of the connection: its watch sets the deadline in the
// past. Its deadline must be added to the watch.
type stallWriter struct {
	w       io.Writer
	g       gatherer // beneath w when w is TLS: a write of several records goes out as one
	watch   *deadlineWatch
	dl      deadline
	timeout time.Duration
}

// newStallWriter returns a stallWriter of w, whose deadlines raw keeps.
func newStallWriter(w io.Writer, raw net.Conn, watch *deadlineWatch, timeout time.Duration) stallWriter {
	return stallWriter{w: w, watch: watch, dl: deadline{conn: raw, writes: true}, timeout: timeout}
}

func (s *stallWriter) Write(b []byte) (int, error) {
	s.watch.arm(&s.dl, s.timeout)
	gather := s.g != nil && len(b) > maxPlaintext
	if gather {
		s.g.gather(true)
	}
	n, err := s.w.Write(b)
	if gather {
		if gerr := s.g.gather(false); err == nil {
			err = gerr
		}
	}
	s.dl.disarm()
	return n, err
}
