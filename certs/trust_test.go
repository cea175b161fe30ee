package certs

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWriteTrustBundle(t *testing.T) {
	ca := newTestCA(t, t0)
	root := newTestCA(t, t0) // stands in for a system root
	tmp := t.TempDir()
	rootsFile := filepath.Join(tmp, "roots.pem")
	// No trailing newline: the bundle must still separate the blocks.
	if err := os.WriteFile(rootsFile, bytes.TrimRight(root.PEM(), "\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	emptyFile := filepath.Join(tmp, "empty.pem")
	if err := os.WriteFile(emptyFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	files := []string{filepath.Join(tmp, "absent.pem"), tmp /* a directory */, emptyFile, rootsFile}

	dir := filepath.Join(tmp, "session")
	path, err := writeTrustBundle(dir, ca, files)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "trust-bundle.pem"); path != want || !filepath.IsAbs(path) {
		t.Errorf("path = %q, want absolute %q", path, want)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("bundle mode = %04o, want 0644", fi.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		subjects = append(subjects, c.Subject.CommonName)
	}
	want := []string{root.Certificate().Subject.CommonName, ca.Certificate().Subject.CommonName}
	if diff := cmp.Diff(want, subjects); diff != "" {
		t.Errorf("bundle certificates, system roots first (-want +got):\n%s", diff)
	}
	if !bytes.HasSuffix(data, ca.PEM()) {
		t.Error("bundle does not end with the CA's PEM")
	}

	// Rewriting replaces the file atomically and leaves no temporary files.
	if _, err := writeTrustBundle(dir, ca, files); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("session dir holds %d entries, want 1", len(entries))
	}
}

func TestWriteTrustBundleNoRoots(t *testing.T) {
	tmp := t.TempDir()
	_, err := writeTrustBundle(filepath.Join(tmp, "out"), newTestCA(t, t0), []string{filepath.Join(tmp, "absent.pem")})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "absent.pem") {
		t.Errorf("error = %v, want one wrapping fs.ErrNotExist and naming the files tried", err)
	}
	if _, err := os.Stat(filepath.Join(tmp, "out", "trust-bundle.pem")); err == nil {
		t.Error("bundle written without system roots")
	}
}

func TestSystemRootFiles(t *testing.T) {
	files := systemRootFiles()
	if len(files) != 6 || files[0] != "/etc/ssl/certs/ca-certificates.crt" {
		t.Errorf("systemRootFiles() = %v", files)
	}
	// On this machine the roots may be absent; when present they must parse.
	b, err := SystemRootsPEM()
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("no system roots: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		t.Error("SystemRootsPEM holds no parsable certificate")
	}
}

func TestTrustEnv(t *testing.T) {
	const bundle = "/var/lib/chaperone/s1/trust-bundle.pem"
	want := []string{
		"SSL_CERT_FILE=" + bundle,
		"CURL_CA_BUNDLE=" + bundle,
		"REQUESTS_CA_BUNDLE=" + bundle,
		"NODE_EXTRA_CA_CERTS=" + bundle,
		"GIT_SSL_CAINFO=" + bundle,
		"PIP_CERT=" + bundle,
		"AWS_CA_BUNDLE=" + bundle,
		"DENO_CERT=" + bundle,
		"CARGO_HTTP_CAINFO=" + bundle,
	}
	if diff := cmp.Diff(want, TrustEnv(bundle)); diff != "" {
		t.Errorf("TrustEnv (-want +got):\n%s", diff)
	}
	var names []string
	for _, kv := range want {
		names = append(names, strings.SplitN(kv, "=", 2)[0])
	}
	if diff := cmp.Diff(names, TrustEnvNames()); diff != "" {
		t.Errorf("TrustEnvNames (-want +got):\n%s", diff)
	}
	for _, n := range TrustEnvNames() {
		if n == "SSL_CERT_DIR" {
			t.Error("TrustEnvNames includes SSL_CERT_DIR, which must be left untouched")
		}
	}
	// Callers may modify the returned slice without affecting later calls.
	TrustEnvNames()[0] = "CHANGED"
	if TrustEnvNames()[0] != "SSL_CERT_FILE" {
		t.Error("TrustEnvNames returns shared state")
	}
}
