package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/spf13/pflag"
)

func TestLoadPrecedence(t *testing.T) {
	dir := t.TempDir()
	home := map[string]string{"HOME": "/home/u"}
	def := Default(envMap(home), 1000)

	file := writeFile(t, dir, "chaperone.yaml", `
state_dir: /from/file
mode: proxy
listen: 127.0.0.1:1001
deny_hosts: [file.example.com]
resolve:
  - file.example:127.0.0.1
log_level: warn
`)
	env := map[string]string{
		"HOME":                 "/home/u",
		"CHAPERONE_STATE_DIR":  "/from/env",
		"CHAPERONE_LISTEN":     "127.0.0.1:1002",
		"CHAPERONE_DENY_HOSTS": "env1.example.com, env2.example.com env3.example.com",
		"CHAPERONE_LOG_LEVEL":  "error",
	}
	flags := []string{"--state-dir=/from/flag", "--deny-host", "flag1.example.com", "--deny-host=flag2.example.com", "--resolve", "flag.example:443:[::1]"}

	type layers struct{ file, env, flags bool }
	tests := []struct {
		name   string
		layers layers
		want   func(Config) Config
	}{
		{"defaults only", layers{}, func(c Config) Config { return c }},
		{"file over defaults", layers{file: true}, func(c Config) Config {
			c.StateDir = "/from/file"
			c.Mode = "proxy"
			c.Listen = "127.0.0.1:1001"
			c.DenyHosts = []string{"file.example.com"}
			c.Resolve = []string{"file.example:127.0.0.1"}
			c.LogLevel = "warn"
			return c
		}},
		{"env over file", layers{file: true, env: true}, func(c Config) Config {
			c.StateDir = "/from/env"
			c.Mode = "proxy"
			c.Listen = "127.0.0.1:1002"
			c.DenyHosts = []string{"env1.example.com", "env2.example.com", "env3.example.com"}
			c.Resolve = []string{"file.example:127.0.0.1"}
			c.LogLevel = "error"
			return c
		}},
		{"flags over env over file", layers{file: true, env: true, flags: true}, func(c Config) Config {
			c.StateDir = "/from/flag"
			c.Mode = "proxy"
			c.Listen = "127.0.0.1:1002"
			c.DenyHosts = []string{"flag1.example.com", "flag2.example.com"}
			c.Resolve = []string{"flag.example:443:[::1]"}
			c.LogLevel = "error"
			return c
		}},
		{"env over defaults", layers{env: true}, func(c Config) Config {
			c.StateDir = "/from/env"
			c.Listen = "127.0.0.1:1002"
			c.DenyHosts = []string{"env1.example.com", "env2.example.com", "env3.example.com"}
			c.LogLevel = "error"
			return c
		}},
		{"flags over defaults", layers{flags: true}, func(c Config) Config {
			c.StateDir = "/from/flag"
			c.DenyHosts = []string{"flag1.example.com", "flag2.example.com"}
			c.Resolve = []string{"flag.example:443:[::1]"}
			return c
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := LoadOptions{Env: envMap(home), EUID: 1000}
			if tt.layers.file {
				opts.File = file
			}
			if tt.layers.env {
				opts.Env = envMap(env)
			}
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			BindFlags(fs)
			if tt.layers.flags {
				if err := fs.Parse(flags); err != nil {
					t.Fatal(err)
				}
			}
			opts.Flags = fs
			got, err := Load(opts)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if diff := cmp.Diff(tt.want(def), got); diff != "" {
				t.Errorf("Load (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadEnviron(t *testing.T) {
	got, err := Load(LoadOptions{
		Environ: []string{"HOME=/home/u", "CHAPERONE_MODE=proxy", "CHAPERONE_RESOLVE=a.example:127.0.0.2,b.example:443:[::1]", "UNRELATED=1", "CHAPERONE_LOG="},
		EUID:    1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Default(envMap(map[string]string{"HOME": "/home/u"}), 1000)
	want.Mode = "proxy"
	want.Resolve = []string{"a.example:127.0.0.2", "b.example:443:[::1]"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
}

func TestLoadUpstreamCAEnvKeepsSpaces(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "my ca.pem", certPEM(t))
	b := writeFile(t, dir, "other.pem", certPEM(t))
	got, err := Load(LoadOptions{Env: envMap(map[string]string{"HOME": "/home/u", "CHAPERONE_UPSTREAM_CA": a + "," + b}), EUID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{a, b}, got.UpstreamCA); diff != "" {
		t.Errorf("upstream_ca (-want +got):\n%s", diff)
	}
}

// Flags registered but not given must not override env or file.
func TestLoadUnsetFlagsDoNotOverride(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	BindFlags(fs)
	if err := fs.Parse([]string{"--mode=proxy"}); err != nil {
		t.Fatal(err)
	}
	got, err := Load(LoadOptions{Env: envMap(map[string]string{"HOME": "/home/u", "CHAPERONE_LOG_LEVEL": "debug", "CHAPERONE_DENY_HOSTS": "x.com"}), Flags: fs, EUID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if got.Mode != "proxy" || got.LogLevel != "debug" || !cmp.Equal(got.DenyHosts, []string{"x.com"}) {
		t.Errorf("got mode %q log_level %q deny_hosts %q; want proxy, debug, [x.com]", got.Mode, got.LogLevel, got.DenyHosts)
	}
}

func TestLoadConfigFromEnv(t *testing.T) {
	file := writeFile(t, t.TempDir(), "c.yaml", "mode: proxy\n")
	got, err := Load(LoadOptions{Env: envMap(map[string]string{"HOME": "/home/u", "CHAPERONE_CONFIG": file}), EUID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if got.Mode != "proxy" {
		t.Errorf("mode = %q, want proxy from CHAPERONE_CONFIG's file", got.Mode)
	}
}

func TestLoadFileErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		content string
		want    []string // substrings of the error
	}{
		{"unknown key", "mode: proxy\ndeny_host: [a.com]\n", []string{"c.yaml", "line 2", `unknown key "deny_host"`, `did you mean "deny_hosts"`}},
		{"unknown nested", "proxy:\n  listen: 127.0.0.1:0\n", []string{`unknown key "proxy"`}},
		{"two unknown keys", "colour: red\nmode: auto\nsize: 3\n", []string{`"colour"`, `"size"`, "line 3"}},
		{"malformed", "mode: proxy\nlisten: [127.0.0.1:0\n", []string{"c.yaml", "line"}},
		{"bad indentation", "mode: proxy\n  listen: x\n", []string{"c.yaml", "line 2"}},
		{"tab", "mode:\tproxy\n\tlisten: x\n", []string{"c.yaml", "line"}},
		{"not a mapping", "- a\n- b\n", []string{"c.yaml", "want a mapping"}},
		{"list for string", "listen: [a, b]\n", []string{"line 1", "listen: want a string, got a list"}},
		{"map for list", "deny_hosts: {a: b}\n", []string{"deny_hosts: want a list of strings"}},
		{"nested list", "resolve: [[a]]\n", []string{"resolve: want a list of strings"}},
		{"duplicate", "mode: proxy\nmode: auto\n", []string{"line 2", "twice"}},
		{"invalid value", "listen: 0.0.0.0:80\n", []string{"config: listen:", "not a loopback"}},
		{"section not a mapping", "audit: all\n", []string{"line 1", "audit: want a mapping"}},
		{"unknown key in a section", "audit:\n  file_read: all\n", []string{"line 2", "audit.file_read: unknown key", `did you mean "file_reads"`}},
		{"section value", "audit:\n  file_reads: some\n", []string{"audit.file_reads", `is not "routine" or "all"`}},
		{"ui listen not loopback", "ui:\n  listen: 0.0.0.0:8080\n", []string{"config: ui.listen:", "not a loopback", "live view"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := writeFile(t, dir, "c.yaml", tt.content)
			_, err := Load(LoadOptions{File: file, Env: envMap(map[string]string{"HOME": "/home/u"}), EUID: 1000})
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadEmptyFile(t *testing.T) {
	dir := t.TempDir()
	for _, content := range []string{"", "# only a comment\n", "---\n", "~\n"} {
		file := writeFile(t, dir, "c.yaml", content)
		got, err := Load(LoadOptions{File: file, Env: envMap(map[string]string{"HOME": "/home/u"}), EUID: 1000})
		if err != nil {
			t.Errorf("Load(%q): %v", content, err)
			continue
		}
		if diff := cmp.Diff(Default(envMap(map[string]string{"HOME": "/home/u"}), 1000), got); diff != "" {
			t.Errorf("Load(%q) (-want +got):\n%s", content, diff)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := Load(LoadOptions{File: missing, Env: envMap(map[string]string{"HOME": "/home/u"})})
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Errorf("Load of a missing file: error %v, want one naming the file", err)
	}
}

func TestYAMLRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ca := writeFile(t, dir, "ca.pem", certPEM(t))
	c := Config{
		StateDir:   filepath.Join(dir, "state"),
		Mode:       "proxy",
		QUIC:       "allow",
		UDP:        "allow",
		Listen:     "127.0.0.1:9999",
		DenyHosts:  []string{"a.com", "*.b.org"},
		UpstreamCA: []string{ca},
		Resolve:    []string{"h:443:[::1]"},
		LogLevel:   "debug",
	}
	c.DNSUpstreams = []string{"127.0.0.5:53", "::1"}
	c.TLSPassthrough = []string{"pinned.example", "*.bank.example"}
	c.LLMHosts = []string{"litellm.internal", "127.0.0.1:4000", "*.gw.example", "[::1]:8080"}
	c.IdentityHeaders = []string{"litellm", "w3c"}
	c.IdentityHosts = []string{"gw.example:8443"}
	c.RestoreSecrets = false
	c.Credentials = []Credential{
		{Name: "github", Env: "GITHUB_TOKEN", Hosts: []string{"api.github.com", "*.githubusercontent.com"}, Header: "Authorization", Format: "Bearer {value}", AgentEnv: []string{"GITHUB_TOKEN", "GH_TOKEN"}},
		{Name: "registry", File: "/run/secrets/registry", Hosts: []string{"registry.example:5000"}, Header: "Authorization", Format: "basic {user}:{value}", User: "ci"},
	}
	b, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "log: "+filepath.Join(dir, "state", "audit.jsonl")) {
		t.Errorf("YAML does not show the audit log path:\n%s", b)
	}
	file := writeFile(t, dir, "shown.yaml", string(b))
	got, err := Load(LoadOptions{File: file, Env: envMap(nil), EUID: 1000})
	if err != nil {
		t.Fatalf("loading the shown config: %v\n%s", err, b)
	}
	want := c
	want.Log = c.AuditLogPath()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	empty, err := Default(envMap(map[string]string{"HOME": "/h"}), 1000).YAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"deny_hosts: []", "llm_hosts: []", "identity_hosts: []", "credentials: []", "restore_secrets: true", "identity_headers:\n    - chaperone\n    - w3c\n"} {
		if !strings.Contains(string(empty), w) {
			t.Errorf("default YAML lacks %q:\n%s", w, empty)
		}
	}
}

func TestBindFlags(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	BindFlags(fs)
	for _, k := range keys {
		if k.flag == "" {
			continue
		}
		f := fs.Lookup(k.flag)
		if f == nil {
			t.Errorf("flag --%s not registered", k.flag)
			continue
		}
		if f.Usage == "" {
			t.Errorf("flag --%s has no help", k.flag)
		}
		if wantType := map[kind]string{kindList: "stringArray", kindString: "string", kindBool: "bool"}[k.kind]; f.Value.Type() != wantType {
			t.Errorf("flag --%s has type %s, want %s", k.flag, f.Value.Type(), wantType)
		}
	}
}

func FuzzLoadYAML(f *testing.F) {
	for _, s := range []string{
		"", "mode: proxy\n", "deny_hosts: [a.com, '*.b.com']\nresolve: [h:1.2.3.4]\n",
		"listen: [\n", "a: &x [*x]\n", "- 1\n", "mode: {a: b}\n", "? [a]\n: b\n",
		"deny_hosts: !!binary aGVsbG8=\n", "<<: {mode: proxy}\n", "state_dir: ~\nlog_level: 3\n",
		"upstream_ca: [/dev/zero]\npolicy: /\n",
		"llm_hosts: [litellm.internal, '127.0.0.1:4000', '*.gw.example', '[::1]:8080']\n",
		"identity_headers: [chaperone, w3c]\nidentity_hosts: gw.example:8443\n",
		"identity_headers: [none]\nrestore_secrets: no\n",
		"restore_secrets: [true]\n",
		"credentials:\n  - name: github\n    env: GITHUB_TOKEN\n    hosts: [api.github.com]\n    header: Authorization\n    format: Bearer {value}\n",
		"credentials:\n  - name: reg\n    file: /run/secrets/reg\n    hosts: registry.example:5000\n    header: Authorization\n    format: basic {user}:{value}\n    user: ci\n    agent_env: [REG]\n",
		"credentials:\n  - &c {name: a, env: A, hosts: [a.example]}\n  - *c\n",
		"credentials:\n  - name: a\n    hoss: [x]\n",
		"credentials: [[a]]\n",
	} {
		f.Add([]byte(s))
	}
	home := envMap(map[string]string{"HOME": "/home/u"})
	f.Fuzz(func(t *testing.T, data []byte) {
		file := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(LoadOptions{File: file, Env: home, EUID: 1000})
		if err != nil {
			return
		}
		if verr := c.Validate(); verr != nil {
			t.Errorf("Load succeeded but Validate fails: %v", verr)
		}
		// What config show prints loads back to the same configuration.
		shown, err := c.YAML()
		if err != nil {
			t.Fatalf("YAML: %v", err)
		}
		if err := os.WriteFile(file, shown, 0o600); err != nil {
			t.Fatal(err)
		}
		again, err := Load(LoadOptions{File: file, Env: home, EUID: 1000})
		if err != nil {
			t.Fatalf("loading the shown config: %v\n%s", err, shown)
		}
		c.Log = c.AuditLogPath()
		if diff := cmp.Diff(c, again, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("shown config loads differently (-first +again):\n%s", diff)
		}
	})
}

// A section's key (audit.file_reads) is set by the file's section, its
// variable and its flag, in that order of precedence.
func TestLoadSectionKey(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "c.yaml", "audit:\n  file_reads: all\n")
	tests := []struct {
		name  string
		file  string
		env   map[string]string
		flags []string
		want  string
	}{
		{"default", "", nil, nil, AuditReadsRoutine},
		{"file", file, nil, nil, AuditReadsAll},
		{"env over file", file, map[string]string{"CHAPERONE_AUDIT_FILE_READS": "routine"}, nil, AuditReadsRoutine},
		{"env", "", map[string]string{"CHAPERONE_AUDIT_FILE_READS": "all"}, nil, AuditReadsAll},
		{"flag over env", file, map[string]string{"CHAPERONE_AUDIT_FILE_READS": "all"}, []string{"--audit-file-reads=routine"}, AuditReadsRoutine},
		{"unset flag", file, nil, []string{}, AuditReadsAll},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"HOME": "/home/u"}
			for k, v := range tt.env {
				env[k] = v
			}
			opts := LoadOptions{File: tt.file, Env: envMap(env), EUID: 1000}
			if tt.flags != nil {
				fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
				BindFlags(fs)
				if err := fs.Parse(tt.flags); err != nil {
					t.Fatal(err)
				}
				opts.Flags = fs
			}
			c, err := Load(opts)
			if err != nil {
				t.Fatal(err)
			}
			if c.Audit.FileReads != tt.want {
				t.Errorf("audit.file_reads = %q, want %q", c.Audit.FileReads, tt.want)
			}
		})
	}
	if got := EnvVar("audit.file_reads"); got != "CHAPERONE_AUDIT_FILE_READS" {
		t.Errorf("EnvVar = %s", got)
	}
}

// ui.listen is set by the file's ui section, CHAPERONE_UI_LISTEN and
// --ui-listen, in that order of precedence.
func TestLoadUIListen(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "c.yaml", "ui:\n  listen: 127.0.0.1:7000\n")
	tests := []struct {
		name  string
		file  string
		env   map[string]string
		flags []string
		want  string
	}{
		{"default", "", nil, nil, DefaultListen},
		{"file", file, nil, nil, "127.0.0.1:7000"},
		{"env over file", file, map[string]string{"CHAPERONE_UI_LISTEN": "127.0.0.2:7001"}, nil, "127.0.0.2:7001"},
		{"flag over env", file, map[string]string{"CHAPERONE_UI_LISTEN": "127.0.0.2:7001"}, []string{"--ui-listen=[::1]:7002"}, "[::1]:7002"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"HOME": "/home/u"}
			for k, v := range tt.env {
				env[k] = v
			}
			opts := LoadOptions{File: tt.file, Env: envMap(env), EUID: 1000}
			if tt.flags != nil {
				fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
				BindFlags(fs)
				if err := fs.Parse(tt.flags); err != nil {
					t.Fatal(err)
				}
				opts.Flags = fs
			}
			c, err := Load(opts)
			if err != nil {
				t.Fatal(err)
			}
			if c.UI.Listen != tt.want {
				t.Errorf("ui.listen = %q, want %q", c.UI.Listen, tt.want)
			}
		})
	}
	if _, err := Load(LoadOptions{Env: envMap(map[string]string{"HOME": "/home/u", "CHAPERONE_UI_LISTEN": "192.0.2.1:80"}), EUID: 1000}); err == nil ||
		!strings.Contains(err.Error(), "ui.listen") {
		t.Errorf("a non-loopback ui.listen: %v, want refused", err)
	}
}
