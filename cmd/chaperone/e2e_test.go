package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// binary is the chaperone executable built once for the end-to-end tests;
// sdkAgent is the agent that speaks LLM APIs with the official SDKs;
// fakeAgent stands for an agent the daemon finds; h3Client fetches over
// HTTP/3 only.
var binary, sdkAgent, fakeAgent, h3Client string

func TestMain(m *testing.M) {
	// A fuzz worker runs only the fuzz function: building the binaries in
	// each worker would use up a short fuzzing run before it starts.
	flag.Parse()
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "chaperone-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755) // tests run it as other users too
	binary = filepath.Join(dir, "chaperone")
	sdkAgent = filepath.Join(dir, "sdkagent")
	fakeAgent = filepath.Join(dir, "fakeagent")
	h3Client = filepath.Join(dir, "h3client")
	for out, pkg := range map[string]string{binary: ".", sdkAgent: "./testdata/sdkagent", fakeAgent: "./testdata/fakeagent", h3Client: "./testdata/h3client"} {
		build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", out, pkg)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build", pkg+":", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// world is the local "internet" of one test: HTTPS servers with a CA of
// their own on 127.0.0.x, and Chaperone's state in a temporary directory.
type world struct {
	t      *testing.T
	dir    string
	caFile string
	ca     *upstream.CA     // signs the upstreams' certificates
	api    *upstream.Server // allowed
	exfil  *upstream.Server // denied by deny_hosts
	log    string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	return newWorldAt(t, t.TempDir(), "127.0.0.2", "127.0.0.3")
}

// newWorldAt is newWorld with its state in dir and its allowed and denied
// upstreams on the loopback addresses api and exfil.
func newWorldAt(t *testing.T, dir, api, exfil string) *world {
	t.Helper()
	w := &world{t: t, dir: dir}
	ca, err := upstream.NewCA("e2e-upstream")
	if err != nil {
		t.Fatal(err)
	}
	w.ca = ca
	if w.caFile, err = ca.WriteFile(w.dir); err != nil {
		t.Fatal(err)
	}
	w.api = startUpstream(t, upstream.Options{Name: "api.e2e.test", Addr: api + ":0", CA: ca})
	w.exfil = startUpstream(t, upstream.Options{Name: "exfil.e2e.test", Addr: exfil + ":0", CA: ca})
	w.log = filepath.Join(w.dir, "audit.jsonl")
	return w
}

func startUpstream(t *testing.T, o upstream.Options) *upstream.Server {
	t.Helper()
	s, err := upstream.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// result is what one chaperone invocation did.
type result struct {
	code           int
	stdout, stderr string
}

// chaperone runs the binary with args and the test's state directory.
func (w *world) chaperone(env []string, args ...string) result {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(baseEnv(w.dir), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		w.t.Fatalf("chaperone %v: %v", args, err)
	}
	return r
}

// run runs agent argv in a session that trusts the upstreams' CA, resolves
// their names and denies the exfil host.
func (w *world) run(agent ...string) result {
	w.t.Helper()
	args := []string{"run", "--mode", "proxy",
		"--upstream-ca", w.caFile,
		"--resolve", "api.e2e.test:" + w.api.Addr.Addr().String(),
		"--resolve", "exfil.e2e.test:" + w.exfil.Addr.Addr().String(),
		"--deny-host", "exfil.e2e.test",
		"--log", w.log,
		"--"}
	return w.chaperone(nil, append(args, agent...)...)
}

// baseEnv is the environment chaperone starts with: the test's own, without
// anything that could point it elsewhere, and HOME in the test's directory.
func baseEnv(dir string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "CHAPERONE_"), strings.HasSuffix(strings.ToUpper(k), "_PROXY"), k == "HOME":
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"CHAPERONE_STATE_DIR="+filepath.Join(dir, "state"),
		"HOME="+filepath.Join(dir, "home"),
		"GIT_CONFIG_NOSYSTEM=1",
	)
}

func (w *world) records() []telemetry.Record {
	w.t.Helper()
	f, err := os.Open(w.log)
	if err != nil {
		w.t.Fatal(err)
	}
	defer f.Close()
	var rs []telemetry.Record
	if err := telemetry.ReadRecords(f, telemetry.Filter{}, func(r telemetry.Record) error {
		rs = append(rs, r)
		return nil
	}); err != nil {
		w.t.Fatal(err)
	}
	return rs
}

// httpRecord returns the audit log's http records for host.
func (w *world) httpRecords(host string) []telemetry.Record {
	var out []telemetry.Record
	for _, r := range w.records() {
		if string(r.Kind) == "http" && strings.HasPrefix(r.Host, host) {
			out = append(out, r)
		}
	}
	return out
}

func mustSucceed(t *testing.T, r result) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}

