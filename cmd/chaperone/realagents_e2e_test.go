//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/netns"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// agentsDir holds the real agent CLIs, installed by make test-deps from
// its package-lock.json.
const agentsDir = "testdata/agents"

// The fake internet of each TestRealAgents subtest, in a network namespace
// of its own, named by the namespace's resolver: the LLM APIs and the
// denied host each on an address of its own, and every other name the
// agents look up on one more, shared, as hosts behind a CDN share theirs.
const (
	agentsResolverAddr = "127.0.30.53:53"
	addrAnthropic      = "127.0.30.1"
	addrOpenAI         = "127.0.30.2"
	addrGemini         = "127.0.30.3"
	addrDenied         = "127.0.30.4"
	addrElsewhere      = "127.0.30.10" // every other name
	addrOTLP           = "127.0.30.11"
)

// agentCommand is the shell command the scripted model asks the agent's
// shell tool to run: it prints the planted secrets, then tries the denied
// host.
const agentCommand = "cat .env; curl -sS https://denied.test/x"

// agentPrompt is what the agent is asked; the fake model's turn does not
// depend on it.
const agentPrompt = "Run `" + agentCommand + "` in the shell and tell me exactly what it printed."

// realAgent is how one agent CLI is run, as its users run it.
type realAgent struct {
	name string // the subtest's: the agent's name, and a variant's after a dash
	bin  string // under agentsDir/node_modules/.bin
	host string // its LLM API's host
	args []string
	env  []string // its fake API key
	// sandboxed runs the agent's own sandbox: a failure to create its
	// namespaces skips the subtest (issue 27, defect 4).
	sandboxed bool
	// noWebSocket has the fake refuse the Responses API's WebSocket, so
	// that Codex speaks HTTPS.
	noWebSocket bool
	// oneMode runs the variant in transparent mode only.
	oneMode bool
}

// agent is the agent's name for Chaperone: the variant's name without
// what follows its dash.
func (a realAgent) agent() string {
	name, _, _ := strings.Cut(a.name, "-")
	return name
}

func realAgents() []realAgent {
	return []realAgent{
		{
			name: "claude", bin: "claude", host: "api.anthropic.com",
			// Root may not skip permissions: allow the shell tool alone.
			args: []string{"-p", agentPrompt, "--output-format", "json", "--allowedTools", "Bash"},
			env:  []string{"ANTHROPIC_API_KEY=" + fakeKey("sk-ant-api03-", 93) + "AA"},
		},
		{
			name: "codex", bin: "codex", host: "api.openai.com",
			args: []string{"exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", agentPrompt},
			env:  codexEnv(),
		},
		{
			name: "gemini", bin: "gemini", host: "generativelanguage.googleapis.com",
			args: []string{"-p", agentPrompt, "--yolo", "--skip-trust", "--output-format", "json"},
			env:  []string{"GEMINI_API_KEY=AIza" + fakeKey("", 35)},
		},
		{
			// Codex over HTTPS, as it falls back when the WebSocket is
			// refused: its calls as SSE, where Chaperone reads them.
			name: "codex-https", bin: "codex", host: "api.openai.com", noWebSocket: true, oneMode: true,
			args: []string{"exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", agentPrompt},
			env:  codexEnv(),
		},
		{
			name: "codex-sandbox", bin: "codex", host: "api.openai.com", sandboxed: true, oneMode: true,
			args: []string{"exec", "--skip-git-repo-check", "--sandbox", "workspace-write",
				"-c", "sandbox_workspace_write.network_access=true", agentPrompt},
			env: codexEnv(),
		},
	}
}

func codexEnv() []string {
	key := "sk-proj-" + fakeKey("", 48)
	return []string{"OPENAI_API_KEY=" + key, "CODEX_API_KEY=" + key}
}

// fakeKey is prefix and n random letters and digits: an API key of the
// right shape that no service knows.
func fakeKey(prefix string, n int) string {
	return prefix + randomOf("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", n)
}

