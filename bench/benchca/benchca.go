// Package benchca makes the certificate authorities of the benchmark's own
// intercepting proxies (bench/gomitm, bench/tlsfloor) and the leaves they
// sign: ECDSA P-256, in memory, valid for a week. It must not import other
// chaperone packages.
package benchca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"time"
)

// New returns a new CA certificate and key named name, for signing leaves,
// and the certificate in PEM for clients to trust.
func New(name string) (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("benchca: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("benchca: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("benchca: %w", err)
	}
	ca := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}
	return ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// Leaf returns a server certificate for host (an IP or a DNS name) signed
// by ca, which must come from New.
func Leaf(ca tls.Certificate, host string) (*tls.Certificate, error) {
	if ca.Leaf == nil {
		return nil, fmt.Errorf("benchca: the CA has no parsed certificate")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("benchca: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     ca.Leaf.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	} else {
		tmpl.DNSNames = append(tmpl.DNSNames, host)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Leaf, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("benchca: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.Certificate[0]}, PrivateKey: key}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		panic("benchca: no randomness: " + err.Error()) // crypto/rand does not fail on Linux
	}
	return n
}

// Listen does what the benchmark's intercepting proxies do before they
// serve: it checks that listen is a loopback IP:port, reads the CAs that
// verify origins from upstreamCA ("": the system's, a nil pool), makes a
// CA named name, writes it to caOut for clients to trust, and listens.
func Listen(name, listen, caOut, upstreamCA string) (ca tls.Certificate, roots *x509.CertPool, l net.Listener, err error) {
	if ap, err := netip.ParseAddrPort(listen); err != nil || !ap.Addr().IsLoopback() {
		return ca, nil, nil, fmt.Errorf("-listen %q: want a loopback IP:port", listen)
	}
	if caOut == "" {
		return ca, nil, nil, fmt.Errorf("-ca-out is required: clients must trust the CA")
	}
	if upstreamCA != "" {
		b, err := os.ReadFile(upstreamCA)
		if err != nil {
			return ca, nil, nil, err
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(b) {
			return ca, nil, nil, fmt.Errorf("-upstream-ca %s: no PEM certificate", upstreamCA)
		}
	}
	ca, caPEM, err := New(name)
	if err != nil {
		return ca, nil, nil, err
	}
	if err := os.WriteFile(caOut, caPEM, 0o644); err != nil {
		return ca, nil, nil, err
	}
	l, err = net.Listen("tcp", listen)
	return ca, roots, l, err
}