func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: %v", tool, err)
		}
	}
}

// checkSessionLog asserts the audit log holds one whole session and an http
// record of GET path on the api host, made by a process whose executable's
// base name is exe.
func (w *world) checkSessionLog(t *testing.T, path, exe string) telemetry.Record {
	t.Helper()
	return w.checkSessionLogFor(t, "api.e2e.test", path, exe)
}

// checkSessionLogFor is checkSessionLog for a request to host.
func (w *world) checkSessionLogFor(t *testing.T, host, path, exe string) telemetry.Record {
	t.Helper()
	rs := w.records()
	if len(rs) < 4 {
		t.Fatalf("audit log has %d records, want session_start, connect, http, session_end at least", len(rs))
	}
	// The session's start is recorded before anything is decided (see
	// auditGuard), and its end after everything else.
	if rs[0].Kind != event.KindSessionStart || rs[len(rs)-1].Kind != event.KindSessionEnd {
		t.Errorf("audit log starts with %q and ends with %q", rs[0].Kind, rs[len(rs)-1].Kind)
	}
	for _, r := range rs {
		if r.Session != rs[0].Session || r.Session == "" {
			t.Errorf("record %+v: session %q, want %q", r, r.Session, rs[0].Session)
		}
	}
	for _, r := range w.httpRecords(host) {
		if r.Method == "GET" && strings.HasSuffix(r.URL, path) {
			if r.Status != 200 || r.Verdict != event.Allow {
				t.Errorf("http record %+v: want status 200 and allow", r)
			}
			if r.Process == nil || r.Process.PID == 0 || filepath.Base(r.Process.Exe) != exe && !strings.HasPrefix(filepath.Base(r.Process.Exe), exe) {
				t.Errorf("http record's process = %+v, want the %s that made the request", r.Process, exe)
			}
			return r
		}
	}
	t.Fatalf("no http record of GET %s in the audit log:\n%+v", path, rs)
	return telemetry.Record{}
}

func TestCurlHTTP1(t *testing.T) {
	need(t, "curl")
	w := newWorld(t)
	r := w.run("curl", "-sS", "--http1.1", "-w", " [%{http_version}]", w.api.URL+"/one")
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, "hello from api.e2e.test") || !strings.HasSuffix(r.stdout, "[1.1]") {
		t.Errorf("curl printed %q", r.stdout)
	}
	reqs := w.api.Requests()
	if len(reqs) != 1 || reqs[0].Path != "/one" {
		t.Fatalf("upstream received %+v, want one GET /one", reqs)
	}
	if h := reqs[0].Header.Get("Proxy-Authorization"); h != "" {
		t.Errorf("upstream received the session's proxy credentials")
	}
	if ua := reqs[0].Header.Get("User-Agent"); !strings.HasPrefix(ua, "curl/") {
		t.Errorf("upstream saw User-Agent %q, want curl's", ua)
	}
	w.checkSessionLog(t, "/one", "curl")
	if !strings.Contains(r.stderr, "not covered") {
		t.Errorf("stderr lacks the proxy-mode warning:\n%s", r.stderr)
	}
	if strings.Contains(r.stderr, "needs root") {
		t.Errorf("stderr says transparent mode needs root, though --mode proxy chose the mode:\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, "1 request to") || !strings.Contains(r.stderr, w.log) {
		t.Errorf("summary missing from stderr:\n%s", r.stderr)
	}
}

