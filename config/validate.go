package config

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// FieldError is one problem with one key.
type FieldError struct {
	// Key names the key, with an index for list entries: "deny_hosts[2]".
	Key string
	// Value is the offending value, quoted in Error; empty for secret keys
	// or when the problem is that the value is missing.
	Value string
	// Problem says what is wrong, as a predicate of Value when Value is set
	// ("is not a host name").
	Problem string
}

func (e *FieldError) Error() string {
	if e.Value == "" {
		return "config: " + e.Key + ": " + e.Problem
	}
	return "config: " + e.Key + ": " + strconv.Quote(e.Value) + " " + e.Problem
}

var logLevels = []string{"debug", "info", "warn", "error"}

// maxPEMSize bounds how much of an upstream_ca file is read.
const maxPEMSize = 16 << 20

// Validate checks every key and returns all problems, joined with
// errors.Join; each is a *FieldError. It reads the file system: the policy
// and upstream_ca files must exist.
func (c *Config) Validate() error {
	var errs []error
	add := func(key, value, problem string) {
		errs = append(errs, &FieldError{Key: key, Value: value, Problem: problem})
	}

	switch {
	case c.StateDir == "":
		add("state_dir", "", "is not set, and neither XDG_STATE_HOME nor HOME is set to derive it")
	case !filepath.IsAbs(c.StateDir):
		add("state_dir", c.StateDir, "is not an absolute path")
	}

	switch c.Mode {
	case ModeAuto, ModeProxy, ModeTransparent:
	case "":
		add("mode", "", `is empty (want "auto", "proxy" or "transparent")`)
	default:
		add("mode", c.Mode, `is not a mode (want "auto", "proxy" or "transparent")`)
	}

	switch c.OTLPProtocol {
	case "", "grpc", "http/protobuf":
	default:
		add("otlp_protocol", c.OTLPProtocol, `is not "grpc" or "http/protobuf"`)
	}
	if e := c.OTLPEndpoint; e != "" && !strings.HasPrefix(e, "http://") && !strings.HasPrefix(e, "https://") {
		add("otlp_endpoint", e, "is not an http:// or https:// URL")
	}

	if p := listenProblem(c.Listen); p != "" {
		add("listen", c.Listen, p)
	}
	if p := listenProblem(c.UI.Listen); c.UI.Listen != "" && p != "" {
		add("ui.listen", c.UI.Listen, strings.Replace(p, "the proxy is", "the live view is", 1))
	}

	if p := fileProblem(c.Policy); c.Policy != "" && p != "" {
		add("policy", c.Policy, p)
	}

	for i, h := range c.DenyHosts {
		if p := denyHostProblem(h); p != "" {
			add(fmt.Sprintf("deny_hosts[%d]", i), h, p)
		}
	}

	for i, path := range c.UpstreamCA {
		if p := pemProblem(path); p != "" {
			add(fmt.Sprintf("upstream_ca[%d]", i), path, p)
		}
	}

	for i, r := range c.Resolve {
		if _, p := parseResolve(r); p != "" {
			add(fmt.Sprintf("resolve[%d]", i), r, p)
		}
	}

	switch c.Audit.FileReads {
	case "", AuditReadsRoutine, AuditReadsAll: // "": routine
	default:
		add("audit.file_reads", c.Audit.FileReads, `is not "routine" or "all"`)
	}
	switch c.QUIC {
	case QUICIntercept, QUICRefuse, QUICAllow:
	default:
		add("quic", c.QUIC, `is not "intercept", "refuse" or "allow"`)
	}
	switch c.UDP {
	case UDPRefuse, UDPAllow:
	default:
		add("udp", c.UDP, `is not "refuse" or "allow"`)
	}

	for i, h := range c.TLSPassthrough {
		if p := denyHostProblem(h); p != "" {
			add(fmt.Sprintf("tls_passthrough[%d]", i), h, p)
		}
	}

	for i, u := range c.DNSUpstreams {
		if _, err := ParseDNSUpstream(u); err != nil {
			add(fmt.Sprintf("dns_upstreams[%d]", i), u, "is not an IP address or IP:port")
		}
	}

	switch {
	case c.LogLevel == "":
		add("log_level", "", "is empty (want debug, info, warn or error)")
	case !containsString(logLevels, c.LogLevel):
		add("log_level", c.LogLevel, "is not a log level (want debug, info, warn or error)")
	}

	for i, h := range c.LLMHosts {
		if p := hostPortProblem(h); p != "" {
			add(fmt.Sprintf("llm_hosts[%d]", i), h, p)
		}
	}

	for i, name := range c.IdentityHeaders {
		switch {
		case name == IdentityNone && len(c.IdentityHeaders) > 1:
			add(fmt.Sprintf("identity_headers[%d]", i), name, "must be the only entry (it sets no identity headers)")
		case name == IdentityNone:
		case !containsString(identityPresets, name):
			add(fmt.Sprintf("identity_headers[%d]", i), name, "is not a preset (want "+strings.Join(identityPresets, ", ")+`, or "none" alone)`)
		}
	}

	for i, h := range c.IdentityHosts {
		if p := hostPortProblem(h); p != "" {
			add(fmt.Sprintf("identity_hosts[%d]", i), h, p)
		}
	}

	names := map[string]int{}
	agentEnv := map[string]int{}
	for i, cr := range c.Credentials {
		errs = append(errs, credentialProblems(i, cr, names, agentEnv)...)
	}
	if c.DaemonSocket != "" && !filepath.IsAbs(c.DaemonSocket) {
		add("daemon_socket", c.DaemonSocket, "is not an absolute path")
	}
	agentNames := map[string]int{}
	for i, a := range c.Agents {
		errs = append(errs, agentProblems(i, a, agentNames)...)
	}

	return errors.Join(errs...)
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func listenProblem(s string) string {
	if s == "" {
		return "is empty (want a loopback IP:port such as 127.0.0.1:0)"
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return "is not an IP:port (want a loopback address such as 127.0.0.1:0)"
	}
	if !ap.Addr().Unmap().IsLoopback() {
		return "is not a loopback address (the proxy is never exposed beyond this machine)"
	}
	return ""
}

// fileProblem checks that path names an existing regular file.
func fileProblem(path string) string {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "does not exist"
	case err != nil:
		return "cannot be read: " + pathErrReason(err)
	case !fi.Mode().IsRegular():
		return "is not a regular file"
	}
	return ""
}

