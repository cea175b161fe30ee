package telemetry

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2025, 3, 1, 13, 4, 5, 123456789, time.UTC)

func proc() *event.Process {
	return &event.Process{PID: 1234, PPID: 1200, Exe: "/usr/bin/curl", Argv: []string{"curl", "https://api.example.com/"}}
}

// sampleEvents has one event of every kind, with every recorded field set.
func sampleEvents() []*event.Event {
	allow := event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByDefault, Reason: "allowed by default"}
	deny := event.Verdict{Action: event.Deny, Rule: "deny_hosts", Reason: "evil.example is listed in deny_hosts", DecidedBy: event.DecidedByRule}
	return []*event.Event{
		{Time: t0, Kind: event.KindSessionStart, Session: "7f3a9c01", Verdict: allow, SessionInfo: &event.Session{
			ID: "7f3a9c01", Agent: "claude", Command: []string{"claude", "--print", "hi"}, RootPID: 1200, Mode: "proxy",
			ContainerID: "8c046cb0b72cd4c99f51b5591cd5b095967f58ee003710a45280c28ee1a9c7fa", ContainerRuntime: "containerd", PodUID: "fd52ef25-a87d-11e9-9423-0800271a638e"}},
		{Time: t0, Kind: event.KindConnect, Session: "7f3a9c01", Process: proc(), Verdict: allow, Connect: &event.Connect{
			Dst: netip.MustParseAddrPort("127.0.0.2:443"), Host: "api.example.com", Port: 443, Transport: event.TCP, Via: "connect"}},
		{Time: t0, Kind: event.KindConnect, Session: "7f3a9c01", Process: proc(), Verdict: deny, Connect: &event.Connect{
			Dst: netip.MustParseAddrPort("[::1]:8443"), Host: "evil.example", Port: 8443, Transport: event.TCP, Via: "transparent"}},
		{Time: t0, Kind: event.KindTLS, Session: "7f3a9c01", Process: proc(), Verdict: allow, TLS: &event.TLS{
			ServerName: "api.example.com", ALPN: []string{"h2", "http/1.1"}, Version: "1.3", Intercepted: true}},
		{Time: t0, Kind: event.KindHTTP, Session: "7f3a9c01", Process: proc(), Verdict: allow, HTTP: &event.HTTP{
			Method: "GET", URL: "https://api.example.com/v1/x?a=1&b=2", Host: "api.example.com", Proto: "HTTP/2.0", Status: 200, Upgrade: "websocket",
			Secrets: []string{"github-pat"}, Rewrite: &event.Changes{Redacted: map[string]int{"aws-access-token": 2},
				Credentials: []string{"github"}, Headers: []string{"Traceparent", "X-Chaperone-Session"}}}},
		{Time: t0, Kind: event.KindLLM, Session: "7f3a9c01", Process: proc(), Verdict: event.Verdict{Action: event.Rewrite, Rule: "redact", DecidedBy: event.DecidedByRule}, LLM: &event.LLM{
			Provider: "anthropic", Model: "claude-sonnet-4", Path: "/v1/messages", Operation: "messages", Stream: true,
			Status: 200, ResponseModel: "claude-sonnet-4-20250514", InputTokens: 12, OutputTokens: 34, CacheReadTokens: 5, CacheCreationTokens: 6,
			FinishReasons: []string{"tool_use"}, ToolCalls: []event.ToolCall{{ID: "toolu_1", Name: "bash"}}, Restored: 1}},
		{Time: t0, Kind: event.KindLLM, Session: "7f3a9c01", Process: proc(), Verdict: event.Verdict{Action: event.Rewrite, Rule: "redact", DecidedBy: event.DecidedByRule}, LLM: &event.LLM{
			Provider: "openai", Model: "gpt-5-codex", Path: "/v1/responses", Operation: "responses", Stream: true, Status: 101,
			InputTokens: 12, OutputTokens: 34, FinishReasons: []string{"completed"}, Restored: 1,
			WebSocket: true, WSMessage: "response.create", WSUnparsed: 2, Rewrite: &event.Changes{Redacted: map[string]int{"github-pat": 1}}}},
		{Time: t0, Kind: event.KindDNS, Session: "7f3a9c01", Process: proc(), Verdict: allow, DNS: &event.DNS{
			Name: "api.example.com", Type: "A", Answers: []netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("::1")}, Rcode: "NOERROR"}},
		{Time: t0, Kind: event.KindFile, Session: "7f3a9c01", Process: proc(), Verdict: event.Verdict{Action: event.Ask, DecidedBy: event.DecidedByHuman}, File: &event.File{
			Path: "/home/u/.ssh/id_ed25519", Access: event.FileRead}},
		{Time: t0, Kind: event.KindExec, Session: "7f3a9c01", Process: proc(), Verdict: allow, Exec: &event.Exec{
			Path: "/usr/bin/git", Argv: []string{"git", "push"}, Cwd: "/work", Digest: "sha256:abcd"}},
		{Time: t0.Add(time.Minute), Kind: event.KindSessionEnd, Session: "7f3a9c01", Verdict: allow, SessionInfo: &event.Session{
			ID: "7f3a9c01", Agent: "claude", Command: []string{"claude"}, RootPID: 1200, Mode: "proxy", ExitCode: 0, Duration: 61234 * time.Millisecond}},
	}
}

