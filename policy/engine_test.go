package policy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

// fakeJudge answers with v (or err) and counts its calls.
type fakeJudge struct {
	v     event.Verdict
	err   error
	block chan struct{} // when set, each call waits for it or its context
	calls atomic.Int64
	last  atomic.Pointer[JudgeRequest]
}

func (j *fakeJudge) Judge(ctx context.Context, req JudgeRequest) (event.Verdict, error) {
	j.calls.Add(1)
	j.last.Store(&req)
	if j.block != nil {
		select {
		case <-j.block:
		case <-ctx.Done():
			return event.Verdict{}, ctx.Err()
		}
	}
	return j.v, j.err
}

// fakePlugins answers events of the kinds in answers and counts its calls.
type fakePlugins struct {
	answers map[event.Kind]event.Verdict
	calls   atomic.Int64
}

func (p *fakePlugins) Ask(_ context.Context, e *event.Event) (event.Verdict, bool) {
	p.calls.Add(1)
	v, ok := p.answers[e.Kind]
	return v, ok
}

func mustEngine(t testing.TB, src string, o EngineOptions) *Engine {
	t.Helper()
	p, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(p, o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func ruleV(a event.Action, rule, reason string) event.Verdict {
	return event.Verdict{Action: a, Rule: rule, Reason: reason, DecidedBy: event.DecidedByRule}
}

func TestDecideRules(t *testing.T) {
	const src = `
rules:
  - name: start
    on: session_start
    when: agent == "claude-code"
    action: allow
  - name: dns-org
    on: dns
    when: glob("*.org", dns.name)
    action: deny
    reason: no .org lookups
  - name: h2-only
    on: tls
    when: '!("h2" in tls.alpn)'
    action: deny
  - name: github
    on: [connect, tls, http]
    when: host == "github.com" || host.endsWith(".github.com")
    action: allow
  - name: first-wins
    on: connect
    when: dst.port == 443
    action: deny
  - name: issues
    on: http
    when: http.path.startsWith("/repos/") && http.method == "POST"
    action: ask
  - name: redact
    on: llm
    action: rewrite
    rewrite: {redact_secrets: true}
  - name: netrc
    on: file
    when: file.path.endsWith("/.netrc")
    action: deny
  - name: push
    on: exec
    when: '"push" in exec.argv'
    action: ask
    reason: pushing needs a person
  - name: later
    action: deny
    when: kind == "session_end"
default: allow
`
	e := mustEngine(t, src, EngineOptions{})
	ev := testEvents()
	other := *ev[event.KindConnect]
	c := *other.Connect
	c.Host, c.Port = "example.net", 80
	other.Connect = &c
	tests := []struct {
		name string
		ev   *event.Event
		want event.Verdict
	}{
		{"session_start", ev[event.KindSessionStart], ruleV(event.Allow, "start", "matched rule start")},
		{"session_end", ev[event.KindSessionEnd], ruleV(event.Deny, "later", "matched rule later")},
		{"dns", ev[event.KindDNS], ruleV(event.Deny, "dns-org", "no .org lookups")},
		{"tls", ev[event.KindTLS], ruleV(event.Allow, "github", "matched rule github")},
		{"connect first match", ev[event.KindConnect], ruleV(event.Deny, "first-wins", "matched rule first-wins")},
		{"connect default", &other, event.Verdict{Action: event.Allow, Reason: "no rule matched; default allow"}},
		{"http: earlier rule wins", ev[event.KindHTTP], ruleV(event.Allow, "github", "matched rule github")},
		{"llm", ev[event.KindLLM], ruleV(event.Rewrite, "redact", "matched rule redact")},
		{"file", ev[event.KindFile], ruleV(event.Deny, "netrc", "matched rule netrc")},
		{"exec", ev[event.KindExec], ruleV(event.Ask, "push", "pushing needs a person")},
		{"unknown kind", &event.Event{Kind: "future"}, event.Verdict{Action: event.Allow, Reason: "no rule matched; default allow"}},
		{"nil event", nil, event.Verdict{Action: event.Deny, Reason: "no event to decide"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, e.Decide(context.Background(), tt.ev)); d != "" {
				t.Errorf("Decide (-want +got):\n%s", d)
			}
		})
	}
	if d := cmp.Diff(map[string]any{"redact_secrets": true}, e.RewriteParams("redact")); d != "" {
		t.Errorf("RewriteParams (-want +got):\n%s", d)
	}
	e.RewriteParams("redact")["redact_secrets"] = false
	if e.RewriteParams("redact")["redact_secrets"] != true {
		t.Error("RewriteParams returned the engine's own map")
	}
	if got := e.RewriteParams("netrc"); got != nil {
		t.Errorf("RewriteParams(netrc) = %v, want nil", got)
	}
	if e.Policy().Source != "t.yaml" {
		t.Errorf("Policy() = %+v", e.Policy())
	}
}

func TestDecideOrderAndDefault(t *testing.T) {
	ev := testEvents()[event.KindHTTP]
	tests := []struct {
		name    string
		src     string
		plugins map[event.Kind]event.Verdict
		judge   event.Verdict
		want    event.Verdict
		judged  int64
		plugged int64
	}{
		{
			name: "rule before plugins",
			src:  "rules: [{name: r, action: deny}]\nplugins: [{name: p, command: x}]\ndefault: allow\n",
			plugins: map[event.Kind]event.Verdict{
				event.KindHTTP: {Action: event.Allow, DecidedBy: event.DecidedByPlugin, Rule: "p"}},
			want: ruleV(event.Deny, "r", "matched rule r"),
		},
		{
			name: "plugins before default judge",
			src:  "rules: [{name: r, on: dns, action: deny}]\nplugins: [{name: p, command: x}]\ndefault: judge\njudge: {provider: openai, model: m}\n",
			plugins: map[event.Kind]event.Verdict{
				event.KindHTTP: {Action: event.Ask, DecidedBy: event.DecidedByPlugin, Rule: "p"}},
			want:    event.Verdict{Action: event.Ask, DecidedBy: event.DecidedByPlugin, Rule: "p"},
			plugged: 1,
		},
		{
			name:    "plugins abstain, default judge",
			src:     "plugins: [{name: p, command: x}]\ndefault: judge\njudge: {provider: openai, model: m}\n",
			judge:   event.Verdict{Action: event.Allow, Reason: "fits the intent"},
			want:    event.Verdict{Action: event.Allow, Rule: "m", Reason: "fits the intent", DecidedBy: event.DecidedByJudge},
			judged:  1,
			plugged: 1,
		},
		{
			name:   "rule hands over to the judge",
			src:    "rules: [{name: r, when: 'http.method == \"POST\"', action: judge}]\ndefault: allow\njudge: {provider: openai, model: m}\n",
			judge:  event.Verdict{Action: event.Deny, Rule: "judge-model", Reason: "off task", DecidedBy: event.DecidedByRule},
			want:   event.Verdict{Action: event.Deny, Rule: "judge-model", Reason: "off task", DecidedBy: event.DecidedByJudge},
			judged: 1,
		},
		{
			name:  "judge may not rewrite",
			src:   "default: judge\njudge: {provider: openai, model: m}\n",
			judge: event.Verdict{Action: event.Rewrite},
			want: event.Verdict{Action: event.Deny, Rule: "m", Reason: "the judge answered rewrite, which it may not",
				DecidedBy: event.DecidedByJudge},
			judged: 1,
		},
		{
			name: "default deny",
			src:  "rules: [{name: r, when: 'false', action: allow}]\ndefault: deny\n",
			want: event.Verdict{Action: event.Deny, Reason: "no rule matched; default deny"},
		},
		{
			name: "default ask",
			src:  "default: ask\n",
			want: event.Verdict{Action: event.Ask, Reason: "no rule matched; default ask"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := &fakeJudge{v: tt.judge}
			pl := &fakePlugins{answers: tt.plugins}
			e := mustEngine(t, tt.src, EngineOptions{Judge: j, Plugins: pl})
			if d := cmp.Diff(tt.want, e.Decide(context.Background(), ev)); d != "" {
				t.Errorf("Decide (-want +got):\n%s", d)
			}
			if got := j.calls.Load(); got != tt.judged {
				t.Errorf("judge called %d times, want %d", got, tt.judged)
			}
			if got := pl.calls.Load(); got != tt.plugged {
				t.Errorf("plugins asked %d times, want %d", got, tt.plugged)
			}
		})
	}
}

func TestJudgeRequest(t *testing.T) {
	j := &fakeJudge{v: event.Verdict{Action: event.Allow}}
	tasks := map[string]string{"s1": "fix the failing test in parser.go"}
	e := mustEngine(t, "intent: keep keys home\ndefault: judge\njudge: {provider: openai, model: m}\n",
		EngineOptions{Judge: j, Task: func(s string) string { return tasks[s] }})
	ev := testEvents()[event.KindExec]
	e.Decide(context.Background(), ev)
	req := j.last.Load()
	if req == nil {
		t.Fatal("the judge was not asked")
	}
	if req.Intent != "keep keys home" || req.Event.Exec != ev.Exec || req.Task != tasks["s1"] {
		t.Errorf("JudgeRequest = %+v", req)
	}
	if d := cmp.Diff([]string{"claude", "bash", "python3"}, req.Lineage); d != "" {
		t.Errorf("Lineage (-want +got):\n%s", d)
	}
}

// Every field the judge reads of a connection, file or exec that a verdict
// may hang on is in the cache key: changing one asks the judge again.
func TestJudgeCacheKeyFields(t *testing.T) {
	evs := testEvents()
	tests := []struct {
		name   string
		kind   event.Kind
		change func(e *event.Event)
	}{
		{"connect via", event.KindConnect, func(e *event.Event) { e.Connect.Via = "transparent" }},
		{"connect relay", event.KindConnect, func(e *event.Event) { e.Connect.Relay = "http://127.0.0.9:3128" }},
		{"file access", event.KindFile, func(e *event.Event) { e.File.Access = event.FileUnknown }},
		{"file op", event.KindFile, func(e *event.Event) { e.File.Op = "rename" }},
		{"file target", event.KindFile, func(e *event.Event) { e.File.Target = "/tmp/x" }},
		{"exec digest", event.KindExec, func(e *event.Event) { e.Exec.Digest = "sha256:ff" }},
		{"exec program", event.KindExec, func(e *event.Event) { e.Exec.Program = "/usr/bin/openssl" }},
		{"exec interpreter", event.KindExec, func(e *event.Event) { e.Exec.Interpreter = "/usr/bin/perl" }},
		{"tls client rejects ca", event.KindTLS, func(e *event.Event) { e.TLS.ClientRejectsCA = true }},
		{"tls client rejected", event.KindTLS, func(e *event.Event) { e.TLS.ClientRejected = true }},
		{"tls alert", event.KindTLS, func(e *event.Event) { e.TLS.Alert = "unknown_ca" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := evs[tt.kind]
			c := *base
			switch {
			case c.Connect != nil:
				x := *c.Connect
				c.Connect = &x
			case c.File != nil:
				x := *c.File
				c.File = &x
			case c.Exec != nil:
				x := *c.Exec
				c.Exec = &x
			case c.TLS != nil:
				x := *c.TLS
				c.TLS = &x
			}
			tt.change(&c)
			if keyOf("r", base) == keyOf("r", &c) {
				t.Errorf("the cache key does not change with the %s", tt.name)
			}
		})
	}
}

func TestJudgeCache(t *testing.T) {
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	j := &fakeJudge{v: event.Verdict{Action: event.Allow, Reason: "ok"}}
	e := mustEngine(t, "default: judge\njudge: {provider: openai, model: m}\n",
		EngineOptions{Judge: j, Now: clock, CacheTTL: time.Minute, CacheSize: 2})
	ctx := context.Background()
	base := testEvents()[event.KindHTTP]
	variant := func(f func(e *event.Event)) *event.Event {
		c := *base
		h := *base.HTTP
		c.HTTP = &h
		p := *base.Process
		c.Process = &p
		f(&c)
		return &c
	}
	steps := []struct {
		name  string
		ev    *event.Event
		calls int64
	}{
		{"first", base, 1},
		{"same again", base, 1},
		{"another pid, time, session, query", variant(func(e *event.Event) {
			e.Process.PID, e.Time, e.Session = 7, time.Unix(5, 0), "s2"
			e.HTTP.URL = "https://api.github.com:443/repos/a%20b/issues?state=closed"
		}), 1},
		{"another path", variant(func(e *event.Event) { e.HTTP.URL = "https://api.github.com/other" }), 2},
		{"another method", variant(func(e *event.Event) { e.HTTP.Method = "GET" }), 3},
		{"another lineage", variant(func(e *event.Event) { e.Process.LineageNames = []string{"claude", "node"} }), 4},
		{"evicted by size 2", base, 5},
	}
	for _, s := range steps {
		v := e.Decide(ctx, s.ev)
		if v.Action != event.Allow || v.DecidedBy != event.DecidedByJudge {
			t.Errorf("%s: verdict %v", s.name, v)
		}
		if got := j.calls.Load(); got != s.calls {
			t.Errorf("%s: judge called %d times, want %d", s.name, got, s.calls)
		}
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	e.Decide(ctx, base)
	if got := j.calls.Load(); got != 6 {
		t.Errorf("after the TTL the judge was called %d times, want 6", got)
	}
	want := Stats{CacheHits: 2, CacheMisses: 6, CacheEntries: 2, JudgeCalls: 6}
	if d := cmp.Diff(want, e.Stats()); d != "" {
		t.Errorf("Stats (-want +got):\n%s", d)
	}
}

func TestJudgeErrors(t *testing.T) {
	tests := []struct {
		name    string
		onError string
		judge   *fakeJudge
		ctx     func() (context.Context, context.CancelFunc)
		want    event.Verdict
	}{
		{"error denies by default", "", &fakeJudge{err: errors.New("status 500 from http://judge/?key=sk-secret")}, nil,
			event.Verdict{Action: event.Deny, Rule: "m", Reason: "judge failed; on_error deny", DecidedBy: event.DecidedByJudge}},
		{"error asks", "ask", &fakeJudge{err: errors.New("bad answer")}, nil,
			event.Verdict{Action: event.Ask, Rule: "m", Reason: "judge failed; on_error ask", DecidedBy: event.DecidedByJudge}},
		{"timeout allows", "allow", &fakeJudge{block: make(chan struct{})}, nil,
			event.Verdict{Action: event.Allow, Rule: "m", Reason: "judge timed out; on_error allow", DecidedBy: event.DecidedByJudge}},
		{"caller gives up", "deny", &fakeJudge{block: make(chan struct{})},
			func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx, func() {}
			},
			event.Verdict{Action: event.Deny, Rule: "m", Reason: "judge canceled; on_error deny", DecidedBy: event.DecidedByJudge}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "default: judge\njudge: {provider: openai, model: m, timeout: 50ms}\n"
			if tt.onError != "" {
				src = strings.Replace(src, "}", ", on_error: "+tt.onError+"}", 1)
			}
			e := mustEngine(t, src, EngineOptions{Judge: tt.judge})
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tt.ctx != nil {
				ctx, cancel = tt.ctx()
			}
			defer cancel()
			ev := testEvents()[event.KindHTTP]
			got := e.Decide(ctx, ev)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("Decide (-want +got):\n%s", d)
			}
			if strings.Contains(got.Reason, "sk-secret") {
				t.Error("the verdict repeats the judge's error text")
			}
			if tt.ctx != nil {
				return // the call goes on without the caller
			}
			// A failure is not remembered: the next event asks again.
			e.Decide(context.Background(), ev)
			if got := tt.judge.calls.Load(); got != 2 {
				t.Errorf("judge called %d times, want 2 (errors must not be cached)", got)
			}
			if s := e.Stats(); s.JudgeErrors != 2 || s.CacheEntries != 0 {
				t.Errorf("Stats = %+v, want 2 judge errors and no cache entries", s)
			}
		})
	}
}

