package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

// fakeJudge is a local OpenAI-compatible chat completions server that
// answers every request with verdict and records the prompts it was sent.
type fakeJudge struct {
	*httptest.Server
	mu      sync.Mutex
	prompts []string
}

func newFakeJudge(t *testing.T, verdict string) *fakeJudge {
	j := &fakeJudge{}
	j.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/chat/completions" || json.Unmarshal(body, &req) != nil || len(req.Messages) == 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		j.mu.Lock()
		j.prompts = append(j.prompts, req.Messages[len(req.Messages)-1].Content)
		j.mu.Unlock()
		answer, _ := json.Marshal(map[string]string{"verdict": verdict, "reason": "fits the intent"})
		json.NewEncoder(w).Encode(map[string]any{
			"id": "c1", "object": "chat.completion", "model": "judge-model",
			"choices": []map[string]any{{"index": 0, "finish_reason": "stop",
				"message": map[string]string{"role": "assistant", "content": string(answer)}}},
		})
	}))
	t.Cleanup(j.Close)
	return j
}

// promptsWith counts the prompts that contain every one of parts.
func (j *fakeJudge) promptsWith(parts ...string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := 0
	for _, p := range j.prompts {
		all := true
		for _, s := range parts {
			all = all && strings.Contains(p, s)
		}
		if all {
			n++
		}
	}
	return n
}

const e2eIntent = "Agents may read the e2e API. Nothing may ever reach the exfil host."

func writePolicy(t *testing.T, dir, judgeURL string) string {
	t.Helper()
	file := filepath.Join(dir, "policy.yaml")
	p := fmt.Sprintf(`intent: %q
rules:
  - name: no-exfil
    on: [connect, tls, http]
    when: host == "exfil.e2e.test"
    action: deny
    reason: the exfil host is off limits
default: judge
judge:
  provider: openai
  url: %s/v1
  model: judge-model
  timeout: 5s
`, e2eIntent, judgeURL)
	if err := os.WriteFile(file, []byte(p), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// A rule denies one host while the judge, reading the intent, allows
// another; the judge is asked once for repeated identical requests.
func TestPolicyRuleAndJudge(t *testing.T) {
	need(t, "curl")
	w := newWorld(t)
	judge := newFakeJudge(t, "allow")
	file := writePolicy(t, w.dir, judge.URL)
	// Network only: with default judge, every file open would be the
	// judge's too.
	r := w.chaperone(nil, "run", "--mode", "proxy", "--mediate-files=false", "--policy", file,
		"--upstream-ca", w.caFile,
		"--resolve", "api.e2e.test:"+w.api.Addr.Addr().String(),
		"--resolve", "exfil.e2e.test:"+w.exfil.Addr.Addr().String(),
		"--log", w.log, "--",
		"sh", "-c", `curl -sS "$1/same"; echo; curl -sS "$1/same"; echo; curl -sS "$2/upload"; echo`, "sh", w.api.URL, w.exfil.URL)
	mustSucceed(t, r)
	if strings.Count(r.stdout, "hello from api.e2e.test") != 2 || !strings.Contains(r.stdout, "denied by rule no-exfil") {
		t.Errorf("agent printed:\n%s", r.stdout)
	}
	if n := len(w.exfil.Requests()); n != 0 {
		t.Errorf("the denied host received %d requests", n)
	}
	if n := len(w.api.Requests()); n != 2 {
		t.Errorf("the allowed host received %d requests, want 2", n)
	}
	if n := judge.promptsWith(`"kind": "http"`, "/same"); n != 1 {
		t.Errorf("the judge was asked %d times about GET /same, want 1 (the second is cached)", n)
	}
	if judge.promptsWith(e2eIntent) == 0 {
		t.Error("the judge's prompts lack the policy's intent")
	}
	if judge.promptsWith("exfil.e2e.test") != 0 {
		t.Error("the judge was asked about the host a rule denies")
	}
	var judged, ruled bool
	for _, rec := range w.records() {
		if rec.Kind != event.KindHTTP {
			continue
		}
		switch {
		case rec.Host == "exfil.e2e.test" || strings.HasPrefix(rec.Host, "exfil.e2e.test:"):
			ruled = rec.Verdict == event.Deny && rec.DecidedBy == event.DecidedByRule && rec.Rule == "no-exfil"
		case strings.HasSuffix(rec.URL, "/same"):
			judged = rec.Verdict == event.Allow && rec.DecidedBy == event.DecidedByJudge
		}
	}
	if !judged || !ruled {
		t.Errorf("audit log: api request decided by the judge %v, exfil request denied by rule %v", judged, ruled)
	}

	// The recorded session replays through the policy offline.
	out := w.chaperone(nil, "policy", "test", file, w.log)
	mustSucceed(t, out)
	if !strings.Contains(out.stdout, "rule no-exfil") || !strings.Contains(out.stdout, "0 verdicts differ") {
		t.Errorf("policy test printed:\n%s", out.stdout)
	}
}

func TestPolicyCommands(t *testing.T) {
	w := newWorld(t)
	judge := newFakeJudge(t, "allow")
	file := writePolicy(t, w.dir, judge.URL)
	r := w.chaperone(nil, "policy", "check", file)
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, "1 rules") || !strings.Contains(r.stdout, "no-exfil") {
		t.Errorf("policy check printed:\n%s", r.stdout)
	}
	r = w.chaperone(nil, "policy", "show-default")
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, "intent:") || !strings.Contains(r.stdout, "default:") {
		t.Errorf("show-default printed:\n%s", r.stdout)
	}
	bad := filepath.Join(w.dir, "bad.yaml")
	os.WriteFile(bad, []byte("rules:\n  - name: oops\n    when: host ==\n    action: deny\ndefault: allow\n"), 0o644)
	for _, args := range [][]string{{"policy", "check", bad}, {"run", "--policy", bad, "--", "true"}} {
		r := w.chaperone(nil, args...)
		if r.code != 2 || !strings.Contains(r.stderr, "oops") || !strings.Contains(r.stderr, ":3") {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit 2 naming rule oops and line 3", args, r.code, r.stderr)
		}
	}
}

