package policy

import (
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

func testProcess() *event.Process {
	return &event.Process{
		PID: 4242, PPID: 4200, Exe: "/usr/bin/python3", Argv: []string{"python3", "x.py"},
		Cwd: "/home/u/proj", UID: 1000, Lineage: []int{4200, 4100},
		LineageNames: []string{"claude", "bash", "python3"}, ExeDigest: "sha256:ab",
	}
}

// testEvents holds one event of every kind.
func testEvents() map[event.Kind]*event.Event {
	p := testProcess()
	return map[event.Kind]*event.Event{
		event.KindSessionStart: {Kind: event.KindSessionStart, Session: "s1", SessionInfo: &event.Session{ID: "s1", Agent: "claude-code", RootPID: 4100,
			Workdir: "/home/u/proj", Home: "/home/u", StateDir: "/var/lib/chaperone"}},
		event.KindSessionEnd: {Kind: event.KindSessionEnd, SessionInfo: &event.Session{ID: "s1", Agent: "claude-code"}},
		event.KindConnect: {Kind: event.KindConnect, Session: "s1", Process: p, Connect: &event.Connect{
			Dst: netip.MustParseAddrPort("[::ffff:127.0.0.1]:8443"), Host: "API.Example.COM.", Port: 443, Transport: event.TCP, Via: "relay", Relay: "socks5://127.0.0.5:1080"}},
		event.KindDNS: {Kind: event.KindDNS, Session: "s1", Process: p, DNS: &event.DNS{Name: "pypi.org.", Type: "aaaa"}},
		event.KindTLS: {Kind: event.KindTLS, Session: "s1", Process: p, TLS: &event.TLS{ServerName: "github.com", ALPN: []string{"h2", "http/1.1"}, Version: "1.3"}},
		event.KindHTTP: {Kind: event.KindHTTP, Session: "s1", Process: p, HTTP: &event.HTTP{
			Method: "POST", URL: "https://api.github.com:443/repos/a%20b/issues?state=open&x=1&x=2#frag", Host: "api.github.com:443",
			Proto: "HTTP/2.0", Status: 201, Upgrade: "WebSocket",
			Header:  map[string][]string{"Content-Type": {"application/json"}, "X-Multi": {"a", "b"}, "x-multi": {"c"}},
			Secrets: []string{"aws-access-token", "github-pat"}}},
		event.KindLLM: {Kind: event.KindLLM, Session: "s1", Process: p, LLM: &event.LLM{Provider: "anthropic", Model: "claude-x", Path: "/v1/messages",
			Operation: "messages", Stream: true}},
		event.KindFile:         {Kind: event.KindFile, Session: "s1", Process: p, File: &event.File{Path: "/home/u/.netrc", Access: event.FileRead, Op: "link", Target: "/home/u/proj/n"}},
		event.KindExec:         {Kind: event.KindExec, Session: "s1", Process: p, Exec: &event.Exec{Path: "/usr/bin/git", Argv: []string{"git", "push"}, Cwd: "/home/u/proj", Digest: "sha256:cd", Interpreter: "/bin/sh"}},
		event.KindPolicyReload: {Kind: event.KindPolicyReload, Session: "s1", Policy: &event.PolicyReload{Path: "/home/u/proj/policy.yaml", Digest: "sha256:ef", Trigger: "SIGHUP"}},
		event.KindWS: {Kind: event.KindWS, Session: "s1", Process: p, WS: &event.WS{Host: "Chat.Example.com:8443", Path: "/socket", Direction: event.WSSend,
			Opcode: "text", Size: 42, Text: `{"method":"tools/call"}`, Truncated: true, Secrets: []string{"github-pat"}, MCPMethod: "tools/call", MCPTool: "search"}},
	}
}

// evalField evaluates one variable of the environment against e and
// returns its Go value.
func evalField(t *testing.T, s *schema, name string, e *event.Event) any {
	t.Helper()
	ast, iss := s.env.Compile(name)
	if iss.Err() != nil {
		t.Fatalf("compile %s: %v", name, iss.Err())
	}
	prg, err := s.env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	act := &activation{s: s, vals: make([]ref.Val, len(s.fields))}
	act.reset(e)
	out, _, err := prg.Eval(act)
	if err != nil {
		t.Fatalf("eval %s: %v", name, err)
	}
	switch v := out.Value().(type) {
	case int64:
		return v
	case string:
		return v
	case bool:
		return v
	}
	switch {
	case strings.HasPrefix(out.Type().TypeName(), "list"):
		l, err := out.ConvertToNative(reflect.TypeFor[[]string]())
		if err != nil {
			t.Fatal(err)
		}
		if l := l.([]string); len(l) > 0 {
			return l
		}
		return []string(nil)
	default:
		m, err := out.ConvertToNative(reflect.TypeFor[map[string]string]())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m := m.(map[string]string); len(m) > 0 {
			return m
		}
		return map[string]string(nil)
	}
}

func TestFieldValues(t *testing.T) {
	s, err := newSchema()
	if err != nil {
		t.Fatal(err)
	}
	proc := map[string]any{
		"session.id": "s1", "agent": "claude", "process.pid": int64(4242), "process.ppid": int64(4200),
		"process.exe": "/usr/bin/python3", "process.argv": []string{"python3", "x.py"}, "process.cwd": "/home/u/proj",
		"process.uid": int64(1000), "process.exe_digest": "sha256:ab", "lineage": []string{"claude", "bash", "python3"},
	}
	with := func(kind event.Kind, m map[string]any) map[string]any {
		out := map[string]any{"kind": string(kind)}
		for k, v := range proc {
			out[k] = v
		}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	// Only the non-zero values; every other field must be zero.
	want := map[event.Kind]map[string]any{
		event.KindSessionStart: {"kind": "session_start", "session.id": "s1", "agent": "claude-code",
			"session.workdir": "/home/u/proj", "session.home": "/home/u", "session.state_dir": "/var/lib/chaperone"},
		event.KindSessionEnd:   {"kind": "session_end", "session.id": "s1", "agent": "claude-code"},
		event.KindPolicyReload: {"kind": "policy_reload", "session.id": "s1"},
		event.KindConnect: with(event.KindConnect, map[string]any{
			"dst.ip": "127.0.0.1", "dst.port": int64(443), "host": "api.example.com", "transport": "tcp",
			"via": "relay", "relay": "socks5://127.0.0.5:1080"}),
		event.KindDNS: with(event.KindDNS, map[string]any{"host": "pypi.org", "dns.name": "pypi.org", "dns.qtype": "AAAA"}),
		event.KindTLS: with(event.KindTLS, map[string]any{"host": "github.com", "tls.sni": "github.com",
			"tls.alpn": []string{"h2", "http/1.1"}, "tls.version": "1.3"}),
		event.KindHTTP: with(event.KindHTTP, map[string]any{
			"host": "api.github.com", "http.method": "POST",
			"http.url":     "https://api.github.com:443/repos/a%20b/issues?state=open&x=1&x=2#frag",
			"http.path":    "/repos/a b/issues",
			"http.query":   map[string]string{"state": "open", "x": "1, 2"},
			"http.headers": map[string]string{"content-type": "application/json", "x-multi": "a, b, c"},
			"http.status":  int64(201), "http.upgrade": "websocket", "http.proto": "HTTP/2.0",
			"http.secrets": []string{"aws-access-token", "github-pat"}}),
		event.KindLLM: with(event.KindLLM, map[string]any{"llm.provider": "anthropic", "llm.model": "claude-x", "llm.path": "/v1/messages",
			"llm.operation": "messages", "llm.stream": true}),
		event.KindFile: with(event.KindFile, map[string]any{"file.path": "/home/u/.netrc", "file.access": "read",
			"file.op": "link", "file.target": "/home/u/proj/n"}),
		event.KindWS: with(event.KindWS, map[string]any{"host": "chat.example.com", "ws.path": "/socket", "ws.direction": "send",
			"ws.opcode": "text", "ws.size": int64(42), "ws.text": `{"method":"tools/call"}`, "ws.truncated": true,
			"ws.secrets": []string{"github-pat"}, "ws.mcp_method": "tools/call", "ws.mcp_tool": "search"}),
		event.KindExec: with(event.KindExec, map[string]any{"exec.path": "/usr/bin/git", "exec.argv": []string{"git", "push"},
			"exec.cwd": "/home/u/proj", "exec.digest": "sha256:cd", "exec.program": "/usr/bin/git", "exec.interpreter": "/bin/sh"}),
	}
	events := testEvents()
	for _, kind := range event.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			e := events[kind]
			got := map[string]any{}
			for _, f := range s.fields {
				v := evalField(t, s, f.name, e)
				switch v := v.(type) {
				case string:
					if v == "" {
						continue
					}
				case int64:
					if v == 0 {
						continue
					}
				case bool:
					if !v {
						continue
					}
				case []string:
					if v == nil {
						continue
					}
				case map[string]string:
					if v == nil {
						continue
					}
				}
				got[f.name] = v
			}
			if d := cmp.Diff(want[kind], got); d != "" {
				t.Errorf("fields (-want +got):\n%s", d)
			}
		})
	}
}

