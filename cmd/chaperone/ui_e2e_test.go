package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/testbrowser"
	"github.com/chaperone-dev/chaperone/internal/upstream"
)

// startUI starts `chaperone ui` over w's log on addr and returns the
// one-time link it prints.
func (w *world) startUI(t *testing.T, addr string) string {
	t.Helper()
	cmd := exec.Command(binary, "ui", "--log", w.log, "--ui-listen", addr)
	cmd.Env = baseEnv(w.dir)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// An interrupt ends it, cleanly.
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("chaperone ui after an interrupt: %v; stderr: %s", err, stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Error("chaperone ui still runs 10 s after an interrupt")
			cmd.Process.Kill()
			<-done
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		for sc.Scan() { // keep the pipe drained
		}
	}()
	select {
	case l, ok := <-lines:
		url, found := strings.CutPrefix(l, "live view: ")
		if !ok || !found || !strings.HasPrefix(url, "http://"+strings.TrimSuffix(addr, ":0")+":") || !strings.Contains(url, "/?token=") {
			t.Fatalf("chaperone ui printed %q, want the live view's link; stderr: %s", l, stderr.String())
		}
		return url
	case <-time.After(30 * time.Second):
		t.Fatal("chaperone ui printed no link within 30 s")
	}
	return ""
}

// waitLog polls w's audit log until a line holds all of want, and returns
// when it saw it.
func (w *world) waitLog(t *testing.T, what string, want ...string) time.Time {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile(w.log)
		for _, l := range strings.Split(string(b), "\n") {
			all := l != ""
			for _, s := range want {
				all = all && strings.Contains(l, s)
			}
			if all {
				return time.Now()
			}
		}
	}
	t.Fatalf("no %s in the audit log", what)
	return time.Time{}
}

