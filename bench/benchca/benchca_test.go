package benchca

import (
	"crypto/ecdsa"
	"crypto/x509"
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
