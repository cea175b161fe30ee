package tls

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	stdtls "crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"testing"
	"time"

	"golang.org/x/crypto/cryptobyte"
)

// recordingConn captures what a TLS client writes and fails its first
// read, so a client handshake stops right after sending its ClientHello.
type recordingConn struct {
	net.Conn // nil: only Read, Write and the methods below are used
	buf      bytes.Buffer
}

func (c *recordingConn) Write(b []byte) (int, error)             { return c.buf.Write(b) }
func (c *recordingConn) Read([]byte) (int, error)                { return 0, io.EOF }
func (c *recordingConn) Close() error                            { return nil }
func (c *recordingConn) SetDeadline(time.Time) error             { return nil }
func (c *recordingConn) SetReadDeadline(time.Time) error         { return nil }
func (c *recordingConn) SetWriteDeadline(time.Time) error        { return nil }
func (c *recordingConn) LocalAddr() net.Addr                     { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
func (c *recordingConn) RemoteAddr() net.Addr                    { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
func (c *recordingConn) ConnectionState() stdtls.ConnectionState { return stdtls.ConnectionState{} }

// captureHello returns the bytes a crypto/tls client sends first under cfg.
func captureHello(t testing.TB, cfg *stdtls.Config) []byte {
	t.Helper()
	rc := &recordingConn{}
	err := stdtls.Client(rc, cfg).Handshake()
	if err == nil {
		t.Fatal("handshake against a conn that never answers succeeded")
	}
	if rc.buf.Len() == 0 {
		t.Fatalf("client wrote nothing: %v", err)
	}
	return rc.buf.Bytes()
}

// reframe splits the handshake message in hello's single record into
// records of the given fragment sizes (the last takes the rest).
func reframe(t testing.TB, hello []byte, sizes ...int) []byte {
	t.Helper()
	if len(hello) < 5 {
		t.Fatal("short hello")
	}
	hdr, msg := hello[:5], hello[5:]
	var out []byte
	for _, n := range append(sizes, len(msg)) {
		n = min(n, len(msg))
		out = append(out, hdr[0], hdr[1], hdr[2], byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
		if len(msg) == 0 {
			break
		}
	}
	return out
}

type ext struct {
	typ  uint16
	body []byte
}

// buildHello assembles a ClientHello record by hand, for shapes crypto/tls
// never sends.
func buildHello(exts ...ext) []byte {
	var b cryptobyte.Builder
	b.AddUint8(recordTypeHandshake)
	b.AddUint16(0x0301)
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		b.AddUint8(handshakeTypeClientHello)
		b.AddUint24LengthPrefixed(func(b *cryptobyte.Builder) {
			b.AddUint16(0x0303)
			b.AddBytes(make([]byte, 32))
			b.AddUint8LengthPrefixed(func(*cryptobyte.Builder) {})
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint16(0x1301) })
			b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint8(0) })
			if exts == nil {
				return
			}
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
				for _, e := range exts {
					b.AddUint16(e.typ)
					b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(e.body) })
				}
			})
		})
	})
	return b.BytesOrPanic()
}

func sniExt(names ...string) ext {
	var b cryptobyte.Builder
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		for _, n := range names {
			b.AddUint8(0)
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(n)) })
		}
	})
	return ext{0, b.BytesOrPanic()}
}

// testCert is a self-signed certificate for names, and a pool trusting it.
func testCert(t testing.TB, names ...string) (stdtls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: names[0]},
		DNSNames:              names,
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return stdtls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// staticCerts is a CertSource that always answers with one certificate and
// remembers the names it was asked for.
type staticCerts struct {
	cert  *stdtls.Certificate
	asked chan string
}

func (s staticCerts) GetCertificate(h *stdtls.ClientHelloInfo) (*stdtls.Certificate, error) {
	if s.asked != nil {
		s.asked <- h.ServerName
	}
	if s.cert == nil {
		return nil, errors.New("no certificate")
	}
	return s.cert, nil
}