// recordable drops what the audit log does not keep, so that
// Record.Event's result can be compared with the original.
func recordable(e *event.Event) *event.Event {
	c := *e
	c.Time = c.Time.UTC()
	if c.Process != nil {
		c.Process = &event.Process{PID: c.Process.PID, PPID: c.Process.PPID, Exe: c.Process.Exe, Argv: c.Process.Argv}
	}
	if c.HTTP != nil {
		h := *c.HTTP
		h.Header = nil
		c.HTTP = &h
	}
	if c.SessionInfo != nil {
		s := *c.SessionInfo
		s.Started = time.Time{}
		s.Duration = s.Duration.Truncate(time.Millisecond)
		if c.Kind == event.KindSessionStart {
			s.ExitCode, s.Duration = 0, 0
		}
		c.SessionInfo = &s
	}
	return &c
}

var cmpEvent = cmp.Options{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b }),
}

func TestRecordRoundTrip(t *testing.T) {
	for _, e := range sampleEvents() {
		t.Run(string(e.Kind)+"/"+e.Verdict.Action.String(), func(t *testing.T) {
			r := RecordOf(e)
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			var back Record
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(r, back); diff != "" {
				t.Errorf("Record -> JSON -> Record (-want +got):\n%s\n%s", diff, b)
			}
			if diff := cmp.Diff(recordable(e), back.Event(), cmpEvent); diff != "" {
				t.Errorf("Event -> Record -> Event (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRecordFields(t *testing.T) {
	tests := []struct {
		name string
		e    *event.Event
		want string
	}{
		{
			name: "minimal connect: always-present fields only",
			e:    &event.Event{Time: t0, Kind: event.KindConnect, Session: "s1", Connect: &event.Connect{}},
			want: `{"time":"2025-03-01T13:04:05.123456789Z","session":"s1","kind":"connect","verdict":"deny","decided_by":"default"}`,
		},
		{
			name: "no session still has the key",
			e:    &event.Event{Time: t0, Kind: event.KindDNS},
			want: `{"time":"2025-03-01T13:04:05.123456789Z","session":"","kind":"dns","verdict":"deny","decided_by":"default"}`,
		},
		{
			name: "local time is written as UTC",
			e:    &event.Event{Time: t0.In(time.FixedZone("x", 3600)), Kind: event.KindFile, Session: "s", Verdict: event.Verdict{Action: event.Allow}, File: &event.File{Path: "/a", Access: event.FileWrite}},
			want: `{"time":"2025-03-01T13:04:05.123456789Z","session":"s","kind":"file","verdict":"allow","decided_by":"default","path":"/a","access":"write"}`,
		},
		{
			name: "http header values never written",
			e: &event.Event{Time: t0, Kind: event.KindHTTP, Session: "s", Process: &event.Process{PID: 5, Cwd: "/work", UID: 1000}, HTTP: &event.HTTP{
				Method: "POST", URL: "https://h/x", Host: "h", Header: map[string][]string{"X-Api-Key": {"sk-verysecret"}, "Content-Type": {"application/json"}}}},
			want: `{"time":"2025-03-01T13:04:05.123456789Z","session":"s","kind":"process","verdict":"allow","decided_by":"default","process":{"pid":5,"ppid":0,"cwd":"/work"},"process_id":1}` + "\n" +
				`{"time":"2025-03-01T13:04:05.123456789Z","session":"s","kind":"http","verdict":"deny","decided_by":"default","process_id":1,"pid":5,"host":"h","method":"POST","url":"https://h/x"}`,
		},
		{
			name: "http that did not complete says why",
			e: &event.Event{Time: t0, Kind: event.KindHTTP, Session: "s", Verdict: event.Verdict{Action: event.Allow}, HTTP: &event.HTTP{
				Method: "GET", URL: "https://h/x", Host: "h", Status: 200, Error: "upstream reset the connection after 10 bytes of the body"}},
			want: `{"time":"2025-03-01T13:04:05.123456789Z","session":"s","kind":"http","verdict":"allow","decided_by":"default","host":"h","method":"GET","url":"https://h/x","status":200,"error":"upstream reset the connection after 10 bytes of the body"}`,
		},
		{
			name: "session_end keeps exit code 0",
			e:    &event.Event{Time: t0, Kind: event.KindSessionEnd, Session: "s", SessionInfo: &event.Session{ID: "s"}},
			want: `{"time":"2025-03-01T13:04:05.123456789Z","session":"s","kind":"session_end","verdict":"deny","decided_by":"default","exit_code":0,"duration_ms":0}`,
		},
		{
			name: "session_start has no exit code",
			e:    &event.Event{Time: t0, Kind: event.KindSessionStart, Session: "s", SessionInfo: &event.Session{ID: "s", ExitCode: 3}},
			want: `{"time":"2025-03-01T13:04:05.123456789Z","session":"s","kind":"session_start","verdict":"deny","decided_by":"default"}`,
		},
		{
			name: "payload of another kind is ignored",
			e:    &event.Event{Time: t0, Kind: event.KindTLS, Session: "s", Connect: &event.Connect{Host: "x"}},
			want: `{"time":"2025-03-01T13:04:05.123456789Z","session":"s","kind":"tls","verdict":"deny","decided_by":"default"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			a := newAuditLog(&buf)
			if err := a.Write(tt.e); err != nil {
				t.Fatal(err)
			}
			if err := a.Flush(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want+"\n", buf.String()); diff != "" {
				t.Errorf("line (-want +got):\n%s", diff)
			}
			if strings.Contains(buf.String(), "sk-verysecret") {
				t.Error("a header value reached the audit log")
			}
		})
	}
}

func TestWriteTruncatesHugeRecords(t *testing.T) {
	argv := make([]string, 5000)
	for i := range argv {
		argv[i] = strings.Repeat("\x01", 300) // six bytes each once escaped
	}
	e := &event.Event{Time: t0, Kind: event.KindExec, Session: "s", Process: &event.Process{PID: 1, Argv: argv},
		Exec: &event.Exec{Path: strings.Repeat("p", 2<<20), Argv: argv}}
	var buf bytes.Buffer
	a := newAuditLog(&buf)
	if err := a.Write(e); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if buf.Len() > MaxLineSize {
		t.Fatalf("line is %d bytes, over MaxLineSize", buf.Len())
	}
	var got []Record
	if err := ReadRecords(&buf, Filter{}, func(r Record) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].Truncated || len(got[0].Argv) != truncList+1 || got[0].Process == nil || len(got[0].Process.Argv) > maxProcessArgs+1 {
		t.Errorf("got %d records, truncated=%v", len(got), len(got) == 1 && got[0].Truncated)
	}
	if len(argv[0]) != 300 || len(e.Exec.Path) != 2<<20 {
		t.Error("truncation modified the event")
	}
}

func TestOpenAuditLog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := filepath.Join(dir, "audit.jsonl")
	a, err := OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if a.Path() != path {
		t.Errorf("Path = %q, want %q", a.Path(), path)
	}
	if err := a.Write(sampleEvents()[1]); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := a.Write(sampleEvents()[1]); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close = %v, want ErrClosed", err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, path: 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s has mode %v, want %v", p, fi.Mode(), want)
		}
	}

	// Reopening appends; a partial last line is ended first.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"time":"2025-`)
	f.Close()
	a, err = OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Write(sampleEvents()[2]); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 5 || lines[2] != `{"time":"2025-` || !strings.Contains(lines[4], `"evil.example"`) {
		t.Errorf("after reopening, the file is:\n%s", data)
	}
	// Readers skip the torn line the crash left.
	var hosts []string
	if err := ReadRecords(bytes.NewReader(data), Filter{}, func(r Record) error { hosts = append(hosts, r.Host); return nil }); err != nil {
		t.Errorf("reading the reopened log: %v", err)
	}
	if diff := cmp.Diff([]string{"api.example.com", "evil.example"}, hosts); diff != "" {
		t.Errorf("records read (-want +got):\n%s", diff)
	}

	var nilLog *AuditLog
	if err := nilLog.Close(); err != nil {
		t.Errorf("Close on nil: %v", err)
	}
}

func TestRunConcurrentPublishers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	bus := event.NewBus()
	sub := bus.Subscribe("audit", event.SubscribeOptions{Lossless: true, Queue: 4}) // small: publishers must wait
	done := make(chan error, 1)
	go func() { done <- a.Run(sub) }()

	const publishers, each = 8, 500
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				bus.Publish(&event.Event{Time: t0, Kind: event.KindConnect, Session: fmt.Sprintf("p%d", p),
					Verdict: event.Verdict{Action: event.Allow}, Connect: &event.Connect{Host: fmt.Sprintf("h%d.example", i), Port: 443}})
			}
		}()
	}
	wg.Wait()
	bus.Close()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]int{}
	if err := ReadRecords(f, Filter{}, func(r Record) error { seen[r.Session+"/"+r.Host]++; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(seen) != publishers*each {
		t.Errorf("%d distinct events written, want %d", len(seen), publishers*each)
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("event %s written %d times", k, n)
		}
	}
}

// Run flushes as soon as its queue is empty, so a reader sees the entry
// while the subscription is still open.
func TestRunFlushesWhenIdle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	bus := event.NewBus()
	sub := bus.Subscribe("audit", event.SubscribeOptions{Lossless: true})
	done := make(chan error, 1)
	go func() { done <- a.Run(sub) }()
	bus.Publish(sampleEvents()[0])

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan Record, 1)
	go Follow(ctx, path, Filter{}, time.Millisecond, func(r Record) error { got <- r; cancel(); return nil })
	select {
	case r := <-got:
		if r.Kind != event.KindSessionStart {
			t.Errorf("kind %q, want session_start", r.Kind)
		}
	case <-ctx.Done():
		t.Fatal("the entry never reached the file while Run was idle")
	}
	bus.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// A write error must not stop Run from draining, or publishers would block.
func TestRunKeepsDrainingAfterError(t *testing.T) {
	a := newAuditLog(failingWriter{})
	bus := event.NewBus()
	sub := bus.Subscribe("audit", event.SubscribeOptions{Lossless: true, Queue: 1})
	done := make(chan error, 1)
	go func() { done <- a.Run(sub) }()
	for range 100 {
		bus.Publish(sampleEvents()[1])
	}
	bus.Close()
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Run = %v, want the write error", err)
	}
	if a.Err() == nil {
		t.Error("Err() = nil after a write error")
	}
	if a.Lost() != 100 {
		t.Errorf("Lost() = %d after every write failed, want 100", a.Lost())
	}
}

