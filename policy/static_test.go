package policy

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

func TestFieldRefs(t *testing.T) {
	s, err := newSchema()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, when string
		want       []string
	}{
		{"empty", "", nil},
		{"constant", "true", nil},
		{"one field", `file.path == "/x"`, []string{"file.path"}},
		{"repeated field", `file.path == "/x" || file.path.endsWith("/y")`, []string{"file.path"}},
		{"comprehension variable is not a field", `["/tmp/"].exists(d, file.path.startsWith(d))`, []string{"file.path"}},
		{"list field", `lineage.exists(l, l == "sh") && file.access == "read"`, []string{"file.access", "lineage"}},
		{"process field", `process.exe.endsWith("/curl")`, []string{"process.exe"}},
		{"session fields", `file.path.startsWith(session.workdir + "/") || session.home == ""`, []string{"file.path", "session.home", "session.workdir"}},
		{"type name is not a field", `type(file.path) == string`, []string{"file.path"}},
		{"function", `glob("*.go", file.path) && agent == "x"`, []string{"agent", "file.path"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.fieldRefs(tt.when)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("fieldRefs(%q) (-want +got):\n%s", tt.when, diff)
			}
		})
	}
}

func TestFileStatic(t *testing.T) {
	const (
		judgeSec = "judge: {provider: openai, model: m}\n"
		// Allows the working tree, asks the judge about the rest.
		treeOrJudge = `
rules:
  - name: tree
    on: file
    when: file.path.startsWith(session.workdir + "/")
    action: allow
default: judge
` + judgeSec
	)
	sess := &event.Session{ID: "s1", Workdir: "/home/u/proj", Home: "/home/u", StateDir: "/home/u/.local/state/chaperone"}
	tests := []struct {
		name string
		src  string // "" is the built-in default policy
		sess *event.Session
		path string
		want bool
	}{
		{name: "default: project file", path: "/home/u/proj/main.go", want: true},
		{name: "default: project .env", path: "/home/u/proj/.env", want: true},
		{name: "default: temporary file", path: "/tmp/build/x.o", want: true},
		{name: "default: agent cache", path: "/home/u/.cache/go-build/ab", want: true},
		{name: "default: bashrc write asks", path: "/home/u/.bashrc"},
		{name: "default: aws credentials read denied", path: "/home/u/.aws/credentials"},
		{name: "default: ssh key read denied", path: "/home/u/.ssh/id_ed25519"},
		{name: "default: other .env read denied", path: "/home/u/other/.env"},
		{name: "default: libc write asks", path: "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		{name: "default: chaperone state denied", path: "/home/u/.local/state/chaperone/ca.key"},
		{name: "default: the working tree itself asks on write", path: "/home/u/proj"},
		{
			// Without a working tree the write rule does not apply.
			name: "default: no session info", sess: &event.Session{ID: "s1"},
			path: "/usr/lib/x86_64-linux-gnu/libc.so.6", want: true,
		},
		{
			name: "file rule reads process.exe: project file",
			src:  "rules: [{name: r, on: file, when: 'process.exe == \"/usr/bin/curl\"', action: deny}]\ndefault: allow\n",
			path: "/home/u/proj/main.go",
		},
		{
			name: "file rule reads process.exe: elsewhere",
			src:  "rules: [{name: r, on: file, when: 'process.exe == \"/usr/bin/curl\"', action: deny}]\ndefault: allow\n",
			path: "/etc/hosts",
		},
		{
			name: "file rule reads agent",
			src:  "rules: [{name: r, on: file, when: 'agent == \"x\"', action: allow}]\ndefault: allow\n",
			path: "/home/u/proj/main.go",
		},
		{
			name: "rule on every kind reads lineage",
			src:  "rules: [{name: r, when: 'lineage.exists(l, l == \"sh\")', action: deny}]\ndefault: allow\n",
			path: "/home/u/proj/main.go",
		},
		{
			name: "process field in a rule on another kind",
			src:  "rules: [{name: r, on: [http, connect], when: 'process.exe == \"/usr/bin/curl\"', action: deny}]\ndefault: allow\n",
			path: "/home/u/proj/main.go", want: true,
		},
		{
			name: "plugin on file",
			src:  "plugins: [{name: p, command: x, on: [file]}]\ndefault: allow\n",
			path: "/home/u/proj/main.go",
		},
		{
			name: "plugin on every kind",
			src:  "plugins: [{name: p, command: x}]\ndefault: allow\n",
			path: "/home/u/proj/main.go",
		},
		{
			name: "plugin on http only",
			src:  "plugins: [{name: p, command: x, on: [http]}]\ndefault: allow\n",
			path: "/home/u/proj/main.go", want: true,
		},
		{name: "default judge, rule allows", src: treeOrJudge, path: "/home/u/proj/main.go", want: true},
		{name: "default judge, no rule allows", src: treeOrJudge, path: "/etc/hosts"},
		{
			name: "matching rule hands to the judge",
			src:  "rules: [{name: r, on: file, action: judge}]\ndefault: allow\n" + judgeSec,
			path: "/home/u/proj/main.go",
		},
		{name: "default ask", src: "default: ask\n", path: "/home/u/proj/main.go"},
		{name: "default deny", src: "default: deny\n", path: "/home/u/proj/main.go"},
		{
			name: "matching rewrite rule",
			src:  "rules: [{name: r, on: file, action: rewrite, rewrite: {redact_secrets: true}}]\ndefault: allow\n",
			path: "/home/u/proj/main.go",
		},
		{
			name: "writes denied",
			src:  "rules: [{name: r, on: file, when: 'file.access == \"write\"', action: deny}]\ndefault: allow\n",
			path: "/home/u/proj/main.go",
		},
		{
			name: "only network rules, default allow",
			src:  "rules: [{name: r, on: [connect, dns], when: 'host == \"evil.test\"', action: deny}]\ndefault: allow\n",
			path: "/etc/passwd", want: true,
		},
		{
			name: "allow before a process rule on file",
			src: "rules:\n  - {name: a, on: file, when: 'file.path.startsWith(session.workdir + \"/\")', action: allow}\n" +
				"  - {name: b, on: file, when: 'process.uid == 0', action: deny}\ndefault: allow\n",
			// Conservative: the kind as a whole reads a process field.
			path: "/home/u/proj/main.go",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := &fakeJudge{v: event.Verdict{Action: event.Allow}}
			pl := &fakePlugins{answers: map[event.Kind]event.Verdict{event.KindFile: {Action: event.Allow}}}
			o := EngineOptions{Judge: j, Plugins: pl}
			var e *Engine
			if tt.src == "" {
				var err error
				if e, err = NewEngine(DefaultPolicy(), o); err != nil {
					t.Fatal(err)
				}
			} else {
				e = mustEngine(t, tt.src, o)
			}
			se := tt.sess
			if se == nil {
				se = sess
			}
			if got := e.FileStatic(tt.path, se); got != tt.want {
				t.Errorf("FileStatic(%q) = %v, want %v", tt.path, got, tt.want)
			}
			if n := j.calls.Load(); n != 0 {
				t.Errorf("the judge was called %d times", n)
			}
			if n := pl.calls.Load(); n != 0 {
				t.Errorf("the plugins were asked %d times", n)
			}
			if !tt.want {
				return
			}
			// A static allow must be what Decide says for any process.
			for _, a := range []event.FileAccess{event.FileRead, event.FileWrite} {
				ev := &event.Event{
					Kind: event.KindFile, Session: se.ID, SessionInfo: se,
					Process: &event.Process{PID: 42, Exe: "/usr/bin/curl", LineageNames: []string{"sh", "curl"}},
					File:    &event.File{Path: tt.path, Access: a},
				}
				if v := e.Decide(context.Background(), ev); v.Action != event.Allow {
					t.Errorf("Decide(%s %q) = %v, want allow", a, tt.path, v)
				}
			}
		})
	}
}