// pathErrReason drops the path an *os.PathError repeats.
func pathErrReason(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func pemProblem(path string) string {
	if path == "" {
		return "is empty (want a PEM file)"
	}
	if p := fileProblem(path); p != "" {
		return p
	}
	f, err := os.Open(path)
	if err != nil {
		return "cannot be read: " + pathErrReason(err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPEMSize+1))
	if err != nil {
		return "cannot be read: " + pathErrReason(err)
	}
	if len(data) > maxPEMSize {
		return "is larger than 16 MiB"
	}
	n := 0
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return "holds a certificate that does not parse: " + err.Error()
		}
		n++
	}
	if n == 0 {
		return "contains no PEM certificate"
	}
	return ""
}

// denyHostProblem accepts what policy.NewBuiltin accepts, and checks host
// names more strictly so typos surface here.
func denyHostProblem(h string) string {
	h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
	if h == "" {
		return "is empty (want a host name, *.domain or IP address)"
	}
	if _, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return ""
	}
	if rest, ok := strings.CutPrefix(h, "*."); ok {
		if !isHostName(rest) {
			return "is not a host name, *.domain or IP address"
		}
		return ""
	}
	if !isHostName(h) {
		return "is not a host name, *.domain or IP address"
	}
	return ""
}

// isHostName reports whether s (lower case, no trailing dot) is a DNS name:
// dot-separated labels of letters, digits, '-' and '_', each 1 to 63 bytes,
// not starting or ending with '-'.
func isHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// ParseDNSUpstream parses a dns_upstreams entry: an IP address (port 53)
// or IP:port ([v6]:port).
func ParseDNSUpstream(s string) (netip.AddrPort, error) {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return netip.AddrPortFrom(a, 53), nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Port() == 0 || ap.Addr().Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("config: dns upstream %q is not an IP address or IP:port", s)
	}
	return ap, nil
}

// maxCredentialName bounds a credential's name, as rewrite/inject does.
const maxCredentialName = 64