func TestReadRecordsErrors(t *testing.T) {
	good := `{"time":"2025-03-01T13:04:05Z","session":"s","kind":"connect","verdict":"allow","decided_by":"default"}`
	tests := []struct {
		name  string
		input string
		want  string
	}{
		{"bad json", good + "\n" + good + "\n{\"time\":}\n", "line 3"},
		{"bad json then more", "{\"time\" 1}\n" + good, "line 1"},
		{"not an object", good + "\n[1,2]\n", "line 2: not a JSON object"},
		{"null", "null\n", "line 1: not a JSON object"},
		{"no kind", `{"time":"2025-03-01T13:04:05Z"}` + "\n", "line 1: no kind"},
		{"unknown verdict", strings.Replace(good, `"allow"`, `"maybe"`, 1) + "\n", "line 1"},
		{"bad time", strings.Replace(good, "2025-03-01T13:04:05Z", "yesterday", 1) + "\n", "line 1"},
		{"garbage in the middle", good + "\ngarbage\n" + good, "line 2"},
		{"too long", good + "\n\n" + `{"kind":"` + strings.Repeat("x", MaxLineSize) + `"}` + "\n", "line 3: longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ReadRecords(strings.NewReader(tt.input), Filter{}, func(Record) error { return nil })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ReadRecords = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// A crash can cut the last line anywhere; it is skipped, never an error.
// Once the writer reopens the log, it ends that line and writes after it.
func TestReadRecordsTornLine(t *testing.T) {
	var lines []string
	for _, e := range sampleEvents()[:3] {
		b, _ := json.Marshal(RecordOf(e))
		lines = append(lines, string(b))
	}
	two := lines[0] + "\n" + lines[1] + "\n"
	tests := []struct {
		name  string
		input string
		want  int
	}{
		{"cut in a string", two + lines[2][:40], 2},
		{"cut after a comma", two + lines[2][:strings.Index(lines[2], ",")+1], 2},
		{"cut after the brace", two + "{", 2},
		{"cut before the newline", two + lines[2], 3},
		{"cut in a CRLF", two + lines[2] + "\r", 3},
		{"unterminated garbage", two + "garb", 2},
		{"unterminated without kind", two + `{"time":"2025-03-01T13:04:05Z"}`, 2},
		{"ended by a reopen", lines[0] + "\n" + lines[1][:50] + "\n" + lines[2] + "\n", 2},
		{"ended by a reopen, then cut again", lines[0][:30] + "\n" + lines[1] + "\n" + lines[2][:9], 1},
		{"only a torn line", lines[0][:10], 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := 0
			err := ReadRecords(strings.NewReader(tt.input), Filter{}, func(Record) error { n++; return nil })
			if err != nil || n != tt.want {
				t.Errorf("ReadRecords: %d records, error %v; want %d, no error", n, err, tt.want)
			}
		})
	}
}

func TestReadRecordsLongLine(t *testing.T) {
	r := RecordOf(&event.Event{Time: t0, Kind: event.KindHTTP, HTTP: &event.HTTP{URL: strings.Repeat("u", MaxLineSize-200)}})
	b, _ := json.Marshal(r)
	var n int
	if err := ReadRecords(bytes.NewReader(append(b, '\n')), Filter{}, func(Record) error { n++; return nil }); err != nil || n != 1 {
		t.Errorf("a %d-byte line: %d records, error %v", len(b), n, err)
	}
}

func TestReadRecordsFilter(t *testing.T) {
	var buf bytes.Buffer
	a := newAuditLog(&buf)
	for _, s := range []string{"s1", "s2", "t1"} {
		for _, e := range sampleEvents() {
			c := *e
			c.Session = s
			a.Write(&c)
		}
	}
	a.Flush()
	data := buf.String() + "\n  \n" // blank lines are skipped
	n := len(sampleEvents())        // one session_end, later than the rest, per session

	tests := []struct {
		name string
		f    Filter
		want int
	}{
		{"all", Filter{}, 3 * n},
		{"session", Filter{Session: "s2"}, n},
		{"session prefix", Filter{Session: "s"}, 2 * n},
		{"kind", Filter{Kinds: []event.Kind{event.KindConnect}}, 6},
		{"kinds", Filter{Kinds: []event.Kind{event.KindConnect, event.KindHTTP}}, 9},
		{"session and kind", Filter{Session: "s1", Kinds: []event.Kind{event.KindConnect}}, 2},
		{"verdict", Filter{Verdicts: []event.Action{event.Deny}}, 3},
		{"verdicts", Filter{Verdicts: []event.Action{event.Deny, event.Ask}}, 6},
		{"verdict and kind", Filter{Verdicts: []event.Action{event.Allow}, Kinds: []event.Kind{event.KindConnect}}, 3},
		{"since", Filter{Since: t0.Add(time.Second)}, 3},
		{"since is inclusive", Filter{Since: t0}, 3 * n},
		{"until", Filter{Until: t0}, 3*n - 3},
		{"until before all", Filter{Until: t0.Add(-time.Nanosecond)}, 0},
		{"since and until", Filter{Since: t0.Add(time.Second), Until: t0.Add(2 * time.Minute), Session: "t"}, 1},
		{"no match", Filter{Session: "nope"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []Record
			if err := ReadRecords(strings.NewReader(data), tt.f, func(r Record) error { got = append(got, r); return nil }); err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.want {
				t.Errorf("%d records, want %d", len(got), tt.want)
			}
			for _, r := range got {
				if !tt.f.Match(r) {
					t.Errorf("record %s/%s does not match the filter", r.Session, r.Kind)
				}
			}
		})
	}

	stop := errors.New("stop")
	n = 0
	err := ReadRecords(strings.NewReader(data), Filter{}, func(Record) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("fn's error: got %v after %d calls, want stop after 1", err, n)
	}
}

func TestFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	lines := make([]string, 0, 4)
	for _, e := range sampleEvents()[:4] {
		b, _ := json.Marshal(RecordOf(e))
		lines = append(lines, string(b))
	}
	if err := os.WriteFile(path, []byte(lines[0]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make(chan Record, 10)
	errc := make(chan error, 1)
	go func() {
		errc <- Follow(ctx, path, Filter{}, time.Millisecond, func(r Record) error { got <- r; return nil })
	}()
	next := func(want event.Kind, host string) {
		t.Helper()
		select {
		case r := <-got:
			if r.Kind != want || r.Host != host {
				t.Fatalf("got %s %q, want %s %q", r.Kind, r.Host, want, host)
			}
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", want)
		}
	}
	next(event.KindSessionStart, "")

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString(lines[1] + "\n")
	next(event.KindConnect, "api.example.com")

	// A line written in two parts is read once, whole.
	half := len(lines[2]) / 2
	f.WriteString(lines[2][:half])
	time.Sleep(20 * time.Millisecond) // several polls see the partial line
	select {
	case r := <-got:
		t.Fatalf("got %v from a partial line", r)
	default:
	}
	f.WriteString(lines[2][half:] + "\n" + lines[3] + "\n")
	next(event.KindConnect, "evil.example")
	next(event.KindTLS, "")

	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Follow after cancel = %v, want nil", err)
	}
}

// Follow waits on a torn last line like on one being written, and skips it
// once the reopened writer ends it.
func TestFollowSkipsTornLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	var lines []string
	for _, e := range sampleEvents()[:3] {
		b, _ := json.Marshal(RecordOf(e))
		lines = append(lines, string(b))
	}
	if err := os.WriteFile(path, []byte(lines[0]+"\n"+lines[1][:40]), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make(chan Record, 10)
	errc := make(chan error, 1)
	go func() {
		errc <- Follow(ctx, path, Filter{}, time.Millisecond, func(r Record) error { got <- r; return nil })
	}()
	a, err := OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	a.Write(sampleEvents()[2])
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// The torn line held lines[1] (api.example.com); the record after it is evil.example's.
	for _, want := range []string{"", "evil.example"} {
		select {
		case r := <-got:
			if r.Host != want {
				t.Errorf("got %s %q, want host %q", r.Kind, r.Host, want)
			}
		case err := <-errc:
			t.Fatalf("Follow = %v before every record was read", err)
		case <-ctx.Done():
			t.Fatalf("timed out waiting for the record of %q", want)
		}
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Follow = %v, want nil", err)
	}
}

func TestFollowWaitsForFileAndReportsBadLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "later.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	var n int
	go func() {
		errc <- Follow(ctx, path, Filter{Kinds: []event.Kind{event.KindTLS}}, time.Millisecond, func(Record) error { n++; return nil })
	}()
	time.Sleep(10 * time.Millisecond)
	var buf bytes.Buffer
	a := newAuditLog(&buf)
	for _, e := range sampleEvents() {
		a.Write(e)
	}
	a.Flush()
	buf.WriteString("garbage\n")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	bad := fmt.Sprintf("line %d", strings.Count(buf.String(), "\n"))
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("Follow = %v, want an error naming %s", err, bad)
	}
	if n != 1 {
		t.Errorf("fn called %d times, want 1 (one tls record)", n)
	}
}

