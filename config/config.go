package config

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Config is Chaperone's configuration. The zero value is not usable; start
// from Default or Load.
type Config struct {
	// StateDir holds the CA and the audit log (the trust bundle for the
	// agent is written to a temporary directory per session).
	StateDir string `mapstructure:"state_dir" yaml:"state_dir"`
	// Mode is "auto", "proxy" or "transparent".
	Mode string `mapstructure:"mode" yaml:"mode"`
	// Listen is the proxy's listen address, a loopback IP:port.
	Listen string `mapstructure:"listen" yaml:"listen"`
	// Log is the audit log's path; empty means <state_dir>/audit.jsonl.
	Log string `mapstructure:"log" yaml:"log"`
	// Audit is what the audit log records.
	Audit Audit `mapstructure:"audit" yaml:"audit"`
	// UI is the live view (`chaperone ui`, `run --ui`, `daemon --ui`).
	UI UI `mapstructure:"ui" yaml:"ui"`
	// Policy is the policy file's path; empty means the built-in policy.
	Policy string `mapstructure:"policy" yaml:"policy"`
	// DenyHosts are the hosts the built-in policy denies: a name, *.domain
	// (its subdomains) or an IP address.
	DenyHosts []string `mapstructure:"deny_hosts" yaml:"deny_hosts"`
	// UpstreamCA are extra PEM files trusted for upstream TLS.
	UpstreamCA []string `mapstructure:"upstream_ca" yaml:"upstream_ca"`
	// Resolve pins host names to addresses, like curl --resolve:
	// HOST:ADDR or HOST:PORT:ADDR.
	Resolve []string `mapstructure:"resolve" yaml:"resolve"`
	// TLSPassthrough are hosts whose TLS is passed through, not
	// intercepted (clients that pin certificates): a name, *.domain or IP.
	TLSPassthrough []string `mapstructure:"tls_passthrough" yaml:"tls_passthrough"`
	// QUIC says what a transparent session does with UDP to port 443:
	// "intercept" (the default: the proxy terminates QUIC and serves its
	// HTTP/3 requests as it does HTTP/1 and HTTP/2), "refuse" (clients
	// fall back to TCP, which the proxy sees) or "allow" (QUIC passes
	// unmediated).
	QUIC string `mapstructure:"quic" yaml:"quic"`
	// UDP says what a transparent session does with UDP to ports other
	// than 53 (DNS, which its resolver answers) and 443 (QUIC): "refuse"
	// (the default: EPERM, and a denied connect event) or "allow" (it
	// passes unmediated and unseen).
	UDP string `mapstructure:"udp" yaml:"udp"`
	// DNSUpstreams are the resolvers a transparent session's resolver
	// forwards to (IP or IP:port); empty means the system's, from
	// /etc/resolv.conf.
	DNSUpstreams []string `mapstructure:"dns_upstreams" yaml:"dns_upstreams"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `mapstructure:"log_level" yaml:"log_level"`
	// LLMHosts are gateways and local LLM servers recognised as LLM APIs by
	// path alone (the providers' own hosts are known): a name, *.domain or
	// IP, optionally with :port ("litellm.internal", "127.0.0.1:4000").
	LLMHosts []string `mapstructure:"llm_hosts" yaml:"llm_hosts"`
	// IdentityHeaders are the presets of identity headers set on LLM API
	// calls and on IdentityHosts (see IdentityPresets); ["none"] sets none.
	IdentityHeaders []string `mapstructure:"identity_headers" yaml:"identity_headers"`
	// IdentityHosts are gateway hosts that also get identity headers, in
	// LLMHosts' syntax.
	IdentityHosts []string `mapstructure:"identity_hosts" yaml:"identity_hosts"`
	// RestoreSecrets turns placeholders in an LLM's answer back into the
	// real values on the way to the agent.
	RestoreSecrets bool `mapstructure:"restore_secrets" yaml:"restore_secrets"`
	// MediateFiles puts the session's file opens and execs to the policy
	// where the machine allows it (root on Linux: fanotify permission
	// events and seccomp); false leaves them alone.
	MediateFiles bool `mapstructure:"mediate_files" yaml:"mediate_files"`
	// OTLPEndpoint and OTLPProtocol send each session's trace to an
	// OpenTelemetry collector; empty means the standard
	// OTEL_EXPORTER_OTLP_* environment, and with neither, no export.
	OTLPEndpoint string `mapstructure:"otlp_endpoint" yaml:"otlp_endpoint"`
	OTLPProtocol string `mapstructure:"otlp_protocol" yaml:"otlp_protocol"`
	// CaptureContent puts whole command lines and URL query values in
	// traces (never prompts or header values).
	CaptureContent bool `mapstructure:"capture_content" yaml:"capture_content"`
	// DaemonSocket is the daemon's control socket: where `chaperone
	// daemon` listens, and where `chaperone run` joins a running daemon
	// instead of starting a proxy of its own.
	DaemonSocket string `mapstructure:"daemon_socket" yaml:"daemon_socket"`
	// BuiltinAgents makes the daemon find the agents Chaperone knows;
	// false leaves Agents alone.
	BuiltinAgents bool `mapstructure:"builtin_agents" yaml:"builtin_agents"`
	// Agents tell the daemon more agents (or, without BuiltinAgents, its
	// only ones). Set in the file only.
	Agents []AgentMatcher `mapstructure:"agents" yaml:"agents,omitempty"`
	// Credentials are brokered: the agent sees a placeholder, and the real
	// value is put in only on requests to the credential's hosts. Set in
	// the file only. The config holds where each value is, never a value.
	Credentials []Credential `mapstructure:"credentials" yaml:"credentials"`
}

