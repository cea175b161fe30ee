package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"time"
)

// debugAddrEnv names the hidden diagnostics listener of a session: unset
// (the default) means none. It takes a loopback IP literal and port, e.g.
// 127.0.0.1:6060, and exists for soak and leak tests, which must see inside
// the process (goroutines, the redirect map) from outside the session. It
// serves counts and stacks, never events or configuration; still, the agent
// can reach any loopback port through the proxy, so it is not for
// production sessions.
const debugAddrEnv = "CHAPERONE_DEBUG_ADDR"

// debugVars is what /debug/chaperone/vars serves.
type debugVars struct {
	PID        int `json:"pid"`
	Goroutines int `json:"goroutines"`
	// FDs counts /proc/self/fd, less the descriptor reading it.
	FDs int `json:"fds"`
	// RedirectEntries counts the records in the redirect map (connections
	// redirected and not yet taken by the proxy, and UDP sockets'); -1 when
	// the session is not transparent or the count failed.
	RedirectEntries int    `json:"redirect_entries"`
	HeapAlloc       uint64 `json:"heap_alloc"`
	HeapInuse       uint64 `json:"heap_inuse"`
	Sys             uint64 `json:"sys"`
	NumGC           uint32 `json:"num_gc"`
}

// startDebug serves the diagnostics listener at addr when it is a loopback
// address, and returns what stops it. An empty addr starts nothing; a bad
// one is logged and ignored: diagnostics never stop a session.
func startDebug(addr string, ts *transparentSession, log *slog.Logger) (stop func()) {
	stop = func() {}
	if addr == "" {
		return stop
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().IsLoopback() {
		log.Warn("debug listener not started: want a loopback ip:port", "env", debugAddrEnv, "addr", addr)
		return stop
	}
	ln, err := net.Listen("tcp", ap.String())
	if err != nil {
		log.Warn("debug listener not started", "err", err)
		return stop
	}
	log.Debug("debug listener", "addr", ln.Addr().String())
	return serveDebug(ln, ts)
}

// serveDebug serves the diagnostics on ln until the returned func is called.
func serveDebug(ln net.Listener, ts *transparentSession) (stop func()) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/chaperone/vars", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(readDebugVars(ts))
	})
	// runtime/pprof rather than net/http/pprof, whose init registers on
	// http.DefaultServeMux.
	mux.HandleFunc("GET /debug/chaperone/goroutines", func(w http.ResponseWriter, r *http.Request) {
		level, _ := strconv.Atoi(r.URL.Query().Get("debug"))
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		pprof.Lookup("goroutine").WriteTo(w, max(level, 1))
	})
	mux.HandleFunc("GET /debug/chaperone/heap", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		pprof.Lookup("heap").WriteTo(w, 0)
	})
	// A CPU profile over ?seconds= (default 10, at most 120): what the
	// committed default.pgo is made from (docs/performance.md).
	mux.HandleFunc("GET /debug/chaperone/cpu", func(w http.ResponseWriter, r *http.Request) {
		secs, err := strconv.Atoi(r.URL.Query().Get("seconds"))
		if err != nil || secs <= 0 {
			secs = 10
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		if err := pprof.StartCPUProfile(w); err != nil {
			http.Error(w, err.Error(), http.StatusConflict) // one already running
			return
		}
		select {
		case <-time.After(time.Duration(min(secs, 120)) * time.Second):
		case <-r.Context().Done():
		}
		pprof.StopCPUProfile()
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}
}

func readDebugVars(ts *transparentSession) debugVars {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	v := debugVars{
		PID:             os.Getpid(),
		Goroutines:      runtime.NumGoroutine(),
		FDs:             -1,
		RedirectEntries: -1,
		HeapAlloc:       ms.HeapAlloc,
		HeapInuse:       ms.HeapInuse,
		Sys:             ms.Sys,
		NumGC:           ms.NumGC,
	}
	if fds, err := countFDs(); err == nil {
		v.FDs = fds
	}
	if ts != nil && ts.red != nil {
		if n, err := ts.red.MapLen(); err == nil {
			v.RedirectEntries = n
		}
	}
	return v
}

// countFDs counts this process's open descriptors, less the one that
// reads the directory.
func countFDs() (int, error) {
	f, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, fmt.Errorf("count fds: %w", err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil && !errors.Is(err, os.ErrClosed) {
		return 0, fmt.Errorf("count fds: %w", err)
	}
	return len(names) - 1, nil
}
