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

	if p := listenProblem(c.Listen); p != "" {
		add("listen", c.Listen, p)
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

	switch c.QUIC {
	case QUICRefuse, QUICAllow:
	default:
		add("quic", c.QUIC, `is not "refuse" or "allow"`)
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