// AgentMatcher tells the daemon an agent by what a process runs: a
// program whose base name is one of Commands, or an interpreter (node,
// python, bun, deno) or launcher running a script whose path contains one
// of Scripts, is the agent Name. A process started with
// CHAPERONE_AGENT=<name> in its environment is that agent whatever it runs.
type AgentMatcher struct {
	// Name is [a-z0-9._-]+: the session's agent.
	Name string `mapstructure:"name" yaml:"name"`
	// Commands are program base names ("my-agent"); the kernel sees their
	// first 15 bytes.
	Commands []string `mapstructure:"commands" yaml:"commands,omitempty"`
	// Scripts are pieces of a script's path ("@acme/agent/cli.js").
	Scripts []string `mapstructure:"scripts" yaml:"scripts,omitempty"`
}

// Credential is one brokered credential. Its value is read, by the caller,
// from Chaperone's environment variable Env or from File (a trailing newline
// trimmed); the config itself holds no secret.
type Credential struct {
	// Name is [a-z0-9_-]+, unique; it appears in the placeholder.
	Name string `mapstructure:"name" yaml:"name"`
	// Env names the environment variable of Chaperone holding the value.
	// Exactly one of Env and File is set.
	Env string `mapstructure:"env" yaml:"env,omitempty"`
	// File is the absolute path of a file holding the value.
	File string `mapstructure:"file" yaml:"file,omitempty"`
	// Hosts may receive the value, in LLMHosts' syntax; at least one.
	Hosts []string `mapstructure:"hosts" yaml:"hosts"`
	// Header is the header the value is set in ("Authorization"); empty
	// means the placeholder is swapped wherever it appears in the headers
	// or URL.
	Header string `mapstructure:"header" yaml:"header,omitempty"`
	// Format builds the header's value from {value} and {user} ("Bearer
	// {value}"); one starting with "basic " is HTTP Basic. Empty means
	// "{value}".
	Format string `mapstructure:"format" yaml:"format,omitempty"`
	// User fills {user} in Format.
	User string `mapstructure:"user" yaml:"user,omitempty"`
	// AgentEnv are the agent's environment variables that get the
	// placeholder. Load sets it to [Env] when it is empty and Env is set.
	AgentEnv []string `mapstructure:"agent_env" yaml:"agent_env,omitempty"`
}

