package upstream

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/gorilla/websocket"
)

// MaxBytes caps what /bytes?n=N will send.
const MaxBytes = 1 << 30

// DefaultHandler returns the handler a Server uses when Options.Handler is
// nil. name appears in its greeting. It serves:
//
//	/bytes?n=N    N bytes (N ≤ MaxBytes), streamed from a small buffer
//	/echo         the request body, with the request's Content-Type
//	/status/NNN   an empty response with status NNN (200–599)
//	/headers      the request headers as a JSON object of string arrays
//	/ws           a WebSocket that echoes every message back
//	anything else 200 text/plain "hello from NAME via PROTO\n"
//
// Mount it beside other handlers (GitHandler, say) with an http.ServeMux.
func DefaultHandler(name string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "hello from %s via %s\n", name, r.Proto)
	})
	mux.HandleFunc("/bytes", serveBytes)
	mux.HandleFunc("/echo", serveEcho)
	mux.HandleFunc("/status/{code}", serveStatus)
	mux.HandleFunc("/headers", serveHeaders)
	mux.HandleFunc("/ws", serveWebSocket)
	return mux
}

func serveBytes(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
	if err != nil || n < 0 || n > MaxBytes {
		http.Error(w, fmt.Sprintf("n must be an integer from 0 to %d", MaxBytes), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	if r.Method == http.MethodHead {
		return
	}
	buf := make([]byte, 32<<10)
	for i := range buf {
		buf[i] = 'a' + byte(i%26)
	}
	for n > 0 {
		k, err := w.Write(buf[:min(n, int64(len(buf)))])
		if err != nil {
			return // client went away
		}
		n -= int64(k)
	}
}

func serveEcho(w http.ResponseWriter, r *http.Request) {
	// Full duplex lets an HTTP/1 client stream a body larger than the
	// buffers while reading the echo; HTTP/2 is always full duplex.
	_ = http.NewResponseController(w).EnableFullDuplex()
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	if r.ContentLength >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(r.ContentLength, 10))
	}
	_, _ = io.Copy(w, r.Body) // an error means the client went away
}

func serveStatus(w http.ResponseWriter, r *http.Request) {
	code, err := strconv.Atoi(r.PathValue("code"))
	if err != nil || code < 200 || code > 599 {
		http.Error(w, "status must be from 200 to 599", http.StatusBadRequest)
		return
	}
	w.WriteHeader(code)
}

func serveHeaders(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(r.Header)
}

func serveWebSocket(w http.ResponseWriter, r *http.Request) {
	up := websocket.Upgrader{
		// Test clients and proxies send any Origin; this server has nothing
		// to protect.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	conn, err := up.Upgrade(w, r, nil) // on error Upgrade has already replied
	if err != nil {
		return
	}
	defer conn.Close()
	for {
		typ, msg, err := conn.ReadMessage()
		if err != nil {
			return
		}
		if err := conn.WriteMessage(typ, msg); err != nil {
			return
		}
	}
}
