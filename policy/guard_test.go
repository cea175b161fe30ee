package policy

import (
	"fmt"
	"strings"
	"testing"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"

	"github.com/chaperone-dev/chaperone/event"
)

// guardText is a guard as a condition would say it, for the tests.
func (s *schema) guardText(g guard) string {
	name := s.fields[g.field].name
	switch g.op {
	case guardNonEmpty:
		return "size(" + name + ") > 0"
	case guardEquals:
		return fmt.Sprintf("%s == %q", name, g.lit)
	}
	return fmt.Sprintf("%s.startsWith(%q)", name, g.lit)
}

// TestGuards: the tests a condition cannot hold without are read off it,
// through conjunctions only.
func TestGuards(t *testing.T) {
	s, err := newSchema()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		when string
		want []string
	}{
		{`http.secrets.exists(s, s != "generic-api-key")`, []string{`size(http.secrets) > 0`}},
		{`file.access == "read" && (file.path.endsWith("/.netrc") || file.path.endsWith("/.aws/credentials"))`,
			[]string{`file.access == "read"`}},
		{`"write" == file.access && session.workdir != "" && !file.path.startsWith(session.workdir + "/")`,
			[]string{`file.access == "write"`}},
		{`http.path.startsWith("/admin") && http.method == "DELETE" && lineage.exists(p, p == "curl")`,
			[]string{`http.path.startsWith("/admin")`, `http.method == "DELETE"`, `size(lineage) > 0`}},
		{`http.query.exists(k, k == "token")`, []string{`size(http.query) > 0`}},
		// None: a disjunction, a negation, all (true over nothing), a
		// literal on both sides, a field compared with a field, an
		// expression that is not a whole field, a literal not a string.
		{`http.method == "GET" || http.method == "HEAD"`, nil},
		{`!http.secrets.exists(s, true)`, nil},
		{`http.secrets.all(s, s == "x")`, nil},
		{`"a" == "a"`, nil},
		{`host == http.method`, nil},
		{`http.path.lowerAscii() == "/x"`, nil},
		{`http.headers["x"] == "y"`, nil},
		{`process.pid == 4100`, nil},
		{`[1, 2].exists(x, x == 1)`, nil},
		{`file.path.startsWith(session.home + "/")`, nil},
	}
	for _, tt := range tests {
		c, issues := s.compile(tt.when)
		if issues != nil {
			t.Fatalf("%s: %v", tt.when, issues)
		}
		var got []string
		for _, g := range c.guards {
			got = append(got, s.guardText(g))
		}
		if strings.Join(got, "; ") != strings.Join(tt.want, "; ") {
			t.Errorf("%s: guards %q, want %q", tt.when, got, tt.want)
		}
	}
}

// TestGuardsSound: whenever an event fails a condition's guard, the
// condition evaluates to false, without an error; and the guards of the
// default policy's rules hold where the rules match.
func TestGuardsSound(t *testing.T) {
	s, err := newSchema()
	if err != nil {
		t.Fatal(err)
	}
	conds := []string{
		`http.secrets.exists(s, s != "generic-api-key")`,
		`http.secrets.exists(s, s.size() > 100 || s == "x") && host == "api.github.com"`,
		`file.access == "read" && file.path.matches("/\\.env$")`,
		`http.path.startsWith("/repos/") && http.method == "POST"`,
		`http.path.startsWith("/nope/") && http.query["state"] == "open"`,
		`lineage.exists(p, p == "python3") && agent == "claude-code"`,
		`exec.argv.exists(a, a == "push") && exec.argv[0] == "git"`,
		`process.argv.exists(a, a == "-c") && kind == "exec"`,
		`kind == "file" && 1/0 == 1`, // an error past a failed guard is no error: false && error is false
		`http.secrets.all(s, s == "x") && kind == "http"`,
		`http.method == "GET" || http.method == "POST"`, // no guard
	}
	var evs []*event.Event
	for _, e := range testEvents() {
		evs = append(evs, e)
		if e.HTTP != nil { // and without secrets, the common case
			c, h := *e, *e.HTTP
			h.Secrets, c.HTTP = nil, &h
			evs = append(evs, &c)
		}
	}
	evs = append(evs, &event.Event{Kind: event.KindHTTP})
	act := &activation{s: s, vals: make([]ref.Val, len(s.fields))}
	failed := 0
	for _, when := range conds {
		c, issues := s.compile(when)
		if issues != nil {
			t.Fatalf("%s: %v", when, issues)
		}
		for _, e := range evs {
			act.reset(e)
			if act.passes(c.guards) {
				continue
			}
			failed++
			out, _, err := c.prog.Eval(act)
			if err != nil || out != types.False {
				t.Errorf("%s on %s: guard failed, but the condition is %v, %v", when, e.Kind, out, err)
			}
		}
	}
	if failed == 0 {
		t.Fatal("no event failed a guard")
	}
}
