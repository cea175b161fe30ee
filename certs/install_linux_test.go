package certs

import (
	"crypto/sha256"
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// nsChildEnv tells the test binary that it runs as
// TestInstallRealStore's child, in a private mount namespace.
const nsChildEnv = "CHAPERONE_CERTS_TEST_MOUNTNS"

// TestInstallRealStore runs Install and Uninstall against this machine's
// real update-ca-certificates, with the running system's defaults, in a
// child process of its own mount namespace where /etc and /usr/local are
// overlays whose writes go to a tmpfs: the machine's trust store never
// changes, which the parent checks.
func TestInstallRealStore(t *testing.T) {
	if dir := os.Getenv(nsChildEnv); dir != "" {
		installRealStoreChild(t, dir)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: a mount namespace with overlays over /etc and /usr/local")
	}
	if _, err := exec.LookPath("update-ca-certificates"); err != nil {
		if _, err := os.Stat("/usr/sbin/update-ca-certificates"); err != nil {
			t.Skip("no update-ca-certificates on this machine")
		}
	}
	if fi, err := os.Stat("/usr/local/share/ca-certificates"); err != nil || !fi.IsDir() {
		t.Skip("no /usr/local/share/ca-certificates: not a Debian trust store")
	}
	const real = "/etc/ssl/certs/ca-certificates.crt"
	before, err := os.ReadFile(real)
	if err != nil {
		t.Skipf("no system bundle: %v", err)
	}

	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestInstallRealStore$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), nsChildEnv+"="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: TestInstallRealStore") {
		t.Fatal("the child did not pass")
	}

	after, err := os.ReadFile(real)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(before) != sha256.Sum256(after) {
		t.Errorf("%s changed outside the namespace", real)
	}
	for _, p := range []string{"/usr/local/share/ca-certificates/chaperone.crt", BundlePath, ProfileDropIn, EnvironmentDropIn} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s exists outside the namespace", p)
		}
	}
}

// installRealStoreChild runs in the private mount namespace.
func installRealStoreChild(t *testing.T, dir string) {
	// Nothing mounted here propagates back.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		t.Fatalf("make / private: %v", err)
	}
	scratch := filepath.Join(dir, "scratch")
	if err := os.Mkdir(scratch, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", scratch, "tmpfs", 0, "mode=0700"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	for _, lower := range []string{"/etc", "/usr/local"} {
		name := strings.ReplaceAll(strings.Trim(lower, "/"), "/", "-")
		upper, work := filepath.Join(scratch, name+"-upper"), filepath.Join(scratch, name+"-work")
		for _, d := range []string{upper, work} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
		if err := syscall.Mount("overlay", lower, "overlay", 0, opts); err != nil {
			t.Skipf("overlay over %s: %v", lower, err)
		}
	}

	ca := newTestCA(t, t0)
	inst, err := Install(ca, InstallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if inst.Store != "Debian/Ubuntu" {
		t.Fatalf("store %q, want Debian/Ubuntu", inst.Store)
	}
	if !systemTrusts(t, ca) {
		t.Error("after install, the system bundle does not hold the CA")
	}
	bundle, err := os.ReadFile(BundlePath)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(bundle)
	if _, err := ca.cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: t0.Add(24 * 3600e9)}); err != nil {
		t.Errorf("the bundle does not make the CA trusted: %v", err)
	}
	if n := strings.Count(string(bundle), string(ca.PEM())); n != 1 {
		t.Errorf("the bundle holds the CA %d times, want once", n)
	}
	got := sourced(t, ProfileDropIn)
	if got["NODE_EXTRA_CA_CERTS"] != BundlePath || got["SSL_CERT_FILE"] != BundlePath {
		t.Errorf("a shell that sourced %s has %v", ProfileDropIn, got)
	}

	// systemd's own reader of environment.d, as user sessions get it.
	const generator = "/usr/lib/systemd/user-environment-generators/30-systemd-environment-d-generator"
	if _, err := os.Stat(generator); err == nil {
		out, err := exec.Command(generator).Output()
		if err != nil {
			t.Fatalf("%s: %v", generator, err)
		}
		for _, n := range TrustEnvNames() {
			if !strings.Contains("\n"+string(out), "\n"+n+"="+BundlePath+"\n") {
				t.Errorf("systemd's environment.d generator does not give %s=%s:\n%s", n, BundlePath, out)
			}
		}
	} else {
		t.Logf("no %s: environment.d not read by systemd here", generator)
	}

	if err := Uninstall(InstallOptions{}); err != nil {
		t.Fatal(err)
	}
	if systemTrusts(t, ca) {
		t.Error("after uninstall, the system bundle still holds the CA")
	}
	for _, p := range []string{inst.Anchor, BundlePath, ProfileDropIn, EnvironmentDropIn, "/etc/ssl/certs/chaperone.pem"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is left after uninstall", p)
		}
	}
}

// systemTrusts reports whether the system bundle holds ca.
func systemTrusts(t *testing.T, ca *CA) bool {
	t.Helper()
	b, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Fatal(err)
	}
	return containsCert(b, ca.cert.Raw)
}
