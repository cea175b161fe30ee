package benchca

import (
	"crypto/ecdsa"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLeafVerifies: a leaf for an IP and one for a name verify against the
// CA's PEM for their host, and not for another.
func TestLeafVerifies(t *testing.T) {
	ca, caPEM, err := New("test CA")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("New: no PEM certificate")
	}
	for _, host := range []string{"127.0.0.1", "::1", "origin.example.test"} {
		leaf, err := Leaf(ca, host)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(leaf.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok {
			t.Errorf("%s: %T key, want ECDSA", host, cert.PublicKey)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "10.9.9.9"}); err == nil {
			t.Errorf("%s: verified for another host", host)
		}
	}
	if _, err := Leaf(ca, "x"); err != nil {
		t.Fatal(err)
	}
	ca.Leaf = nil
	if _, err := Leaf(ca, "x"); err == nil {
		t.Error("Leaf with an unparsed CA: no error")
	}
}

// TestListen: a loopback address, a CA file and roots that parse give a
// listener and the CA written out; anything else an error and no listener.
func TestListen(t *testing.T) {
	dir := t.TempDir()
	_, rootPEM, err := New("roots")
	if err != nil {
		t.Fatal(err)
	}
	rootsFile := filepath.Join(dir, "roots.pem")
	os.WriteFile(rootsFile, rootPEM, 0o644)
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("no certificate here"), 0o644)
	caOut := filepath.Join(dir, "ca.pem")

	ca, roots, l, err := Listen("test CA", "127.0.0.1:0", caOut, rootsFile)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if roots == nil || ca.Leaf == nil || ca.Leaf.Subject.CommonName != "test CA" {
		t.Errorf("roots %v, CA %v", roots, ca.Leaf)
	}
	if b, err := os.ReadFile(caOut); err != nil || !strings.Contains(string(b), "BEGIN CERTIFICATE") {
		t.Errorf("CA file: %q %v", b, err)
	}
	for _, tc := range []struct{ listen, caOut, upstreamCA, want string }{
		{"10.0.0.1:0", caOut, "", "loopback"},
		{"localhost:0", caOut, "", "loopback"},
		{"127.0.0.1:0", "", "", "-ca-out"},
		{"127.0.0.1:0", caOut, notPEM, "no PEM"},
		{"127.0.0.1:0", caOut, filepath.Join(dir, "missing.pem"), "no such file"},
	} {
		_, _, l, err := Listen("x", tc.listen, tc.caOut, tc.upstreamCA)
		if err == nil || !strings.Contains(err.Error(), tc.want) || l != nil {
			t.Errorf("Listen(%q, %q, %q): %v, want an error with %q", tc.listen, tc.caOut, tc.upstreamCA, err, tc.want)
			if l != nil {
				l.Close()
			}
		}
	}
}