// curl speaks HTTP/2 to the proxy; the request goes upstream over
// HTTP/1.1, unless it is gRPC-like (TE: trailers), which stays HTTP/2 on
// both legs.
func TestCurlHTTP2(t *testing.T) {
	need(t, "curl")
	w := newWorld(t)
	r := w.run("curl", "-sS", "--http2", "-w", " [%{http_version}]", w.api.URL+"/two",
		"--next", "--http2", "-H", "TE: trailers", "-w", " [%{http_version}]", w.api.URL+"/two-grpc")
	mustSucceed(t, r)
	if strings.Count(r.stdout, "[2]") != 2 {
		t.Errorf("curl did not speak HTTP/2 to the proxy: %q", r.stdout)
	}
	got := map[string]string{}
	for _, req := range w.api.Requests() {
		got[req.Path] = req.Proto
	}
	if want := map[string]string{"/two": "HTTP/1.1", "/two-grpc": "HTTP/2.0"}; !maps.Equal(got, want) {
		t.Fatalf("upstream received %v, want %v", got, want)
	}
	rec := w.checkSessionLog(t, "/two", "curl")
	if rec.Proto != "HTTP/2.0" {
		t.Errorf("audit log proto = %q, want HTTP/2.0 (the client's)", rec.Proto)
	}
}

func TestPythonUrllib(t *testing.T) {
	need(t, "python3")
	w := newWorld(t)
	script := `
import os, sys, urllib.request
base = sys.argv[1]
print(urllib.request.urlopen(base + "/py", timeout=20).read().decode().strip())
req = urllib.request.Request(base + "/echo", data=b"payload-123", method="POST")
print(urllib.request.urlopen(req, timeout=20).read().decode())
`
	r := w.run("python3", "-c", script, w.api.URL)
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, "hello from api.e2e.test") || !strings.Contains(r.stdout, "payload-123") {
		t.Errorf("python printed %q", r.stdout)
	}
	reqs := w.api.Requests()
	if len(reqs) != 2 || reqs[1].Method != "POST" || string(reqs[1].Body) != "payload-123" {
		t.Fatalf("upstream received %+v", reqs)
	}
	w.checkSessionLog(t, "/py", "python3")
}

// A grandchild (bash → python3) is in the session too and is attributed to
// itself, with its parent in its lineage.
func TestGrandchildAttributed(t *testing.T) {
	need(t, "bash", "python3")
	w := newWorld(t)
	r := w.run("bash", "-c", `python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=20).read()' "$1"; echo done`, "bash", w.api.URL+"/grandchild")
	mustSucceed(t, r)
	rec := w.checkSessionLog(t, "/grandchild", "python3")
	start := w.sessionStart()
	if start.RootPID == 0 || rec.Process.PPID != start.RootPID {
		t.Errorf("python's parent = %d, want the session's root bash %d", rec.Process.PPID, start.RootPID)
	}
}

func TestNodeFetch(t *testing.T) {
	need(t, "node")
	undici, err := filepath.Abs("testdata/node/node_modules/undici")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(undici); err != nil {
		t.Skipf("undici is not installed (run make test-deps): %v", err)
	}
	w := newWorld(t)
	script := `
const { setGlobalDispatcher, EnvHttpProxyAgent } = require(process.argv[1]);
setGlobalDispatcher(new EnvHttpProxyAgent());
fetch(process.argv[2]).then(async r => { console.log(r.status, (await r.text()).trim()); })
  .catch(e => { console.error(e); process.exit(1); });
`
	r := w.run("node", "-e", script, undici, w.api.URL+"/node")
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, "200 hello from api.e2e.test") {
		t.Errorf("node printed %q", r.stdout)
	}
	w.checkSessionLog(t, "/node", "node")
}

