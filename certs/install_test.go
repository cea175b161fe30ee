package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// layout is a system's tree as Install sees it: files (path → content;
// "dir/" for a directory, "#!" content for an executable).
type layout map[string]string

func (l layout) build(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range l {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := fs.FileMode(0o644)
		if strings.HasPrefix(content, "#!") {
			mode = 0o755
		}
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// listing is every entry under root: its type and mode, and a file's
// content.
func listing(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += " " + string(b)
		}
		out[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// recorder is a Runner that records the commands it is asked to run.
type recorder struct {
	calls [][]string
	err   error
}

func (r *recorder) runner() Runner {
	return RunnerFunc(func(name string, args ...string) error {
		r.calls = append(r.calls, append([]string{name}, args...))
		return r.err
	})
}

const stub = "#!/bin/sh\nexit 0\n"

func TestInstall(t *testing.T) {
	ca := newTestCA(t, t0)
	sysRoot := newTestCA(t, t0) // stands in for a system root
	roots := string(sysRoot.PEM())
	tests := []struct {
		name    string
		layout  layout
		want    Installed
		command []string // within the root
		// uncommand is the update command's arguments on uninstall,
		// when not command's
		uncommand []string
	}{
		{
			name: "debian",
			layout: layout{
				"usr/sbin/update-ca-certificates":   stub,
				"usr/local/share/ca-certificates/":  "",
				"etc/ssl/certs/ca-certificates.crt": roots,
				"etc/profile.d/bash_completion.sh":  "# theirs\n",
			},
			want:      Installed{Store: "Debian/Ubuntu", Anchor: "/usr/local/share/ca-certificates/chaperone.crt"},
			command:   []string{"/usr/sbin/update-ca-certificates"},
			uncommand: []string{"--fresh"},
		},
		{
			name: "debian with p11-kit's update-ca-trust too",
			layout: layout{
				"usr/sbin/update-ca-certificates":   stub,
				"usr/bin/update-ca-trust":           stub,
				"usr/local/share/ca-certificates/":  "",
				"etc/ssl/certs/ca-certificates.crt": roots,
				"etc/profile.d/":                    "",
				"etc/environment.d/":                "",
			},
			want:      Installed{Store: "Debian/Ubuntu", Anchor: "/usr/local/share/ca-certificates/chaperone.crt"},
			command:   []string{"/usr/sbin/update-ca-certificates"},
			uncommand: []string{"--fresh"},
		},
		{
			name: "fedora",
			layout: layout{
				"usr/bin/update-ca-trust":                           stub,
				"etc/pki/ca-trust/source/anchors/":                  "",
				"etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem":  roots,
				"etc/profile.d/":                                    "",
				"etc/environment.d/10-theirs.conf":                  "EDITOR=vi\n",
				"usr/local/share/chaperone/keep-me":                 "theirs\n",
				"etc/pki/ca-trust/source/anchors/their-corp-ca.pem": roots,
			},
			want:    Installed{Store: "Fedora/RHEL", Anchor: "/etc/pki/ca-trust/source/anchors/chaperone.pem"},
			command: []string{"/usr/bin/update-ca-trust", "extract"},
		},
		{
			name: "arch",
			layout: layout{
				"usr/bin/update-ca-trust":                   stub,
				"etc/ca-certificates/trust-source/anchors/": "",
				"etc/ssl/certs/ca-certificates.crt":         roots,
				"usr/local/":                                "",
			},
			want:    Installed{Store: "Arch", Anchor: "/etc/ca-certificates/trust-source/anchors/chaperone.crt"},
			command: []string{"/usr/bin/update-ca-trust"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := tt.layout.build(t)
			before := listing(t, root)
			var rec recorder
			opts := InstallOptions{Root: root, Path: "/usr/local/bin:/usr/bin:/usr/sbin", Run: rec.runner()}

			got, err := Install(ca, opts)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			want.Bundle = BundlePath
			want.DropIns = []string{ProfileDropIn, EnvironmentDropIn}
			want.Command = append([]string{filepath.Join(root, tt.command[0])}, tt.command[1:]...)
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("Installed (-want +got):\n%s", d)
			}
			if d := cmp.Diff([][]string{want.Command}, rec.calls); d != "" {
				t.Errorf("commands run (-want +got):\n%s", d)
			}
			checkInstalled(t, root, got, ca, sysRoot)
			installed := listing(t, root)

			// Twice: the same files, nothing added twice.
			if _, err := Install(ca, opts); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(installed, listing(t, root)); d != "" {
				t.Errorf("a second install changed the tree (-once +twice):\n%s", d)
			}

			rec.calls = nil
			if err := Uninstall(opts); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(before, listing(t, root)); d != "" {
				t.Errorf("uninstall did not leave the tree as it was (-before +after):\n%s", d)
			}
			uncommand := want.Command
			if tt.uncommand != nil {
				uncommand = append([]string{want.Command[0]}, tt.uncommand...)
			}
			if d := cmp.Diff([][]string{uncommand}, rec.calls); d != "" {
				t.Errorf("uninstall's commands (-want +got):\n%s", d)
			}
			if err := Uninstall(opts); err != nil {
				t.Fatalf("a second uninstall: %v", err)
			}
			if d := cmp.Diff(before, listing(t, root)); d != "" {
				t.Errorf("a second uninstall changed the tree (-before +after):\n%s", d)
			}
		})
	}
}

// checkInstalled checks the files Install wrote under root: their modes,
// the anchor (the CA), the bundle (the system root, then the CA), and the
// drop-ins, read by a real shell.
func checkInstalled(t *testing.T, root string, inst Installed, ca, sysRoot *CA) {
	t.Helper()
	for _, p := range append([]string{inst.Anchor, inst.Bundle}, inst.DropIns...) {
		fi, err := os.Stat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != 0o644 {
			t.Errorf("%s: mode %v, want -rw-r--r--", p, fi.Mode())
		}
	}
	anchor, err := os.ReadFile(filepath.Join(root, inst.Anchor))
	if err != nil {
		t.Fatal(err)
	}
	if string(anchor) != string(ca.PEM()) {
		t.Errorf("anchor holds %q, want the CA's PEM", anchor)
	}
	bundle, err := os.ReadFile(filepath.Join(root, inst.Bundle))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{sysRoot.cert.Subject.CommonName, ca.cert.Subject.CommonName}, subjects(t, bundle)); d != "" {
		t.Errorf("bundle's certificates (-want +got):\n%s", d)
	}

	want := map[string]string{}
	for _, n := range TrustEnvNames() {
		want[n] = BundlePath
	}
	if d := cmp.Diff(want, sourced(t, filepath.Join(root, ProfileDropIn))); d != "" {
		t.Errorf("variables of a shell that sourced %s (-want +got):\n%s", ProfileDropIn, d)
	}
	env, err := os.ReadFile(filepath.Join(root, EnvironmentDropIn))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(string(env), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			got[k] = v
		}
	}
	for n := range want {
		want[n] = "'" + BundlePath + "'"
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("%s (-want +got):\n%s", EnvironmentDropIn, d)
	}
}