// A real session watched in the live view: `chaperone ui` started by the
// test, a session started by the test appears in the list within a second
// of its session_start being in the log, its events stream in, and its
// ask, answered on the page with Allow once, lets the agent's request
// through.
func TestUILiveSession(t *testing.T) {
	need(t, "curl")
	if _, err := testbrowser.Binary(); err != nil {
		t.Skipf("no browser for the live view's tests: %v", err)
	}
	w := newWorldAt(t, t.TempDir(), "127.0.40.3", "127.0.40.4")
	link := w.startUI(t, "127.0.40.2:0")
	b := testbrowser.New(t, 1280, 900)
	if code := b.Open(link); code != 200 {
		t.Fatalf("the link answered %d", code)
	}
	b.WaitFor("the stream", `document.querySelector('#conn').dataset.state === 'live'`, 10*time.Second)

	// The agent waits for the test's go, asks for /streamed (allowed),
	// then for /asked, which the policy puts to a person.
	policy := writeAskPolicy(t, w.dir, "60s", "deny", "wait")
	askOnly(t, policy, "/asked")
	flag := filepath.Join(w.dir, "go")
	script := `for i in $(seq 600); do [ -e "$2" ] && break; sleep 0.05; done; curl -sS "$1/streamed"; curl -sS "$1/asked"`
	cmd, out, errb := w.startAskSession(t, policy, nil, "sh", "-c", script, "sh", w.api.URL, flag)

	logged := w.waitLog(t, "session_start", `"kind":"session_start"`)
	id := sessionOf(t, w)
	row := fmt.Sprintf(`#sessions [data-session=%q]`, id)
	b.WaitFor("the session in the list within a second of its session_start in the log", `document.querySelector('`+row+`')`, time.Second-time.Since(logged))
	t.Logf("the session was listed %v after its session_start was in the log", time.Since(logged).Round(time.Millisecond))
	if st := testbrowser.Eval[string](b, `document.querySelector('`+row+` .state').textContent`); st != "running" {
		t.Errorf("the session is %q, want running", st)
	}

	b.Click(row)
	b.WaitFor("the session's route", `location.hash === '#/s/`+id+`'`, 10*time.Second)
	b.WaitFor("the session view", `document.querySelector('#events .event[data-kind="session_start"]')`, 10*time.Second)
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b.WaitFor("the request streamed in", `[...document.querySelectorAll('#events .event[data-kind="http"]')].some(e => e.innerText.includes('/streamed'))`, 30*time.Second)
	// The shell's child that became curl: "dash → curl".
	b.WaitFor("curl in the tree", `[...document.querySelectorAll('#tree .pname')].some(e => e.textContent.endsWith('→ curl'))`, 10*time.Second)
	b.WaitFor("the request in the timeline", `document.querySelector('#timeline g.lane[data-kind="http"] rect.bar')`, 10*time.Second)

	q := `#questions .question[data-id]`
	b.WaitFor("the question", `document.querySelector('`+q+`')`, 30*time.Second)
	summary := testbrowser.Eval[string](b, `document.querySelector('`+q+`').innerText`)
	if !strings.Contains(summary, "/asked") || !strings.Contains(summary, "ask-api") {
		t.Errorf("the question reads %q", summary)
	}
	if title := testbrowser.Eval[string](b, `document.title`); !strings.HasPrefix(title, "(1 waiting)") {
		t.Errorf("the page's title is %q, want it to say a question waits", title)
	}
	b.Screenshot(uiShotDir(t), "question")
	// When the click reaches the page (the browser's clock is this
	// machine's), to when the api receives the request it let through.
	testbrowser.Eval[bool](b, `(document.addEventListener('click', () => { window.__clickedAt = Date.now(); }, true), true)`)
	b.Click(q + ` button[data-answer="once"]`)
	for deadline := time.Now().Add(30 * time.Second); !received(w.api, "/asked"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the api never received the asked request; session stderr:\n%s", errb.String())
		}
	}
	got := time.Now().UnixMilli()
	t.Logf("the api received the asked request %d ms after the click on Allow once", got-testbrowser.Eval[int64](b, `window.__clickedAt`))
	b.WaitFor("the question gone", `!document.querySelector('`+q+`')`, 10*time.Second)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("session: %v\n%s", err, errb.String())
	}
	if got := out.String(); strings.Count(got, "hello from api.e2e.test") != 2 {
		t.Errorf("the agent printed %q, want both answers of the api", got)
	}
	found := false
	for _, r := range w.records() {
		if r.Kind == event.KindHTTP && strings.HasSuffix(r.URL, "/asked") {
			found = r.Verdict == event.Allow && r.DecidedBy == event.DecidedByHuman
		}
	}
	if !found {
		t.Error("the audit log has no /asked request allowed by a person")
	}
	b.WaitFor("the session ended", `document.querySelector('#session-head .state').textContent === 'ended'`, 10*time.Second)
	if errs := b.Errors(); len(errs) > 0 {
		t.Errorf("the page reported errors:\n%s", strings.Join(errs, "\n"))
	}
}

// askOnly narrows the ask policy's rule to requests for path.
func askOnly(t *testing.T, policy, path string) {
	t.Helper()
	b, err := os.ReadFile(policy)
	if err != nil {
		t.Fatal(err)
	}
	const when = `when: host == "api.e2e.test"`
	p := strings.Replace(string(b), when, when+` && http.path == "`+path+`"`, 1)
	if p == string(b) {
		t.Fatal("the ask policy has no rule to narrow")
	}
	if err := os.WriteFile(policy, []byte(p), 0o644); err != nil {
		t.Fatal(err)
	}
}

// received reports whether srv has received a request for path.
func received(srv *upstream.Server, path string) bool {
	for _, r := range srv.Requests() {
		if r.Path == path {
			return true
		}
	}
	return false
}

// uiShotDir is where the screenshots go: docs/ui with -update.
func uiShotDir(t *testing.T) string {
	if *update {
		return filepath.Join("..", "..", "docs", "ui")
	}
	return t.TempDir()
}

// sessionOf returns the id of the one session in w's log.
func sessionOf(t *testing.T, w *world) string {
	t.Helper()
	for _, r := range w.records() {
		if r.Kind == event.KindSessionStart {
			return r.Session
		}
	}
	t.Fatal("no session_start in the log")
	return ""
}
