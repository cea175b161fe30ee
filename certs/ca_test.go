package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// t0 is whole seconds because certificates store times to the second.
var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

func seededRand(seed uint64) *mrand.ChaCha8 {
	var s [32]byte
	s[0] = byte(seed)
	s[1] = byte(seed >> 8)
	return mrand.NewChaCha8(s)
}

// newTestCA creates a CA in memory.
func newTestCA(t testing.TB, now time.Time) *CA {
	t.Helper()
	ca, _, err := newCA(now, seededRand(1))
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestLoadOrCreateRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	ca, created, err := LoadOrCreate(dir, fixedClock(t0), seededRand(7))
	if err != nil {
		t.Fatal(err)
	}
	if !created {
		t.Fatal("first LoadOrCreate: created = false, want true")
	}

	c := ca.Certificate()
	type caFields struct {
		NotBefore, NotAfter    time.Time
		IsCA, BasicConstraints bool
		MaxPathLen             int
		MaxPathLenZero         bool
		KeyUsage               x509.KeyUsage
		Curve                  string
		CNPrefix               bool
		SelfSignatureVerifies  bool
	}
	pub, _ := c.PublicKey.(*ecdsa.PublicKey)
	curve := ""
	if pub != nil {
		curve = pub.Curve.Params().Name
	}
	got := caFields{
		NotBefore: c.NotBefore, NotAfter: c.NotAfter,
		IsCA: c.IsCA, BasicConstraints: c.BasicConstraintsValid,
		MaxPathLen: c.MaxPathLen, MaxPathLenZero: c.MaxPathLenZero,
		KeyUsage:              c.KeyUsage,
		Curve:                 curve,
		CNPrefix:              strings.HasPrefix(c.Subject.CommonName, "Chaperone CA ") && len(c.Subject.CommonName) > len("Chaperone CA "),
		SelfSignatureVerifies: c.CheckSignatureFrom(c) == nil,
	}
	want := caFields{
		NotBefore: t0.Add(-time.Hour), NotAfter: t0.AddDate(10, 0, 0),
		IsCA: true, BasicConstraints: true,
		MaxPathLen: 0, MaxPathLenZero: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		Curve:                 "P-256",
		CNPrefix:              true,
		SelfSignatureVerifies: true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("created CA (-want +got):\n%s", diff)
	}

	modes := map[string]fs.FileMode{}
	for _, p := range []string{dir, CertFile(dir), KeyFile(dir)} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		modes[filepath.Base(p)] = fi.Mode().Perm()
	}
	wantModes := map[string]fs.FileMode{"ca": 0o700, "ca.pem": 0o644, "ca-key.pem": 0o600}
	if diff := cmp.Diff(wantModes, modes); diff != "" {
		t.Errorf("file modes (-want +got):\n%s", diff)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("dir holds %d entries, want 2 (no temp files left)", len(entries))
	}

	keyPEM, err := os.ReadFile(KeyFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := pem.Decode(keyPEM); b == nil || b.Type != "PRIVATE KEY" {
		t.Errorf("key file is not a PKCS#8 PEM block")
	}
	certPEM, _ := os.ReadFile(CertFile(dir))
	if !bytes.Equal(certPEM, ca.PEM()) {
		t.Errorf("ca.pem differs from CA.PEM()")
	}

	later := t0.Add(24 * time.Hour)
	again, created, err := LoadOrCreate(dir, fixedClock(later), seededRand(8))
	if err != nil {
		t.Fatal(err)
	}
	if created {
		t.Error("second LoadOrCreate: created = true, want false")
	}
	if !bytes.Equal(again.Certificate().Raw, c.Raw) {
		t.Error("second LoadOrCreate returned a different certificate")
	}
	loaded, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(loaded.PEM(), ca.PEM()) {
		t.Error("Load returned a different certificate")
	}

	// The loaded key signs for the stored certificate.
	l := NewLeaves(loaded, LeafOptions{Now: fixedClock(later)})
	leaf, err := l.Certificate("example.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.Leaf.CheckSignatureFrom(c); err != nil {
		t.Errorf("leaf from loaded CA: %v", err)
	}
}

func TestCANamesDiffer(t *testing.T) {
	a, _, err := LoadOrCreate(t.TempDir(), fixedClock(t0), seededRand(1))
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := LoadOrCreate(t.TempDir(), fixedClock(t0), seededRand(2))
	if err != nil {
		t.Fatal(err)
	}
	if a.Certificate().Subject.CommonName == b.Certificate().Subject.CommonName {
		t.Errorf("two CAs share the common name %q", a.Certificate().Subject.CommonName)
	}
}

