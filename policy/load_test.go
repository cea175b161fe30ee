package policy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

const fullPolicy = `intent: |
  Work on the repository; never leak credentials.
rules:
  - name: github
    on: [connect, tls, http]
    when: host == "github.com" || host.endsWith(".github.com")
    action: allow
  - name: ask-exec
    on: exec
    when: >-
      exec.argv.exists(a, a == "push")
    action: ask
    reason: pushing needs a person
  - name: redact
    on: llm
    action: rewrite
    rewrite:
      redact_secrets: true
      on_signed: allow
  - name: unsure
    action: judge
default: deny
judge:
  provider: openai
  url: http://127.0.0.1:11434/v1
  model: llama3
  api_key_env: JUDGE_KEY
  timeout: 3s
  on_error: ask
plugins:
  - name: scanner
    command: /usr/local/bin/scan --fast
    on: http
  - name: listed
    command: [/bin/check, "two words"]
    timeout: 500ms
    on_error: allow
ask:
  timeout: 90s
  on_timeout: allow
  unattended: wait
secrets:
  allow_rules: [generic-api-key]
  allow_literals:
    - AKIAIOSFODNN7EXAMPLE
`

func TestParseFull(t *testing.T) {
	p, err := Parse("full.yaml", []byte(fullPolicy))
	if err != nil {
		t.Fatal(err)
	}
	want := &Policy{
		Intent: "Work on the repository; never leak credentials.\n",
		Rules: []Rule{
			{Name: "github", On: []event.Kind{event.KindConnect, event.KindTLS, event.KindHTTP},
				When: `host == "github.com" || host.endsWith(".github.com")`, Action: ActionAllow, Line: 4},
			{Name: "ask-exec", On: []event.Kind{event.KindExec}, When: `exec.argv.exists(a, a == "push")`,
				Action: ActionAsk, Reason: "pushing needs a person", Line: 8},
			{Name: "redact", On: []event.Kind{event.KindLLM}, Action: ActionRewrite,
				Rewrite: map[string]any{"redact_secrets": true, "on_signed": "allow"}, Line: 14},
			{Name: "unsure", Action: ActionJudge, Line: 20},
		},
		Default: ActionDeny,
		Judge: JudgeConfig{Provider: "openai", URL: "http://127.0.0.1:11434/v1", Model: "llama3",
			APIKeyEnv: "JUDGE_KEY", Timeout: 3 * time.Second, OnError: ActionAsk},
		Plugins: []PluginConfig{
			{Name: "scanner", Command: []string{"/usr/local/bin/scan", "--fast"}, On: []event.Kind{event.KindHTTP},
				Timeout: DefaultPluginTimeout, OnError: ActionDeny, Line: 31},
			{Name: "listed", Command: []string{"/bin/check", "two words"}, Timeout: 500 * time.Millisecond,
				OnError: ActionAllow, Line: 34},
		},
		Ask:     AskConfig{Timeout: 90 * time.Second, OnTimeout: ActionAllow, Unattended: AskWait},
		Secrets: SecretsConfig{AllowRules: []string{"generic-api-key"}, AllowLiterals: []string{"AKIAIOSFODNN7EXAMPLE"}},
		Source:  "full.yaml",
	}
	if d := cmp.Diff(want, p); d != "" {
		t.Errorf("Parse (-want +got):\n%s", d)
	}
}