// SIGHUP reloads the policy while the session runs; a file that does not
// load keeps the old policy.
func TestPolicyReload(t *testing.T) {
	need(t, "curl")
	w := newWorld(t)
	file := filepath.Join(w.dir, "live.yaml")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("rules:\n  - name: no-api\n    on: [http]\n    when: host == \"api.e2e.test\"\n    action: deny\ndefault: allow\n")
	step := filepath.Join(w.dir, "step")
	cmd := exec.Command(binary, "run", "--mode", "proxy", "--policy", file, "--upstream-ca", w.caFile,
		"--resolve", "api.e2e.test:"+w.api.Addr.Addr().String(), "--log", w.log, "--",
		"sh", "-c", `get() { curl -s -o /dev/null -w '%{http_code}\n' "$1/$2"; }
get "$1" a; touch "$2.1"; while [ ! -e "$2.go1" ]; do sleep 0.02; done
get "$1" b; touch "$2.2"; while [ ! -e "$2.go2" ]; do sleep 0.02; done
get "$1" c`, "sh", w.api.URL, step)
	cmd.Env = baseEnv(w.dir)
	var stdout strings.Builder
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitLine := func(want string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("chaperone ended before saying %q", want)
				}
				if strings.Contains(l, want) {
					return
				}
			case <-timeout:
				t.Fatalf("chaperone never said %q", want)
			}
		}
	}
	waitFile(t, step+".1")
	write("rules:\n  - name: broken\n    when: host ==\n    action: deny\ndefault: allow\n")
	cmd.Process.Signal(syscall.SIGHUP)
	waitLine("the old policy stays")
	os.WriteFile(step+".go1", nil, 0o644)
	waitFile(t, step+".2")
	write("default: allow\n")
	cmd.Process.Signal(syscall.SIGHUP)
	waitLine("policy reloaded")
	os.WriteFile(step+".go2", nil, 0o644)
	go func() {
		for range lines {
		}
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("chaperone: %v", err)
	}
	if got := strings.Fields(stdout.String()); strings.Join(got, " ") != "403 403 200" {
		t.Errorf("statuses %v, want 403 (denied), 403 (bad file kept the policy), 200 (reloaded)", got)
	}
	// Each reload is in the audit log: the bad file's error, the good
	// file's digest.
	type reload struct {
		Verdict          event.Action
		Path, Digest     string
		Trigger          string
		Error, SessionOK bool
	}
	var got []reload
	for _, r := range w.kindRecords(event.KindPolicyReload) {
		got = append(got, reload{Verdict: r.Verdict, Path: r.Path, Digest: r.Digest, Trigger: r.Trigger,
			Error: strings.Contains(r.Error, "broken"), SessionOK: r.Session != ""})
	}
	digest := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	want := []reload{
		{Verdict: event.Deny, Path: file, Trigger: "SIGHUP", Error: true, SessionOK: true,
			Digest: digest("rules:\n  - name: broken\n    when: host ==\n    action: deny\ndefault: allow\n")},
		{Verdict: event.Allow, Path: file, Trigger: "SIGHUP", SessionOK: true, Digest: digest("default: allow\n")},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("policy_reload records (-want +got):\n%s", d)
	}
}
