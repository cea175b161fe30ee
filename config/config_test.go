package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chaperone-dev/chaperone/policy"
	"github.com/google/go-cmp/cmp"
)

func TestDefault(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		euid int
		want string
	}{
		{"root", map[string]string{"HOME": "/root", "XDG_STATE_HOME": "/x"}, 0, "/var/lib/chaperone"},
		{"xdg", map[string]string{"HOME": "/home/u", "XDG_STATE_HOME": "/home/u/st"}, 1000, "/home/u/st/chaperone"},
		{"relative xdg ignored", map[string]string{"HOME": "/home/u", "XDG_STATE_HOME": "st"}, 1000, "/home/u/.local/state/chaperone"},
		{"home", map[string]string{"HOME": "/home/u"}, 1000, "/home/u/.local/state/chaperone"},
		{"nothing", nil, 1000, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default(envMap(tt.env), tt.euid)
			want := Config{StateDir: tt.want, Mode: "auto", Listen: "127.0.0.1:0", LogLevel: "info", QUIC: "intercept", UDP: "refuse", Audit: Audit{FileReads: "routine"}, UI: UI{Listen: "127.0.0.1:0"},
				IdentityHeaders: []string{"chaperone", "w3c"}, RestoreSecrets: true, MediateFiles: true, BuiltinAgents: true}
			if diff := cmp.Diff(want, c); diff != "" {
				t.Errorf("Default (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefaultValidates(t *testing.T) {
	for _, euid := range []int{0, 1000} {
		c := Default(envMap(map[string]string{"HOME": "/home/u"}), euid)
		if err := c.Validate(); err != nil {
			t.Errorf("euid %d: Default().Validate() = %v", euid, err)
		}
	}
	c := Default(nil, 1000)
	if got, want := fieldKeys(c.Validate()), []string{"state_dir"}; !cmp.Equal(got, want) {
		t.Errorf("no HOME: error keys = %v, want %v", got, want)
	}
}

func TestAuditLogPath(t *testing.T) {
	c := Config{StateDir: "/s"}
	if got := c.AuditLogPath(); got != "/s/audit.jsonl" {
		t.Errorf("AuditLogPath = %q", got)
	}
	c.Log = "/elsewhere/a.jsonl"
	if got := c.AuditLogPath(); got != "/elsewhere/a.jsonl" {
		t.Errorf("AuditLogPath with log = %q", got)
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	ca := writeFile(t, dir, "ca.pem", certPEM(t))
	noCert := writeFile(t, dir, "empty.pem", "not a certificate\n")
	keyOnly := writeFile(t, dir, "key.pem", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
	pol := writeFile(t, dir, "policy.yaml", "default: allow\n")

	tests := []struct {
		name    string
		mod     func(*Config)
		want    []string // keys of the errors
		message string   // a substring of the error
	}{
		{"defaults", func(*Config) {}, nil, ""},
		{"otlp", func(c *Config) { c.OTLPEndpoint, c.OTLPProtocol = "http://127.0.0.1:4318", "grpc" }, nil, ""},
		{"bad otlp protocol", func(c *Config) { c.OTLPProtocol = "thrift" }, []string{"otlp_protocol"}, `is not "grpc"`},
		{"bad otlp endpoint", func(c *Config) { c.OTLPEndpoint = "collector:4317" }, []string{"otlp_endpoint"}, "not an http"},
		{"all valid", func(c *Config) {
			c.Mode = "proxy"
			c.Listen = "[::1]:8080"
			c.Policy = pol
			c.DenyHosts = []string{"example.com", "*.example.org", "10.0.0.1", "[::2]", "Upper.Example.COM."}
			c.UpstreamCA = []string{ca}
			c.Resolve = []string{"api.example.com:127.0.0.2", "h:443:[::1]"}
			c.LogLevel = "debug"
		}, nil, ""},
		{"relative state_dir", func(c *Config) { c.StateDir = "state" }, []string{"state_dir"}, "not an absolute path"},
		{"bad mode", func(c *Config) { c.Mode = "stealth" }, []string{"mode"}, `"stealth" is not a mode`},
		{"empty mode", func(c *Config) { c.Mode = "" }, []string{"mode"}, "empty"},
		{"unknown mode", func(c *Config) { c.Mode = "sideways" }, []string{"mode"}, "is not a mode"},
		{"tls passthrough", func(c *Config) { c.TLSPassthrough = []string{"ok.example", "a b"} }, []string{"tls_passthrough[1]"}, "not a host name"},
		{"dns upstream", func(c *Config) { c.DNSUpstreams = []string{"127.0.0.1", "[::1]:5353", "dns.example:53"} }, []string{"dns_upstreams[2]"}, "not an IP address"},
		{"non-loopback listen", func(c *Config) { c.Listen = "0.0.0.0:8080" }, []string{"listen"}, "not a loopback"},
		{"public listen", func(c *Config) { c.Listen = "192.0.2.1:80" }, []string{"listen"}, "not a loopback"},
		{"listen name", func(c *Config) { c.Listen = "localhost:80" }, []string{"listen"}, "not an IP:port"},
		{"listen no port", func(c *Config) { c.Listen = "127.0.0.1" }, []string{"listen"}, "not an IP:port"},
		{"missing policy", func(c *Config) { c.Policy = filepath.Join(dir, "nope.yaml") }, []string{"policy"}, "does not exist"},
		{"policy is a dir", func(c *Config) { c.Policy = dir }, []string{"policy"}, "not a regular file"},
		{"bad deny host", func(c *Config) { c.DenyHosts = []string{"ok.com", "fine.org", "a b"} }, []string{"deny_hosts[2]"}, `deny_hosts[2]: "a b" is not a host name`},
		{"deny host url", func(c *Config) { c.DenyHosts = []string{"https://x.com/"} }, []string{"deny_hosts[0]"}, "not a host name"},
		{"deny host empty", func(c *Config) { c.DenyHosts = []string{" "} }, []string{"deny_hosts[0]"}, "empty"},
		{"deny host bad wildcard", func(c *Config) { c.DenyHosts = []string{"*.*.com"} }, []string{"deny_hosts[0]"}, "not a host name"},
		{"missing upstream_ca", func(c *Config) { c.UpstreamCA = []string{filepath.Join(dir, "missing.pem")} }, []string{"upstream_ca[0]"}, "does not exist"},
		{"upstream_ca without certs", func(c *Config) { c.UpstreamCA = []string{ca, noCert} }, []string{"upstream_ca[1]"}, "contains no PEM certificate"},
		{"upstream_ca key only", func(c *Config) { c.UpstreamCA = []string{keyOnly} }, []string{"upstream_ca[0]"}, "no PEM certificate"},
		{"upstream_ca dev", func(c *Config) { c.UpstreamCA = []string{os.DevNull} }, []string{"upstream_ca[0]"}, "not a regular file"},
		{"bad resolve", func(c *Config) { c.Resolve = []string{"api.example.com"} }, []string{"resolve[0]"}, `"api.example.com" has no address`},
		{"resolve bad addr", func(c *Config) { c.Resolve = []string{"h:1:2:3"} }, []string{"resolve[0]"}, "IP address"},
		{"bad log_level", func(c *Config) { c.LogLevel = "verbose" }, []string{"log_level"}, `"verbose" is not a log level`},
		{"upper log_level", func(c *Config) { c.LogLevel = "INFO" }, []string{"log_level"}, "not a log level"},
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
			if err != nil && !strings.HasPrefix(err.Error(), "config: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}

func TestValidateReportsAll(t *testing.T) {
	c := Config{
		StateDir:   "/s",
		Mode:       "opaque",
		Listen:     "0.0.0.0:1",
		DenyHosts:  []string{"a b", "ok.com", "c/d"},
		UpstreamCA: []string{"/nonexistent/ca.pem"},
		Resolve:    []string{"x"},
		QUIC:       "sometimes",
		UDP:        "maybe",
		LogLevel:   "loud",
	}
	want := []string{"mode", "listen", "deny_hosts[0]", "deny_hosts[2]", "upstream_ca[0]", "resolve[0]", "quic", "udp", "log_level"}
	err := c.Validate()
	if diff := cmp.Diff(want, fieldKeys(err)); diff != "" {
		t.Errorf("error keys (-want +got):\n%s", diff)
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != len(want) {
		t.Errorf("error has %d lines, want %d:\n%v", n, len(want), err)
	}
}

// Every deny host that Validate accepts must be accepted by the built-in
// policy too, or a valid config would fail at start.
func TestDenyHostsAgreeWithPolicy(t *testing.T) {
	hosts := []string{"example.com", "*.example.org", "10.0.0.1", "[::2]", "::3", "Upper.COM.", "under_score.example", "xn--bcher-kva.example", "a", "*.a", "a b", "x/y", "*", "*.", "a..b", "-a.com", "[::1", "user@host"}
	for _, h := range hosts {
		if denyHostProblem(h) != "" {
			continue
		}
		if _, err := policy.NewBuiltin([]string{h}); err != nil {
			t.Errorf("config accepts deny host %q but policy rejects it: %v", h, err)
		}
	}
}

func TestSlogLevel(t *testing.T) {
	for in, want := range map[string]string{"debug": "DEBUG", "info": "INFO", "warn": "WARN", "error": "ERROR", "bogus": "INFO", "": "INFO"} {
		if got := (Config{LogLevel: in}).SlogLevel().String(); got != want {
			t.Errorf("SlogLevel(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestFieldError(t *testing.T) {
	tests := []struct {
		e    FieldError
		want string
	}{
		{FieldError{Key: "deny_hosts[2]", Value: "a b", Problem: "is not a host name"}, `config: deny_hosts[2]: "a b" is not a host name`},
		{FieldError{Key: "mode", Problem: "is empty"}, "config: mode: is empty"},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}
