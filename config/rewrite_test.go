package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

// The keys of the rewrite stage: llm_hosts, identity_headers,
// identity_hosts, restore_secrets and credentials.

func TestLoadRewriteKeysPrecedence(t *testing.T) {
	type layers struct{ file, env, flags bool }
	tests := []struct {
		name  string
		file  string
		env   map[string]string
		flags []string
		get   func(Config) any
		want  map[layers]any // every combination of layers
	}{
		{
			name:  "llm_hosts",
			file:  "llm_hosts: [litellm.internal, '*.gw.example']\n",
			env:   map[string]string{"CHAPERONE_LLM_HOSTS": "127.0.0.1:4000, [::1]:4000"},
			flags: []string{"--llm-host", "flag.example", "--llm-host=10.0.0.1:8080"},
			get:   func(c Config) any { return c.LLMHosts },
			want: map[layers]any{
				{}:                                   []string(nil),
				{file: true}:                         []string{"litellm.internal", "*.gw.example"},
				{env: true}:                          []string{"127.0.0.1:4000", "[::1]:4000"},
				{file: true, env: true}:              []string{"127.0.0.1:4000", "[::1]:4000"},
				{flags: true}:                        []string{"flag.example", "10.0.0.1:8080"},
				{file: true, flags: true}:            []string{"flag.example", "10.0.0.1:8080"},
				{env: true, flags: true}:             []string{"flag.example", "10.0.0.1:8080"},
				{file: true, env: true, flags: true}: []string{"flag.example", "10.0.0.1:8080"},
			},
		},
		{
			name:  "identity_headers",
			file:  "identity_headers:\n  - litellm\n  - portkey\n",
			env:   map[string]string{"CHAPERONE_IDENTITY_HEADERS": "none"},
			flags: []string{"--identity-header", "helicone", "--identity-header", "cloudflare"},
			get:   func(c Config) any { return c.IdentityHeaders },
			want: map[layers]any{
				{}:                                   []string{"chaperone", "w3c"},
				{file: true}:                         []string{"litellm", "portkey"},
				{env: true}:                          []string{"none"},
				{file: true, env: true}:              []string{"none"},
				{flags: true}:                        []string{"helicone", "cloudflare"},
				{file: true, flags: true}:            []string{"helicone", "cloudflare"},
				{env: true, flags: true}:             []string{"helicone", "cloudflare"},
				{file: true, env: true, flags: true}: []string{"helicone", "cloudflare"},
			},
		},
		{
			name:  "identity_hosts",
			file:  "identity_hosts: gw.example\n",
			env:   map[string]string{"CHAPERONE_IDENTITY_HOSTS": "env.gw.example:8443 10.1.1.1"},
			flags: []string{"--identity-host=*.flag.example"},
			get:   func(c Config) any { return c.IdentityHosts },
			want: map[layers]any{
				{}:                                   []string(nil),
				{file: true}:                         []string{"gw.example"},
				{env: true}:                          []string{"env.gw.example:8443", "10.1.1.1"},
				{file: true, env: true}:              []string{"env.gw.example:8443", "10.1.1.1"},
				{flags: true}:                        []string{"*.flag.example"},
				{file: true, flags: true}:            []string{"*.flag.example"},
				{env: true, flags: true}:             []string{"*.flag.example"},
				{file: true, env: true, flags: true}: []string{"*.flag.example"},
			},
		},
		{
			// Each layer flips the value, so every step of precedence shows.
			name:  "restore_secrets",
			file:  "restore_secrets: false\n",
			env:   map[string]string{"CHAPERONE_RESTORE_SECRETS": "yes"},
			flags: []string{"--restore-secrets=false"},
			get:   func(c Config) any { return c.RestoreSecrets },
			want: map[layers]any{
				{}:                                   true,
				{file: true}:                         false,
				{env: true}:                          true,
				{file: true, env: true}:              true,
				{flags: true}:                        false,
				{file: true, flags: true}:            false,
				{env: true, flags: true}:             false,
				{file: true, env: true, flags: true}: false,
			},
		},
	}
	for _, tt := range tests {
		for l, want := range tt.want {
			name := tt.name
			for _, on := range []struct {
				set  bool
				name string
			}{{l.file, "file"}, {l.env, "env"}, {l.flags, "flags"}} {
				if on.set {
					name += "/" + on.name
				}
			}
			t.Run(name, func(t *testing.T) {
				env := map[string]string{"HOME": "/home/u"}
				opts := LoadOptions{EUID: 1000}
				if l.file {
					opts.File = writeFile(t, t.TempDir(), "c.yaml", tt.file)
				}
				if l.env {
					for k, v := range tt.env {
						env[k] = v
					}
				}
				opts.Env = envMap(env)
				fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
				BindFlags(fs)
				if l.flags {
					if err := fs.Parse(tt.flags); err != nil {
						t.Fatal(err)
					}
				}
				opts.Flags = fs
				got, err := Load(opts)
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if diff := cmp.Diff(want, tt.get(got)); diff != "" {
					t.Errorf("%s (-want +got):\n%s", tt.name, diff)
				}
			})
		}
	}
}

