package upstream

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// CA is a throwaway certificate authority, held in memory, that signs the
// leaf certificates of upstream servers. Its key never leaves the process.
type CA struct {
	Cert *x509.Certificate // the self-signed CA certificate
	PEM  []byte            // Cert in PEM form, for trust files (GIT_SSL_CAINFO, SSL_CERT_FILE…)
	Pool *x509.CertPool    // a pool holding only Cert, for Go clients

	name string
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA named name with an ECDSA P-256 key. The name appears in
// the certificate's subject and in the file name WriteFile chooses.
func NewCA(name string) (*CA, error) {
	if name == "" {
		return nil, errors.New("upstream: new ca: empty name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("upstream: new ca: generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, fmt.Errorf("upstream: new ca: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name + " test CA", Organization: []string{"Chaperone upstream test"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("upstream: new ca: sign: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("upstream: new ca: parse: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{
		Cert: cert,
		PEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Pool: pool,
		name: name,
		key:  key,
	}, nil
}

// WriteFile writes the CA certificate (never the key) to dir/<name>-ca.pem,
// with characters of the name that are unsafe in a file name replaced by
// '-', and returns the file's path.
func (ca *CA) WriteFile(dir string) (string, error) {
	path := filepath.Join(dir, fileSafe(ca.name)+"-ca.pem")
	if err := os.WriteFile(path, ca.PEM, 0o644); err != nil {
		return "", fmt.Errorf("upstream: write ca: %w", err)
	}
	return path, nil
}

// Leaf mints a server certificate signed by the CA for hosts: each is an IP
// SAN if it parses as an IP address and a DNS SAN otherwise. The first host
// is also the subject's common name.
func (ca *CA) Leaf(hosts ...string) (tls.Certificate, error) {
	if len(hosts) == 0 {
		return tls.Certificate{}, errors.New("upstream: leaf: no hosts")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("upstream: leaf: generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("upstream: leaf: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("upstream: leaf: sign: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("upstream: leaf: parse: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial: %w", err)
	}
	return s, nil
}

func fileSafe(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '-'
	}, name)
}