// Identity header presets accepted by Validate. The list must match the
// presets of rewrite/inject (IdentityHeaders), which this package must not
// import; agree_test.go checks that they do.
var identityPresets = []string{"chaperone", "litellm", "portkey", "helicone", "cloudflare", "w3c"}

// DefaultDaemonSocket is the daemon's control socket unless configured.
const DefaultDaemonSocket = "/run/chaperone/daemon.sock"

// DaemonSocketPath is the daemon's control socket: DaemonSocket, else the
// default.
func (c Config) DaemonSocketPath() string {
	if c.DaemonSocket == "" {
		return DefaultDaemonSocket
	}
	return c.DaemonSocket
}

// IdentityNone, alone in IdentityHeaders, sets no identity headers.
const IdentityNone = "none"

// IdentityPresets returns the identity header presets to apply: nil when
// IdentityHeaders is empty or ["none"].
func (c Config) IdentityPresets() []string {
	if len(c.IdentityHeaders) == 0 || len(c.IdentityHeaders) == 1 && c.IdentityHeaders[0] == IdentityNone {
		return nil
	}
	return slices.Clone(c.IdentityHeaders)
}

// What transparent sessions do with QUIC.
const (
	QUICIntercept = "intercept"
	QUICRefuse    = "refuse"
	QUICAllow     = "allow"
)

// What transparent sessions do with UDP other than DNS and QUIC.
const (
	UDPRefuse = "refuse"
	UDPAllow  = "allow"
)

// Modes accepted by Validate.
const (
	ModeAuto        = "auto"
	ModeProxy       = "proxy"
	ModeTransparent = "transparent" // Linux, as root: eBPF cgroup hooks
)

// DefaultListen lets the system pick a free loopback port.
const DefaultListen = "127.0.0.1:0"

// Audit is the audit key's section: what the audit log records.
type Audit struct {
	// FileReads says which file reads the log records whole: "routine"
	// (the default) folds routine reads (event.Routine) into one
	// file_reads record per process ("" too); "all" records every read.
	FileReads string `mapstructure:"file_reads" yaml:"file_reads"`
}

// UI is the ui key's section: the live view.
type UI struct {
	// Listen is the live view's address, a loopback IP:port (port 0: one
	// the system picks).
	Listen string `mapstructure:"listen" yaml:"listen"`
}

// Which file reads the audit log records whole (Audit.FileReads).
const (
	AuditReadsRoutine = "routine"
	AuditReadsAll     = "all"
)

// AuditLogFile is the audit log's file name inside StateDir.
const AuditLogFile = "audit.jsonl"

// kind is the shape of a key's value.
type kind int

const (
	kindString   kind = iota
	kindList          // a list of strings
	kindBool          // true or false
	kindMappings      // a list of mappings of fields; file only
	kindSection       // a mapping of fields, each a key of its own (section.field)
)

// key describes one configuration key.
type key struct {
	name string // the config key (file and mapstructure)
	flag string // the flag that sets it; "" for keys set in the file only
	kind kind
	help string
	// fields are the keys of each mapping of a kindMappings key, or of a
	// kindSection key's mapping.
	fields []key
}