func TestLoadRestoreSecretsEnv(t *testing.T) {
	tests := []struct {
		val     string
		want    bool
		wantErr bool
	}{
		{"true", true, false}, {"false", false, false},
		{"1", true, false}, {"0", false, false},
		{"yes", true, false}, {"no", false, false},
		{"on", true, false}, {"off", false, false},
		{"TRUE", true, false}, {"Off", false, false}, {" no ", false, false},
		{"maybe", false, true}, {"2", false, true}, {"t", false, true}, {"nope", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.val, func(t *testing.T) {
			got, err := Load(LoadOptions{Env: envMap(map[string]string{"HOME": "/home/u", "CHAPERONE_RESTORE_SECRETS": tt.val}), EUID: 1000})
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Load succeeded with restore_secrets %v, want an error", got.RestoreSecrets)
				}
				for _, w := range []string{"config: CHAPERONE_RESTORE_SECRETS", `"` + tt.val + `"`, "not a boolean"} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.RestoreSecrets != tt.want {
				t.Errorf("restore_secrets = %v, want %v", got.RestoreSecrets, tt.want)
			}
		})
	}
}

func TestLoadRestoreSecretsFile(t *testing.T) {
	tests := []struct {
		content string
		want    bool
	}{
		{"restore_secrets: true\n", true},
		{"restore_secrets: false\n", false},
		{"restore_secrets: False\n", false},
		{"restore_secrets: no\n", false},
		{"restore_secrets: 'off'\n", false},
		{"restore_secrets: 0\n", false},
		{"restore_secrets: on\n", true},
		{"restore_secrets: ~\n", true}, // unset: the default
	}
	for _, tt := range tests {
		t.Run(tt.content, func(t *testing.T) {
			file := writeFile(t, t.TempDir(), "c.yaml", tt.content)
			got, err := Load(LoadOptions{File: file, Env: envMap(map[string]string{"HOME": "/home/u"}), EUID: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if got.RestoreSecrets != tt.want {
				t.Errorf("restore_secrets = %v, want %v", got.RestoreSecrets, tt.want)
			}
		})
	}
}

func TestLoadRestoreSecretsFlag(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{[]string{"--restore-secrets"}, true},
		{[]string{"--restore-secrets=true"}, true},
		{[]string{"--restore-secrets=false"}, false},
		{[]string{"--restore-secrets=0"}, false},
		{nil, false}, // not given: the env's false stands
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			BindFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			got, err := Load(LoadOptions{Env: envMap(map[string]string{"HOME": "/home/u", "CHAPERONE_RESTORE_SECRETS": "off"}), Flags: fs, EUID: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if got.RestoreSecrets != tt.want {
				t.Errorf("restore_secrets = %v, want %v", got.RestoreSecrets, tt.want)
			}
		})
	}
}

func TestLoadCredentials(t *testing.T) {
	file := writeFile(t, t.TempDir(), "c.yaml", `
credentials:
  - name: github
    env: GITHUB_TOKEN
    hosts: [api.github.com, "*.githubusercontent.com"]
    header: Authorization
    format: "Bearer {value}"
  - name: openai
    env: OPENAI_API_KEY
    hosts: api.openai.com
    agent_env: [OPENAI_API_KEY, OPENAI_KEY]
  - name: registry
    file: /run/secrets/registry
    hosts:
      - registry.example:5000
    header: Authorization
    format: "basic {user}:{value}"
    user: ci
`)
	env := map[string]string{"HOME": "/home/u"}
	got, err := Load(LoadOptions{File: file, Env: envMap(env), EUID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	want := []Credential{
		{Name: "github", Env: "GITHUB_TOKEN", Hosts: []string{"api.github.com", "*.githubusercontent.com"}, Header: "Authorization", Format: "Bearer {value}", AgentEnv: []string{"GITHUB_TOKEN"}},
		{Name: "openai", Env: "OPENAI_API_KEY", Hosts: []string{"api.openai.com"}, AgentEnv: []string{"OPENAI_API_KEY", "OPENAI_KEY"}},
		{Name: "registry", File: "/run/secrets/registry", Hosts: []string{"registry.example:5000"}, Header: "Authorization", Format: "basic {user}:{value}", User: "ci"},
	}
	if diff := cmp.Diff(want, got.Credentials); diff != "" {
		t.Errorf("credentials (-want +got):\n%s", diff)
	}

	// Flags and the environment leave the file's credentials alone.
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	BindFlags(fs)
	if err := fs.Parse([]string{"--llm-host=gw.example"}); err != nil {
		t.Fatal(err)
	}
	got, err = Load(LoadOptions{File: file, Env: envMap(map[string]string{"HOME": "/home/u", "CHAPERONE_LLM_HOSTS": "x.example"}), Flags: fs, EUID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got.Credentials); diff != "" {
		t.Errorf("credentials with flags and env (-want +got):\n%s", diff)
	}
}

func TestCredentialsFileOnly(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	BindFlags(fs)
	fs.VisitAll(func(f *pflag.Flag) {
		if strings.Contains(f.Name, "credential") {
			t.Errorf("flag --%s exists; credentials are set in the file only", f.Name)
		}
	})
	_, err := Load(LoadOptions{Env: envMap(map[string]string{"HOME": "/home/u", "CHAPERONE_CREDENTIALS": "github"}), EUID: 1000})
	if err == nil || !strings.Contains(err.Error(), "CHAPERONE_CREDENTIALS") || !strings.Contains(err.Error(), "config file only") {
		t.Errorf("Load with CHAPERONE_CREDENTIALS: error %v, want one saying it is file only", err)
	}
}

func TestLoadRewriteKeysFileErrors(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    []string // substrings of the error
	}{
		{"nested unknown key", "mode: proxy\ncredentials:\n  - name: a\n    env: A\n    hosts: [a.example]\n  - name: b\n    env: B\n    hoss: [b.example]\n",
			[]string{"c.yaml", "line 8: credentials[1].hoss: unknown key", `did you mean "hosts"?`}},
		{"two nested unknown keys", "credentials:\n  - name: a\n    colour: red\n    size: 3\n",
			[]string{"line 3: credentials[0].colour: unknown key", "line 4: credentials[0].size: unknown key"}},
		{"nested key case", "credentials:\n  - Name: a\n", []string{"line 2: credentials[0].Name: unknown key", `did you mean "name"?`}},
		{"nested duplicate", "credentials:\n  - name: a\n    name: b\n", []string{"line 3: credentials[0].name: appears twice"}},
		{"credentials a mapping", "credentials:\n  name: a\n", []string{"line 2: credentials: want a list of mappings, got a mapping"}},
		{"credentials a string", "credentials: github\n", []string{"line 1: credentials: want a list of mappings, got a scalar"}},
		{"entry a string", "credentials:\n  - github\n", []string{"line 2: credentials[0]: want a mapping, got a scalar"}},
		{"entry a list", "credentials:\n  - [a]\n", []string{"line 2: credentials[0]: want a mapping, got a list"}},
		{"hosts a mapping", "credentials:\n  - name: a\n    hosts: {a: b}\n", []string{"line 3: credentials[0].hosts: want a list of strings, got a mapping"}},
		{"hosts nested list", "credentials:\n  - name: a\n    hosts:\n      - [a.example]\n", []string{"line 4: credentials[0].hosts: want a list of strings, got a list in it"}},
		{"agent_env null entry", "credentials:\n  - name: a\n    agent_env: [A, ~]\n", []string{"line 3: credentials[0].agent_env: want a list of strings, got null in it"}},
		{"name a list", "credentials:\n  - name: [a]\n", []string{"line 2: credentials[0].name: want a string, got a list"}},
		{"header a mapping", "credentials:\n  - name: a\n    header:\n      x: y\n", []string{"line 4: credentials[0].header: want a string, got a mapping"}},
		{"nested key not a name", "credentials:\n  - ? [a]\n    : b\n", []string{"line 2: credentials[0]: a key must be a plain name"}},
		{"restore_secrets not a boolean", "restore_secrets: maybe\n", []string{"line 1: restore_secrets: want true or false, got \"maybe\""}},
		{"restore_secrets a list", "restore_secrets: [true]\n", []string{"line 1: restore_secrets: want true or false, got a list"}},
		{"llm_hosts a mapping", "llm_hosts: {a: b}\n", []string{"line 1: llm_hosts: want a list of strings"}},
		{"identity_headers nested", "identity_headers: [[w3c]]\n", []string{"line 1: identity_headers: want a list of strings"}},
		{"unknown top key suggests", "identity_header: [w3c]\n", []string{`unknown key "identity_header"`, `did you mean "identity_headers"?`}},
		{"invalid nested value", "credentials:\n  - name: Bad Name\n    env: A\n    hosts: [a.example]\n", []string{`config: credentials[0].name: "Bad Name" is not a credential name`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := writeFile(t, t.TempDir(), "c.yaml", tt.content)
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

func TestValidateRewriteKeys(t *testing.T) {
	// ok is a credential that validates; tests change one thing.
	ok := func() Credential {
		return Credential{Name: "github", Env: "GITHUB_TOKEN", Hosts: []string{"api.github.com"}, Header: "Authorization", Format: "Bearer {value}", AgentEnv: []string{"GITHUB_TOKEN"}}
	}
	cred := func(mod func(*Credential)) func(*Config) {
		return func(c *Config) {
			cr := ok()
			mod(&cr)
			c.Credentials = []Credential{cr}
		}
	}
	tests := []struct {
		name    string
		mod     func(*Config)
		want    []string // keys of the errors
		message string   // a substring of the error
	}{
		{"all valid", func(c *Config) {
			c.LLMHosts = []string{"litellm.internal", "127.0.0.1:4000", "*.gw.example", "*.gw.example:443", "[::1]:8080", "[::1]", "::1", "LiteLLM.Internal", "10.0.0.1", "under_score.example:65535"}
			c.IdentityHeaders = []string{"chaperone", "litellm", "portkey", "helicone", "cloudflare", "w3c"}
			c.IdentityHosts = []string{"gw.example", "gw.example:8443"}
			c.RestoreSecrets = false
			c.Credentials = []Credential{
				ok(),
				{Name: "registry-2", File: "/run/secrets/registry", Hosts: []string{"registry.example:5000", "10.0.0.2"}, Header: "authorization", Format: "basic {user}:{value}", User: "ci"},
				{Name: "plain_swap", Env: "PLAIN", Hosts: []string{"*.example.com"}},
				{Name: "x-api", Env: "X", Hosts: []string{"[2001:db8::1]:443"}, Header: "X-Api-Key", AgentEnv: []string{"X_KEY", "_X2"}},
			}
		}, nil, ""},
		{"identity none", func(c *Config) { c.IdentityHeaders = []string{"none"} }, nil, ""},
		{"identity empty", func(c *Config) { c.IdentityHeaders = nil }, nil, ""},

		{"llm host url", func(c *Config) { c.LLMHosts = []string{"ok.example", "https://gw.example/"} }, []string{"llm_hosts[1]"}, `"https://gw.example/" is not a host name`},
		{"llm host empty", func(c *Config) { c.LLMHosts = []string{""} }, []string{"llm_hosts[0]"}, "is empty"},
		{"llm host space", func(c *Config) { c.LLMHosts = []string{"a b"} }, []string{"llm_hosts[0]"}, "not a host name"},
		{"llm host port 0", func(c *Config) { c.LLMHosts = []string{"gw.example:0"} }, []string{"llm_hosts[0]"}, "port from 1 to 65535"},
		{"llm host port too big", func(c *Config) { c.LLMHosts = []string{"127.0.0.1:65536"} }, []string{"llm_hosts[0]"}, "port"},
		{"llm host port leading zero", func(c *Config) { c.LLMHosts = []string{"gw.example:0443"} }, []string{"llm_hosts[0]"}, "port"},
		{"llm host empty port", func(c *Config) { c.LLMHosts = []string{"gw.example:"} }, []string{"llm_hosts[0]"}, "port"},
		{"llm host signed port", func(c *Config) { c.LLMHosts = []string{"gw.example:+80"} }, []string{"llm_hosts[0]"}, "port"},
		{"llm host tld wildcard", func(c *Config) { c.LLMHosts = []string{"*.com"} }, []string{"llm_hosts[0]"}, "whole top-level domain"},
		{"llm host double wildcard", func(c *Config) { c.LLMHosts = []string{"*.*.example"} }, []string{"llm_hosts[0]"}, "not a host name"},
		{"llm host bare star", func(c *Config) { c.LLMHosts = []string{"*"} }, []string{"llm_hosts[0]"}, "not a host name"},
		{"llm host trailing dot", func(c *Config) { c.LLMHosts = []string{"gw.example."} }, []string{"llm_hosts[0]"}, "not a host name"},
		{"llm host v6 port unbracketed", func(c *Config) { c.LLMHosts = []string{"::1:8080:x"} }, []string{"llm_hosts[0]"}, "not a host name"},
		{"llm host unclosed bracket", func(c *Config) { c.LLMHosts = []string{"[::1:8080"} }, []string{"llm_hosts[0]"}, "unclosed bracket"},
		{"llm host v4 in brackets", func(c *Config) { c.LLMHosts = []string{"[127.0.0.1]:80"} }, []string{"llm_hosts[0]"}, "IPv6"},
		{"llm host junk after bracket", func(c *Config) { c.LLMHosts = []string{"[::1]x"} }, []string{"llm_hosts[0]"}, "after its brackets"},
		{"llm host zoned", func(c *Config) { c.LLMHosts = []string{"[fe80::1%eth0]:80"} }, []string{"llm_hosts[0]"}, "zoned"},
		{"llm host zoned bare", func(c *Config) { c.LLMHosts = []string{"fe80::1%eth0"} }, []string{"llm_hosts[0]"}, "zoned"},
		{"llm host user info", func(c *Config) { c.LLMHosts = []string{"u@gw.example"} }, []string{"llm_hosts[0]"}, "not a host name"},

		{"identity unknown preset", func(c *Config) { c.IdentityHeaders = []string{"w3c", "langfuse"} }, []string{"identity_headers[1]"}, `"langfuse" is not a preset`},
		{"identity upper case", func(c *Config) { c.IdentityHeaders = []string{"W3C"} }, []string{"identity_headers[0]"}, "not a preset"},
		{"identity none with others", func(c *Config) { c.IdentityHeaders = []string{"w3c", "none"} }, []string{"identity_headers[1]"}, `"none" must be the only entry`},
		{"identity empty entry", func(c *Config) { c.IdentityHeaders = []string{""} }, []string{"identity_headers[0]"}, "not a preset"},

		{"identity host bad", func(c *Config) { c.IdentityHosts = []string{"gw.example", "gw.example/x"} }, []string{"identity_hosts[1]"}, "not a host name"},
		{"identity host tld wildcard", func(c *Config) { c.IdentityHosts = []string{"*.internal"} }, []string{"identity_hosts[0]"}, "top-level domain"},

		{"credential no name", cred(func(c *Credential) { c.Name = "" }), []string{"credentials[0].name"}, "credentials[0].name: is missing"},
		{"credential bad name", cred(func(c *Credential) { c.Name = "GitHub" }), []string{"credentials[0].name"}, `"GitHub" is not a credential name`},
		{"credential name with dot", cred(func(c *Credential) { c.Name = "a.b" }), []string{"credentials[0].name"}, "not a credential name"},
		{"credential long name", cred(func(c *Credential) { c.Name = strings.Repeat("a", 65) }), []string{"credentials[0].name"}, "not a credential name"},
		{"credential both sources", cred(func(c *Credential) { c.File = "/run/secrets/x" }), []string{"credentials[0]"}, "both env and file"},
		{"credential no source", cred(func(c *Credential) { c.Env = "" }), []string{"credentials[0]"}, "neither env nor file"},
		{"credential bad env", cred(func(c *Credential) { c.Env = "GITHUB-TOKEN" }), []string{"credentials[0].env"}, `"GITHUB-TOKEN" is not an environment variable name`},
		{"credential env digit", cred(func(c *Credential) { c.Env = "1TOKEN" }), []string{"credentials[0].env"}, "not an environment variable name"},
		{"credential relative file", cred(func(c *Credential) { c.Env = ""; c.File = "secrets/token" }), []string{"credentials[0].file"}, "not an absolute path"},
		{"credential no hosts", cred(func(c *Credential) { c.Hosts = nil }), []string{"credentials[0].hosts"}, "credentials[0].hosts: is empty"},
		{"credential bad host", cred(func(c *Credential) { c.Hosts = []string{"api.github.com", "*.com"} }), []string{"credentials[0].hosts[1]"}, "top-level domain"},
		{"credential host url", cred(func(c *Credential) { c.Hosts = []string{"https://api.github.com"} }), []string{"credentials[0].hosts[0]"}, "not a host name"},
		{"credential bad header", cred(func(c *Credential) { c.Header = "Authorization:" }), []string{"credentials[0].header"}, "not a header name"},
		{"credential header space", cred(func(c *Credential) { c.Header = "X Key" }), []string{"credentials[0].header"}, "not a header name"},
		{"credential transport header", cred(func(c *Credential) { c.Header = "host" }), []string{"credentials[0].header"}, "reserved for the transport"},
		{"credential format lacks value", cred(func(c *Credential) { c.Format = "Bearer" }), []string{"credentials[0].format"}, `"Bearer" lacks {value}`},
		{"credential format unknown placeholder", cred(func(c *Credential) { c.Format = "{scheme} {value}" }), []string{"credentials[0].format"}, "other than {value} and {user}"},
		{"credential format control", cred(func(c *Credential) { c.Format = "Bearer {value}\r\nX: y" }), []string{"credentials[0].format"}, "control character"},
		{"credential format without header", cred(func(c *Credential) { c.Header = "" }), []string{"credentials[0].format"}, "needs a header"},
		{"credential user without header", cred(func(c *Credential) { c.Header = ""; c.Format = ""; c.User = "ci" }), []string{"credentials[0].user"}, "needs a header"},
		{"credential user unused", cred(func(c *Credential) { c.User = "ci" }), []string{"credentials[0].format"}, "lacks {user} but user is set"},
		{"credential user missing", cred(func(c *Credential) { c.Format = "basic {user}:{value}" }), []string{"credentials[0].format"}, "uses {user} but user is empty"},
		{"credential basic user colon", cred(func(c *Credential) { c.Format = "Basic {user}:{value}"; c.User = "a:b" }), []string{"credentials[0].format"}, "contains ':'"},
		{"credential user control", cred(func(c *Credential) { c.Format = "{user} {value}"; c.User = "a\nb" }), []string{"credentials[0].user"}, "control character"},
		{"credential bad agent_env", cred(func(c *Credential) { c.AgentEnv = []string{"OK", "NOT OK"} }), []string{"credentials[0].agent_env[1]"}, `"NOT OK" is not an environment variable name`},
		{"credential empty agent_env entry", cred(func(c *Credential) { c.AgentEnv = []string{""} }), []string{"credentials[0].agent_env[0]"}, "not an environment variable name"},
		{"credential agent_env twice", cred(func(c *Credential) { c.AgentEnv = []string{"A", "A"} }), []string{"credentials[0].agent_env[1]"}, "appears twice"},
		{"credential duplicate name", func(c *Config) {
			a, b := ok(), ok()
			b.Env, b.AgentEnv = "OTHER", []string{"OTHER"}
			c.Credentials = []Credential{a, b}
		}, []string{"credentials[1].name"}, `"github" is also the name of credentials[0]`},
		{"credential shared agent_env", func(c *Config) {
			a, b := ok(), ok()
			b.Name = "other"
			c.Credentials = []Credential{a, b}
		}, []string{"credentials[1].agent_env[0]"}, "is also given to credentials[0]"},
		{"credential several problems", func(c *Config) {
			c.Credentials = []Credential{{Name: "Bad", Hosts: []string{"a b"}, Header: "X:", AgentEnv: []string{"1"}}}
		}, []string{"credentials[0].name", "credentials[0]", "credentials[0].hosts[0]", "credentials[0].header", "credentials[0].agent_env[0]"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default(envMap(map[string]string{"HOME": "/home/u"}), 1000)
			tt.mod(&c)
			err := c.Validate()
			if diff := cmp.Diff(tt.want, fieldKeys(err)); diff != "" {
				t.Errorf("error keys (-want +got):\n%s\nerror: %v", diff, err)
			}
			if tt.message != "" && (err == nil || !strings.Contains(err.Error(), tt.message)) {
				t.Errorf("error %q does not contain %q", err, tt.message)
			}
		})
	}
}

func TestIdentityPresets(t *testing.T) {
	tests := []struct {
		in   []string
		want []string
	}{
		{[]string{"chaperone", "w3c"}, []string{"chaperone", "w3c"}},
		{[]string{"none"}, nil},
		{[]string{}, nil},
		{nil, nil},
		{[]string{"litellm"}, []string{"litellm"}},
	}
	for _, tt := range tests {
		c := Config{IdentityHeaders: tt.in}
		got := c.IdentityPresets()
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("IdentityPresets(%q) (-want +got):\n%s", tt.in, diff)
		}
		if len(got) > 0 {
			got[0] = "changed"
			if c.IdentityHeaders[0] == "changed" {
				t.Errorf("IdentityPresets(%q) shares its slice with the Config", tt.in)
			}
		}
	}
}

// config show prints credentials as they are: names, variable names and
// paths, which are not secret.
func TestYAMLShowsCredentials(t *testing.T) {
	c := Default(envMap(map[string]string{"HOME": "/home/u"}), 1000)
	c.Credentials = []Credential{{Name: "github", Env: "GITHUB_TOKEN", Hosts: []string{"api.github.com"}, Header: "Authorization", Format: "Bearer {value}", AgentEnv: []string{"GITHUB_TOKEN"}}}
	b, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	want := `credentials:
    - name: github
      env: GITHUB_TOKEN
      hosts:
        - api.github.com
      header: Authorization
      format: Bearer {value}
      agent_env:
        - GITHUB_TOKEN
`
	if !strings.Contains(string(b), want) {
		t.Errorf("YAML lacks\n%s\ngot:\n%s", want, b)
	}
	if !strings.HasSuffix(string(b), want) {
		t.Errorf("credentials are not the last key shown:\n%s", b)
	}
}

func TestSuggest(t *testing.T) {
	tests := []struct{ in, want string }{
		{"deny_host", "deny_hosts"},
		{"Deny-Hosts", "deny_hosts"},
		{"hoss", "hosts"},
		{"hsots", "hosts"},
		{"agentenv", "agent_env"},
		{"nmae", "name"},
		{"colour", ""},
		{"ab", ""},
		{strings.Repeat("x", 100), ""},
	}
	for _, tt := range tests {
		want := ""
		if tt.want != "" {
			want = ` (did you mean "` + tt.want + `"?)`
		}
		if got := suggest(tt.in, append(keys[:len(keys):len(keys)], credentialFields...)); got != want {
			t.Errorf("suggest(%q) = %q, want %q", tt.in, got, want)
		}
	}
}
