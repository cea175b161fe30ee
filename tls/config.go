package tls

import (
	stdtls "crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// CertSource hands out the certificate to present for a ClientHello;
// *certs.Leaves implements it.
type CertSource interface {
	GetCertificate(*stdtls.ClientHelloInfo) (*stdtls.Certificate, error)
}

// ServerConfig returns the configuration that terminates an intercepted
// connection: certificates from certs, TLS 1.2 or later, session tickets on,
// and ALPN limited to h2 and http/1.1 chosen by the client's preference (a
// client offering only http/1.1 gets http/1.1; one offering neither gets
// no ALPN, and is then served HTTP/1.1 rather than refused by the
// handshake, so its bytes are still inspected).
func ServerConfig(certs CertSource) *stdtls.Config {
	base := &stdtls.Config{
		GetCertificate: certs.GetCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
		MinVersion:     stdtls.VersionTLS12,
	}
	// crypto/tls picks the first of the server's protocols that the client
	// offers; ordering the server's list per client gives the client's
	// preference. Configs returned by GetConfigForClient without their own
	// ticket keys share base's, so resumption works across all three.
	h1First := base.Clone()
	h1First.NextProtos = []string{"http/1.1", "h2"}
	noALPN := base.Clone()
	noALPN.NextProtos = nil
	base.GetConfigForClient = func(hello *stdtls.ClientHelloInfo) (*stdtls.Config, error) {
		for _, p := range hello.SupportedProtos {
			switch p {
			case "h2":
				return nil, nil
			case "http/1.1":
				return h1First, nil
			}
		}
		if len(hello.SupportedProtos) == 0 {
			return nil, nil
		}
		return noALPN, nil
	}
	return base
}

// LoadRoots returns the pool that verifies upstream servers: the system
// roots when system is true, plus the certificates of each PEM file. A file
// that cannot be read or holds no certificate is an error naming it.
func LoadRoots(system bool, files ...string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if system {
		p, err := x509.SystemCertPool()
		if err != nil {
			return nil, fmt.Errorf("tls: load system roots: %w", err)
		}
		pool = p
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("tls: load roots: %w", err)
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("tls: load roots from %s: %w", f, errNoCertificates)
		}
	}
	return pool, nil
}

var errNoCertificates = errors.New("no PEM certificate found")