func TestFormatRecord(t *testing.T) {
	ev := sampleEvents()
	tests := []struct {
		e    *event.Event
		want string
	}{
		{ev[0], "13:04:05.123 7f3a9c01 session_start allow   claude proxy container containerd:8c046cb0b72c pod fd52ef25-a87d-11e9-9423-0800271a638e $ claude --print hi\n"},
		{ev[1], "13:04:05.123 7f3a9c01 connect       allow   api.example.com:443 (127.0.0.2:443)  curl[1234]\n"},
		{ev[2], "13:04:05.123 7f3a9c01 connect       deny    evil.example:8443 ([::1]:8443)  curl[1234]  deny_hosts: evil.example is listed in deny_hosts (by rule)\n"},
		{ev[3], "13:04:05.123 7f3a9c01 tls           allow   api.example.com alpn=h2,http/1.1 tls1.3 intercepted  curl[1234]\n"},
		{ev[4], "13:04:05.123 7f3a9c01 http          allow   GET https://api.example.com/v1/x?a=1&b=2 upgrade=websocket → 200  curl[1234]\n"},
		{ev[5], "13:04:05.123 7f3a9c01 llm           rewrite anthropic claude-sonnet-4 /v1/messages  curl[1234]  redact (by rule)\n"},
		{ev[6], "13:04:05.123 7f3a9c01 llm           rewrite openai gpt-5-codex /v1/responses ws response.create  curl[1234]  redact (by rule)\n"},
		{ev[7], "13:04:05.123 7f3a9c01 dns           allow   api.example.com A → 127.0.0.2,::1  curl[1234]\n"},
		{ev[8], "13:04:05.123 7f3a9c01 file          ask     read /home/u/.ssh/id_ed25519  curl[1234]\n"},
		{ev[9], "13:04:05.123 7f3a9c01 exec          allow   /usr/bin/git push  curl[1234]\n"},
		{ev[10], "13:05:05.123 7f3a9c01 session_end   allow   claude exit=0 after 61.234s\n"},
		{&event.Event{Time: t0, Kind: event.KindHTTP, Session: "abc", Verdict: event.Verdict{Action: event.Allow}, HTTP: &event.HTTP{Method: "GET", URL: "https://x/big", Status: 200, Error: "client closed the connection after 5 bytes of the body"}},
			"13:04:05.123 abc http          allow   GET https://x/big → 200 (client closed the connection after 5 bytes of the body)\n"},
		{&event.Event{Time: t0, Kind: event.KindHTTP, Session: "abc", HTTP: &event.HTTP{Method: "GET", URL: "https://x/\x1b[2J"}},
			"13:04:05.123 abc http          deny    GET https://x/\\x1b[2J\n"},
		{&event.Event{Time: t0, Kind: event.KindSessionStart, Session: "abc", SessionInfo: &event.Session{Agent: "sh", Mode: "proxy", Command: []string{"sh", "-c", "\necho " + strings.Repeat("x", 200)}}},
			"13:04:05.123 abc session_start deny    sh proxy $ sh -c echo " + strings.Repeat("x", 100-len("sh -c echo ")-1) + "…\n"},
		{&event.Event{Time: t0, Kind: event.KindConnect, Verdict: event.Verdict{Reason: "not from a managed session"}, Connect: &event.Connect{Dst: netip.MustParseAddrPort("127.0.0.1:80")}},
			"13:04:05.123 - connect       deny    127.0.0.1:80  not from a managed session (by default)\n"},
		{&event.Event{Time: t0, Kind: event.KindWS, Session: "abc", Verdict: event.Verdict{Action: event.Allow}, WS: &event.WS{Host: "mcp.example.com", Path: "/mcp",
			Direction: event.WSSend, Opcode: "text", Size: 94, Text: "not shown", MCPMethod: "tools/call", MCPTool: "search"}},
			"13:04:05.123 abc ws            allow   send text mcp.example.com/mcp 94B tools/call search\n"},
		{&event.Event{Time: t0, Kind: event.KindWS, Session: "abc", Verdict: event.Verdict{Rule: "no-secrets-over-websocket", Reason: "the message carries a secret", DecidedBy: event.DecidedByRule},
			WS: &event.WS{Host: "chat.example.com", Path: "/", Direction: event.WSSend, Opcode: "binary", Size: -1, Secrets: []string{"github-pat"}}},
			"13:04:05.123 abc ws            deny    send binary chat.example.com/ secrets=github-pat  no-secrets-over-websocket: the message carries a secret (by rule)\n"},
	}
	for _, tt := range tests {
		t.Run(string(tt.e.Kind), func(t *testing.T) {
			var b strings.Builder
			FormatRecord(&b, RecordOf(tt.e))
			if diff := cmp.Diff(tt.want, b.String()); diff != "" {
				t.Errorf("FormatRecord (-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzReadRecords(f *testing.F) {
	var buf bytes.Buffer
	a := newAuditLog(&buf)
	for _, e := range sampleEvents() {
		a.Write(e)
	}
	a.Flush()
	evs, _ := foldSession()
	for _, e := range evs {
		a.Write(e)
	}
	a.Flush()
	f.Add(buf.Bytes()) // process records before the records that name them
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		f.Add(append([]byte(nil), sc.Bytes()...))
	}
	for _, s := range []string{"", "\n", "null", "{}", `{"kind":"x","verdict":"nope"}`, `{"kind":"dns","answers":["x"]}`, `{"kind":"connect","dst":"[::1"}`, "{\"kind\":\"a\"}\n{", "{\"kind\":\"a\",\n{\"kind\":\"b\"}\n{\"ki"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = ReadRecords(bytes.NewReader(data), Filter{}, func(r Record) error {
			// Whatever parsed must survive the other paths too.
			_ = r.Event()
			_ = r.Events()
			FormatRecord(io.Discard, r)
			if _, err := json.Marshal(r); err != nil {
				t.Errorf("a parsed record does not marshal: %v", err)
			}
			return nil
		})
	})
}

func BenchmarkAuditWrite(b *testing.B) {
	e := sampleEvents()[4]
	b.Run("encode-only", func(b *testing.B) {
		a := newAuditLog(io.Discard)
		b.ReportAllocs()
		for b.Loop() {
			if err := a.Write(e); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("file", func(b *testing.B) {
		a, err := OpenAuditLog(filepath.Join(b.TempDir(), "audit.jsonl"))
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		b.ReportAllocs()
		for b.Loop() {
			if err := a.Write(e); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("file-via-bus", func(b *testing.B) {
		a, err := OpenAuditLog(filepath.Join(b.TempDir(), "audit.jsonl"))
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		bus := event.NewBus()
		sub := bus.Subscribe("audit", event.SubscribeOptions{Lossless: true})
		done := make(chan error, 1)
		go func() { done <- a.Run(sub) }()
		b.ReportAllocs()
		for b.Loop() {
			bus.Publish(e)
		}
		bus.Close()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	})
}

func TestAuditLogRedactor(t *testing.T) {
	const secret = "s3cr3t-value"
	var buf bytes.Buffer
	a := newAuditLog(&buf)
	a.SetRedactor(func(s string) string { return strings.ReplaceAll(s, secret, "[REDACTED:test:0001]") })
	evs := sampleEvents()
	for _, e := range evs {
		if e.Process != nil {
			e.Process.Argv = []string{"curl", "-H", "Authorization: Bearer " + secret}
		}
		if e.Exec != nil {
			e.Exec.Argv = []string{"git", "push", "https://x:" + secret + "@h/r"}
		}
		if e.SessionInfo != nil {
			e.SessionInfo.Command = []string{"agent", "--key=" + secret}
		}
		if e.HTTP != nil {
			e.HTTP.URL = "https://h/" + secret
		}
		if err := a.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), secret) {
		t.Errorf("the secret is in the log:\n%s", buf.String())
	}
	for _, line := range strings.Split(buf.String(), "\n") {
		if (strings.Contains(line, `"argv"`) || strings.Contains(line, `"command"`) || strings.Contains(line, `"url"`)) &&
			!strings.Contains(line, "[REDACTED:test:0001]") {
			t.Errorf("a record with a command line or URL and no placeholder: %s", line)
		}
	}
	// The events themselves are left as they were.
	for _, e := range evs {
		if e.Process != nil && !strings.Contains(e.Process.Argv[2], secret) {
			t.Errorf("the event's argv was changed: %q", e.Process.Argv)
		}
	}
}

func TestProcessArgvClipped(t *testing.T) {
	many := make([]string, 5000)
	for i := range many {
		many[i] = fmt.Sprintf("tree/d%02d/f%04d.go", i/1000, i%1000)
	}
	long := strings.Repeat("x", 1000)
	for _, tt := range []struct {
		name string
		argv []string
		want []string
	}{
		{"short", []string{"cat", "a", "b"}, []string{"cat", "a", "b"}},
		{"many", append([]string{"cat"}, many...), append(append([]string{"cat"}, many[:31]...), "…(4969 more)")},
		{"long", []string{"echo", long}, []string{"echo", strings.Repeat("x", 256) + "…"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := &event.Event{Kind: event.KindFile, Process: &event.Process{PID: 1, Argv: tt.argv}, File: &event.File{Path: "/x", Access: event.FileRead}}
			if d := cmp.Diff(tt.want, RecordOf(e).Process.Argv); d != "" {
				t.Errorf("argv (-want +got):\n%s", d)
			}
		})
	}
	// The argv of an exec record is the exec's: kept whole.
	e := &event.Event{Kind: event.KindExec, Exec: &event.Exec{Path: "/bin/cat", Argv: many}}
	if got := RecordOf(e).Argv; len(got) != len(many) {
		t.Errorf("exec argv has %d elements, want %d", len(got), len(many))
	}
}

// syncClock is a fake clock for an AuditLog's syncs: it counts syncs and
// holds the scheduled one for the test to run.
type syncClock struct {
	now     time.Time
	syncs   int
	syncErr error
	waits   []time.Duration // each sync scheduled, after how long
	due     func()          // the last one scheduled
	dues    []func()        // every one scheduled
	stopped int
}

// syncLog is an AuditLog on a buffer with a fake clock.
func syncLog(every time.Duration, syncErr error) (*AuditLog, *bytes.Buffer, *syncClock) {
	var buf bytes.Buffer
	a := newAuditLog(&buf)
	c := &syncClock{now: t0, syncErr: syncErr}
	a.sync = func() error { c.syncs++; return c.syncErr }
	a.now = func() time.Time { return c.now }
	a.after = func(d time.Duration, f func()) func() bool {
		c.waits, c.due, c.dues = append(c.waits, d), f, append(c.dues, f)
		return func() bool { c.stopped++; return true }
	}
	a.syncEvery = every
	return a, &buf, c
}

func TestAuditLogSync(t *testing.T) {
	a, buf, c := syncLog(time.Hour, nil)
	write := func(e *event.Event) {
		t.Helper()
		if err := a.Write(e); err != nil {
			t.Fatal(err)
		}
		if err := a.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(step string, syncs int, waits []time.Duration) {
		t.Helper()
		if c.syncs != syncs {
			t.Errorf("%s: %d syncs, want %d", step, c.syncs, syncs)
		}
		if diff := cmp.Diff(waits, c.waits); diff != "" {
			t.Errorf("%s: syncs scheduled (-want +got):\n%s", step, diff)
		}
	}

	a.Flush()
	check("flush of nothing", 0, nil)
	write(sampleEvents()[0])
	check("first flush", 0, []time.Duration{0}) // due at once, never in Flush itself
	c.due()
	check("first sync", 1, []time.Duration{0})
	if buf.Len() == 0 {
		t.Error("synced before writing")
	}

	c.now = c.now.Add(time.Minute)
	write(sampleEvents()[1])
	check("flush within the interval", 1, []time.Duration{0, 59 * time.Minute})
	write(sampleEvents()[2])
	check("flush with a sync due", 1, []time.Duration{0, 59 * time.Minute})

	// Close syncs what is left and cancels the sync due.
	due := c.due
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	check("Close", 2, []time.Duration{0, 59 * time.Minute})
	if c.stopped != 1 {
		t.Errorf("Close stopped %d scheduled syncs, want 1", c.stopped)
	}
	due() // as if the cancelled timer had fired anyway
	check("a sync due after Close", 2, []time.Duration{0, 59 * time.Minute})
	if n := strings.Count(buf.String(), "\n") - strings.Count(buf.String(), `"kind":"process"`); n != 3 {
		t.Errorf("%d lines of events written, want 3", n)
	}

	// A log synced since its last write has nothing to sync at Close.
	a, _, c = syncLog(time.Hour, nil)
	write(sampleEvents()[0])
	c.due()
	if err := a.Close(); err != nil || c.syncs != 1 {
		t.Errorf("Close after a sync: %d syncs, error %v; want 1, nil", c.syncs, err)
	}

	// Neither a plain writer nor a device is synced.
	var plain bytes.Buffer
	p := newAuditLog(&plain)
	p.Write(sampleEvents()[0])
	if err := p.Flush(); err != nil || p.stopSync != nil {
		t.Errorf("a plain writer: error %v, sync scheduled %v", err, p.stopSync != nil)
	}
	if dev, err := OpenAuditLog(os.DevNull); err == nil {
		if dev.sync != nil {
			t.Error("a device would be synced")
		}
		dev.Close()
	}
}

// The timer that syncs an AuditLog opened on a file, and Close, work
// together under the race detector.
func TestAuditLogSyncFile(t *testing.T) {
	a, err := OpenAuditLog(filepath.Join(t.TempDir(), "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	a.syncEvery = time.Millisecond
	for range 50 {
		a.Write(sampleEvents()[1])
		if err := a.Flush(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Microsecond)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Err(); err != nil {
		t.Errorf("Err = %v", err)
	}
}

// A failed fsync may have lost lines: the log reports it and stops.
func TestAuditLogSyncError(t *testing.T) {
	a, _, c := syncLog(time.Hour, errors.New("input/output error"))
	a.Write(sampleEvents()[0])
	a.Flush()
	c.due()
	if err := a.Err(); err == nil || !strings.Contains(err.Error(), "sync audit log: input/output error") {
		t.Fatalf("Err = %v, want the sync error", err)
	}
	if err := a.Write(sampleEvents()[1]); err == nil {
		t.Error("Write after a sync error succeeded")
	}
	if a.Lost() != 1 {
		t.Errorf("Lost = %d, want 1", a.Lost())
	}

	// At Close, the sync error is Close's.
	a, _, _ = syncLog(time.Hour, errors.New("input/output error"))
	a.Write(sampleEvents()[0])
	if err := a.Close(); err == nil || !strings.Contains(err.Error(), "sync audit log") {
		t.Errorf("Close = %v, want the sync error", err)
	}
}

// Lines are written whole: a buffer that fills is written out before the
// line that would not fit, so no write ends inside a line.
func TestAuditLogWritesWholeLines(t *testing.T) {
	var w recordingWriter
	a := newAuditLog(&w)
	e := *sampleEvents()[4]
	h := *e.HTTP
	for i := range 400 {
		h.URL = "https://api.example.com/" + strings.Repeat("x", i*7%1000)
		e.HTTP = &h
		if err := a.Write(&e); err != nil {
			t.Fatal(err)
		}
	}
	big := e
	bh := h
	bh.URL = strings.Repeat("y", 2*outSize)
	big.HTTP = &bh
	a.Write(&big)
	a.Write(&e)
	a.Flush()
	if len(w.writes) < 3 {
		t.Fatalf("%d writes, want several", len(w.writes))
	}
	lines := 0
	for i, b := range w.writes {
		if len(b) == 0 || b[len(b)-1] != '\n' {
			t.Errorf("write %d of %d bytes does not end a line", i, len(b))
		}
		if len(b) > outSize && bytes.Count(b, []byte("\n")) > 1 {
			t.Errorf("write %d is %d bytes, over the buffer, and not a single line", i, len(b))
		}
		lines += bytes.Count(b, []byte("\n"))
	}
	if lines != 403 {
		t.Errorf("%d lines written, want 403: a process record and 402 events", lines)
	}
}

type recordingWriter struct{ writes [][]byte }

func (w *recordingWriter) Write(b []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(b))
	return len(b), nil
}

// A process's record is made, clipped and redacted once; each record still
// names its own process when processes alternate. Records of no session
// carry their process inline.
func TestAuditLogProcessRecordPerProcess(t *testing.T) {
	const secret = "s3cr3t-value"
	var buf bytes.Buffer
	a := newAuditLog(&buf)
	cat := &event.Process{PID: 10, Exe: "/bin/cat", Argv: []string{"cat", "--token=" + secret, "a"}}
	sh := &event.Process{PID: 11, Exe: "/bin/sh", Argv: []string{"sh", "-c", "x"}}
	argvRedacted := 0 // calls for an argument of either
	a.SetRedactor(func(s string) string {
		if slices.Contains(cat.Argv, s) || slices.Contains(sh.Argv, s) {
			argvRedacted++
		}
		return strings.ReplaceAll(s, secret, "[REDACTED:test:0001]")
	})
	order := []*event.Process{cat, cat, sh, cat, nil, sh}
	for i, p := range order {
		e := &event.Event{Kind: event.KindFile, Session: "s", Process: p, File: &event.File{Path: fmt.Sprintf("/f%d", i), Access: event.FileRead}}
		if err := a.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	var recs []Record
	if err := ReadRecords(&buf, Filter{}, func(r Record) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(order) {
		t.Fatalf("%d records, want %d", len(recs), len(order))
	}
	for i, p := range order {
		got := recs[i].Process
		switch {
		case p == nil && got != nil:
			t.Errorf("record %d: process %+v, want none", i, got)
		case p == nil:
		case got == nil || got.PID != p.PID || got.Argv[0] != p.Argv[0]:
			t.Errorf("record %d: process %+v, want pid %d %q", i, got, p.PID, p.Argv[0])
		case p == cat && got.Argv[1] != "--token=[REDACTED:test:0001]":
			t.Errorf("record %d: argv %q not redacted", i, got.Argv)
		}
	}
	if cat.Argv[1] != "--token="+secret {
		t.Errorf("the event's argv was changed: %q", cat.Argv)
	}
	if want := len(cat.Argv) + len(sh.Argv); argvRedacted != want {
		t.Errorf("argv elements redacted %d times, want %d: once per process however they alternate", argvRedacted, want)
	}

	// The records kept are bounded.
	for i := range maxProcRecs + 10 {
		p := &event.Process{PID: 100 + i, Exe: "/bin/true", Argv: []string{"true"}}
		if err := a.Write(&event.Event{Kind: event.KindFile, Session: "s", Process: p, File: &event.File{Path: "/x", Access: event.FileRead}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(a.procIDs); n > maxProcRecs {
		t.Errorf("%d process records kept, want at most %d", n, maxProcRecs)
	}
}
