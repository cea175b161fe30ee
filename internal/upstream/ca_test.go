package upstream

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
)

func TestLeafVerifiesForEachHost(t *testing.T) {
	ca, err := NewCA("leaf")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Leaf("api.example.test", "127.0.0.2", "::1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host   string
		wantOK bool
	}{
		{"api.example.test", true},
		{"127.0.0.2", true},
		{"::1", true},
		{"other.example.test", false},
		{"127.0.0.3", false},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			_, err := cert.Leaf.Verify(x509.VerifyOptions{
				DNSName:   tt.host,
				Roots:     ca.Pool,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			})
			if got := err == nil; got != tt.wantOK {
				t.Errorf("Verify(%q) error = %v, want ok %v", tt.host, err, tt.wantOK)
			}
		})
	}
}

func TestLeafOtherCAFails(t *testing.T) {
	ca1, err := NewCA("one")
	if err != nil {
		t.Fatal(err)
	}
	ca2, err := NewCA("two")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca1.Leaf("a.example.test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: "a.example.test", Roots: ca2.Pool}); err == nil {
		t.Error("leaf of one CA verified against another CA's pool")
	}
}

func TestCAErrors(t *testing.T) {
	if _, err := NewCA(""); err == nil {
		t.Error("NewCA(\"\") succeeded, want error")
	}
	ca, err := NewCA("x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Leaf(); err == nil {
		t.Error("Leaf() with no hosts succeeded, want error")
	}
}

func TestWriteFile(t *testing.T) {
	tests := []struct {
		name     string
		wantFile string
	}{
		{"demo", "demo-ca.pem"},
		{"my CA/../x", "my-CA-..-x-ca.pem"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ca, err := NewCA(tt.name)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			path, err := ca.WriteFile(dir)
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(dir, tt.wantFile); path != want {
				t.Errorf("path = %q, want %q", path, want)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			block, rest := pem.Decode(data)
			if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
				t.Fatalf("file is not exactly one PEM certificate:\n%s", data)
			}
			if !bytes.Equal(block.Bytes, ca.Cert.Raw) {
				t.Error("file's certificate differs from ca.Cert")
			}
		})
	}
}
