package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/testpty"
)

// writeAskPolicy writes a policy that asks before any request to the api
// host and allows the rest; unattended, when not empty, is its
// ask.unattended.
func writeAskPolicy(t *testing.T, dir, timeout, onTimeout, unattended string) string {
	t.Helper()
	file := filepath.Join(dir, "ask.yaml")
	p := fmt.Sprintf(`rules:
  - name: ask-api
    on: [http]
    when: host == "api.e2e.test"
    action: ask
    reason: the api needs a person's yes
default: allow
ask:
  timeout: %s
  on_timeout: %s
`, timeout, onTimeout)
	if unattended != "" {
		p += "  unattended: " + unattended + "\n"
	}
	if err := os.WriteFile(file, []byte(p), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// syncBuffer is an output written by a running chaperone and read by the
// test meanwhile.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startAskSession starts `chaperone run` with the ask policy around agent,
// with stdin as given (nil: none), and returns the command and its
// outputs; wait for it with cmd.Wait.
func (w *world) startAskSession(t *testing.T, policy string, stdin *os.File, agent ...string) (*exec.Cmd, *syncBuffer, *syncBuffer) {
	t.Helper()
	args := append([]string{"run", "--mode", "proxy", "--policy", policy,
		"--upstream-ca", w.caFile,
		"--resolve", "api.e2e.test:" + w.api.Addr.Addr().String(),
		"--log", w.log, "--"}, agent...)
	cmd := exec.Command(binary, args...)
	cmd.Env = baseEnv(w.dir)
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = stdin
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, &out, &errb
}

// waitQuestion runs `chaperone approve` (which lists the waiting
// questions) until one appears, and returns its id.
func (w *world) waitQuestion(t *testing.T, stderr *syncBuffer) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		r := w.chaperone(nil, "approve")
		if r.code != 0 {
			t.Fatalf("chaperone approve (list): %d %s", r.code, r.stderr)
		}
		if id, rest, ok := strings.Cut(r.stdout, "  session "); ok && !strings.HasPrefix(r.stdout, "no questions") {
			if !strings.Contains(rest, "curl") || !strings.Contains(rest, "/asked") || !strings.Contains(rest, "ask-api") {
				t.Errorf("question listed as %q", r.stdout)
			}
			return id
		}
	}
	t.Fatalf("no question appeared; session stderr:\n%s", stderr.String())
	return ""
}

// A rule asks; a person answers from another terminal with chaperone
// approve or deny, and the audit log says a human decided.
func TestAskAnsweredByCommand(t *testing.T) {
	need(t, "curl")
	for _, tt := range []struct {
		verb     string
		wantBody string
		want     event.Action
	}{
		{"approve", "hello from api.e2e.test", event.Allow},
		{"deny", "chaperone: denied by rule ask-api: denied by chaperone deny", event.Deny},
	} {
		t.Run(tt.verb, func(t *testing.T) {
			w := newWorld(t)
			policy := writeAskPolicy(t, w.dir, "60s", "deny", "wait")
			cmd, out, errb := w.startAskSession(t, policy, nil, "curl", "-sS", w.api.URL+"/asked")
			id := w.waitQuestion(t, errb)
			if !strings.Contains(errb.String(), "chaperone: ask "+id+":") {
				t.Errorf("the session did not say it asks:\n%s", errb.String())
			}
			r := w.chaperone(nil, tt.verb, id)
			mustSucceed(t, r)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("session: %v\n%s", err, errb.String())
			}
			if !strings.Contains(out.String(), tt.wantBody) {
				t.Errorf("agent printed %q, want %q", out.String(), tt.wantBody)
			}
			if again := w.chaperone(nil, tt.verb, id); again.code == 0 {
				t.Errorf("answering twice succeeded: %s", again.stdout)
			}
			recs := w.records()
			found := false
			for _, rec := range recs {
				if rec.Kind == event.KindHTTP && rec.Rule == "ask-api" {
					found = true
					if rec.Verdict != tt.want || rec.DecidedBy != event.DecidedByHuman {
						t.Errorf("logged verdict %v by %v, want %v by a human", rec.Verdict, rec.DecidedBy, tt.want)
					}
				}
			}
			if !found {
				t.Error("no http record of rule ask-api in the audit log")
			}
		})
	}
}