func TestParseDefaults(t *testing.T) {
	p, err := Parse("", []byte("default: judge\njudge: {provider: anthropic, model: m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := JudgeConfig{Provider: "anthropic", URL: "https://api.anthropic.com", Model: "m",
		Timeout: DefaultJudgeTimeout, OnError: ActionDeny}
	if d := cmp.Diff(want, p.Judge); d != "" {
		t.Errorf("judge defaults (-want +got):\n%s", d)
	}
	if p.Source != "<policy>" {
		t.Errorf("Source = %q, want <policy>", p.Source)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // each the text of one problem, in order
	}{
		{"empty", "", []string{"policy: p.yaml: empty policy: a policy needs at least default:"}},
		{"yaml syntax", "default: allow\nrules: [\n", []string{"policy: p.yaml:2: yaml: did not find expected node content"}},
		{"not a mapping", "- a\n- b\n", []string{"policy: p.yaml:1: a policy is a mapping"}},
		{"two documents", "default: allow\n---\ndefault: deny\n", []string{"policy: p.yaml:2: a policy file holds one YAML document"}},
		{"missing default", "intent: x\n", []string{"policy: p.yaml:1: default: is required"}},
		{"bad default", "default: rewrite\n", []string{`policy: p.yaml:1: default "rewrite" is not allow, deny, ask or judge`}},
		{"unknown top key", "default: allow\nrulez: []\n", []string{`policy: p.yaml:2: unknown key "rulez"`}},
		{"duplicate key", "default: allow\ndefault: deny\n", []string{`policy: p.yaml:2: key "default" appears twice`}},
		{"unknown rule key", "default: allow\nrules:\n  - name: a\n    acton: deny\n", []string{
			`policy: p.yaml:4: rule "a": unknown key "acton"`,
			`policy: p.yaml:3: rule "a": action is required`}},
		{"unknown action", "default: allow\nrules:\n  - name: a\n    action: alow\n", []string{
			`policy: p.yaml:4: rule "a": unknown action "alow" (want allow, deny, rewrite, ask or judge)`}},
		{"unknown kind", "default: allow\nrules:\n  - name: a\n    on: [http, htp]\n    action: deny\n", []string{
			`policy: p.yaml:4: rule "a": unknown event kind "htp"`}},
		{"duplicate names", "default: allow\nrules:\n  - name: a\n    action: deny\n  - name: a\n    action: allow\n", []string{
			`policy: p.yaml:5: rule "a": duplicate rule name (first at line 3)`}},
		{"missing name", "default: allow\nrules:\n  - action: deny\n", []string{`policy: p.yaml:3: rule 1: name is required`}},
		{"cel syntax", "default: allow\nrules:\n  - name: a\n    when: host ==\n    action: deny\n", []string{
			`policy: p.yaml:4: rule "a": when: Syntax error`}},
		{"cel unknown field", "default: allow\nrules:\n  - name: a\n    when: process.pidd == 1\n    action: deny\n", []string{
			`policy: p.yaml:4: rule "a": when: undeclared reference to 'process.pidd'`}},
		{"cel block line", "default: allow\nrules:\n  - name: a\n    when: |\n      host == \"x\" &&\n      nope == 1\n    action: deny\n", []string{
			`policy: p.yaml:6: rule "a": when: undeclared reference to 'nope'`}},
		{"cel type", "default: allow\nrules:\n  - name: a\n    when: dst.port == \"443\"\n    action: deny\n", []string{
			`policy: p.yaml:4: rule "a": when: found no matching overload for '_==_' applied to '(int, string)'`}},
		{"cel not bool", "default: allow\nrules:\n  - name: a\n    when: host\n    action: deny\n", []string{
			`policy: p.yaml:4: rule "a": when: condition is of type string, want bool`}},
		{"judge without section", "default: allow\nrules:\n  - name: a\n    action: judge\n", []string{
			`policy: p.yaml:4: rule "a": action judge needs a judge: section`}},
		{"default judge without section", "default: judge\n", []string{
			`policy: p.yaml:1: default judge needs a judge: section`}},
		{"rewrite without params", "default: allow\nrules:\n  - name: a\n    action: rewrite\n", []string{
			`policy: p.yaml:4: rule "a": action rewrite needs rewrite parameters`}},
		{"bad rewrite params", "default: allow\nrules:\n  - name: a\n    action: rewrite\n    rewrite:\n      redact_secrets: yes please\n      on_signed: maybe\n      colour: red\n", []string{
			`policy: p.yaml:6: rule "a": rewrite: redact_secrets must be true or false`,
			`policy: p.yaml:7: rule "a": rewrite: on_signed must be allow or deny`,
			`policy: p.yaml:8: rule "a": rewrite: unknown parameter "colour"`}},
		{"params without rewrite", "default: allow\nrules:\n  - name: a\n    action: deny\n    rewrite: {redact_secrets: true}\n", []string{
			`policy: p.yaml:5: rule "a": rewrite parameters given but action is deny, not rewrite`}},
		{"empty judge", "default: judge\njudge: {}\n", []string{
			`policy: p.yaml:2: judge: provider is required`, `policy: p.yaml:2: judge: model is required`}},
		{"bad judge", "default: allow\njudge:\n  provider: gemini\n  model: m\n  url: ftp://x\n  timeout: soon\n  on_error: rewrite\n  api_key_env: sk-live-abc\n  key: x\n", []string{
			`policy: p.yaml:6: judge: timeout "soon" is not a positive duration`,
			`policy: p.yaml:9: judge: unknown key "key"`,
			`policy: p.yaml:2: judge: unknown provider "gemini"`,
			`policy: p.yaml:2: judge: url must be an http or https URL`,
			`policy: p.yaml:2: judge: api_key_env must name an environment variable`,
			`policy: p.yaml:7: judge: on_error "rewrite" is not allow, deny or ask`}},
		{"bad ask", "default: allow\nask:\n  timeout: never\n  on_timeout: ask\n  who: me\n  unattended: later\n", []string{
			`policy: p.yaml:3: ask: timeout "never" is not a positive duration`,
			`policy: p.yaml:4: ask: on_timeout "ask" is not allow or deny`,
			`policy: p.yaml:5: ask: unknown key "who"`,
			`policy: p.yaml:6: ask: unattended "later" is not allow, deny or wait`}},
		{"ask not a mapping", "default: allow\nask: 10s\n", []string{
			`policy: p.yaml:2: ask: ask must be a mapping`}},
		{"bad secrets", "default: allow\nsecrets:\n  allow_rules: {a: b}\n  allow_literals: [\"\"]\n  deny: x\n", []string{
			`policy: p.yaml:3: secrets: allow_rules must be a list of strings`,
			`policy: p.yaml:4: secrets: allow_literals holds an empty string`,
			`policy: p.yaml:5: secrets: unknown key "deny"`}},
		{"plugin without command", "default: allow\nplugins:\n  - name: p\n    on: http\n", []string{
			`policy: p.yaml:3: plugin "p": command is required`}},
		{"plugin problems", "default: allow\nplugins:\n  - name: p\n    command: x\n    on_error: maybe\n    on: [nope]\n    colour: red\n  - command: y\n", []string{
			`policy: p.yaml:7: plugin "p": unknown key "colour"`,
			`policy: p.yaml:3: plugin "p": unknown event kind "nope"`,
			`policy: p.yaml:3: plugin "p": on_error "maybe" is not allow, deny or ask`,
			`policy: p.yaml:8: plugin 2: name is required`}},
		{"wrong shapes", "default: allow\nrules: {a: b}\nplugins: x\nintent: [a]\n", []string{
			`policy: p.yaml:2: rules must be a list`,
			`policy: p.yaml:3: plugins must be a list`,
			`policy: p.yaml:4: intent must be a single value`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse("p.yaml", []byte(tt.src))
			if err == nil {
				t.Fatalf("Parse succeeded with %+v, want errors", p)
			}
			if p != nil {
				t.Errorf("Parse returned a policy with its error")
			}
			got := problems(err)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("problem %d = %q, want it to start with %q", i, got[i], w)
				}
			}
			if strings.Contains(err.Error(), "sk-live-abc") {
				t.Errorf("an error repeats the value of api_key_env")
			}
		})
	}
}