func TestFileStaticNilSession(t *testing.T) {
	e, err := NewEngine(DefaultPolicy(), EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		want bool
	}{
		{"/home/u/proj/main.go", true},
		{"/home/u/.aws/credentials", false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			if got := e.FileStatic(tt.path, nil); got != tt.want {
				t.Errorf("FileStatic(%q, nil) = %v, want %v", tt.path, got, tt.want)
			}
		})
	}
}

// BenchmarkFileStatic compares FileStatic on the default policy with the
// two Decide calls it stands for.
func BenchmarkFileStatic(b *testing.B) {
	e, err := NewEngine(DefaultPolicy(), EngineOptions{})
	if err != nil {
		b.Fatal(err)
	}
	sess := &event.Session{ID: "s1", Workdir: "/home/u/proj", Home: "/home/u", StateDir: "/home/u/.local/state/chaperone"}
	for _, c := range []struct{ name, path string }{
		{"project", "/home/u/proj/internal/server/main.go"},
		{"credentials", "/home/u/.aws/credentials"},
		{"outside", "/usr/lib/x86_64-linux-gnu/libc.so.6"},
	} {
		b.Run("FileStatic/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e.FileStatic(c.path, sess)
			}
		})
		b.Run("Decide2/"+c.name, func(b *testing.B) {
			ctx := context.Background()
			proc := &event.Process{PID: 42, Exe: "/usr/bin/go", LineageNames: []string{"claude", "go"}}
			r := &event.Event{Kind: event.KindFile, Session: "s1", SessionInfo: sess, Process: proc,
				File: &event.File{Path: c.path, Access: event.FileRead}}
			w := &event.Event{Kind: event.KindFile, Session: "s1", SessionInfo: sess, Process: proc,
				File: &event.File{Path: c.path, Access: event.FileWrite}}
			b.ReportAllocs()
			for b.Loop() {
				e.Decide(ctx, r)
				e.Decide(ctx, w)
			}
		})
	}
}