// randomOf is n bytes drawn from chars.
func randomOf(chars string, n int) string {
	b := make([]byte, n)
	for i := range b {
		k, err := rand.Int(rand.Reader, big.NewInt(int64(len(chars))))
		if err != nil {
			panic(err)
		}
		b[i] = chars[k.Int64()]
	}
	return string(b)
}

// plantedSecret is one secret of the agent's .env file.
type plantedSecret struct {
	kind, env, value string
}

// plantSecrets writes a .env of four secrets shaped as real ones into dir
// (the shapes of rewrite/secrets' corpus; internal/secretcorpus's
// generator, once it lands, should make them).
func plantSecrets(t *testing.T, dir string) []plantedSecret {
	t.Helper()
	const digits = "0123456789"
	secrets := []plantedSecret{
		{"aws-access-key", "AWS_ACCESS_KEY_ID", "AKIA" + randomOf("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)},
		{"github-pat", "GITHUB_TOKEN", upstream.FakeGitHubToken()},
		{"slack-bot-token", "SLACK_BOT_TOKEN", "xoxb-" + randomOf(digits, 11) + "-" + randomOf(digits, 12) + "-" + fakeKey("", 24)},
		{"stripe-live-key", "STRIPE_SECRET_KEY", "sk_" + "live_" + fakeKey("", 32)},
	}
	var b strings.Builder
	b.WriteString("# the project's settings\n")
	for _, s := range secrets {
		fmt.Fprintf(&b, "%s=%s\n", s.env, s.value)
	}
	if err := os.WriteFile(filepath.Join(dir, ".env"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return secrets
}

// scrub replaces the secrets in s by their kinds, for test output.
func scrub(s string, secrets []plantedSecret) string {
	for _, sec := range secrets {
		s = strings.ReplaceAll(s, sec.value, "<"+sec.kind+">")
	}
	return s
}

// agentWorld is one subtest's network namespace and what runs in it.
type agentWorld struct {
	t        *testing.T
	ns       *netns.NS
	dir      string
	caFile   string
	llm      *upstream.ScriptedLLM
	servers  map[string]*upstream.Server // by host name; "*" for every other name
	resolver *upstream.Resolver
	otlp     *otlpReceiver
	resolv   string // the resolv.conf that names the resolver
	log      string
}

func newAgentWorld(t *testing.T) *agentWorld {
	t.Helper()
	ns, err := netns.New()
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("the agents run in a network namespace of their own, which needs root: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	aw := &agentWorld{t: t, ns: ns, dir: t.TempDir(), llm: upstream.NewScriptedLLM(agentCommand), servers: map[string]*upstream.Server{}}
	ca, err := upstream.NewCA("agents-upstream")
	if err != nil {
		t.Fatal(err)
	}
	if aw.caFile, err = ca.WriteFile(aw.dir); err != nil {
		t.Fatal(err)
	}
	aw.log = filepath.Join(aw.dir, "audit.jsonl")
	names := map[string]netip.Addr{}
	err = ns.Do(func() error {
		for _, s := range []struct {
			name, addr string
			llm        bool
		}{
			{"api.anthropic.com", addrAnthropic, true},
			{"api.openai.com", addrOpenAI, true},
			{"generativelanguage.googleapis.com", addrGemini, true},
			{"denied.test", addrDenied, false},
			{"*", addrElsewhere, false},
		} {
			o := upstream.Options{Name: s.name, Addr: s.addr + ":443", CA: ca}
			if s.llm {
				o.Handler = aw.llm
			}
			if s.name == "*" {
				o.Name, o.AnyName = "elsewhere.test", true
			} else {
				names[s.name] = netip.MustParseAddr(s.addr)
			}
			srv, err := upstream.Start(o)
			if err != nil {
				return err
			}
			t.Cleanup(func() { srv.Close() })
			aw.servers[s.name] = srv
		}
		var err error
		aw.resolver, err = upstream.StartResolver(upstream.ResolverOptions{Addr: agentsResolverAddr, Names: names, Default: netip.MustParseAddr(addrElsewhere)})
		if err != nil {
			return err
		}
		t.Cleanup(func() { aw.resolver.Close() })
		aw.otlp, err = startOTLPReceiver(addrOTLP + ":0")
		if err == nil {
			t.Cleanup(aw.otlp.Close)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	aw.resolv = filepath.Join(aw.dir, "resolv.conf")
	conf := "nameserver " + aw.resolver.Addr().Addr().String() + "\noptions timeout:2 attempts:2\n"
	if err := os.WriteFile(aw.resolv, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return aw
}

// run runs the agent in a Chaperone session of mode inside the namespace,
// from work, with the resolver as the machine's (a private mount of
// /etc/resolv.conf) and the upstreams' CA trusted by Chaperone. The agent
// trusts Chaperone's CA through the variables Chaperone sets.
func (aw *agentWorld) run(a realAgent, mode, work string) result {
	aw.t.Helper()
	// HOME and TMPDIR apart, as on a user's machine: Codex makes the
	// helper its sandbox runs in under CODEX_HOME (~/.codex) only outside
	// the temporary directory.
	tmp := filepath.Join(aw.dir, "tmp")
	for _, d := range []string{filepath.Join(aw.dir, "home"), tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			aw.t.Fatal(err)
		}
	}
	bin, err := filepath.Abs(filepath.Join(agentsDir, "node_modules", ".bin", a.bin))
	if err != nil {
		aw.t.Fatal(err)
	}
	args := []string{"-c", `mount --bind "$0" /etc/resolv.conf && exec "$@"`, aw.resolv,
		binary, "run", "--mode", mode,
		"--upstream-ca", aw.caFile,
		"--deny-host", "denied.test",
		// The full signal URL, which the exporter uses as it is.
		"--otlp-endpoint", aw.otlp.URL + "/v1/traces",
		"--log", aw.log,
		"--", bin}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", append(args, a.args...)...)
	cmd.Dir = work
	cmd.Env = append(baseEnv(aw.dir), append(a.env, "TMPDIR="+tmp)...)
	// The agents' own update checks and telemetry stay on: what they
	// contact is part of what the test sees.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second // for what the agent leaves holding its output
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := aw.ns.Do(cmd.Start); err != nil {
		aw.t.Fatalf("start chaperone in the namespace: %v", err)
	}
	err = cmd.Wait()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		aw.t.Fatalf("chaperone: %v", err)
	}
	return r
}

func TestRealAgents(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agents run in a network namespace of their own, which needs root")
	}
	need(t, "curl", "node", "mount")
	// make test-deps installs them, and fails when the registry answers
	// but the install does not.
	for _, a := range realAgents() {
		if _, err := os.Stat(filepath.Join(agentsDir, "node_modules", ".bin", a.bin)); err != nil {
			t.Skipf("%s is not installed: make test-deps installs the agents from %s/package-lock.json (%v)", a.name, agentsDir, err)
		}
	}
	for _, a := range realAgents() {
		for _, mode := range []string{"transparent", "proxy"} {
			if a.oneMode && mode == "proxy" {
				continue // a variant: one mode is enough
			}
			t.Run(a.name+"/"+mode, func(t *testing.T) { testRealAgent(t, a, mode) })
		}
	}
}

func testRealAgent(t *testing.T, a realAgent, mode string) {
	if mode == "transparent" {
		needTransparent(t)
	}
	aw := newAgentWorld(t)
	if a.noWebSocket {
		aw.llm.RefuseWebSocket()
	}
	work := filepath.Join(aw.dir, "project")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	secrets := plantSecrets(t, work)
	began := time.Now()
	r := aw.run(a, mode, work)
	t.Logf("the session took %v", time.Since(began).Round(time.Millisecond))
	calls := aw.llm.Calls()
	if a.sandboxed {
		// bubblewrap's words when unshare(CLONE_NEWUSER) fails.
		refused := regexp.MustCompile(`No permissions to create (a )?new namespace`)
		seen := refused.MatchString(r.stdout + r.stderr)
		for _, c := range calls {
			seen = seen || refused.Match(c.Body)
		}
		if seen {
			t.Skipf("%s's own sandbox (bubblewrap) may not create its namespaces inside Chaperone: needs issue 27's defect 4, user namespaces for agents' sandboxes", a.name)
		}
	}
	out := scrub(r.stdout, secrets)
	errs := scrub(r.stderr, secrets)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, out, errs)
		}
	})
	w := &world{t: t, dir: aw.dir, log: aw.log}
	recs := w.records()
	start := w.sessionStart()

	// Chaperone knew the agent, and it ran to the end: it exits 0 and the
	// fake played both turns.
	if want := a.agent(); start.Agent != want {
		t.Errorf("session of agent %q, want %q", start.Agent, want)
	}
	if r.code != 0 {
		t.Errorf("exit status %d, want 0", r.code)
	}
	var toolCall, final *upstream.Call
	for i, c := range calls {
		switch {
		case c.Turn == upstream.TurnToolCall && toolCall == nil:
			toolCall = &calls[i]
		case c.Turn == upstream.TurnFinal && final == nil:
			final = &calls[i]
		}
	}
	if toolCall == nil || final == nil {
		t.Errorf("the fake model's turn was not played: tool call %v, final answer %v; calls: %s", toolCall != nil, final != nil, describeCalls(calls))
	}

	// No planted secret reached any fake server, in any request or
	// WebSocket message; the agent's answer has them all back.
	for name, srv := range aw.servers {
		for _, req := range srv.Requests() {
			cr := canaryRequest{path: req.Path, query: req.RawQuery, proto: req.Proto, header: req.Header, body: req.Body}
			for _, s := range secrets {
				if cr.holds(secretForms(s.value)) {
					t.Errorf("the %s secret reached %s: %s %s", s.kind, name, req.Method, req.Path)
				}
			}
		}
	}
	for _, c := range calls {
		for _, s := range secrets {
			for _, f := range secretForms(s.value) {
				if bytes.Contains(c.Body, []byte(f)) {
					t.Errorf("the %s secret reached %s in a %s %s call (%s)", s.kind, a.host, c.Transport, c.Path, c.Turn)
					break
				}
			}
		}
	}
	for _, s := range secrets {
		if !strings.Contains(r.stdout, s.value) {
			t.Errorf("the agent's answer lacks the %s secret: its placeholder was not restored", s.kind)
		}
	}

	// The denied host was refused, and the refusal is curl's, under the
	// agent.
	if got := aw.servers["denied.test"].Requests(); len(got) > 0 {
		t.Errorf("denied.test received %d requests", len(got))
	}
	var denial *telemetry.Record
	for i, rec := range recs {
		if rec.Verdict == event.Deny && aboutHost(rec, "denied.test") {
			if denial == nil || denial.Process == nil {
				denial = &recs[i]
			}
		}
	}
	switch {
	case denial == nil:
		t.Errorf("no denied record of denied.test in the audit log")
	case denial.Process == nil || !strings.HasPrefix(filepath.Base(denial.Process.Exe), "curl"):
		t.Errorf("the refusal of denied.test (%s) is attributed to %+v, want curl", denial.Kind, denial.Process)
	case len(denial.Process.Lineage) < 3 || denial.Process.Lineage[len(denial.Process.Lineage)-1] != "curl":
		t.Errorf("curl's lineage %q, want the agent, its shell and curl", denial.Process.Lineage)
	default:
		t.Logf("denied.test refused (%s) for curl, lineage %q", denial.Kind, denial.Process.Lineage)
	}

	// Nothing else was refused.
	for _, rec := range recs {
		if rec.Verdict != event.Allow && rec.Verdict != event.Rewrite && !aboutHost(rec, "denied.test") {
			t.Errorf("refused by mistake: %s %s%s%s %s (%s: %s)", rec.Kind, rec.Host, rec.Name, rec.Path, rec.URL, rec.Rule, rec.Reason)
		}
	}

	// Every model call carried the session's identity.
	for _, c := range calls {
		if c.Turn == "" {
			continue
		}
		if got := c.Header.Get("X-Chaperone-Session"); got != start.Session || c.Header.Get("X-Chaperone-Agent") == "" || c.Header.Get("Traceparent") == "" {
			t.Errorf("%s %s call (%s) carried identity %q, agent %q, traceparent %q; want session %q",
				c.Transport, c.Path, c.Turn, got, c.Header.Get("X-Chaperone-Agent"), c.Header.Get("Traceparent"), start.Session)
		}
	}

	// The audit log has the tool call in the LLM answer, and the trace
	// links it to the processes it ran.
	if toolCall != nil {
		var logged bool
		for _, rec := range recs {
			if rec.Kind == event.KindLLM {
				logged = logged || slices.ContainsFunc(rec.ToolCalls, func(tc event.ToolCall) bool { return tc.ID == toolCall.CallID })
			}
		}
		if !logged {
			t.Errorf("no llm record in the audit log has the %s tool call %s", toolCall.Tool, toolCall.CallID)
		}
		checkToolLinked(t, aw.otlp.got(), toolCall.CallID)
	}

	// What the agent contacted besides its API (docs/agents.md).
	var asked []string
	for _, q := range aw.resolver.Queries() {
		if q.Type == "A" && !slices.Contains(asked, q.Name) {
			asked = append(asked, q.Name)
		}
	}
	sort.Strings(asked)
	var elsewhere []string
	for _, req := range aw.servers["*"].Requests() {
		elsewhere = append(elsewhere, req.Method+" "+req.ServerName+req.Path)
	}
	t.Logf("names resolved: %q", asked)
	t.Logf("requests elsewhere: %q", elsewhere)
	t.Logf("model calls: %s", describeCalls(calls))
}

// aboutHost tells whether an audit record is about host: its host, DNS
// name, SNI or URL.
func aboutHost(r telemetry.Record, host string) bool {
	return strings.HasPrefix(r.Host, host) || r.Name == host || r.SNI == host || strings.Contains(r.URL, "://"+host)
}

// describeCalls says what each model call was, for logs.
func describeCalls(calls []upstream.Call) string {
	var parts []string
	for _, c := range calls {
		turn := string(c.Turn)
		if turn == "" {
			turn = "unanswered"
		}
		parts = append(parts, fmt.Sprintf("%s %s %s (%s %s)", c.Transport, c.Path, c.Model, turn, c.Tool))
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// checkToolLinked asserts the trace has an execute_tool span for the call
// id, and that the span of a process the call ran (the shell, cat or curl)
// links to it.
func checkToolLinked(t *testing.T, spans []*tracepb.Span, callID string) {
	t.Helper()
	var tool *tracepb.Span
	for _, s := range spans {
		if strings.HasPrefix(s.Name, "execute_tool") && attr(s, "gen_ai.tool.call.id").GetStringValue() == callID {
			tool = s
		}
	}
	if tool == nil {
		var names []string
		for _, s := range spans {
			names = append(names, s.Name)
		}
		t.Errorf("no execute_tool span for the call %s among %d spans %q", callID, len(spans), names)
		return
	}
	var linked []string
	for _, s := range spans {
		for _, l := range s.Links {
			if hex.EncodeToString(l.SpanId) == hex.EncodeToString(tool.SpanId) {
				linked = append(linked, s.Name)
			}
		}
	}
	if !slices.ContainsFunc(linked, func(n string) bool {
		return strings.HasPrefix(n, "process curl") || strings.HasPrefix(n, "process cat")
	}) {
		t.Errorf("the spans linked to %s are %q, want curl's or cat's process among them", tool.Name, linked)
	}
}

// got returns the spans received so far.
func (r *otlpReceiver) got() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*tracepb.Span, len(r.spans))
	for i, s := range r.spans {
		out[i] = proto.Clone(s).(*tracepb.Span)
	}
	return out
}