func TestConditions(t *testing.T) {
	s, err := newSchema()
	if err != nil {
		t.Fatal(err)
	}
	events := testEvents()
	tests := []struct {
		kind event.Kind
		when string
		want bool
	}{
		{event.KindConnect, `host.endsWith(".example.com") && dst.port == 443`, true},
		{event.KindConnect, `dst.ip == "127.0.0.1" && transport == "udp"`, false},
		{event.KindDNS, `dns.qtype == "AAAA" && glob("*.org", dns.name)`, true},
		{event.KindTLS, `"h2" in tls.alpn && tls.sni == host`, true},
		{event.KindHTTP, `http.method == "POST" && http.path.startsWith("/repos/") && http.query["state"] == "open"`, true},
		{event.KindHTTP, `"authorization" in http.headers`, false},
		{event.KindHTTP, `http.headers["content-type"].contains("json") && "github-pat" in http.secrets`, true},
		{event.KindLLM, `llm.provider == "anthropic" && lineage.exists(p, p == "python3")`, true},
		{event.KindLLM, `host == "" && http.method == ""`, true}, // absent payloads are zero, not errors
		{event.KindFile, `glob("/home/*/.netrc", file.path) && file.access == "read"`, true},
		{event.KindFile, `glob("/home/*", file.path)`, false}, // * does not cross "/"
		{event.KindExec, `exec.argv[0] == "git" && "push" in exec.argv && process.argv.size() == 2`, true},
		{event.KindExec, `agent == "claude" && session.id == "s1" && process.uid == 1000`, true},
		{event.KindSessionStart, `agent == "claude-code" && process.pid == 0 && size(lineage) == 0`, true},
		{event.KindHTTP, `http.url.lowerAscii().contains("github")`, true}, // ext.Strings
	}
	for _, tt := range tests {
		t.Run(tt.when, func(t *testing.T) {
			prg, issues := s.compile(tt.when)
			if issues != nil {
				t.Fatalf("compile: %v", issues)
			}
			act := &activation{s: s, vals: make([]ref.Val, len(s.fields))}
			act.reset(events[tt.kind])
			out, _, err := prg.prog.Eval(act)
			if err != nil {
				t.Fatal(err)
			}
			if got := out.Value() == true; got != tt.want {
				t.Errorf("%s on %s = %v, want %v", tt.when, tt.kind, got, tt.want)
			}
			if tt.want && !act.passes(prg.guards) {
				t.Errorf("a guard of %s fails on %s", tt.when, tt.kind)
			}
		})
	}
}

