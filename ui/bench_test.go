package ui

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// bigLog writes one session of n events (http, dns, exec and file
// records by 20 processes, some denied, and every 500th an LLM call that
// asks for a tool) with the real writer.
func bigLog(b *testing.B, n int) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "audit.jsonl")
	a, err := telemetry.OpenAuditLog(path)
	if err != nil {
		b.Fatal(err)
	}
	a.SetFileReads(true)
	procs := make([]*event.Process, 20)
	for i := range procs {
		procs[i] = proc(1000+i, 1000+max(0, i-1), fmt.Sprintf("/usr/bin/tool%d", i), "claude", fmt.Sprintf("tool%d", i))
	}
	write := func(e *event.Event) {
		if err := a.Write(e); err != nil {
			b.Fatal(err)
		}
	}
	write(sessionStart("big", t0, 1000))
	for i := 1; i < n; i++ {
		p := procs[i%len(procs)]
		at := t0.Add(time.Duration(i) * time.Millisecond)
		switch {
		case i%500 == 0:
			write(&event.Event{Time: at, Kind: event.KindLLM, Session: "big", Process: procs[0], Verdict: event.Verdict{Action: event.Allow},
				LLM: &event.LLM{Provider: "anthropic", Model: "claude-x", Operation: "messages", InputTokens: 1000, OutputTokens: 100,
					ToolCalls: []event.ToolCall{{ID: fmt.Sprintf("toolu_%d", i), Name: "Bash"}}}})
		case i%4 == 0:
			write(httpEv("big", at, p, fmt.Sprintf("https://api.example/v1/items/%d", i), i%97 == 0))
		case i%4 == 1:
			write(dnsEv("big", at, p, fmt.Sprintf("h%d.example", i%50), i%89 == 0))
		case i%4 == 2:
			write(execEv("big", at, p, "cc", "-c", fmt.Sprintf("file%d.c", i)))
		default:
			write(&event.Event{Time: at, Kind: event.KindFile, Session: "big", Process: p, Verdict: event.Verdict{Action: event.Allow},
				File: &event.File{Path: fmt.Sprintf("/work/src/file%d.c", i), Access: event.FileRead}})
		}
	}
	if err := a.Close(); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkOpenSession is what opening a session of 100,000 events
// costs: its summary and tree, its newest page of events and its
// timeline, from the server's index ("index"), against reading the
// whole log as `sessions show` does ("read-all", the baseline). The
// log's first indexing is BenchmarkIndexLog.
func BenchmarkOpenSession(b *testing.B) {
	const n = 100_000
	path := bigLog(b, n)
	fi, _ := os.Stat(path)
	b.Logf("log: %d events, %d MB", n, fi.Size()>>20)

	b.Run("index", func(b *testing.B) {
		s, err := New(Options{Logs: []string{path}})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		s.Poll()
		s.cookie = "c"
		h := s.Handler()
		local := &net.TCPAddr{IP: net.IPv4(127, 0, 39, 1), Port: 8080}
		ctx := context.WithValue(context.Background(), http.LocalAddrContextKey, net.Addr(local))
		get := func(path string) {
			r := httptest.NewRequestWithContext(ctx, "GET", "http://127.0.39.1:8080"+path, nil)
			r.AddCookie(&http.Cookie{Name: CookieName, Value: "c"})
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != 200 {
				b.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			get("/api/sessions/big")
			get("/api/sessions/big/events")
			get("/api/sessions/big/timeline?buckets=60")
		}
	})
	b.Run("read-all", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			var recs []telemetry.Record
			err = telemetry.ReadRecords(f, telemetry.Filter{Session: "big"}, func(r telemetry.Record) error {
				recs = append(recs, r)
				return nil
			})
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
			c := telemetry.NewSessionCounter("big")
			for _, r := range recs {
				c.Add(r)
			}
			telemetry.ProcessTree(c.Summary(), recs)
		}
	})
}

// BenchmarkIndexLog is the first read of a 100,000-event log by the
// server's index (what Start does before it serves).
func BenchmarkIndexLog(b *testing.B) {
	path := bigLog(b, 100_000)
	b.ReportAllocs()
	for b.Loop() {
		x := telemetry.NewLogIndex(path)
		if _, err := x.Poll(false); err != nil {
			b.Fatal(err)
		}
		x.Close()
	}
}
