package session

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/certs"
	"github.com/chaperone-dev/chaperone/config"
	"github.com/chaperone-dev/chaperone/fileexec"
)

func TestChildEnv(t *testing.T) {
	s := &Session{id: "abc123", proxyURL: "http://chaperone:tok@127.0.0.1:9", bundle: "/state/trust-bundle.pem"}
	base := []string{
		"PATH=/usr/bin", "HOME=/root",
		"HTTPS_PROXY=http://corp:3128", "no_proxy=*", "NO_PROXY=internal",
		"SSL_CERT_FILE=/mine.pem", "NODE_EXTRA_CA_CERTS=/x.pem",
		"CHAPERONE_STATE_DIR=/secret/state", "CHAPERONE_SESSION=spoofed",
		"GITHUB_TOKEN=real-value", "GH_TOKEN=also-real", "REAL_ONLY=hidden",
	}
	env := childEnv(base, s, true, []string{"GITHUB_TOKEN=chaperone-cred-gh-1", "GH_TOKEN=chaperone-cred-gh-1"}, []string{"GITHUB_TOKEN", "REAL_ONLY"})
	get := func(k string) []string {
		var vs []string
		for _, kv := range env {
			if key, v, _ := strings.Cut(kv, "="); key == k {
				vs = append(vs, v)
			}
		}
		return vs
	}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
		if diff := cmp.Diff([]string{s.proxyURL}, get(k)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", k, diff)
		}
	}
	for _, k := range []string{"NO_PROXY", "no_proxy"} {
		if diff := cmp.Diff([]string{""}, get(k)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", k, diff)
		}
	}
	if diff := cmp.Diff([]string{"basic"}, get("GIT_HTTP_PROXY_AUTHMETHOD")); diff != "" {
		t.Errorf("GIT_HTTP_PROXY_AUTHMETHOD (-want +got):\n%s", diff)
	}
	for _, k := range certs.TrustEnvNames() {
		if diff := cmp.Diff([]string{s.bundle}, get(k)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", k, diff)
		}
	}
	if got := get("CHAPERONE_STATE_DIR"); got != nil {
		t.Errorf("CHAPERONE_STATE_DIR leaked to the agent: %v", got)
	}
	if diff := cmp.Diff([]string{"abc123"}, get("CHAPERONE_SESSION")); diff != "" {
		t.Errorf("CHAPERONE_SESSION (-want +got):\n%s", diff)
	}
	for k, want := range map[string][]string{"GITHUB_TOKEN": {"chaperone-cred-gh-1"}, "GH_TOKEN": {"chaperone-cred-gh-1"}, "REAL_ONLY": nil} {
		if diff := cmp.Diff(want, get(k)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", k, diff)
		}
	}
	if !slices.Contains(env, "PATH=/usr/bin") || !slices.Contains(env, "HOME=/root") {
		t.Errorf("ordinary variables lost: %v", env)
	}
}

func TestResolver(t *testing.T) {
	r := resolver([]config.Resolve{
		{Host: "api.test", Port: 443, Addr: netip.MustParseAddr("127.0.0.2")},
		{Host: "api.test", Addr: netip.MustParseAddr("127.0.0.3")},
	})
	tests := []struct {
		host string
		port uint16
		want string
	}{
		{"api.test", 443, "127.0.0.2"},
		{"API.test.", 443, "127.0.0.2"},
		{"api.test", 8443, "127.0.0.3"},
		{"other.test", 443, "invalid IP"},
	}
	for _, tt := range tests {
		got, ok := r(tt.host, tt.port)
		if got.String() != tt.want || ok != got.IsValid() {
			t.Errorf("resolve(%s, %d) = %v, %v; want %s", tt.host, tt.port, got, ok, tt.want)
		}
	}
	if resolver(nil) != nil {
		t.Error("resolver(nil) is not nil")
	}
}

func TestChildEnvTransparent(t *testing.T) {
	s := &Session{id: "abc123", proxyURL: "http://chaperone:tok@127.0.0.1:9", bundle: "/b.pem"}
	env := childEnv([]string{"PATH=/usr/bin", "HTTPS_PROXY=http://corp:3128", "no_proxy=*"}, s, false, nil, nil)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasSuffix(strings.ToLower(k), "_proxy") || strings.Contains(kv, "tok") {
			t.Errorf("transparent session's environment has %q", kv)
		}
	}
	if !slices.Contains(env, "SSL_CERT_FILE=/b.pem") || !slices.Contains(env, "PATH=/usr/bin") {
		t.Errorf("environment %v lacks the trust bundle or PATH", env)
	}
}

// The audit log records reads of the protected files whole: by the path
// given, by the path its links resolve to, and under a protected tree.
func TestProtectedPath(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(real, "policy.yaml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	whole := protectedPath([]fileexec.Protect{
		{Path: filepath.Join(link, "policy.yaml"), Protection: fileexec.NoWrite},
		{Path: "/var/lib/chaperone", Protection: fileexec.NoAccess, Tree: true},
		{Path: ""},
	})
	for path, want := range map[string]bool{
		filepath.Join(link, "policy.yaml"): true,
		filepath.Join(real, "policy.yaml"): true,
		filepath.Join(real, "other.yaml"):  false,
		"/var/lib/chaperone/audit.jsonl":   true,
		"/var/lib/chaperone":               true,
		"/var/lib/chaperone2/x":            false,
		"":                                 false,
	} {
		if got := whole(path); got != want {
			t.Errorf("protectedPath(%q) = %v, want %v", path, got, want)
		}
	}
}