func subjects(t *testing.T, data []byte) []string {
	t.Helper()
	var out []string
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return out
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c.Subject.CommonName)
	}
}

// sourced returns the trust variables a POSIX shell has after sourcing
// file, in an environment without them.
func sourced(t *testing.T, file string) map[string]string {
	t.Helper()
	script := ". " + shellQuote(file)
	for _, n := range TrustEnvNames() {
		script += "; printf '%s=%s\\0' " + n + " \"$" + n + "\""
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sh: %v", err)
	}
	got := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	return got
}

// TestShellQuote: a real shell reads back what shellQuote quoted.
func TestShellQuote(t *testing.T) {
	for _, s := range []string{"", "/usr/local/share/chaperone/ca-bundle.pem", "it's", "'", "a b\tc\nd", `$HOME $(id) ` + "`id`" + ` \ "x" *`, "'''"} {
		out, err := exec.Command("sh", "-c", "X="+shellQuote(s)+"; printf %s \"$X\"").Output()
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if string(out) != s {
			t.Errorf("sh read %q back as %q", s, out)
		}
	}
}

// TestInstallUnknownSystem: a tree of no known layout (or with the update
// command but not its directory) is an error naming what was looked for,
// and nothing is written.
func TestInstallUnknownSystem(t *testing.T) {
	ca := newTestCA(t, t0)
	for name, l := range map[string]layout{
		"nothing":              {"etc/ssl/certs/ca-certificates.crt": string(ca.PEM())},
		"command without dir":  {"usr/sbin/update-ca-certificates": stub, "etc/ssl/certs/ca-certificates.crt": string(ca.PEM())},
		"dir without command":  {"etc/pki/ca-trust/source/anchors/": "", "etc/ssl/certs/ca-certificates.crt": string(ca.PEM())},
		"command not runnable": {"usr/bin/update-ca-trust": "not executable", "etc/pki/ca-trust/source/anchors/": ""},
	} {
		t.Run(name, func(t *testing.T) {
			root := l.build(t)
			before := listing(t, root)
			var rec recorder
			_, err := Install(ca, InstallOptions{Root: root, Path: "/usr/bin:/usr/sbin", Run: rec.runner()})
			if !errors.Is(err, ErrNoTrustStore) {
				t.Fatalf("err = %v, want ErrNoTrustStore", err)
			}
			for _, s := range []string{"update-ca-certificates and /usr/local/share/ca-certificates (Debian/Ubuntu)",
				"update-ca-trust and /etc/pki/ca-trust/source/anchors (Fedora/RHEL)",
				"update-ca-trust and /etc/ca-certificates/trust-source/anchors (Arch)"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
			if d := cmp.Diff(before, listing(t, root)); d != "" {
				t.Errorf("tree changed (-before +after):\n%s", d)
			}
			if len(rec.calls) != 0 {
				t.Errorf("ran %v", rec.calls)
			}
		})
	}
}

// TestInstallNoRoots: without system roots the bundle would distrust
// every other server; Install writes nothing.
func TestInstallNoRoots(t *testing.T) {
	ca := newTestCA(t, t0)
	root := layout{"usr/sbin/update-ca-certificates": stub, "usr/local/share/ca-certificates/": ""}.build(t)
	before := listing(t, root)
	var rec recorder
	if _, err := Install(ca, InstallOptions{Root: root, Path: "/usr/sbin", Run: rec.runner()}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want fs.ErrNotExist", err)
	}
	if d := cmp.Diff(before, listing(t, root)); d != "" {
		t.Errorf("tree changed (-before +after):\n%s", d)
	}
}

// TestInstallCAInSystemRoots: once the store's update put the CA in the
// system's bundle, the trust bundle holds it once.
func TestInstallCAInSystemRoots(t *testing.T) {
	ca := newTestCA(t, t0)
	sysRoot := newTestCA(t, t0)
	root := layout{
		"usr/sbin/update-ca-certificates":   stub,
		"usr/local/share/ca-certificates/":  "",
		"etc/ssl/certs/ca-certificates.crt": string(sysRoot.PEM()) + string(ca.PEM()),
	}.build(t)
	var rec recorder
	inst, err := Install(ca, InstallOptions{Root: root, Path: "/usr/sbin", Run: rec.runner()})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, inst.Bundle))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{sysRoot.cert.Subject.CommonName, ca.cert.Subject.CommonName}, subjects(t, b)); d != "" {
		t.Errorf("bundle (-want +got):\n%s", d)
	}
}