// keys lists every key in the order they are documented and shown.
var keys = []key{
	{name: "state_dir", flag: "state-dir", help: "directory for the CA and the audit log"},
	{name: "mode", flag: "mode", help: `interception mode: "auto", "proxy" or "transparent" (Linux, root)`},
	{name: "listen", flag: "listen", help: "proxy listen address, a loopback IP:port"},
	{name: "log", flag: "log", help: "audit log path (default <state_dir>/audit.jsonl)"},
	{name: "audit", kind: kindSection, fields: auditFields},
	{name: "ui", kind: kindSection, fields: uiFields},
	{name: "policy", flag: "policy", help: "policy file (default: the built-in policy)"},
	{name: "deny_hosts", flag: "deny-host", kind: kindList, help: "deny this host: a name, *.domain or IP (repeatable)"},
	{name: "upstream_ca", flag: "upstream-ca", kind: kindList, help: "also trust this PEM file's certificates for upstream TLS (repeatable)"},
	{name: "resolve", flag: "resolve", kind: kindList, help: "pin HOST:ADDR or HOST:PORT:ADDR, like curl --resolve (repeatable)"},
	{name: "tls_passthrough", flag: "tls-passthrough", kind: kindList, help: "do not intercept TLS to this host (certificate pinning): a name, *.domain or IP (repeatable)"},
	{name: "quic", flag: "quic", help: `transparent mode: "intercept" QUIC (UDP to port 443) in the proxy, which serves its HTTP/3 requests as any other; "refuse" it so clients fall back to TCP through the proxy; or "allow" it unmediated`},
	{name: "udp", flag: "udp", help: `transparent mode: "refuse" UDP to ports other than 53 (DNS) and 443 (QUIC), reported as denied connect events, or "allow" it unmediated`},
	{name: "dns_upstreams", flag: "dns-upstream", kind: kindList, help: "transparent mode: forward the session's DNS to this resolver, IP or IP:port (repeatable; default: the system's)"},
	{name: "log_level", flag: "log-level", help: "debug, info, warn or error"},
	{name: "llm_hosts", flag: "llm-host", kind: kindList, help: "treat this gateway or local server as an LLM API, recognised by path: a name, *.domain or IP, optionally with :port (repeatable)"},
	{name: "identity_headers", flag: "identity-header", kind: kindList, help: `identity header preset for LLM calls and identity hosts: chaperone, litellm, portkey, helicone, cloudflare, w3c, or "none" alone (repeatable; default chaperone and w3c)`},
	{name: "identity_hosts", flag: "identity-host", kind: kindList, help: "also set identity headers on requests to this gateway: a name, *.domain or IP, optionally with :port (repeatable)"},
	{name: "otlp_endpoint", flag: "otlp-endpoint", help: "send session traces to this OTLP collector, e.g. http://127.0.0.1:4318 (default: OTEL_EXPORTER_OTLP_ENDPOINT, else no export)"},
	{name: "otlp_protocol", flag: "otlp-protocol", help: `OTLP protocol: "grpc" or "http/protobuf" (default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)`},
	{name: "capture_content", flag: "capture-content", kind: kindBool, help: "put whole command lines and URL query values in traces (default false)"},
	{name: "mediate_files", flag: "mediate-files", kind: kindBool, help: "decide the session's file opens and execs too, where the machine allows it: root on Linux (default true)"},
	{name: "restore_secrets", flag: "restore-secrets", kind: kindBool, help: "turn placeholders in LLM answers back into the real values (default true; --restore-secrets=false to keep them)"},
	{name: "daemon_socket", flag: "daemon-socket", help: "the daemon's control socket: `daemon` listens there and `run` joins a daemon listening there (default /run/chaperone/daemon.sock)"},
	{name: "builtin_agents", flag: "builtin-agents", kind: kindBool, help: "daemon: find the agents Chaperone knows (Claude Code, Codex, Gemini CLI, aider, Cursor, goose, opencode, Copilot) besides the agents list (default true)"},
	{name: "agents", kind: kindMappings, fields: agentFields},
	{name: "credentials", kind: kindMappings, fields: credentialFields},
}

// auditFields are the keys of the audit section.
var auditFields = []key{
	{name: "file_reads", flag: "audit-file-reads", help: `"routine": fold routine file reads (libraries, locale, caches, the working tree) into one audit record per process; "all": record every read`},
}

// uiFields are the keys of the ui section.
var uiFields = []key{
	{name: "listen", flag: "ui-listen", help: "the live view's listen address, a loopback IP:port (default 127.0.0.1:0: a port the system picks)"},
}

// agentFields are the keys of an agents entry.
var agentFields = []key{
	{name: "name"},
	{name: "commands", kind: kindList},
	{name: "scripts", kind: kindList},
}

