package ui

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/testbrowser"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// The page in a real browser (Debian's chromium, headless), against a
// Server over audit logs the tests write. 127.0.40.0/24 is these tests'.
const browserAddr = "127.0.40.1:0"

var updateShots = flag.Bool("update", false, "write the browser tests' screenshots to docs/ui")

// shotDir is where screenshots go: docs/ui with -update, else a temporary
// directory (each is still checked to be a PNG).
func shotDir(t *testing.T) string {
	if *updateShots {
		return filepath.Join("..", "docs", "ui")
	}
	return t.TempDir()
}

// startBrowserServer starts a Server over logs (polled every 50 ms) on
// this file's address.
func startBrowserServer(t *testing.T, logs ...string) *Server {
	t.Helper()
	s, err := New(Options{Logs: logs, AskDir: t.TempDir(), Listen: browserAddr, Poll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// base is the server's origin, http://127.0.40.1:PORT.
func base(s *Server) string {
	u, _, _ := strings.Cut(s.URL(), "/?token=")
	return u
}

// signedIn opens a browser on s's one-time link and waits for the list.
func signedIn(t *testing.T, s *Server) *testbrowser.Browser {
	t.Helper()
	b := testbrowser.New(t, 1280, 900)
	if code := b.Open(s.URL()); code != 200 {
		t.Fatalf("the token link answered %d", code)
	}
	b.WaitFor("the sessions list", `document.querySelector('#sessions tbody')`, 10*time.Second)
	return b
}

// noPageErrors fails t when the page reported an exception, a console
// error or a CSP violation.
func noPageErrors(t *testing.T, b *testbrowser.Browser) {
	t.Helper()
	if errs := b.Errors(); len(errs) > 0 {
		t.Errorf("the page reported errors:\n%s", strings.Join(errs, "\n"))
	}
}

// fixture writes audit-log events with the real writer.
type fixture struct {
	t    *testing.T
	path string
	at   time.Time
}

// newFixture writes to the log at path, its first event a minute and a
// half ago (a running session's duration then reads as it would).
func newFixture(t *testing.T, path string) *fixture {
	return &fixture{t: t, path: path, at: time.Now().UTC().Add(-90 * time.Second).Truncate(time.Second)}
}

// next is a time 137 ms after the previous one.
func (f *fixture) next() time.Time {
	f.at = f.at.Add(137 * time.Millisecond)
	return f.at
}

func (f *fixture) write(evs ...*event.Event) { writeLog(f.t, f.path, evs...) }

func allow() event.Verdict {
	return event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByDefault}
}

func deny(rule, reason string) event.Verdict {
	return event.Verdict{Action: event.Deny, Rule: rule, Reason: reason, DecidedBy: event.DecidedByRule}
}

func process(pid, ppid int, exe string, argv []string, lineage ...string) *event.Process {
	return &event.Process{PID: pid, PPID: ppid, Exe: exe, Argv: argv, LineageNames: lineage, UID: 1000}
}

// agentSession writes a session of claude: an LLM call whose prompt
// carries two placeholders, a test run whose python reads shared
// libraries (routine: folded) and is refused an SSH key, and a curl to a
// denied host. It is left running.
func (f *fixture) agentSession(id string) {
	claude := process(1200, 1, "/usr/local/bin/claude", []string{"claude", "--print", "fix the tests"}, "claude")
	bash := process(1300, 1200, "/usr/bin/bash", []string{"bash", "-c", "python3 -m pytest -q"}, "claude", "bash")
	py := process(1301, 1300, "/usr/bin/python3.11", []string{"python3", "-m", "pytest", "-q"}, "claude", "bash", "python3.11")
	sh := process(1299, 1200, "/usr/bin/dash", []string{"sh", "-c", "curl -s https://evil.example/x"}, "claude", "sh")
	curl := process(1302, 1299, "/usr/bin/curl", []string{"curl", "-s", "https://evil.example/x"}, "claude", "sh", "curl")
	info := &event.Session{ID: id, Agent: "claude", Command: claude.Argv, RootPID: 1200, Mode: "proxy", UID: 1000,
		Workdir: "/work/repo", Home: "/home/u"}
	ev := func(kind event.Kind, p *event.Process, v event.Verdict) *event.Event {
		return &event.Event{Time: f.next(), Kind: kind, Session: id, Process: p, Verdict: v}
	}
	start := ev(event.KindSessionStart, nil, allow())
	start.SessionInfo = info
	conn := ev(event.KindConnect, claude, allow())
	conn.Connect = &event.Connect{Dst: netip.MustParseAddrPort("127.0.0.2:443"), Host: "api.anthropic.com", Port: 443, Transport: "tcp", Via: "connect"}
	redacted := &event.Changes{Redacted: map[string]int{"aws-access-token": 1, "github-pat": 1}}
	llm := ev(event.KindLLM, claude, event.Verdict{Action: event.Rewrite, Rule: "redact-secrets", Reason: "redacted 2 secrets", DecidedBy: event.DecidedByRule})
	llm.LLM = &event.LLM{Provider: "anthropic", Model: "claude-sonnet-4", Path: "/v1/messages", Operation: "messages", Status: 200,
		ResponseModel: "claude-sonnet-4", InputTokens: 1200, OutputTokens: 340, FinishReasons: []string{"tool_use"},
		ToolCalls: []event.ToolCall{{ID: "toolu_01", Name: "bash"}}, Restored: 1, Rewrite: redacted}
	setPrompt(llm.LLM, "The deploy fails with AWS key [REDACTED:aws-access-token:7f3a9c01] and token [REDACTED:github-pat:c0ffee42]; run the tests and fix them.", 1834*time.Millisecond)
	post := ev(event.KindHTTP, claude, llm.Verdict)
	post.HTTP = &event.HTTP{Method: "POST", URL: "https://api.anthropic.com/v1/messages", Host: "api.anthropic.com", Proto: "HTTP/1.1", Status: 200, Rewrite: redacted}
	run := ev(event.KindExec, bash, allow())
	run.Exec = &event.Exec{Path: "/usr/bin/python3.11", Argv: py.Argv, Program: "/usr/bin/python3.11"}
	var reads []*event.Event
	for i, p := range []string{"/etc/ld.so.cache", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
		"/usr/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libexpat.so.1", "/usr/lib/locale/C.utf8/LC_CTYPE"} {
		for range 1 + i%3 {
			r := ev(event.KindFile, py, allow())
			r.File = &event.File{Path: p, Access: event.FileRead}
			reads = append(reads, r)
		}
	}
	pypi := ev(event.KindHTTP, py, allow())
	pypi.HTTP = &event.HTTP{Method: "GET", URL: "https://pypi.org/simple/requests/", Host: "pypi.org", Proto: "HTTP/2.0", Status: 200}
	key := ev(event.KindFile, py, deny("no-ssh-keys", "agents may not read SSH keys"))
	key.File = &event.File{Path: "/home/u/.ssh/id_ed25519", Access: event.FileRead}
	shExec := ev(event.KindExec, sh, allow())
	shExec.Exec = &event.Exec{Path: "/usr/bin/curl", Argv: curl.Argv, Program: "/usr/bin/curl"}
	q := ev(event.KindDNS, curl, allow())
	q.DNS = &event.DNS{Name: "evil.example", Type: "A", Answers: []netip.Addr{netip.MustParseAddr("192.0.2.7")}, Rcode: "NOERROR"}
	evil := ev(event.KindHTTP, curl, deny("deny_hosts", "evil.example is listed in deny_hosts"))
	evil.HTTP = &event.HTTP{Method: "GET", URL: "https://evil.example/x", Host: "evil.example", Proto: "HTTP/1.1", Status: 403}
	all := []*event.Event{start, conn, llm, post, run}
	all = append(all, reads...)
	all = append(all, pypi, key, shExec, q, evil)
	f.write(all...)
}

// endedSession writes a short session of codex that ended.
func (f *fixture) endedSession(id string) {
	codex := process(2200, 1, "/usr/local/bin/codex", []string{"codex", "exec", "add a README"}, "codex")
	info := &event.Session{ID: id, Agent: "codex", Command: codex.Argv, RootPID: 2200, Mode: "transparent", UID: 1001}
	start := &event.Event{Time: f.next(), Kind: event.KindSessionStart, Session: id, Verdict: allow(), SessionInfo: info}
	get := &event.Event{Time: f.next(), Kind: event.KindHTTP, Session: id, Process: codex, Verdict: allow(),
		HTTP: &event.HTTP{Method: "GET", URL: "https://api.openai.com/v1/models", Host: "api.openai.com", Proto: "HTTP/1.1", Status: 200}}
	endInfo := *info
	endInfo.ExitCode, endInfo.Duration = 0, 2*time.Second
	end := &event.Event{Time: f.next(), Kind: event.KindSessionEnd, Session: id, Verdict: allow(), SessionInfo: &endInfo}
	f.write(start, get, end)
}

// A click on a running session's row opens it even when the row's counts
// change between the press and the release (a cell replaced under the
// pointer would take the click with it).
func TestBrowserClickWhileTheRowChanges(t *testing.T) {
	const id = "c1c0000000a1"
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	f := newFixture(t, log)
	f.agentSession(id)
	s := startBrowserServer(t, log)
	b := signedIn(t, s)
	row := fmt.Sprintf(`#sessions [data-session=%q]`, id)
	cell := row + ` [data-col="requests"]`
	b.WaitFor("the session's row", `document.querySelector('`+cell+`')`, 10*time.Second)
	// A stream of the test's own sees the summary the page is sent.
	testbrowser.Eval[bool](b, `(() => { window.__requests = 0; const es = new EventSource('/api/stream');
		es.addEventListener('open', () => { window.__open = true; });
		es.addEventListener('session', (e) => { window.__requests = JSON.parse(e.data).requests; });
		return true; })()`)
	b.WaitFor("the test's stream", `window.__open`, 10*time.Second)

	release := b.Press(cell)
	p := process(1200, 1, "/usr/local/bin/claude", []string{"claude"}, "claude")
	f.write(&event.Event{Time: f.next(), Kind: event.KindHTTP, Session: id, Process: p, Verdict: allow(),
		HTTP: &event.HTTP{Method: "GET", URL: "https://pypi.org/simple/", Host: "pypi.org", Proto: "HTTP/1.1", Status: 200}})
	b.WaitFor("the new summary", `window.__requests === 4`, 10*time.Second)
	// Ten frames: the page's own stream has had its summary too, and a
	// render of it would have happened.
	testbrowser.Eval[bool](b, `(() => { window.__frames = 0; const tick = () => { if (++window.__frames < 10) requestAnimationFrame(tick); };
		requestAnimationFrame(tick); return true; })()`)
	b.WaitFor("ten frames", `window.__frames >= 10`, 10*time.Second)
	release()
	b.WaitFor("the session opened by the click", `location.hash === '#/s/`+id+`'`, 5*time.Second)
	b.Click(`#crumbs a`)
	b.WaitFor("the list with the new count", `document.querySelector('`+cell+`').innerText === '4'`, 10*time.Second)
	noPageErrors(t, b)
}

// The token is required: without the cookie the page is the 401 page; the
// one-time link signs in, once.
func TestBrowserTokenRequired(t *testing.T) {
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	f := newFixture(t, log)
	f.endedSession("5e55a000e1d0")
	s := startBrowserServer(t, log)

	b := testbrowser.New(t, 1280, 900)
	if code := b.Open(base(s) + "/"); code != 401 {
		t.Errorf("without the cookie / answered %d, want 401", code)
	}
	if got := testbrowser.Eval[string](b, `document.body.innerText`); !strings.Contains(got, "Open the URL that chaperone printed") {
		t.Errorf("the 401 page says %q", got)
	}
	if testbrowser.Eval[bool](b, `document.querySelector('#sessions') !== null`) {
		t.Error("the list is shown without the cookie")
	}
	if code := b.Open(base(s) + "/?token=wrong"); code != 401 {
		t.Errorf("a wrong token answered %d, want 401", code)
	}
	b.Errors() // the 401s, as expected
	if code := b.Open(s.URL()); code != 200 {
		t.Fatalf("the token link answered %d", code)
	}
	b.WaitFor("the session in the list", `document.querySelector('#sessions [data-session="5e55a000e1d0"]')`, 10*time.Second)
	if got := testbrowser.Eval[string](b, `location.href`); got != base(s)+"/" {
		t.Errorf("after the token the page is at %q, want the token gone from the address", got)
	}
	if got := testbrowser.Eval[string](b, `document.cookie`); got != "" {
		t.Errorf("the page's script can read the cookie: %q", got)
	}
	noPageErrors(t, b)

	// The link is good once: another browser using it gets the 401 page.
	other := testbrowser.New(t, 800, 600)
	if code := other.Open(s.URL()); code != 401 {
		t.Errorf("the token used a second time answered %d, want 401", code)
	}
}

// Every field is untrusted: an event whose URL, argv, file path, DNS name,
// model, prompt, tool call and reason carry script renders them as text,
// and no script runs.
func TestBrowserRendersEventsAsText(t *testing.T) {
	const (
		script = `<script>window.__x=1</script>`
		img    = `<img src=x onerror="window.__x=1">`
		id     = "0bad00000001"
	)
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	f := newFixture(t, log)
	p := process(3000, 1, "/tmp/"+img, []string{"sh", "-c", script, img}, "sh"+script, img)
	info := &event.Session{ID: id, Agent: "agent" + img, Command: []string{"sh", "-c", script}, RootPID: 3000, Mode: "proxy"}
	v := deny("rule"+script, "because "+img)
	evs := []*event.Event{
		{Time: f.next(), Kind: event.KindSessionStart, Session: id, Verdict: allow(), SessionInfo: info},
		{Time: f.next(), Kind: event.KindExec, Session: id, Process: p, Verdict: v,
			Exec: &event.Exec{Path: "/tmp/" + script, Argv: []string{"sh", "-c", script, img}}},
		{Time: f.next(), Kind: event.KindHTTP, Session: id, Process: p, Verdict: v,
			HTTP: &event.HTTP{Method: "GET", URL: "https://evil.example/" + script + "?q=" + img, Host: "evil.example", Status: 403}},
		{Time: f.next(), Kind: event.KindFile, Session: id, Process: p, Verdict: v,
			File: &event.File{Path: "/tmp/" + img, Access: event.FileWrite}},
		{Time: f.next(), Kind: event.KindDNS, Session: id, Process: p, Verdict: v,
			DNS: &event.DNS{Name: img + ".example", Type: "A"}},
		{Time: f.next(), Kind: event.KindLLM, Session: id, Process: p, Verdict: allow(),
			LLM: &event.LLM{Provider: "openai", Model: script, ResponseModel: img, Status: 200,
				ToolCalls: []event.ToolCall{{ID: "call_" + img, Name: script}}}},
	}
	setPrompt(evs[len(evs)-1].LLM, "say "+script+" and "+img, time.Second)
	f.write(evs...)
	s := startBrowserServer(t, log)
	b := signedIn(t, s)

	b.WaitFor("the session in the list", fmt.Sprintf(`document.querySelector('#sessions [data-session=%q]')`, id), 10*time.Second)
	b.Click(fmt.Sprintf(`#sessions [data-session=%q]`, id))
	b.WaitFor("its events", `document.querySelectorAll('#events .event').length >= 6`, 10*time.Second)
	b.WaitFor("its tree", `document.querySelector('#tree [data-pid="3000"]')`, 10*time.Second)

	if !testbrowser.Eval[bool](b, `window.__x === undefined`) {
		t.Error("a script from an event ran")
	}
	if n := testbrowser.Eval[int](b, `document.querySelectorAll('img').length`); n != 0 {
		t.Errorf("the page holds %d img elements", n)
	}
	if n := testbrowser.Eval[int](b, `document.querySelectorAll('script').length`); n != 1 {
		t.Errorf("the page holds %d script elements, want app.js alone", n)
	}
	text := testbrowser.Eval[string](b, `document.querySelector('#session').innerText`)
	for _, want := range []string{
		"GET https://evil.example/" + script + "?q=" + img, // the URL
		"sh -c " + script + " " + img,                      // argv
		"/tmp/" + img,                                      // the file
		img + ".example",                                   // the name
		"say " + script + " and " + img,                    // the prompt
		"rule" + script,                                    // the rule
		"because " + img,                                   // the reason
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the session view does not show %q as text", want)
		}
	}
	if tools := testbrowser.Eval[string](b, `document.querySelector('#events .tools').innerText`); !strings.Contains(tools, script) {
		t.Errorf("the tool call shows as %q", tools)
	}
	b.Click("#crumbs a")
	b.WaitFor("the list again", `!document.querySelector('#list-view').hidden`, 10*time.Second)
	if row := testbrowser.Eval[string](b, fmt.Sprintf(`document.querySelector('#sessions [data-session=%q]').innerText`, id)); !strings.Contains(row, "agent"+img) {
		t.Errorf("the list shows the agent as %q", row)
	}
	if !testbrowser.Eval[bool](b, `window.__x === undefined`) {
		t.Error("a script from an event ran")
	}
	noPageErrors(t, b)
}

// The list, then a session: its tree folds, its timeline charts kinds by
// verdict, its events stream in live and filter; a denial shows its rule,
// reason and lineage; routine reads fold into one counted line until
// #show-all. Screenshots of each view.
func TestBrowserSessionView(t *testing.T) {
	const id, ended = "7f3a9c01e5d2", "c0de00000002"
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	f := newFixture(t, log)
	f.endedSession(ended)
	f.agentSession(id)
	s := startBrowserServer(t, log)
	b := signedIn(t, s)
	shots := shotDir(t)

	row := fmt.Sprintf(`#sessions [data-session=%q]`, id)
	b.WaitFor("both sessions", `document.querySelectorAll('#sessions [data-session]').length === 2`, 10*time.Second)
	if first := testbrowser.Eval[string](b, `document.querySelector('#sessions tbody tr').dataset.session`); first != id {
		t.Errorf("the list starts with %s, want the newest, %s", first, id)
	}
	cells := testbrowser.Eval[map[string]string](b, `Object.fromEntries([...document.querySelectorAll('`+row+` [data-col]')].map(c => [c.dataset.col, c.innerText]))`)
	for col, want := range map[string]string{"requests": "3", "denials": "2", "redactions": "2", "llm_calls": "1", "tokens": "1540"} {
		if cells[col] != want {
			t.Errorf("list column %s = %q, want %q", col, cells[col], want)
		}
	}
	if st := testbrowser.Eval[string](b, `document.querySelector('`+row+` .state').innerText`); st != "running" {
		t.Errorf("state %q, want running", st)
	}
	b.Screenshot(shots, "list")

	b.Click(row)
	b.WaitFor("the session view", `location.hash === '#/s/`+id+`' && !document.querySelector('#session').hidden`, 10*time.Second)
	b.WaitFor("the tree", `document.querySelector('#tree [data-pid="1302"]')`, 10*time.Second)
	b.WaitFor("the timeline", `document.querySelector('#timeline rect.bar.v-deny')`, 10*time.Second)
	b.WaitFor("the events", `document.querySelector('#events .event[data-kind="http"][data-verdict="deny"]')`, 10*time.Second)

	t.Run("tree", func(t *testing.T) {
		b := b.For(t)
		names := testbrowser.Eval[string](b, `document.querySelector('#tree').innerText`)
		for _, want := range []string{"claude", "bash", "python3.11", "curl", "curl -s https://evil.example/x"} {
			if !strings.Contains(names, want) {
				t.Errorf("the tree does not show %q:\n%s", want, names)
			}
		}
		b.Click(`#tree [data-pid="1299"] > .proc .toggle`)
		b.WaitFor("sh folded", `!document.querySelector('#tree [data-pid="1302"]')`, 5*time.Second)
		b.Click(`#tree [data-pid="1299"] > .proc .toggle`)
		b.WaitFor("sh unfolded", `document.querySelector('#tree [data-pid="1302"]')`, 5*time.Second)
	})

	t.Run("denial", func(t *testing.T) {
		b := b.For(t)
		sel := `#events .event[data-kind="http"][data-verdict="deny"]`
		reason := testbrowser.Eval[string](b, `document.querySelector('`+sel+` .reason').innerText`)
		if !strings.Contains(reason, "deny_hosts") || !strings.Contains(reason, "by rule") || !strings.Contains(reason, "evil.example is listed in deny_hosts") {
			t.Errorf("the denial's reason reads %q", reason)
		}
		lineage := testbrowser.Eval[string](b, `document.querySelector('`+sel+` .lineage').innerText`)
		if !strings.Contains(lineage, "claude › sh › curl") || !strings.Contains(lineage, "1302") {
			t.Errorf("the denial's lineage reads %q", lineage)
		}
		if c := testbrowser.Eval[string](b, `getComputedStyle(document.querySelector('`+sel+` .verdict')).color`); c != "rgb(207, 34, 46)" {
			t.Errorf("a denial's verdict is coloured %s, want red", c)
		}
	})

	t.Run("timeline", func(t *testing.T) {
		b := b.For(t)
		lanes := testbrowser.Eval[[]string](b, `[...document.querySelectorAll('#timeline g.lane')].map(g => g.dataset.kind)`)
		for _, want := range []string{"http", "llm", "file", "exec", "dns"} {
			if !strings.Contains(strings.Join(lanes, " "), want) {
				t.Errorf("the timeline has no %s lane: %v", want, lanes)
			}
		}
		if n := testbrowser.Eval[int](b, `document.querySelectorAll('#timeline rect.bar.v-deny').length`); n < 2 {
			t.Errorf("%d denied bars, want the http and the file denial", n)
		}
	})
	b.Screenshot(shots, "session")

	t.Run("routine reads", func(t *testing.T) {
		b := b.For(t)
		folded := testbrowser.Eval[string](b, `[...document.querySelectorAll('#events .event.folded')].map(e => e.innerText).join('\n')`)
		if !strings.Contains(folded, "12 routine reads of 6 files") {
			t.Errorf("the folded line reads %q", folded)
		}
		if all := testbrowser.Eval[string](b, `document.querySelector('#events').innerText`); strings.Contains(all, "libexpat.so.1") {
			t.Error("a routine read is shown one by one by default")
		}
		b.Click("#show-all")
		b.WaitFor("every read", `!document.querySelector('#events .event.folded') && document.querySelector('#events').innerText.includes('libexpat.so.1')`, 10*time.Second)
		b.Click("#show-all")
		b.WaitFor("the reads folded again", `document.querySelector('#events .event.folded')`, 10*time.Second)
	})

	t.Run("filters", func(t *testing.T) {
		b := b.For(t)
		b.Select("#filter-verdict", "deny")
		b.WaitFor("denials only", `[...document.querySelectorAll('#events .event')].length === 2 && [...document.querySelectorAll('#events .event')].every(e => e.dataset.verdict === 'deny')`, 10*time.Second)
		b.Screenshot(shots, "denial")
		b.Select("#filter-verdict", "")
		b.Type("#filter-text", "pypi.org")
		b.WaitFor("the text filter", `[...document.querySelectorAll('#events .event')].length === 1 && document.querySelector('#events').innerText.includes('pypi.org/simple')`, 10*time.Second)
		b.Type("#filter-text", "")
		b.WaitFor("the text filter gone", `document.querySelectorAll('#events .event').length > 10`, 10*time.Second)
		b.Click(`#tree [data-pid="1302"] > .proc`)
		b.WaitFor("curl's events", `document.querySelector('#filter-pid').value === '1302' && document.querySelectorAll('#events .event').length === 2`, 10*time.Second)
		b.Click("#filter-clear")
		b.WaitFor("everything again", `document.querySelectorAll('#events .event').length > 10`, 10*time.Second)
	})

	t.Run("live", func(t *testing.T) {
		b := b.For(t)
		before := testbrowser.Eval[int](b, `Math.max(...[...document.querySelectorAll('#events .event')].map(e => +e.dataset.seq))`)
		curl := process(1302, 1299, "/usr/bin/curl", []string{"curl", "-s", "https://evil.example/x"}, "claude", "sh", "curl")
		f.write(&event.Event{Time: f.next(), Kind: event.KindHTTP, Session: id, Process: curl, Verdict: deny("deny_hosts", "live.example is listed in deny_hosts"),
			HTTP: &event.HTTP{Method: "GET", URL: "https://live.example/streamed", Host: "live.example", Status: 403}})
		b.WaitFor("the new record", fmt.Sprintf(`[...document.querySelectorAll('#events .event')].some(e => +e.dataset.seq > %d && e.innerText.includes('live.example/streamed'))`, before), 10*time.Second)
		b.WaitFor("the denial counted", `document.querySelector('#session-head').innerText.includes('3\ndenials')`, 10*time.Second)

		// Routine reads recorded one by one (audit.file_reads: all) come
		// live as one counted line, as a page folds them.
		folded := testbrowser.Eval[int](b, `document.querySelectorAll('#events .event.folded').length`)
		a, err := telemetry.OpenAuditLog(log)
		if err != nil {
			t.Fatal(err)
		}
		a.SetFileReads(true)
		for _, path := range []string{"/usr/lib/x86_64-linux-gnu/libssl.so.3", "/usr/lib/x86_64-linux-gnu/libcrypto.so.3", "/usr/lib/x86_64-linux-gnu/libssl.so.3"} {
			if err := a.Write(&event.Event{Time: f.next(), Kind: event.KindFile, Session: id, Process: curl, Verdict: allow(),
				File: &event.File{Path: path, Access: event.FileRead}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		b.WaitFor("the live reads folded", fmt.Sprintf(`document.querySelectorAll('#events .event.folded').length === %d && document.querySelector('#events').lastChild.innerText.includes('3 routine reads of 2 files')`, folded+1), 10*time.Second)
	})
	noPageErrors(t, b)
}

// An LLM call shows its provider, model, tokens and latency, its prompt's
// last user turn with each placeholder highlighted and labelled by its
// rule, what was restored, and its tool calls linked to the actions they
// caused.
func TestBrowserLLMCall(t *testing.T) {
	const id = "11aa00000003"
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	f := newFixture(t, log)
	f.agentSession(id)
	s := startBrowserServer(t, log)
	b := signedIn(t, s)
	b.Open(base(s) + "/#/s/" + id)
	b.WaitFor("the LLM call", `document.querySelector('#events .event[data-kind="llm"] .llm')`, 10*time.Second)
	b.Select("#filter-kind", "llm")
	b.WaitFor("LLM calls only", `document.querySelectorAll('#events .event').length === 1 && [...document.querySelectorAll('#events .event')].every(e => e.dataset.kind === 'llm')`, 10*time.Second)

	meta := testbrowser.Eval[string](b, `document.querySelector('#events .llm .llm-meta').innerText`)
	for _, want := range []string{"anthropic", "claude-sonnet-4", "1200 in / 340 out", "1.8s", "1 placeholder"} {
		if !strings.Contains(meta, want) {
			t.Errorf("the LLM call's line %q lacks %q", meta, want)
		}
	}
	marks := testbrowser.Eval[[][2]string](b, `[...document.querySelectorAll('#events .prompt mark.placeholder[data-rule]')].map(m => [m.dataset.rule, m.textContent])`)
	want := [][2]string{{"aws-access-token", "[REDACTED:aws-access-token:7f3a9c01]"}, {"github-pat", "[REDACTED:github-pat:c0ffee42]"}}
	if fmt.Sprint(marks) != fmt.Sprint(want) {
		t.Errorf("placeholders marked %v, want %v", marks, want)
	}
	if label := testbrowser.Eval[string](b, `getComputedStyle(document.querySelector('mark.placeholder'), '::before').content`); !strings.Contains(label, "aws-access-token") {
		t.Errorf("the placeholder is labelled %s", label)
	}

	// The tool call links to the rows it caused (telemetry.LinkToolCalls
	// on the server: the exec and what followed from bash).
	b.Select("#filter-kind", "")
	b.WaitFor("every event", `document.querySelectorAll('#events .event').length > 5`, 10*time.Second)
	if n := testbrowser.Eval[int](b, `document.querySelectorAll('#events .event[data-tool-id="toolu_01"]').length`); n == 0 {
		t.Fatal("no event is linked to the tool call toolu_01")
	}
	b.Click(`#events a[data-tool="toolu_01"]`)
	b.WaitFor("the caused rows highlighted", `document.querySelectorAll('#events .event.hl[data-tool-id="toolu_01"]').length > 0 && document.querySelectorAll('#events .event.hl:not([data-tool-id="toolu_01"])').length === 0`, 5*time.Second)
	testbrowser.Eval[bool](b, `(document.querySelector('#events-wrap').scrollTop = document.querySelector('#events .event[data-kind="llm"]').offsetTop, true)`)
	b.Screenshot(shotDir(t), "llm")
	noPageErrors(t, b)
}

// A session of 100,000 events opens from the list and shows its newest
// page; older pages come on demand. The time is logged, not asserted (the
// server's BenchmarkOpenSession measures it).
func TestBrowserBigSession(t *testing.T) {
	const id, n = "b16000000004", 100_000
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	writeBigSession(t, log, id, n)
	s := startBrowserServer(t, log)
	b := signedIn(t, s)
	row := fmt.Sprintf(`#sessions [data-session=%q]`, id)
	b.WaitFor("the big session", `document.querySelector('`+row+`')`, 30*time.Second)
	start := time.Now()
	b.Click(row)
	b.WaitFor("its newest page", fmt.Sprintf(`document.querySelectorAll('#events .event').length === 200 && document.querySelector('#events .event:last-child').dataset.seq === '%d'`, n), 30*time.Second)
	opened := time.Since(start)
	b.WaitFor("its tree and timeline", `document.querySelector('#tree [data-pid="4001"]') && document.querySelector('#timeline rect.bar')`, 30*time.Second)
	all := time.Since(start)
	t.Logf("requests: %s", testbrowser.Eval[string](b, `performance.getEntriesByType('resource').filter(r => r.name.includes('/api/sessions/')).map(r => r.name.replace(location.origin, '') + ' ' + Math.round(r.duration) + ' ms').join('; ')`))
	t.Logf("a %d-event session: newest page shown %v after the click (its request and rendering: %s ms), with its tree and timeline %v",
		n, opened.Round(time.Millisecond), testbrowser.Eval[string](b, `document.body.dataset.eventsLoadedMs`), all.Round(time.Millisecond))
	if got := testbrowser.Eval[string](b, `document.querySelector('#events-count').textContent`); got != fmt.Sprintf("200 shown of %d", n) {
		t.Errorf("the count reads %q", got)
	}
	b.Click("#older")
	b.WaitFor("the page before", fmt.Sprintf(`document.querySelectorAll('#events .event').length === 400 && document.querySelector('#events .event').dataset.seq === '%d'`, n-399), 30*time.Second)
	noPageErrors(t, b)
}

// writeBigSession writes a session of n actions (connects, requests,
// queries, file opens; one in 50 denied) by two processes.
func writeBigSession(t *testing.T, path, id string, n int) {
	t.Helper()
	a, err := telemetry.OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	root := process(4000, 1, "/usr/local/bin/claude", []string{"claude"}, "claude")
	worker := process(4001, 4000, "/usr/bin/make", []string{"make", "-j8"}, "claude", "make")
	at := t0
	write := func(e *event.Event) {
		if err := a.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	write(&event.Event{Time: at, Kind: event.KindSessionStart, Session: id, Verdict: allow(),
		SessionInfo: &event.Session{ID: id, Agent: "claude", Command: []string{"claude"}, RootPID: 4000, Mode: "proxy"}})
	for i := 1; i < n; i++ {
		at = at.Add(3 * time.Millisecond)
		e := &event.Event{Time: at, Session: id, Process: worker, Verdict: allow()}
		if i%7 == 0 {
			e.Process = root
		}
		if i%50 == 0 {
			e.Verdict = deny("no-evil", "evil host")
		}
		switch i % 4 {
		case 0:
			e.Kind, e.HTTP = event.KindHTTP, &event.HTTP{Method: "GET", URL: fmt.Sprintf("https://api.example.com/v1/items/%d", i), Host: "api.example.com", Status: 200}
		case 1:
			e.Kind, e.DNS = event.KindDNS, &event.DNS{Name: fmt.Sprintf("h%d.example.com", i%100), Type: "A"}
		case 2:
			e.Kind, e.File = event.KindFile, &event.File{Path: fmt.Sprintf("/work/repo/src/f%d.go", i%1000), Access: event.FileWrite}
		case 3:
			e.Kind, e.Connect = event.KindConnect, &event.Connect{Host: "api.example.com", Port: 443, Transport: "tcp"}
		}
		write(e)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err == nil {
		t.Logf("the log: %d records, %.1f MB", n, float64(fi.Size())/1e6)
	}
}

// setPrompt records the prompt's last user turn and the latency of an LLM
// call.
func setPrompt(l *event.LLM, prompt string, latency time.Duration) {
	l.Prompt, l.Latency = prompt, latency
}

// A log that starts over (replaced, as by logrotate) takes its sessions
// with it: the list shows what the new log holds.
func TestBrowserLogStartsOver(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "audit.jsonl")
	newFixture(t, log).endedSession("01d000000001")
	s := startBrowserServer(t, log)
	b := signedIn(t, s)
	b.WaitFor("the old session", `document.querySelector('#sessions [data-session="01d000000001"]')`, 10*time.Second)

	next := filepath.Join(dir, "next.jsonl")
	newFixture(t, next).endedSession("2e0000000002")
	if err := os.Rename(next, log); err != nil {
		t.Fatal(err)
	}
	b.WaitFor("only the new log's session", `document.querySelector('#sessions [data-session="2e0000000002"]') && !document.querySelector('#sessions [data-session="01d000000001"]')`, 10*time.Second)
	noPageErrors(t, b)
}