func TestGitLsRemote(t *testing.T) {
	need(t, "git")
	w := newWorld(t)
	root := t.TempDir()
	head, err := upstream.InitRepo(root, "project")
	if err != nil {
		t.Fatal(err)
	}
	h, err := upstream.GitHandler(root)
	if errors.Is(err, exec.ErrNotFound) {
		t.Skipf("git http-backend is not installed: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	ca, err := upstream.NewCA("git-upstream")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.WriteFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	git := startUpstream(t, upstream.Options{Name: "git.e2e.test", Addr: "127.0.0.4:0", CA: ca, Handler: h})
	r := w.chaperone(nil, "run", "--mode", "proxy", "--upstream-ca", caFile, "--resolve", "git.e2e.test:127.0.0.4", "--log", w.log, "--",
		"git", "ls-remote", git.URL+"/project.git")
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, head) {
		t.Errorf("git ls-remote printed %q, want head %s", r.stdout, head)
	}
	if len(git.Requests()) == 0 {
		t.Error("the git server received nothing")
	}
	found := false
	for _, rec := range w.httpRecords("git.e2e.test") {
		found = found || strings.Contains(rec.URL, "/project.git/info/refs")
	}
	if !found {
		t.Error("audit log has no http record of /project.git/info/refs")
	}
	// git offers the session's credentials with its first CONNECT, never
	// waiting to be challenged: a challenge would be a refusal in the log.
	for _, rec := range w.records() {
		if rec.Verdict != event.Allow {
			t.Errorf("refused: %s %s (%s: %s)", rec.Kind, rec.Host, rec.Rule, rec.Reason)
		}
	}
}

func TestDeniedHost(t *testing.T) {
	need(t, "curl", "python3")
	w := newWorld(t)
	r := w.run("sh", "-c", `curl -sS -w '\n%{http_code}' "$1/secret"; echo; python3 -c '
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/upload", data=b"x", method="POST"), timeout=20)
    print("python: not blocked")
except urllib.error.HTTPError as e:
    print("python:", e.code, e.read().decode().strip())
except OSError as e:
    print("python: refused:", e)
' "$1"`, "sh", w.exfil.URL)
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, "403") || !strings.Contains(r.stdout, "deny_hosts") {
		t.Errorf("the agent was not told which rule denied it:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "not blocked") {
		t.Errorf("python was not blocked:\n%s", r.stdout)
	}
	if n := len(w.exfil.Requests()); n != 0 {
		t.Fatalf("the denied host received %d requests", n)
	}
	denied := 0
	for _, rec := range w.records() {
		if rec.Verdict == event.Deny {
			denied++
			if rec.Rule != "deny_hosts" || rec.DecidedBy != event.DecidedByRule || rec.Reason == "" {
				t.Errorf("deny record %+v lacks rule, decider or reason", rec)
			}
		}
	}
	if denied == 0 {
		t.Error("audit log holds no deny")
	}
	if !strings.Contains(r.stderr, "denied") {
		t.Errorf("summary does not mention the denials:\n%s", r.stderr)
	}
}

func TestProxyRefusesClientsWithoutTheSessionToken(t *testing.T) {
	need(t, "curl")
	w := newWorld(t)
	// The agent strips the credentials from its proxy URL, then tries a
	// wrong token: both are refused with 407, and nothing reaches upstream.
	r := w.run("sh", "-c", `p="${HTTPS_PROXY##*@}"
curl -sS -o /dev/null -w 'none %{http_code}\n' -x "http://$p" "http://127.0.0.2:$2/"
curl -sS -o /dev/null -w 'wrong %{http_code}\n' -x "http://chaperone:wrong@$p" "http://127.0.0.2:$2/"
curl -sS -o /dev/null -w 'connect %{http_connect}\n' -x "http://$p" "$1/" 2>/dev/null
exit 0`, "sh", w.api.URL, fmt.Sprint(w.api.Addr.Port()))
	mustSucceed(t, r)
	for _, want := range []string{"none 407", "wrong 407", "connect 407"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if n := len(w.api.Requests()); n != 0 {
		t.Errorf("upstream received %d requests from unauthenticated clients", n)
	}
}

func TestExitStatusAndSignals(t *testing.T) {
	w := newWorld(t)
	if r := w.run("sh", "-c", "exit 7"); r.code != 7 {
		t.Errorf("exit status %d, want 7\n%s", r.code, r.stderr)
	}
	if r := w.run("no-such-command-chaperone"); r.code != 127 {
		t.Errorf("missing command: exit status %d, want 127\n%s", r.code, r.stderr)
	}

	// SIGTERM to chaperone reaches the command, whose status is returned.
	ready := filepath.Join(w.dir, "ready")
	cmd := exec.Command(binary, "run", "--mode", "proxy", "--log", w.log, "--", "sh", "-c", `trap 'exit 42' TERM; touch "$1"; while :; do sleep 0.05; done`, "sh", ready)
	cmd.Env = baseEnv(w.dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the command never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 42 {
		t.Errorf("after SIGTERM: %v, want exit status 42", err)
	}
}

func TestBadConfig(t *testing.T) {
	w := newWorld(t)
	bad := filepath.Join(w.dir, "bad.yaml")
	os.WriteFile(bad, []byte("deny_hosts: [ok.test]\nlisten_adress: 127.0.0.1:0\n"), 0o644)
	tests := []struct {
		name string
		env  []string
		args []string
		key  string
	}{
		{"flag", nil, []string{"run", "--mode", "sideways", "--", "true"}, "mode"},
		{"env", []string{"CHAPERONE_LISTEN=0.0.0.0:8080"}, []string{"run", "--", "true"}, "listen"},
		{"deny host", nil, []string{"run", "--deny-host", "a b", "--", "true"}, "deny_hosts"},
		{"unknown key in file", nil, []string{"run", "--config", bad, "--", "true"}, "listen_adress"},
		{"resolve", nil, []string{"config", "show", "--resolve", "nohost"}, "resolve"},
		{"no command", nil, []string{"run"}, "no command given"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := w.chaperone(tt.env, tt.args...)
			if r.code != 2 {
				t.Fatalf("exit status %d, want 2 (usage); stdout:\n%s", r.code, r.stdout)
			}
			if !strings.Contains(r.stderr, tt.key) {
				t.Errorf("error does not name %q:\n%s", tt.key, r.stderr)
			}
		})
	}
}

func TestConfigShowPrecedence(t *testing.T) {
	w := newWorld(t)
	file := filepath.Join(w.dir, "c.yaml")
	os.WriteFile(file, []byte("deny_hosts: [file.test]\nlog_level: debug\nmode: proxy\n"), 0o644)
	r := w.chaperone([]string{"CHAPERONE_DENY_HOSTS=env.test", "CHAPERONE_LOG_LEVEL=warn"},
		"config", "show", "--config", file, "--log-level", "error")
	mustSucceed(t, r)
	for _, want := range []string{"env.test", "log_level: error", "mode: proxy"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("config show lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "file.test") {
		t.Errorf("the environment did not override the file:\n%s", r.stdout)
	}
}

func TestCACommands(t *testing.T) {
	w := newWorld(t)
	r := w.chaperone(nil, "ca", "init")
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, "created") {
		t.Errorf("first ca init: %q", r.stdout)
	}
	key := filepath.Join(w.dir, "state", "ca-key.pem")
	st, err := os.Stat(key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("CA key mode %v, want 0600", st.Mode().Perm())
	}
	if r := w.chaperone(nil, "ca", "init"); !strings.Contains(r.stdout, "exists") {
		t.Errorf("second ca init: %q", r.stdout)
	}
	path := strings.TrimSpace(w.chaperone(nil, "ca", "path").stdout)
	pem, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if exp := w.chaperone(nil, "ca", "export").stdout; exp != string(pem) || !strings.HasPrefix(exp, "-----BEGIN CERTIFICATE-----") {
		t.Errorf("ca export differs from %s", path)
	}
	if strings.Contains(w.chaperone(nil, "ca", "export").stdout, "PRIVATE KEY") {
		t.Error("ca export printed the key")
	}
}

func TestEventsCommand(t *testing.T) {
	need(t, "curl")
	w := newWorld(t)
	mustSucceed(t, w.run("curl", "-sS", "-o", "/dev/null", w.api.URL+"/events"))
	r := w.chaperone(nil, "events", "--log", w.log, "--kind", "http")
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, "GET") || !strings.Contains(r.stdout, "/events") || strings.Contains(r.stdout, "session_start") {
		t.Errorf("events --kind http printed:\n%s", r.stdout)
	}
	r = w.chaperone(nil, "events", "--log", w.log, "--json")
	mustSucceed(t, r)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("--json line %q: %v", l, err)
		}
	}
	if len(lines) != len(w.records()) {
		t.Errorf("--json printed %d records, the log has %d", len(lines), len(w.records()))
	}
	if r := w.chaperone(nil, "events", "--log", w.log, "--kind", "nonsense"); r.code == 0 {
		t.Error("events --kind nonsense succeeded")
	}
}

