package ui

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Stream bounds: the frames a page may have waiting before it is dropped,
// and how often an idle stream is pinged.
const (
	clientQueue  = 1024
	pingInterval = 15 * time.Second
)

// hub fans the server's events out to the pages connected to
// /api/stream. publish never blocks: a page whose queue is full is
// dropped (its stream ends; EventSource reconnects) and counted.
type hub struct {
	log     *slog.Logger
	dropped atomic.Int64

	mu      sync.Mutex
	clients map[*client]struct{}
	closed  bool
	// attend is called when the first page connects; the function it
	// returns when the last one leaves.
	attend   func() (release func())
	released func()
}

type client struct {
	session string // records of this session only; "" for all
	ch      chan []byte
	gone    chan struct{} // closed when the hub drops the client
}

func newHub(log *slog.Logger, attend func() func()) *hub {
	return &hub{log: log, clients: map[*client]struct{}{}, attend: attend}
}

// join adds a page's stream.
func (h *hub) join(session string) (*client, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, false
	}
	c := &client{session: session, ch: make(chan []byte, clientQueue), gone: make(chan struct{})}
	h.clients[c] = struct{}{}
	if len(h.clients) == 1 && h.attend != nil {
		h.released = h.attend()
	}
	return c, true
}

// leave removes c, whether or not it was dropped.
func (h *hub) leave(c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removeLocked(c)
}

func (h *hub) removeLocked(c *client) {
	if _, ok := h.clients[c]; !ok {
		return
	}
	delete(h.clients, c)
	close(c.gone)
	if len(h.clients) == 0 && h.released != nil {
		h.released()
		h.released = nil
	}
}

// wantsRecords reports whether any page is connected.
func (h *hub) wantsRecords() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients) > 0
}

// publish sends an event to every page (a record only to the pages that
// follow its session, or every session).
func (h *hub) publish(name, session string, data json.RawMessage) {
	frame := fmt.Appendf(nil, "event: %s\ndata: %s\n\n", name, data)
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.clients {
		if name == "record" && c.session != "" && c.session != session {
			continue
		}
		select {
		case c.ch <- frame:
		default:
			h.dropped.Add(1)
			h.log.Warn("ui: a page fell behind the stream; dropped it", "dropped", h.dropped.Load())
			h.removeLocked(c)
		}
	}
}

// reset tells every page that the logs started over.
func (h *hub) reset() { h.publish("reset", "", json.RawMessage(`{}`)) }

// Dropped counts the pages dropped for falling behind.
func (s *Server) Dropped() int64 { return s.hub.dropped.Load() }

// close ends every stream.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for c := range h.clients {
		h.removeLocked(c)
	}
}

func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		apiError(w, http.StatusInternalServerError, "ui: streaming unsupported")
		return
	}
	c, ok := s.hub.join(r.URL.Query().Get("session"))
	if !ok {
		apiError(w, http.StatusServiceUnavailable, "ui: closing")
		return
	}
	defer s.hub.leave(c)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": chaperone live view\n\n")
	fl.Flush()
	t := time.NewTicker(pingInterval)
	defer t.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.gone:
			return
		case <-t.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return
			}
			fl.Flush()
		case f := <-c.ch:
			if _, err := w.Write(f); err != nil {
				return
			}
			// Write what else is waiting before flushing.
			for more := true; more; {
				select {
				case f := <-c.ch:
					if _, err := w.Write(f); err != nil {
						return
					}
				default:
					more = false
				}
			}
			fl.Flush()
		}
	}
}