// credentialFields are the keys of a credentials entry, for checkFile.
var credentialFields = []key{
	{name: "name"},
	{name: "env"},
	{name: "file"},
	{name: "hosts", kind: kindList},
	{name: "header"},
	{name: "format"},
	{name: "user"},
	{name: "agent_env", kind: kindList},
}

func lookupKey(name string) (key, bool) {
	i := slices.IndexFunc(keys, func(k key) bool { return k.name == name })
	if i < 0 {
		return key{}, false
	}
	return keys[i], true
}

// EnvVar returns the environment variable that sets a key:
// CHAPERONE_ and the key in upper case.
// A section's key is named section.field: its variable is
// CHAPERONE_SECTION_FIELD.
func EnvVar(key string) string {
	return "CHAPERONE_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// leafKeys lists the keys that hold values, a section's fields under their
// dotted names (audit.file_reads), in the order of keys.
func leafKeys() []key {
	var out []key
	for _, k := range keys {
		if k.kind != kindSection {
			out = append(out, k)
			continue
		}
		for _, f := range k.fields {
			f.name = k.name + "." + f.name
			out = append(out, f)
		}
	}
	return out
}

// EnvConfigFile names the config file when LoadOptions.File is empty.
const EnvConfigFile = "CHAPERONE_CONFIG"

// Default returns the configuration used when nothing else is set. env looks
// up environment variables (os.Getenv in production); euid is the effective
// user id. State lives in /var/lib/chaperone for root, else in
// $XDG_STATE_HOME/chaperone or ~/.local/state/chaperone. When neither
// XDG_STATE_HOME nor HOME is set, StateDir is empty and Validate says so.
func Default(env func(string) string, euid int) Config {
	if env == nil {
		env = func(string) string { return "" }
	}
	return Config{
		StateDir:        defaultStateDir(env, euid),
		Mode:            ModeAuto,
		QUIC:            QUICIntercept,
		Audit:           Audit{FileReads: AuditReadsRoutine},
		UI:              UI{Listen: DefaultListen},
		UDP:             UDPRefuse,
		Listen:          DefaultListen,
		LogLevel:        "info",
		IdentityHeaders: []string{"chaperone", "w3c"},
		RestoreSecrets:  true,
		MediateFiles:    true,
		BuiltinAgents:   true,
	}
}

func defaultStateDir(env func(string) string, euid int) string {
	if euid == 0 {
		return "/var/lib/chaperone"
	}
	// The XDG spec says relative values are invalid and must be ignored.
	if x := env("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "chaperone")
	}
	if h := env("HOME"); h != "" && filepath.IsAbs(h) {
		return filepath.Join(h, ".local", "state", "chaperone")
	}
	return ""
}

// AuditLogPath returns where the audit log is written.
func (c Config) AuditLogPath() string {
	if c.Log != "" {
		return c.Log
	}
	if c.StateDir == "" {
		return ""
	}
	return filepath.Join(c.StateDir, AuditLogFile)
}

// SlogLevel returns LogLevel as a slog.Level; info when it is not valid.
func (c Config) SlogLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil || !slices.Contains(logLevels, c.LogLevel) {
		return slog.LevelInfo
	}
	return l
}

// YAML returns the effective configuration as a YAML document, for
// `chaperone config show`. The log key shows the audit log's actual path.
func (c Config) YAML() ([]byte, error) {
	c.Log = c.AuditLogPath()
	for _, p := range []*[]string{&c.DenyHosts, &c.UpstreamCA, &c.Resolve, &c.TLSPassthrough, &c.DNSUpstreams, &c.LLMHosts, &c.IdentityHeaders, &c.IdentityHosts} {
		if *p == nil {
			*p = []string{}
		}
	}
	// Credentials hold variable names and paths, never values, so they are
	// shown as they are.
	c.Credentials = slices.Clone(c.Credentials)
	if c.Credentials == nil {
		c.Credentials = []Credential{}
	}
	for i := range c.Credentials {
		if c.Credentials[i].Hosts == nil {
			c.Credentials[i].Hosts = []string{}
		}
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("config: encode yaml: %w", err)
	}
	return b, nil
}