func TestJudgeConcurrentCallsShareOne(t *testing.T) {
	j := &fakeJudge{v: event.Verdict{Action: event.Allow}, block: make(chan struct{})}
	e := mustEngine(t, "default: judge\njudge: {provider: openai, model: m, timeout: 1m}\n", EngineOptions{Judge: j})
	ev := testEvents()[event.KindConnect]
	var wg sync.WaitGroup
	results := make(chan event.Verdict, 20)
	for range 20 {
		wg.Go(func() { results <- e.Decide(context.Background(), ev) })
	}
	for j.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(j.block)
	wg.Wait()
	close(results)
	for v := range results {
		if v.Action != event.Allow {
			t.Errorf("verdict %v, want allow", v)
		}
	}
	if got := j.calls.Load(); got != 1 {
		t.Errorf("judge called %d times for 20 identical events, want 1", got)
	}
}

func TestDecideConcurrent(t *testing.T) {
	j := &fakeJudge{v: event.Verdict{Action: event.Ask}}
	e := mustEngine(t, `
rules:
  - {name: a, on: http, when: 'http.headers["content-type"] == "x"', action: allow}
  - {name: b, on: [connect, dns], when: 'host.endsWith(".org")', action: deny}
  - {name: c, on: exec, action: judge}
default: allow
judge: {provider: openai, model: m}
`, EngineOptions{Judge: j})
	evs := testEvents()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for n := range 200 {
				k := event.Kinds[(i+n)%len(event.Kinds)]
				v := e.Decide(context.Background(), evs[k])
				want := event.Allow
				switch k {
				case event.KindDNS:
					want = event.Deny
				case event.KindExec:
					want = event.Ask
				}
				if v.Action != want {
					t.Errorf("%s: %v, want %v", k, v, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestEvalErrorSkipsRule(t *testing.T) {
	e := mustEngine(t, `
rules:
  - {name: missing-header, on: http, when: 'http.headers["authorization"] == "x"', action: allow}
  - {name: next, on: http, action: deny}
default: allow
`, EngineOptions{})
	v := e.Decide(context.Background(), testEvents()[event.KindHTTP])
	if v.Rule != "next" {
		t.Errorf("Decide = %v, want rule next (a failing condition does not match)", v)
	}
	if got := e.Stats().EvalErrors; got != 1 {
		t.Errorf("EvalErrors = %d, want 1", got)
	}
}

func TestNewEngineRefuses(t *testing.T) {
	judged := &Policy{Default: ActionJudge, Judge: JudgeConfig{Provider: "openai", Model: "m"}}
	tests := []struct {
		name string
		p    *Policy
		o    EngineOptions
		want string
	}{
		{"nil policy", nil, EngineOptions{}, "policy: no policy"},
		{"judge missing", judged, EngineOptions{}, "policy: the policy uses the judge but the engine was given none"},
		{"plugins missing", &Policy{Default: ActionAllow, Plugins: []PluginConfig{{Name: "p", Command: []string{"x"}}}},
			EngineOptions{}, "policy: the policy has plugins but the engine was given no plugin runner"},
		{"bad hand-built policy", &Policy{Source: "hand", Rules: []Rule{{Name: "r", When: "nope", Action: "deny"}}},
			EngineOptions{}, "policy: hand: default must be allow, deny, ask or judge\npolicy: hand: rule \"r\": when: undeclared reference to 'nope' (column 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := NewEngine(tt.p, tt.o)
			if err == nil || err.Error() != tt.want {
				t.Errorf("NewEngine = %v, %v; want error %q", e, err, tt.want)
			}
		})
	}
	if _, err := NewEngine(judged, EngineOptions{Judge: &fakeJudge{}}); err != nil {
		t.Errorf("NewEngine(hand-built policy) = %v", err)
	}
}

func TestDefaultPolicy(t *testing.T) {
	p, err := Parse("default.yaml", DefaultPolicyYAML())
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(p, DefaultPolicy()); d != "" {
		t.Errorf("DefaultPolicy differs from parsing its YAML (-parsed +DefaultPolicy):\n%s", d)
	}
	if p.Default != ActionAllow || !strings.Contains(p.Intent, "Credentials") {
		t.Errorf("default policy: default %q, intent %q", p.Default, p.Intent)
	}
	e, err := NewEngine(p, EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sess := &event.Session{ID: "s1", Workdir: "/home/u/proj", Home: "/home/u", StateDir: "/var/lib/chaperone"}
	file := func(path string, a event.FileAccess) *event.Event {
		return &event.Event{Kind: event.KindFile, Process: testProcess(), SessionInfo: sess, File: &event.File{Path: path, Access: a}}
	}
	evs := testEvents()
	clean := *evs[event.KindHTTP]
	h := *clean.HTTP
	h.Secrets = nil
	clean.HTTP = &h
	wsWith := func(ids []string) *event.Event {
		e := *evs[event.KindWS]
		w := *e.WS
		w.Secrets = ids
		e.WS = &w
		return &e
	}
	tests := []struct {
		name string
		ev   *event.Event
		want event.Action
		rule string
	}{
		{"aws", file("/home/u/.aws/credentials", event.FileRead), event.Deny, "no-credential-files"},
		{"ssh key", file("/root/.ssh/id_ed25519", event.FileRead), event.Deny, "no-credential-files"},
		{"ssh public key", file("/root/.ssh/id_ed25519.pub", event.FileRead), event.Allow, ""},
		{"netrc", file("/home/u/.netrc", event.FileRead), event.Deny, "no-credential-files"},
		{"gh", file("/home/u/.config/gh/hosts.yml", event.FileRead), event.Deny, "no-credential-files"},
		{"docker", file("/home/u/.docker/config.json", event.FileRead), event.Deny, "no-credential-files"},
		{"project file", file("/home/u/proj/main.go", event.FileRead), event.Allow, ""},
		{"project .env", file("/home/u/proj/.env", event.FileRead), event.Allow, ""},
		{"other .env", file("/home/u/other/.env.production", event.FileRead), event.Deny, "no-env-files-elsewhere"},
		{"not an env file", file("/home/u/other/.envrc", event.FileRead), event.Allow, ""},
		{"ca key", file("/var/lib/chaperone/ca-key.pem", event.FileRead), event.Deny, "no-chaperone-state"},
		{"state dir lookalike", file("/var/lib/chaperone-other/x", event.FileRead), event.Allow, ""},
		{"write in project", file("/home/u/proj/out/a.o", event.FileWrite), event.Allow, ""},
		{"write in tmp", file("/tmp/build-1/x", event.FileWrite), event.Allow, ""},
		{"write cache", file("/home/u/.cache/go-build/ab", event.FileWrite), event.Allow, ""},
		{"write bashrc", file("/home/u/.bashrc", event.FileWrite), event.Ask, "ask-writes-elsewhere"},
		{"write etc", file("/etc/cron.d/x", event.FileWrite), event.Ask, "ask-writes-elsewhere"},
		{"write sibling project", file("/home/u/proj2/x", event.FileWrite), event.Ask, "ask-writes-elsewhere"},
		{"llm", evs[event.KindLLM], event.Rewrite, "redact-llm-prompts"},
		{"http without secrets", &clean, event.Allow, ""},
		{"http with secrets", evs[event.KindHTTP], event.Deny, "no-secrets-to-other-hosts"},
		{"connect", evs[event.KindConnect], event.Allow, ""},
		{"ws with a secret", evs[event.KindWS], event.Deny, "no-secrets-over-websocket"},
		{"ws with a generic key", wsWith([]string{"generic-api-key"}), event.Allow, ""},
		{"ws without secrets", wsWith(nil), event.Allow, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := e.Decide(context.Background(), tt.ev)
			if v.Action != tt.want || v.Rule != tt.rule {
				t.Errorf("Decide = %v, want %v by rule %q", v, tt.want, tt.rule)
			}
		})
	}
	if d := cmp.Diff(map[string]any{"redact_secrets": true}, e.RewriteParams("redact-llm-prompts")); d != "" {
		t.Errorf("RewriteParams (-want +got):\n%s", d)
	}
	docs, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(docs, DefaultPolicyYAML()) {
		t.Error("docs/policy.md does not show the default policy as it is")
	}
	// DefaultPolicyYAML returns a copy.
	DefaultPolicyYAML()[0] = 'X'
	if DefaultPolicyYAML()[0] == 'X' {
		t.Error("DefaultPolicyYAML returned the embedded bytes")
	}
}

// hundredRules is a policy of 100 rules of which none matches the
// benchmark's event, so every applicable rule is evaluated.
func hundredRules() string {
	var b strings.Builder
	kinds := []string{"http", "connect", "[http, tls]", "dns", "file"}
	for i := range 100 {
		fmt.Fprintf(&b, "  - name: r%d\n    on: %s\n    when: 'host == \"h%d.example.com\" || (http.method == \"DELETE\" && http.path.startsWith(\"/r%d\"))'\n    action: deny\n",
			i, kinds[i%len(kinds)], i, i)
	}
	return "rules:\n" + b.String() + "default: allow\n"
}

func BenchmarkDecide100Rules(b *testing.B) {
	e := mustEngine(b, hundredRules(), EngineOptions{})
	ev := testEvents()[event.KindHTTP]
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if v := e.Decide(ctx, ev); v.Action != event.Allow {
			b.Fatal(v)
		}
	}
}

func BenchmarkDecideCacheHit(b *testing.B) {
	j := &fakeJudge{v: event.Verdict{Action: event.Allow}}
	e := mustEngine(b, "default: judge\njudge: {provider: openai, model: m}\n", EngineOptions{Judge: j})
	ev := testEvents()[event.KindHTTP]
	ctx := context.Background()
	e.Decide(ctx, ev)
	b.ReportAllocs()
	for b.Loop() {
		e.Decide(ctx, ev)
	}
	if j.calls.Load() != 1 {
		b.Fatalf("judge called %d times", j.calls.Load())
	}
}

// BenchmarkDecideDefault decides an http event with the default policy, as
// the proxy does for every request.
func BenchmarkDecideDefault(b *testing.B) {
	e := mustEngine(b, string(DefaultPolicyYAML()), EngineOptions{})
	ev := *testEvents()[event.KindHTTP]
	h := *ev.HTTP
	h.Secrets, ev.HTTP = nil, &h // most requests carry none
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if v := e.Decide(ctx, &ev); v.Action != event.Allow {
			b.Fatal(v)
		}
	}
}

// An open whose access could not be seen is decided as a read and as a
// write: the stricter verdict wins, and says so.
func TestDecideUnknownAccess(t *testing.T) {
	e := mustEngine(t, string(DefaultPolicyYAML()), EngineOptions{})
	sess := &event.Session{ID: "s1", Workdir: "/home/u/proj", Home: "/home/u", StateDir: "/var/lib/chaperone"}
	unknown := func(path string) *event.Event {
		return &event.Event{Kind: event.KindFile, Process: testProcess(), SessionInfo: sess, File: &event.File{Path: path, Access: event.FileUnknown}}
	}
	for _, tt := range []struct {
		name, path string
		want       event.Action
		rule       string
		as         string // the access the reason names; "" for none
	}{
		{"other tree's .env: denied as a read", "/home/u/other/.env", event.Deny, "no-env-files-elsewhere", "as a read"},
		{"credentials: denied as a read", "/home/u/.aws/credentials", event.Deny, "no-credential-files", "as a read"},
		{"state: denied either way", "/var/lib/chaperone/ca-key.pem", event.Deny, "no-chaperone-state", "as a read"},
		{"outside the tree: asked as a write", "/home/u/.bashrc", event.Ask, "ask-writes-elsewhere", "as a write"},
		{"in the tree: allowed", "/home/u/proj/main.go", event.Allow, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ev := unknown(tt.path)
			v := e.Decide(context.Background(), ev)
			if v.Action != tt.want || v.Rule != tt.rule {
				t.Errorf("Decide = %v, want %v by rule %q", v, tt.want, tt.rule)
			}
			if !strings.Contains(v.Reason, "decided as a read and as a write") || (tt.as != "") != strings.Contains(v.Reason, "; as a ") || !strings.Contains(v.Reason, tt.as) {
				t.Errorf("reason %q does not say it was decided both ways (%q)", v.Reason, tt.as)
			}
			if ev.File.Access != event.FileUnknown {
				t.Errorf("Decide changed the event's access to %q", ev.File.Access)
			}
		})
	}

	// Plugins and the judge are asked once, with the event as it is.
	j := &fakeJudge{v: event.Verdict{Action: event.Allow, Reason: "fine"}}
	pl := &fakePlugins{}
	e = mustEngine(t, `rules:
  - name: judge-writes
    on: file
    when: file.access == "write" && file.path.startsWith("/srv/")
    action: judge
plugins:
  - name: p
    command: [p]
judge: {provider: openai, model: m}
default: judge
`, EngineOptions{Judge: j, Plugins: pl})
	v := e.Decide(context.Background(), unknown("/home/u/x"))
	if v.Action != event.Allow || j.calls.Load() != 1 || pl.calls.Load() != 1 {
		t.Errorf("no rule either way: %v, judge called %d times, plugins %d, want allow, 1, 1", v, j.calls.Load(), pl.calls.Load())
	}
	if got := j.last.Load().Event.File.Access; got != event.FileUnknown {
		t.Errorf("the judge saw access %q, want unknown", got)
	}
	j.v = event.Verdict{Action: event.Ask, Reason: "a person should see this"}
	v = e.Decide(context.Background(), unknown("/srv/y"))
	if v.Action != event.Ask || v.Rule != "m" || !strings.Contains(v.Reason, "as a write: a person should see this") {
		t.Errorf("the judge asked about the write: %v, want ask by m", v)
	}
	// A rule's deny either way is the answer: nobody else is asked.
	e = mustEngine(t, `rules:
  - name: no-writes
    on: file
    when: file.access == "write"
    action: deny
plugins:
  - name: p
    command: [p]
judge: {provider: openai, model: m}
default: judge
`, EngineOptions{Judge: j, Plugins: pl})
	judged, asked := j.calls.Load(), pl.calls.Load()
	if v := e.Decide(context.Background(), unknown("/home/u/x")); v.Action != event.Deny || v.Rule != "no-writes" {
		t.Errorf("Decide = %v, want deny by no-writes", v)
	}
	if j.calls.Load() != judged || pl.calls.Load() != asked {
		t.Error("the judge or a plugin was asked about an open a rule denies")
	}
}

// The judge's verdicts are remembered per question: an open of a file, a
// link of it elsewhere and an open of unknown access are three.
func TestJudgeCacheKeysFileQuestions(t *testing.T) {
	j := &fakeJudge{v: event.Verdict{Action: event.Allow}}
	e := mustEngine(t, "default: judge\njudge: {provider: openai, model: m}\n", EngineOptions{Judge: j})
	file := func(access event.FileAccess, op, target string) *event.Event {
		return &event.Event{Kind: event.KindFile, Process: testProcess(), File: &event.File{Path: "/home/u/x", Access: access, Op: op, Target: target}}
	}
	for _, ev := range []*event.Event{
		file(event.FileRead, "", ""),
		file(event.FileRead, "link", "/home/u/proj/x"),
		file(event.FileRead, "link", "/tmp/x"),
		file(event.FileRead, "rename", "/tmp/x"),
		file(event.FileUnknown, "", ""),
		file(event.FileRead, "", ""), // the first again: cached
	} {
		e.Decide(context.Background(), ev)
	}
	if n := j.calls.Load(); n != 5 {
		t.Errorf("the judge was asked %d times, want 5 (one per question)", n)
	}
}