func TestFileStaticFor(t *testing.T) {
	p, err := Parse("default.yaml", DefaultPolicyYAML())
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(p, EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sess := &event.Session{ID: "s1", Workdir: "/home/u/proj", Home: "/home/u", StateDir: "/var/lib/chaperone"}
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	if e.FileStatic(libc, sess) {
		t.Error("libc static for reads and writes: a write outside the tree asks")
	}
	if !e.FileStaticFor(libc, sess, event.FileRead) {
		t.Error("libc not static for reads")
	}
	if e.FileStaticFor("/home/u/.aws/credentials", sess, event.FileRead) {
		t.Error("credentials static for reads")
	}
	if e.FileStaticFor(libc, sess) {
		t.Error("static for no access at all")
	}
}

func TestFileStaticGiven(t *testing.T) {
	p, err := Parse("default.yaml", DefaultPolicyYAML())
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(p, EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sess := &event.Session{ID: "s1", Workdir: "/home/u/proj", Home: "/home/u", StateDir: "/var/lib/chaperone"}
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	const src = "/home/u/proj/main.go"
	byRule := event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByRule}
	byDefault := event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByDefault}
	read, write := event.FileRead, event.FileWrite
	for _, tt := range []struct {
		name     string
		path     string
		v        event.Verdict
		accesses []event.FileAccess
		want     bool
		decided  event.FileAccess // read when empty
	}{
		{"read decided, only reads asked", libc, byRule, []event.FileAccess{read}, true, ""},
		{"read decided by default", libc, byDefault, []event.FileAccess{read}, true, ""},
		{"read decided, writes still evaluated (ask)", libc, byRule, []event.FileAccess{read, write}, false, ""},
		{"tree file, writes evaluated and allowed", src, byRule, []event.FileAccess{read, write}, true, ""},
		{"denied read", libc, event.Verdict{Action: event.Deny, DecidedBy: event.DecidedByRule}, []event.FileAccess{read}, false, ""},
		{"allowed by a person", libc, event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByHuman}, []event.FileAccess{read}, false, ""},
		{"allowed by the judge", libc, event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByJudge}, []event.FileAccess{read}, false, ""},
		{"other access decided: read evaluated, denied", "/home/u/.aws/credentials", byRule, []event.FileAccess{read}, false, write},
		{"no access at all", libc, byRule, nil, false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			decided := tt.decided
			if decided == "" {
				decided = read
			}
			if got := e.FileStaticGiven(tt.path, sess, decided, tt.v, tt.accesses...); got != tt.want {
				t.Errorf("FileStaticGiven = %v, want %v", got, tt.want)
			}
		})
	}
	// A policy whose file decisions depend on the process is never static,
	// whatever verdict is given.
	p2, err := Parse("p.yaml", []byte(`
default: allow
rules:
  - name: python-no-tree
    on: [file]
    when: process.exe.endsWith("python3")
    action: deny
`))
	if err != nil {
		t.Fatal(err)
	}
	e2, err := NewEngine(p2, EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if e2.FileStaticGiven(src, sess, read, byDefault, read) {
		t.Error("static although a rule reads process.exe")
	}
}
