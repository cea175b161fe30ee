package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// testAddr is this package's tests' loopback address (127.0.39.0/24 is
// theirs).
const testAddr = "127.0.39.1:0"

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// writeLog writes events to the audit log at path (appending) with the
// real writer.
func writeLog(tb testing.TB, path string, events ...*event.Event) {
	tb.Helper()
	a, err := telemetry.OpenAuditLog(path)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range events {
		if err := a.Write(e); err != nil {
			tb.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		tb.Fatal(err)
	}
}

func proc(pid, ppid int, exe string, lineage ...string) *event.Process {
	return &event.Process{PID: pid, PPID: ppid, Exe: exe, Argv: []string{filepath.Base(exe), "-x"}, LineageNames: lineage}
}

func sessionStart(id string, at time.Time, rootPID int) *event.Event {
	return &event.Event{Time: at, Kind: event.KindSessionStart, Session: id, Verdict: event.Verdict{Action: event.Allow},
		SessionInfo: &event.Session{ID: id, Agent: "claude", Command: []string{"claude", "-p", "hi"}, RootPID: rootPID, Mode: "proxy"}}
}

func sessionEnd(id string, at time.Time, rootPID int) *event.Event {
	return &event.Event{Time: at, Kind: event.KindSessionEnd, Session: id, Verdict: event.Verdict{Action: event.Allow},
		SessionInfo: &event.Session{ID: id, Agent: "claude", Command: []string{"claude", "-p", "hi"}, RootPID: rootPID, Mode: "proxy", Duration: time.Minute}}
}

func httpEv(id string, at time.Time, p *event.Process, url string, deny bool) *event.Event {
	v := event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByDefault}
	if deny {
		v = event.Verdict{Action: event.Deny, Rule: "no-evil", Reason: "evil host", DecidedBy: event.DecidedByRule}
	}
	u, _ := neturlParse(url)
	return &event.Event{Time: at, Kind: event.KindHTTP, Session: id, Process: p, Verdict: v,
		HTTP: &event.HTTP{Method: "GET", URL: url, Host: u, Proto: "HTTP/1.1", Status: 200}}
}

func neturlParse(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}

func execEv(id string, at time.Time, p *event.Process, argv ...string) *event.Event {
	return &event.Event{Time: at, Kind: event.KindExec, Session: id, Process: p, Verdict: event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByDefault},
		Exec: &event.Exec{Path: "/usr/bin/" + argv[0], Argv: argv, Program: "/usr/bin/" + argv[0]}}
}

func dnsEv(id string, at time.Time, p *event.Process, name string, deny bool) *event.Event {
	v := event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByDefault}
	if deny {
		v = event.Verdict{Action: event.Deny, Rule: "no-dns", DecidedBy: event.DecidedByRule}
	}
	return &event.Event{Time: at, Kind: event.KindDNS, Session: id, Process: p, Verdict: v, DNS: &event.DNS{Name: name, Type: "A"}}
}

// testServer is a Server served by httptest on this package's address,
// and a client signed in with its token.
type testServer struct {
	s      *Server
	base   string // http://127.0.39.1:PORT
	client *http.Client
}

// newTestServer serves a new Server over o with httptest and signs in.
// The logs are read once; call s.Poll to read more.
func newTestServer(t *testing.T, o Options) *testServer {
	t.Helper()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	base := httptestServer(t, s.Handler())
	s.Poll()
	tsrv := &testServer{s: s, base: base}
	tsrv.client = tsrv.signIn(t)
	return tsrv
}

// startTestServer starts a Server with o on testAddr, polling its logs
// every 10 ms, as chaperone ui does (its own listener and poller), and
// signs a client in.
func startTestServer(t *testing.T, o Options) *testServer {
	t.Helper()
	o.Listen, o.Poll = testAddr, 10*time.Millisecond
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ts := &testServer{s: s, base: s.URL()[:strings.Index(s.URL(), "/?")]}
	ts.client = ts.signIn(t)
	return ts
}

// signIn uses the server's token and returns a client holding the cookie.
func (ts *testServer) signIn(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	resp, err := c.Get(ts.base + "/?token=" + ts.s.token)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sign in: status %d", resp.StatusCode)
	}
	return c
}

// getJSON gets path and decodes its JSON answer into v, which must come
// with status want.
func (ts *testServer) getJSON(t *testing.T, path string, want int, v any) {
	t.Helper()
	resp, err := ts.client.Get(ts.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: status %d, want %d: %s", path, resp.StatusCode, want, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET %s: Content-Type %q, want application/json", path, ct)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, b)
		}
	}
}

// sseEvent is one server-sent event.
type sseEvent struct {
	name string
	data string
}

// openStream connects to the stream at url with client c and returns its
// events on a channel (closed when the stream ends), and a function that
// disconnects (also called at the test's end).
func openStream(t *testing.T, c *http.Client, url string) (<-chan sseEvent, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	cc := *c
	cc.Timeout = 0
	resp, err := cc.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		t.Fatalf("stream: status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ch := make(chan sseEvent, 1024)
	done := make(chan struct{})
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			resp.Body.Close()
			<-done
		})
	}
	t.Cleanup(stop)
	go func() {
		defer close(done)
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 4<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" {
					ch <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.name = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[len("data: "):]
			}
		}
	}()
	return ch, stop
}

// waitEvent returns the first event of ch that match accepts, failing
// after a deadline.
func waitEvent(t *testing.T, ch <-chan sseEvent, what string, match func(sseEvent) bool) sseEvent {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended before %s", what)
			}
			if match(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s on the stream within 10 s", what)
		}
	}
}

func seqs(events []map[string]any) []int {
	out := []int{}
	for _, e := range events {
		out = append(out, int(e["seq"].(float64)))
	}
	return out
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(fmt.Sprint("must: ", err))
	}
	return v
}

// httptestServer serves h with httptest on this package's address and
// returns its base URL.
func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	ts := httptest.NewUnstartedServer(h)
	ln, err := net.Listen("tcp", testAddr)
	if err != nil {
		t.Fatal(err)
	}
	ts.Listener.Close()
	ts.Listener = ln
	ts.Start()
	t.Cleanup(ts.Close)
	return ts.URL
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