// TestUninstallLeavesEditedFiles: files that are no longer Install's (an
// anchor replaced by another certificate, a drop-in rewritten without the
// marker, a bundle with a certificate added after the CA) stay; the rest
// goes.
func TestUninstallLeavesEditedFiles(t *testing.T) {
	ca := newTestCA(t, t0)
	other := corpCA(t)
	root := layout{
		"usr/sbin/update-ca-certificates":   stub,
		"usr/local/share/ca-certificates/":  "",
		"etc/ssl/certs/ca-certificates.crt": string(other),
		"etc/profile.d/":                    "",
		"etc/environment.d/":                "",
	}.build(t)
	var rec recorder
	opts := InstallOptions{Root: root, Path: "/usr/sbin", Run: rec.runner()}
	inst, err := Install(ca, opts)
	if err != nil {
		t.Fatal(err)
	}
	edits := map[string]string{
		inst.Anchor:   string(other),
		ProfileDropIn: "export SSL_CERT_FILE=/mine.pem\n",
	}
	bundle, err := os.ReadFile(filepath.Join(root, BundlePath))
	if err != nil {
		t.Fatal(err)
	}
	edits[BundlePath] = string(bundle) + string(other)
	for p, content := range edits {
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := Uninstall(opts); err != nil {
		t.Fatal(err)
	}
	for p, content := range edits {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if string(b) != content {
			t.Errorf("%s changed", p)
		}
	}
	if _, err := os.Stat(filepath.Join(root, EnvironmentDropIn)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s: %v, want removed", EnvironmentDropIn, err)
	}
}

// TestInstallUpdateFails: the update command's failure is Install's error,
// naming the store.
func TestInstallUpdateFails(t *testing.T) {
	ca := newTestCA(t, t0)
	root := layout{
		"usr/sbin/update-ca-certificates":   stub,
		"usr/local/share/ca-certificates/":  "",
		"etc/ssl/certs/ca-certificates.crt": string(ca.PEM()),
	}.build(t)
	rec := recorder{err: errors.New("exit status 1")}
	_, err := Install(ca, InstallOptions{Root: root, Path: "/usr/sbin", Run: rec.runner()})
	if err == nil || !strings.Contains(err.Error(), "update the Debian/Ubuntu trust store: exit status 1") {
		t.Fatalf("err = %v", err)
	}
}

// corpCA is a self-signed CA that is not Chaperone's, in PEM form.
func corpCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "Their Corp CA"},
		NotBefore: t0, NotAfter: t0.AddDate(1, 0, 0), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestInstallOtherRootNeedsRunner: under a root that is not the running
// system's, the update command is never run unless a Runner is given: the
// files are written and the error says the command did not run.
func TestInstallOtherRootNeedsRunner(t *testing.T) {
	ca := newTestCA(t, t0)
	marker := filepath.Join(t.TempDir(), "ran")
	root := layout{
		"usr/sbin/update-ca-certificates":   "#!/bin/sh\ntouch " + shellQuote(marker) + "\n",
		"usr/local/share/ca-certificates/":  "",
		"etc/ssl/certs/ca-certificates.crt": string(ca.PEM()),
	}.build(t)
	_, err := Install(ca, InstallOptions{Root: root, Path: "/usr/sbin"})
	if err == nil || !strings.Contains(err.Error(), "no Runner given, not run") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the update command ran: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/local/share/ca-certificates/chaperone.crt")); err != nil {
		t.Errorf("anchor not written: %v", err)
	}
}
