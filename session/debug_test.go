package session

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
)

func TestStartDebugRefuses(t *testing.T) {
	for _, addr := range []string{"", "0.0.0.0:0", "localhost:6060", "192.0.2.1:6060", "127.0.0.1"} {
		t.Run(addr, func(t *testing.T) {
			var logs bytes.Buffer
			stop := startDebug(addr, nil, slog.New(slog.NewTextHandler(&logs, nil)))
			defer stop()
			if addr != "" && !strings.Contains(logs.String(), "debug listener not started") {
				t.Errorf("%q: no warning logged; logs:\n%s", addr, logs.String())
			}
			if addr == "" && logs.Len() > 0 {
				t.Errorf("unset address logged:\n%s", logs.String())
			}
		})
	}
}

func TestServeDebug(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := serveDebug(ln, nil)
	defer stop()
	base := "http://" + ln.Addr().String() + "/debug/chaperone/"
	get := func(path string) []byte {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d, %v", path, resp.StatusCode, err)
		}
		return b
	}
	var v debugVars
	if err := json.Unmarshal(get("vars"), &v); err != nil {
		t.Fatal(err)
	}
	if v.PID != os.Getpid() || v.Goroutines < 2 || v.HeapAlloc == 0 {
		t.Errorf("vars %+v: want this process, its goroutines and heap", v)
	}
	if runtime.GOOS == "linux" && v.FDs < 3 {
		t.Errorf("fds = %d, want at least stdin, stdout, stderr", v.FDs)
	}
	if v.RedirectEntries != -1 {
		t.Errorf("redirect_entries = %d without a transparent session, want -1", v.RedirectEntries)
	}
	if g := string(get("goroutines")); !strings.Contains(g, "goroutine profile: total") || !strings.Contains(g, "TestServeDebug") {
		t.Errorf("goroutines dump does not show this test:\n%.500s", g)
	}
	if len(get("heap")) == 0 {
		t.Error("empty heap profile")
	}
	// A profile is gzipped protobuf.
	if p := get("cpu?seconds=1"); len(p) < 2 || p[0] != 0x1f || p[1] != 0x8b {
		t.Errorf("cpu profile of %d bytes is not gzipped: % x", len(p), p[:min(len(p), 8)])
	}
}