func TestLoadRefuses(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(t *testing.T, dir string)
		now      time.Time
		wantErr  string // substring
		notExist bool
	}{
		{
			name:     "no CA",
			setup:    func(t *testing.T, dir string) { os.RemoveAll(dir) },
			now:      t0,
			wantErr:  "ca.pem",
			notExist: true,
		},
		{
			name:    "key mode 0644",
			setup:   func(t *testing.T, dir string) { chmod(t, KeyFile(dir), 0o644) },
			now:     t0,
			wantErr: KeyFile("") + " has mode 0644",
		},
		{
			name:    "key mode 0640",
			setup:   func(t *testing.T, dir string) { chmod(t, KeyFile(dir), 0o640) },
			now:     t0,
			wantErr: "has mode 0640",
		},
		{
			name:    "key mode 0604",
			setup:   func(t *testing.T, dir string) { chmod(t, KeyFile(dir), 0o604) },
			now:     t0,
			wantErr: "has mode 0604",
		},
		{
			name: "mismatched key",
			setup: func(t *testing.T, dir string) {
				other := t.TempDir()
				if _, _, err := LoadOrCreate(other, fixedClock(t0), seededRand(99)); err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(KeyFile(other))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(KeyFile(dir), b, 0o600); err != nil {
					t.Fatal(err)
				}
			},
			now:     t0,
			wantErr: "does not match",
		},
		{
			name: "not a CA",
			setup: func(t *testing.T, dir string) {
				// Replace the certificate by a leaf for the same key.
				ca, err := load(dir, fixedClock(t0))
				if err != nil {
					t.Fatal(err)
				}
				tmpl := &x509.Certificate{
					SerialNumber: ca.cert.SerialNumber,
					Subject:      ca.cert.Subject,
					NotBefore:    t0, NotAfter: t0.AddDate(1, 0, 0),
					KeyUsage:              x509.KeyUsageDigitalSignature,
					BasicConstraintsValid: true,
				}
				der, err := x509.CreateCertificate(seededRand(3), tmpl, tmpl, ca.key.Public(), ca.key)
				if err != nil {
					t.Fatal(err)
				}
				writePEM(t, CertFile(dir), "CERTIFICATE", der)
			},
			now:     t0,
			wantErr: "is not a CA certificate",
		},
		{
			name:    "expired",
			setup:   func(t *testing.T, dir string) {},
			now:     t0.AddDate(10, 0, 1),
			wantErr: "expired at",
		},
		{
			name:     "key missing",
			setup:    func(t *testing.T, dir string) { os.Remove(KeyFile(dir)) },
			now:      t0,
			wantErr:  "has no key",
			notExist: true,
		},
		{
			name:    "garbage key",
			setup:   func(t *testing.T, dir string) { os.WriteFile(KeyFile(dir), []byte("not pem"), 0o600) },
			now:     t0,
			wantErr: "no PKCS#8 PRIVATE KEY",
		},
		{
			name:    "garbage cert",
			setup:   func(t *testing.T, dir string) { os.WriteFile(CertFile(dir), []byte("not pem"), 0o644) },
			now:     t0,
			wantErr: "no CERTIFICATE PEM block",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, _, err := LoadOrCreate(dir, fixedClock(t0), seededRand(5)); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, dir)
			_, err := load(dir, fixedClock(tt.now))
			if err == nil {
				t.Fatalf("load succeeded, want error containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "certs: ") {
				t.Errorf("load error = %q, want prefix \"certs: \" and %q", err, tt.wantErr)
			}
			if got := errors.Is(err, fs.ErrNotExist); got != tt.notExist {
				t.Errorf("errors.Is(err, fs.ErrNotExist) = %v, want %v", got, tt.notExist)
			}
			// LoadOrCreate must refuse the same way rather than replace the CA
			// (except when nothing is there).
			if !tt.notExist || tt.name == "key missing" {
				if _, created, err := LoadOrCreate(dir, fixedClock(tt.now), seededRand(6)); err == nil || created {
					t.Errorf("LoadOrCreate = created %v, err %v; want refusal", created, err)
				}
			}
		})
	}
}

func TestLoadPublicWrapsNotExist(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "absent"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(absent dir) error = %v, want one wrapping fs.ErrNotExist", err)
	}
}

func TestLoadOrCreateReplacesOrphanKey(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(KeyFile(dir), []byte("left by an interrupted run"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca, created, err := LoadOrCreate(dir, fixedClock(t0), seededRand(4))
	if err != nil || !created {
		t.Fatalf("LoadOrCreate = created %v, err %v; want a new CA", created, err)
	}
	loaded, err := load(dir, fixedClock(t0))
	if err != nil {
		t.Fatalf("load after replacing orphan key: %v", err)
	}
	if !bytes.Equal(loaded.PEM(), ca.PEM()) {
		t.Error("loaded CA differs from the created one")
	}
}

func TestCANeverPrintsKey(t *testing.T) {
	dir := t.TempDir()
	ca, _, err := LoadOrCreate(dir, fixedClock(t0), seededRand(1))
	if err != nil {
		t.Fatal(err)
	}
	d := ca.key.(*ecdsa.PrivateKey).D
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("ca", "ca", ca)
	outputs := map[string]string{"slog": logged.String()}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%d", "%x", "%q"} {
		outputs[verb] = fmt.Sprintf(verb, ca)
		outputs[verb+" value"] = fmt.Sprintf(verb, *ca)
	}
	secrets := []string{d.String(), d.Text(16), "PRIVATE KEY"}
	for name, out := range outputs {
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("%s output contains key material", name)
			}
		}
		if !strings.Contains(out, "Chaperone CA") && name != "%x" && name != "%x value" {
			t.Errorf("%s output %q does not name the CA", name, out)
		}
	}
}

func chmod(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
}