func TestGlob(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"*.github.com", "api.github.com", true},
		{"*.github.com", "github.com", false},
		{"/home/*/.ssh/id_*", "/home/u/.ssh/id_ed25519", true},
		{"/home/*/.ssh/id_*", "/home/u/x/.ssh/id_rsa", false},
		{"a?c", "abc", true},
	}
	for _, tt := range tests {
		if got := globBinding(types.String(tt.pattern), types.String(tt.s)); got.Value() != tt.want {
			t.Errorf("glob(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
	if got := globBinding(types.String("[bad"), types.String("x")); !types.IsError(got) {
		t.Errorf("glob with a bad pattern = %v, want an error", got)
	}
}

// TestFieldsDocumented keeps docs/policy.md in step with the environment:
// every variable appears there with its type.
func TestFieldsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fields() {
		typ := cel.FormatCELType(f.typ)
		re := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(f.name) + "` \\| " + regexp.QuoteMeta(typ) + " \\|")
		if !re.Match(doc) {
			t.Errorf("docs/policy.md has no row \"| `%s` | %s |\"", f.name, typ)
		}
	}
}

func TestLookup(t *testing.T) {
	s, err := newSchema()
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range s.fields {
		if got, ok := s.lookup(f.name); !ok || got != i {
			t.Errorf("lookup(%q) = %d, %v; want %d, true", f.name, got, ok, i)
		}
	}
	for _, name := range []string{"", "process", "http.secret", "hosts", "tls.sni2"} {
		if i, ok := s.lookup(name); ok {
			t.Errorf("lookup(%q) = %d, want no field", name, i)
		}
	}
}
