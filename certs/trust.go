package certs

import (
	"encoding/pem"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

const trustBundleName = "trust-bundle.pem"

// systemRootFiles lists where Linux distributions keep their root bundle
// (Debian/Ubuntu/Alpine, Fedora/RHEL, openSUSE, OpenELEC, CentOS/RHEL 7,
// Alpine/Arch), in the order Go's crypto/x509 tries them.
func systemRootFiles() []string {
	return []string{
		"/etc/ssl/certs/ca-certificates.crt",
		"/etc/pki/tls/certs/ca-bundle.crt",
		"/etc/ssl/ca-bundle.pem",
		"/etc/pki/tls/cacert.pem",
		"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
		"/etc/ssl/cert.pem",
	}
}

// SystemRootsPEM returns the system's root certificates in PEM form: the
// first readable file of the usual Linux locations that holds a certificate.
// When there is none the error wraps fs.ErrNotExist.
func SystemRootsPEM() ([]byte, error) { return readRoots(systemRootFiles()) }

func readRoots(files []string) ([]byte, error) {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || !hasCertificate(b) {
			continue // unreadable, empty or a placeholder: try the next location
		}
		return b, nil
	}
	return nil, fmt.Errorf("certs: no root certificates in %s: %w", strings.Join(files, ", "), fs.ErrNotExist)
}

func hasCertificate(b []byte) bool {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return false
		}
		if block.Type == "CERTIFICATE" {
			return true
		}
	}
}

// WriteTrustBundle writes dir/trust-bundle.pem (mode 0644, atomically): the
// system roots followed by the CA (once: not again when Install put it in
// the system roots), so that a process pointed at it trusts the
// proxy's leaves and, for connections the proxy passes through, the real
// servers. dir is created with mode 0755 if missing, since the session's
// processes must reach the file. It returns the bundle's absolute path, which
// stays valid when a process changes directory.
func WriteTrustBundle(dir string, ca *CA) (path string, err error) {
	return writeTrustBundle(dir, ca, systemRootFiles())
}

func writeTrustBundle(dir string, ca *CA, rootFiles []string) (string, error) {
	roots, err := readRoots(rootFiles)
	if err != nil {
		return "", fmt.Errorf("certs: write trust bundle: %w", err)
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("certs: write trust bundle: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("certs: write trust bundle: %w", err)
	}
	path := filepath.Join(dir, trustBundleName)
	if err := writeFileAtomic(path, trustBundle(roots, ca), 0o644); err != nil {
		return "", fmt.Errorf("certs: write trust bundle: %w", err)
	}
	return path, nil
}

// TrustEnvNames returns the environment variables that TrustEnv sets: the
// ones OpenSSL, Go, curl, Python requests and pip, Node.js, git, the AWS
// SDKs and CLI, Deno and cargo read for a CA bundle.
//
// SSL_CERT_DIR is left untouched: it names a directory of hashed
// certificates, OpenSSL and Go consult it in addition to SSL_CERT_FILE, and
// keeping the user's value keeps any roots they added there.
func TrustEnvNames() []string {
	return []string{
		"SSL_CERT_FILE",
		"CURL_CA_BUNDLE",
		"REQUESTS_CA_BUNDLE",
		"NODE_EXTRA_CA_CERTS",
		"GIT_SSL_CAINFO",
		"PIP_CERT",
		"AWS_CA_BUNDLE",
		"DENO_CERT",
		"CARGO_HTTP_CAINFO",
	}
}

// TrustEnv returns KEY=VALUE entries, one for each of TrustEnvNames, all
// pointing at bundle (the path WriteTrustBundle returned). SSL_CERT_DIR is
// left untouched; see TrustEnvNames.
func TrustEnv(bundle string) []string {
	names := TrustEnvNames()
	env := make([]string, len(names))
	for i, n := range names {
		env[i] = n + "=" + bundle
	}
	return env
}