// TestDemo runs chaperone demo and checks each item of its headline on its
// screen (what the servers received included) and in its audit log:
// the mode, the secret redacted in the prompt the LLM API received and
// restored in the answer, the identity headers, the denied host with the
// lineage of the child process denied, the denied read of
// ~/.aws/credentials (with file mediation, as root), and the live view.
func TestDemo(t *testing.T) {
	need(t, "curl", "python3")
	dir := t.TempDir()
	w := &world{t: t, dir: dir, log: filepath.Join(dir, "audit.jsonl")}
	r := w.chaperone(nil, "demo", "--dir", dir)
	mustSucceed(t, r)
	out := r.stdout
	if n := strings.Count(out, "\n"); n > 40 {
		t.Errorf("the demo's screen is %d lines, want at most 40:\n%s", n, out)
	}
	var start telemetry.Record
	for _, rec := range w.records() {
		if rec.Kind == event.KindSessionStart {
			start = rec
		}
	}
	if start.Session == "" {
		t.Fatalf("no session_start in the demo's log; output:\n%s", out)
	}
	transparent := start.Mode == "transparent"
	if root := os.Geteuid() == 0 && runtime.GOOS == "linux"; root != transparent {
		t.Logf("root %v, mode %s (transparent mode unavailable here?)", root, start.Mode)
	}
	if start.Home != filepath.Join(dir, "home") {
		t.Errorf("the session's home is %q, want the demo's %q", start.Home, filepath.Join(dir, "home"))
	}
	mode := "explicit proxy (transparent mode needs root on Linux)"
	if transparent {
		mode = "transparent: the kernel hands every connection"
	}
	lines := []string{
		"Session " + start.Session + ", " + mode,
		// The secret: stripped from what the API received, restored in the answer.
		"the answer quotes the real token: Chaperone restored it",
		`llm.demo.test: POST /v1/messages, prompt "Deploy the site with token [REDACTED:github-pat:`,
		// The identity headers, as the API received them.
		"X-Chaperone-Session: " + start.Session,
		"X-Chaperone-Agent: sh",
		"X-Chaperone-Lineage: ",
		"Traceparent: 00-",
		// The denied host: never reached, denied with the lineage of the
		// child process that asked.
		"exfil.demo.test: 0 requests",
		"deny_hosts: exfil.demo.test is listed in deny_hosts (by rule)",
		"Watch it live: chaperone ui --log " + w.log,
	}
	if transparent {
		lines = append(lines, "cat: refused (Operation not permitted)",
			"DENIED file read "+filepath.Join(dir, "home", ".aws", "credentials"),
			"no-credential-files: the file holds the user's credentials (by rule)")
	} else {
		lines = append(lines, "curl: HTTP 403")
	}
	for _, want := range lines {
		if !strings.Contains(out, want) {
			t.Errorf("the demo's screen lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`DENIED \w+ exfil\.demo\.test.*  by [^\n]*python3[^\n]* > curl\[\d+\]`).MatchString(out) {
		t.Errorf("the demo's screen lacks the denied host with the lineage of curl, python3's child:\n%s", out)
	}
	// The log: the llm record says the prompt as sent and the call's
	// latency; the denials are there.
	var llm, deniedHost, deniedFile int
	for _, rec := range w.records() {
		switch {
		case rec.Kind == event.KindLLM:
			llm++
			if !strings.HasPrefix(rec.Prompt, "Deploy the site with token [REDACTED:github-pat:") || rec.Restored != 1 || rec.LatencyMS < 0 {
				t.Errorf("llm record: prompt %q, restored %d, latency %d ms", rec.Prompt, rec.Restored, rec.LatencyMS)
			}
		case rec.Verdict == event.Deny && rec.Rule == "deny_hosts":
			deniedHost++
			if rec.Process == nil || len(rec.Process.Lineage) < 3 || !strings.HasPrefix(rec.Process.Lineage[len(rec.Process.Lineage)-2], "python3") {
				t.Errorf("the denied request's process %+v: want curl, child of python3", rec.Process)
			}
		case rec.Verdict == event.Deny && rec.Rule == "no-credential-files":
			deniedFile++
		}
	}
	if llm != 1 || deniedHost == 0 || transparent && deniedFile != 1 {
		t.Errorf("the log has %d llm records, %d denials of the host, %d of the credentials file", llm, deniedHost, deniedFile)
	}
}

func TestEventsFollow(t *testing.T) {
	need(t, "curl")
	w := newWorld(t)
	ctx, cancel := context.WithCancel(context.Background())
	follow := exec.CommandContext(ctx, binary, "events", "--follow", "--log", w.log, "--kind", "http")
	follow.Env = baseEnv(w.dir)
	out, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		follow.Wait()
	}()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// The log does not exist yet: the follower waits for it.
	mustSucceed(t, w.run("curl", "-sS", "-o", "/dev/null", w.api.URL+"/followed"))
	select {
	case l := <-lines:
		if !strings.Contains(l, "GET") || !strings.Contains(l, "/followed") || !strings.Contains(l, "200") {
			t.Errorf("followed line %q", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("events --follow printed nothing for 30s")
	}
}

func TestIPv6Proxy(t *testing.T) {
	need(t, "curl")
	if ln, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	} else {
		ln.Close()
	}
	w := newWorld(t)
	r := w.chaperone(nil, "run", "--mode", "proxy", "--listen", "[::1]:0", "--upstream-ca", w.caFile,
		"--resolve", "api.e2e.test:"+w.api.Addr.Addr().String(), "--log", w.log, "--",
		"sh", "-c", `echo "$HTTPS_PROXY" | grep -q '@\[::1\]:' || { echo "proxy URL $HTTPS_PROXY"; exit 3; }; curl -sS "$1/v6"`, "sh", w.api.URL)
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, "hello from api.e2e.test") {
		t.Errorf("curl printed %q", r.stdout)
	}
	w.checkSessionLog(t, "/v6", "curl")
}

// sessionStart is the audit log's session_start record.
func (w *world) sessionStart() telemetry.Record {
	w.t.Helper()
	for _, r := range w.records() {
		if r.Kind == event.KindSessionStart {
			return r
		}
	}
	w.t.Fatal("no session_start record")
	return telemetry.Record{}
}