// problems returns the text of each joined *LoadError.
func problems(err error) []string {
	var out []string
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, problems(e)...)
		}
		return out
	}
	var le *LoadError
	if !errors.As(err, &le) {
		return []string{"not a *LoadError: " + err.Error()}
	}
	return []string{err.Error()}
}

func TestParseReportsEveryProblem(t *testing.T) {
	src := "default: allow\nrules:\n  - name: a\n    action: nope\n  - name: b\n    when: 1 + 1\n    action: deny\n  - name: a\n    action: allow\n"
	_, err := Parse("p.yaml", []byte(src))
	got := problems(err)
	want := []string{
		`policy: p.yaml:4: rule "a": unknown action "nope" (want allow, deny, rewrite, ask or judge)`,
		`policy: p.yaml:6: rule "b": when: condition is of type int, want bool (column 1)`,
		`policy: p.yaml:8: rule "a": duplicate rule name (first at line 3)`,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("problems (-want +got):\n%s", d)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("default: deny\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(good)
	if err != nil {
		t.Fatal(err)
	}
	if p.Source != good || p.Default != ActionDeny {
		t.Errorf("Load = %+v", p)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("default: deny\nrules: [{name: x, action: maybe}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), bad+":2: rule \"x\": unknown action") {
		t.Errorf("Load(bad) = %v, want the file, line, rule and reason", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want ErrNotExist", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("default: deny\n#"+strings.Repeat("x", MaxPolicySize)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load(big) = %v, want a size error", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(fullPolicy))
	f.Add(defaultYAML)
	f.Add([]byte("default: allow\n"))
	f.Add([]byte("default: allow\nrules:\n  - name: a\n    when: |\n      host == \"x\" &&\n      nope == 1\n    action: deny\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("default: &d allow\nrules: [{name: *d, on: *d, action: *d, when: 'size(lineage) > 0'}]\n"))
	f.Add([]byte("\x00\xff: ["))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz.yaml", data)
		if (p == nil) == (err == nil) {
			t.Fatalf("Parse = %v, %v: want exactly one of a policy and an error", p, err)
		}
		if err != nil {
			return
		}
		if _, err := NewEngine(p, EngineOptions{Judge: &fakeJudge{}, Plugins: &fakePlugins{}}); err != nil {
			t.Fatalf("NewEngine refused a policy Parse accepted: %v", err)
		}
	})
}

// TestDocExamples parses every YAML example of docs/policy.md; the last is
// the default policy, verbatim.
func TestDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for rest := string(doc); ; {
		_, after, ok := strings.Cut(rest, "```yaml\n")
		if !ok {
			break
		}
		block, tail, _ := strings.Cut(after, "```")
		blocks = append(blocks, block)
		rest = tail
	}
	if len(blocks) < 4 {
		t.Fatalf("docs/policy.md has %d yaml examples, want at least 4", len(blocks))
	}
	for i, b := range blocks {
		if _, err := Parse(fmt.Sprintf("example %d", i+1), []byte(b)); err != nil {
			t.Errorf("example %d does not parse: %v", i+1, err)
		}
	}
	if got := blocks[len(blocks)-1]; got != string(defaultYAML) {
		t.Errorf("the last example of docs/policy.md is not policy/default.yaml verbatim")
	}
}