// Nobody answers: the policy's on_timeout applies. The agent cannot answer
// its own question, even as the same user, from inside the session.
func TestAskTimeoutAndNoSelfApproval(t *testing.T) {
	need(t, "curl")
	w := newWorld(t)
	policy := writeAskPolicy(t, w.dir, "4s", "deny", "wait")
	script := `curl -sS "$1/asked" > "$2/curl.out" 2>&1 &
sleep 1
"$3" --state-dir "$4" approve
for id in $("$3" --state-dir "$4" approve 2>/dev/null | grep session | cut -d' ' -f1); do "$3" --state-dir "$4" approve "$id"; done
wait
cat "$2/curl.out"`
	cmd, out, errb := w.startAskSession(t, policy, nil, "sh", "-c", script, "sh", w.api.URL, w.dir, binary, filepath.Join(w.dir, "state"))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("session: %v\n%s", err, errb.String())
	}
	if !strings.Contains(errb.String(), "the session's own processes cannot answer") {
		t.Errorf("the agent's approve was not refused; session stderr:\n%s\nstdout:\n%s", errb.String(), out.String())
	}
	if !strings.Contains(out.String(), "nobody answered within 4s; on_timeout deny") {
		t.Errorf("agent printed:\n%s", out.String())
	}
	if n := len(w.api.Requests()); n != 0 {
		t.Errorf("the api received %d requests", n)
	}
}

// On a terminal, the session asks there and takes the typed answer.
func TestAskOnTerminal(t *testing.T) {
	need(t, "curl")
	w := newWorld(t)
	master, slave := testpty.Open(t)
	policy := writeAskPolicy(t, w.dir, "60s", "deny", "") // the terminal attends
	cmd, out, errb := w.startAskSession(t, policy, slave, "curl", "-sS", w.api.URL+"/asked")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !strings.Contains(errb.String(), "allow? [y]es") {
		if ctx.Err() != nil {
			t.Fatalf("no prompt on the terminal; stderr:\n%s", errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := master.Write([]byte("y\n")); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("session: %v\n%s", err, errb.String())
	}
	if !strings.Contains(out.String(), "hello from api.e2e.test") {
		t.Errorf("agent printed %q; stderr:\n%s", out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "allowed") {
		t.Errorf("the terminal was not told: %s", errb.String())
	}
}

// Nobody can answer (no terminal, nobody watching): the ask is denied at
// once by ask.unattended, not after the timeout (whose verdict here would
// allow). With `chaperone approve --watch` running, the same question
// waits, the watcher prints it, and its approval lets the request through.
func TestAskUnattended(t *testing.T) {
	need(t, "curl")
	t.Run("nobody", func(t *testing.T) {
		w := newWorld(t)
		policy := writeAskPolicy(t, w.dir, "10m", "allow", "")
		cmd, out, errb := w.startAskSession(t, policy, nil, "curl", "-sS", w.api.URL+"/asked")
		if err := cmd.Wait(); err != nil {
			t.Fatalf("session: %v\n%s", err, errb.String())
		}
		if !strings.Contains(out.String(), "nobody could be asked") {
			t.Errorf("agent printed %q, want the unattended denial", out.String())
		}
		if n := len(w.api.Requests()); n != 0 {
			t.Errorf("the api received %d requests", n)
		}
		found := false
		for _, rec := range w.records() {
			if rec.Kind == event.KindHTTP && rec.Rule == "ask-api" {
				found = rec.Verdict == event.Deny && strings.Contains(rec.Reason, "unattended deny")
			}
		}
		if !found {
			t.Error("no http record of rule ask-api denied unattended in the audit log")
		}
	})
	t.Run("watched", func(t *testing.T) {
		w := newWorld(t)
		policy := writeAskPolicy(t, w.dir, "10m", "deny", "")
		watch := exec.Command(binary, "approve", "--watch")
		watch.Env = baseEnv(w.dir)
		pipe, err := watch.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		watch.Stderr = os.Stderr
		if err := watch.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { watch.Process.Kill(); watch.Wait() })
		lines := bufio.NewScanner(pipe)
		next := func(what string) string {
			t.Helper()
			if !lines.Scan() {
				t.Fatalf("the watcher ended before %s: %v", what, lines.Err())
			}
			return lines.Text()
		}
		if l := next("its first line"); !strings.HasPrefix(l, "watching for questions") {
			t.Fatalf("watcher printed %q", l)
		}
		// The agent asks once the watcher watches its session.
		flag := filepath.Join(w.dir, "watched")
		script := `for i in $(seq 600); do [ -e "$2" ] && break; sleep 0.1; done; curl -sS "$1/asked"`
		cmd, out, errb := w.startAskSession(t, policy, nil, "sh", "-c", script, "sh", w.api.URL, flag)
		if l := next("the session"); !strings.HasPrefix(l, "watching session ") {
			t.Fatalf("watcher printed %q, want the session", l)
		}
		if err := os.WriteFile(flag, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		l := next("the question")
		id, rest, ok := strings.Cut(l, "  session ")
		if !ok || !strings.Contains(rest, "/asked") {
			t.Fatalf("watcher printed %q, want the question", l)
		}
		mustSucceed(t, w.chaperone(nil, "approve", id))
		if err := cmd.Wait(); err != nil {
			t.Fatalf("session: %v\n%s", err, errb.String())
		}
		if !strings.Contains(out.String(), "hello from api.e2e.test") {
			t.Errorf("agent printed %q, want the api's answer", out.String())
		}
	})
}
