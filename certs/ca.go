package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

const (
	certFileName = "ca.pem"
	keyFileName  = "ca-key.pem"

	caCommonNamePrefix = "Chaperone CA "
	caValidityYears    = 10

	// backdate covers clients whose clocks run behind the proxy's.
	backdate = time.Hour
)

// CA is Chaperone's certificate authority: a certificate and the key that
// signs leaves. Its String, Format and LogValue methods describe the
// certificate only; nothing in this package prints or returns the key.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	pem  []byte
}

// CertFile is the path of the CA certificate in dir.
func CertFile(dir string) string { return filepath.Join(dir, certFileName) }

// KeyFile is the path of the CA key in dir.
func KeyFile(dir string) string { return filepath.Join(dir, keyFileName) }

// Certificate returns the CA certificate. The caller must not modify it.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// PEM returns the CA certificate (never the key) in PEM form.
func (ca *CA) PEM() []byte { return append([]byte(nil), ca.pem...) }

// String names the CA by subject, expiry and certificate fingerprint.
func (ca *CA) String() string {
	if ca == nil || ca.cert == nil {
		return "certs.CA(nil)"
	}
	sum := sha256.Sum256(ca.cert.Raw)
	return fmt.Sprintf("certs.CA(%q, not after %s, sha256 %s)",
		ca.cert.Subject.CommonName, ca.cert.NotAfter.UTC().Format(time.RFC3339), hex.EncodeToString(sum[:]))
}

// Format prints String for every verb, so that no verb (%d, %#v, ...) can
// reach the key through reflection. Its value receiver covers a dereferenced
// CA too.
func (ca CA) Format(f fmt.State, _ rune) { io.WriteString(f, ca.String()) }

// LogValue logs the CA as its String.
func (ca *CA) LogValue() slog.Value { return slog.StringValue(ca.String()) }

// LoadOrCreate loads the CA stored in dir or, when dir holds no CA
// certificate, creates one there (creating dir with mode 0700 if missing) and
// reports created. now defaults to time.Now and random to crypto/rand.Reader;
// random supplies the serial number and the name suffix (since Go 1.26 key
// generation always draws from the crypto packages' own secure source).
//
// A certificate without its key is an error rather than a reason to start
// over: clients may already trust that certificate.
func LoadOrCreate(dir string, now func() time.Time, random io.Reader) (ca *CA, created bool, err error) {
	if now == nil {
		now = time.Now
	}
	if random == nil {
		random = rand.Reader
	}
	// The certificate is written last, so its presence marks a complete CA; a
	// key left alone by an interrupted creation is replaced.
	if _, err := os.Stat(CertFile(dir)); !errors.Is(err, fs.ErrNotExist) {
		ca, err := load(dir, now)
		return ca, false, err
	}
	ca, keyPEM, err := newCA(now(), random)
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("certs: create ca dir: %w", err)
	}
	if err := writeFileAtomic(KeyFile(dir), keyPEM, 0o600); err != nil {
		return nil, false, fmt.Errorf("certs: write ca key: %w", err)
	}
	if err := writeFileAtomic(CertFile(dir), ca.pem, 0o644); err != nil {
		return nil, false, fmt.Errorf("certs: write ca cert: %w", err)
	}
	return ca, true, nil
}

// Load loads the CA stored in dir. When dir holds no CA the error wraps
// fs.ErrNotExist.
func Load(dir string) (*CA, error) { return load(dir, time.Now) }

func load(dir string, now func() time.Time) (*CA, error) {
	certPath, keyPath := CertFile(dir), KeyFile(dir)

	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("certs: load ca cert: %w", err)
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("certs: load ca cert %s: no CERTIFICATE PEM block", certPath)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: load ca cert %s: %w", certPath, err)
	}

	key, err := readKey(keyPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("certs: ca cert %s has no key (remove it to create a new CA): %w", certPath, err)
		}
		return nil, err
	}

	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("certs: ca key %s does not match cert %s", keyPath, certPath)
	}
	if !cert.BasicConstraintsValid || !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("certs: ca cert %s is not a CA certificate (needs basic constraints CA:true and key usage cert sign)", certPath)
	}
	if t := now(); t.After(cert.NotAfter) {
		return nil, fmt.Errorf("certs: ca cert %s expired at %s (remove %s and %s to create a new CA)",
			certPath, cert.NotAfter.UTC().Format(time.RFC3339), certPath, keyPath)
	}
	return &CA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})}, nil
}

// readKey reads a PKCS#8 PEM key, refusing a file that group or others may
// access. The mode is checked on the open file so that it is the file read.
func readKey(path string) (crypto.Signer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("certs: load ca key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("certs: load ca key: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("certs: ca key %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("certs: ca key %s has mode %04o, which lets group or others access it (chmod 600 %s)", path, perm, path)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("certs: load ca key: %w", err)
	}
	// Parse errors below never quote the file's bytes.
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("certs: load ca key %s: no PKCS#8 PRIVATE KEY PEM block", path)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: load ca key %s: not a valid PKCS#8 key", path)
	}
	key, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("certs: load ca key %s: key type %T cannot sign", path, parsed)
	}
	return key, nil
}

// newCA creates a CA in memory and returns it with its key in PKCS#8 PEM.
func newCA(now time.Time, random io.Reader) (*CA, []byte, error) {
	var suffix [4]byte
	if _, err := io.ReadFull(random, suffix[:]); err != nil {
		return nil, nil, fmt.Errorf("certs: create ca: read random: %w", err)
	}
	serial, err := randomSerial(random)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: create ca: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), random)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: create ca: generate key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			// The suffix makes CAs of two machines distinguishable in trust stores.
			CommonName:   caCommonNamePrefix + hex.EncodeToString(suffix[:]),
			Organization: []string{"Chaperone"},
		},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.AddDate(caValidityYears, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(random, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: create ca: sign: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: create ca: parse: %w", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: create ca: marshal key: %w", err)
	}
	ca := &CA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	return ca, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), nil
}

// randomSerial returns a positive 127-bit serial number (RFC 5280 allows up
// to 20 octets; 16 random bytes with the sign bit cleared fit).
func randomSerial(random io.Reader) (*big.Int, error) {
	var b [16]byte
	if _, err := io.ReadFull(random, b[:]); err != nil {
		return nil, fmt.Errorf("read random serial: %w", err)
	}
	b[0] &= 0x7f
	n := new(big.Int).SetBytes(b[:])
	if n.Sign() == 0 {
		n.SetInt64(1)
	}
	return n, nil
}