// credentialProblems checks credentials[i]. names and agentEnv map the names
// and agent_env variables of the entries checked so far to their index.
// The checks are those rewrite/inject applies, bar the value itself, so that
// a configuration that validates is one the broker accepts.
func credentialProblems(i int, cr Credential, names, agentEnv map[string]int) []error {
	var errs []error
	key := fmt.Sprintf("credentials[%d]", i)
	add := func(field, value, problem string) {
		k := key
		if field != "" {
			k += "." + field
		}
		errs = append(errs, &FieldError{Key: k, Value: value, Problem: problem})
	}

	switch j, dup := names[cr.Name]; {
	case cr.Name == "":
		add("name", "", "is missing")
	case !isCredentialName(cr.Name):
		add("name", cr.Name, fmt.Sprintf("is not a credential name (want 1 to %d of a-z, 0-9, _ and -)", maxCredentialName))
	case dup:
		add("name", cr.Name, fmt.Sprintf("is also the name of credentials[%d]", j))
	default:
		names[cr.Name] = i
	}

	switch {
	case cr.Env != "" && cr.File != "":
		add("", "", "sets both env and file (want exactly one)")
	case cr.Env == "" && cr.File == "":
		add("", "", "sets neither env nor file (want exactly one: where the value is)")
	case cr.Env != "" && !isEnvName(cr.Env):
		add("env", cr.Env, "is not an environment variable name")
	case cr.File != "" && !filepath.IsAbs(cr.File):
		add("file", cr.File, "is not an absolute path")
	}

	if len(cr.Hosts) == 0 {
		add("hosts", "", "is empty (want the hosts that may receive the value)")
	}
	for j, h := range cr.Hosts {
		if p := hostPortProblem(h); p != "" {
			add(fmt.Sprintf("hosts[%d]", j), h, p)
		}
	}

	if hasControl(cr.User) {
		add("user", "", "contains a control character")
	}
	switch {
	case cr.Header == "":
		if cr.Format != "" {
			add("format", cr.Format, "needs a header")
		}
		if cr.User != "" {
			add("user", "", "needs a header and a format with {user}")
		}
	case !isToken(cr.Header):
		add("header", cr.Header, "is not a header name")
	case isTransportHeader(cr.Header):
		add("header", cr.Header, "is reserved for the transport")
	default:
		if p := formatProblem(cr.Format, cr.User); p != "" {
			add("format", cr.Format, p)
		}
	}

	for j, e := range cr.AgentEnv {
		switch k, dup := agentEnv[e]; {
		case !isEnvName(e):
			add(fmt.Sprintf("agent_env[%d]", j), e, "is not an environment variable name")
		case dup && k != i:
			add(fmt.Sprintf("agent_env[%d]", j), e, fmt.Sprintf("is also given to credentials[%d]", k))
		case dup:
			add(fmt.Sprintf("agent_env[%d]", j), e, "appears twice")
		default:
			agentEnv[e] = i
		}
	}
	return errs
}

// formatProblem checks a header format, as rewrite/inject expands it.
func formatProblem(format, user string) string {
	if format == "" {
		format = "{value}"
	}
	if hasControl(format) {
		return "contains a control character"
	}
	if rest := strings.NewReplacer("{value}", "", "{user}", "").Replace(format); strings.ContainsAny(rest, "{}") {
		return "has a placeholder other than {value} and {user}"
	}
	if !strings.Contains(format, "{value}") {
		return "lacks {value}"
	}
	usesUser := strings.Contains(format, "{user}")
	switch {
	case usesUser && user == "":
		return "uses {user} but user is empty"
	case !usesUser && user != "":
		return "lacks {user} but user is set"
	case usesUser && strings.Contains(user, ":") && len(format) > len("basic ") && strings.EqualFold(format[:len("basic ")], "basic "):
		return "is HTTP Basic but user contains ':'"
	}
	return ""
}

