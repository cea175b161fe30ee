package config

import (
	"bytes"
	"strings"
	"testing"

	"github.com/chaperone-dev/chaperone/rewrite/inject"
)

// The config package keeps its own copy of rewrite/inject's rules (it must
// not import it); these tests check that the copies agree, so that a
// configuration that validates never fails when the session starts.

func TestIdentityPresetsAgreeWithInject(t *testing.T) {
	id := inject.Identity{Session: "s", Agent: "a", TraceID: [16]byte{1}, SpanID: [8]byte{1}}
	for _, p := range identityPresets {
		if _, err := inject.IdentityHeaders([]string{p}, id); err != nil {
			t.Errorf("config accepts identity preset %q but inject rejects it: %v", p, err)
		}
	}
	// "none" is config's word for no presets; inject must never see it.
	if _, err := inject.IdentityHeaders([]string{IdentityNone}, id); err == nil {
		t.Errorf("inject accepts a preset named %q; IdentityPresets must stop translating it", IdentityNone)
	}
}

// credentialAgrees fails t when Validate accepts cr but inject.NewBroker,
// given a value, rejects it.
func credentialAgrees(t *testing.T, cr Credential) {
	t.Helper()
	c := Config{StateDir: "/s", Mode: ModeAuto, Listen: DefaultListen, QUIC: QUICIntercept, UDP: UDPRefuse, LogLevel: "info", Credentials: []Credential{cr}}
	if err := c.Validate(); err != nil {
		return
	}
	ic := inject.Credential{Name: cr.Name, Value: "v", Hosts: cr.Hosts, Header: cr.Header, Format: cr.Format, User: cr.User}
	if _, err := inject.NewBroker([]inject.Credential{ic}, bytes.NewReader(make([]byte, 16))); err != nil {
		t.Errorf("config accepts credential %+v but inject rejects it: %v", cr, err)
	}
}

func TestCredentialsAgreeWithInject(t *testing.T) {
	hosts := []string{
		"api.github.com", "*.example.com", "*.com", "10.0.0.1", "10.0.0.1:443", "[::1]", "[::1]:8443", "::1",
		"API.GitHub.COM", "a.example:0443", "a.example:0", "a.example.", "[127.0.0.1]", "[fe80::1%eth0]", "x_y.example",
		"*.*.example", "a..b", "-a.example", "h:65535", "h:65536", "[::1]x", "::ffff:1.2.3.4",
	}
	for _, h := range hosts {
		credentialAgrees(t, Credential{Name: "n", Env: "E", Hosts: []string{h}})
	}
	forms := []struct{ header, format, user string }{
		{"Authorization", "Bearer {value}", ""},
		{"Authorization", "basic {user}:{value}", "ci"},
		{"Authorization", "Basic {user}:{value}", "a:b"},
		{"authorization", "{value}", ""},
		{"X-Api-Key", "", ""},
		{"X-Api-Key", "", "u"},
		{"Host", "{value}", ""},
		{"X Key", "{value}", ""},
		{"", "{value}", ""},
		{"", "", "u"},
		{"A", "{user}{value}", ""},
		{"A", "{value}", "u"},
		{"A", "{{value}}", ""},
		{"A", "x\x7f{value}", ""},
		{"A", "{user}:{value}", "u\tv"},
	}
	for _, f := range forms {
		credentialAgrees(t, Credential{Name: "n", Env: "E", Hosts: []string{"h.example"}, Header: f.header, Format: f.format, User: f.user})
	}
	for _, name := range []string{"a", "a-b_c9", strings.Repeat("a", 64), strings.Repeat("a", 65), "A", "a.b", ""} {
		credentialAgrees(t, Credential{Name: name, Env: "E", Hosts: []string{"h.example"}})
	}
}

func FuzzCredentialAgreesWithInject(f *testing.F) {
	f.Add("github", "api.github.com", "Authorization", "Bearer {value}", "")
	f.Add("reg", "registry.example:5000", "Authorization", "basic {user}:{value}", "ci")
	f.Add("v6", "[::1]:8443", "", "", "")
	f.Add("w", "*.example.com", "X-Key", "{value}", "")
	f.Add("z", "fe80::1%eth0", "x", "{user}{value}", "a:b")
	f.Fuzz(func(t *testing.T, name, host, header, format, user string) {
		credentialAgrees(t, Credential{Name: name, Env: "E", Hosts: []string{host}, Header: header, Format: format, User: user})
	})
}