func isCredentialName(s string) bool {
	if s == "" || len(s) > maxCredentialName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// isEnvName reports whether s is [A-Za-z_][A-Za-z0-9_]*.
func isEnvName(s string) bool {
	if s == "" || '0' <= s[0] && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// isToken reports whether s is an HTTP token (RFC 9110), as a header name
// must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func isTransportHeader(h string) bool {
	switch strings.ToLower(h) {
	case "host", "content-length", "transfer-encoding", "connection", "te", "trailer",
		"upgrade", "keep-alive", "proxy-connection":
		return true
	}
	return false
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}

const hostPortWant = "(want a host name, *.domain or IP address, optionally with :port)"

// hostPortProblem checks an entry of llm_hosts, identity_hosts or a
// credential's hosts: a host name, *.domain (two labels or more after the
// star), an IP address, each optionally followed by :port; an IPv6 address
// with a port is in brackets. It accepts what rewrite/inject accepts for a
// credential's hosts, minus ports with leading zeros.
func hostPortProblem(s string) string {
	if s == "" {
		return "is empty " + hostPortWant
	}
	host, port := strings.ToLower(s), ""
	switch {
	case strings.HasPrefix(host, "["):
		end := strings.IndexByte(host, ']')
		if end < 0 {
			return "has an unclosed bracket " + hostPortWant
		}
		host, port = host[1:end], host[end+1:]
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return "does not have an IPv6 address in its brackets " + hostPortWant
		}
		if a.Zone() != "" {
			return "has a zoned address " + hostPortWant
		}
		if port != "" && !strings.HasPrefix(port, ":") {
			return "has something after its brackets other than :port " + hostPortWant
		}
		return portProblem(port)
	case strings.Count(host, ":") > 1:
		a, err := netip.ParseAddr(host)
		if err != nil {
			return "is not a host name, *.domain or IP address " + hostPortWant
		}
		if a.Zone() != "" {
			return "has a zoned address " + hostPortWant
		}
		return ""
	}
	if i := strings.IndexByte(host, ':'); i >= 0 {
		host, port = host[:i], host[i:]
	}
	if p := portProblem(port); p != "" {
		return p
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		if !isHostName(rest) {
			return "is not a host name, *.domain or IP address " + hostPortWant
		}
		if !strings.Contains(rest, ".") {
			return "is a wildcard for a whole top-level domain (want *.example.com, not *.com)"
		}
		return ""
	}
	if !isHostName(host) {
		return "is not a host name, *.domain or IP address " + hostPortWant
	}
	return ""
}

// portProblem checks "" or ":port".
func portProblem(p string) string {
	if p == "" {
		return ""
	}
	digits := p[1:]
	if !allDigits(digits) {
		// "https://host/" and the like.
		return "is not a host name, *.domain or IP address " + hostPortWant
	}
	n, err := strconv.Atoi(digits)
	if err != nil || digits == "" || n < 1 || n > 65535 || digits[0] == '0' {
		return "does not end with a port from 1 to 65535 " + hostPortWant
	}
	return ""
}

// agentProblems checks agents[i]; names maps the names seen to their
// index.
func agentProblems(i int, a AgentMatcher, names map[string]int) []error {
	var errs []error
	key := fmt.Sprintf("agents[%d]", i)
	add := func(field, value, problem string) {
		errs = append(errs, fmt.Errorf("config: %s.%s %q %s", key, field, value, problem))
	}
	switch j, dup := names[a.Name]; {
	case a.Name == "":
		add("name", "", "is empty (want [a-z0-9._-]+)")
	case strings.Trim(a.Name, "abcdefghijklmnopqrstuvwxyz0123456789._-") != "":
		add("name", a.Name, "has characters other than a-z, 0-9, '.', '_' and '-'")
	case dup:
		add("name", a.Name, fmt.Sprintf("is also the name of agents[%d]", j))
	default:
		names[a.Name] = i
	}
	if len(a.Commands) == 0 && len(a.Scripts) == 0 {
		errs = append(errs, fmt.Errorf("config: %s: has neither commands nor scripts: it would match nothing", key))
	}
	for j, c := range a.Commands {
		if c == "" || strings.ContainsAny(c, "/\x00") {
			add(fmt.Sprintf("commands[%d]", j), c, "is not a program's base name (no '/', not empty)")
		}
	}
	for j, s := range a.Scripts {
		if strings.TrimSpace(s) == "" {
			add(fmt.Sprintf("scripts[%d]", j), s, "is empty")
		}
	}
	return errs
}
