package certs

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNoTrustStore is wrapped by Install's error on a system whose trust
// store it does not know.
var ErrNoTrustStore = errors.New("no known system trust store")

// Where Install writes, relative to InstallOptions.Root.
const (
	// BundlePath is the bundle the drop-ins point at: the system roots
	// and the CA, world-readable, outside the state directory.
	BundlePath = "/usr/local/share/chaperone/ca-bundle.pem"
	// ProfileDropIn sets the trust variables for login shells.
	ProfileDropIn = "/etc/profile.d/chaperone-ca.sh"
	// EnvironmentDropIn sets them for systemd user sessions
	// (environment.d(5)), whose programs no login shell starts.
	EnvironmentDropIn = "/etc/environment.d/90-chaperone-ca.conf"
)

// dropInMarker begins both drop-ins: a file that does not begin with it
// is not Install's, and Uninstall leaves it. createdMarker records the
// directories Install created, which Uninstall removes when empty.
const (
	dropInMarker  = "# Written by chaperone ca install; chaperone ca uninstall removes it."
	createdMarker = "# chaperone-ca-install created:"
)

// trustStore is one distribution family's system trust store: the
// directory of anchors the administrator adds, and the command that
// rebuilds the store from them.
type trustStore struct {
	name      string   // what it is, for messages
	anchorDir string   // relative to the root; must exist
	anchor    string   // the file name Install writes there
	command   []string // the update command and its arguments
	// uncommand is the update command after an anchor is removed, when
	// it differs: Debian's leaves the link to a removed anchor in
	// /etc/ssl/certs unless made to rebuild every link (--fresh).
	uncommand []string
}

func (s trustStore) updateAfterRemove() []string {
	if s.uncommand != nil {
		return s.uncommand
	}
	return s.command
}

// trustStores are looked for in this order; the first whose update
// command is in PATH and whose anchor directory exists is the system's.
// Arch's update-ca-trust rebuilds from /etc/ca-certificates/trust-source
// (where `trust anchor --store` also writes) and takes no argument.
func trustStores() []trustStore {
	return []trustStore{
		{"Debian/Ubuntu", "/usr/local/share/ca-certificates", "chaperone.crt", []string{"update-ca-certificates"}, []string{"update-ca-certificates", "--fresh"}},
		{"Fedora/RHEL", "/etc/pki/ca-trust/source/anchors", "chaperone.pem", []string{"update-ca-trust", "extract"}, nil},
		{"Arch", "/etc/ca-certificates/trust-source/anchors", "chaperone.crt", []string{"update-ca-trust"}, nil},
	}
}

// Runner runs a trust store's update command: name is the command's
// path. A nil error means it exited 0.
type Runner interface {
	Run(name string, args ...string) error
}

// RunnerFunc adapts a function to Runner.
type RunnerFunc func(name string, args ...string) error

// Run calls f.
func (f RunnerFunc) Run(name string, args ...string) error { return f(name, args...) }

// runCommand runs the command, its output kept for the error.
func runCommand(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		if msg := strings.TrimSpace(string(out)); msg != "" {
			return fmt.Errorf("%s: %w: %s", filepath.Base(name), err, msg)
		}
		return fmt.Errorf("%s: %w", filepath.Base(name), err)
	}
	return nil
}

// InstallOptions says where Install and Uninstall work.
type InstallOptions struct {
	// Root is the file system root every path is under: "" or "/" is
	// the running system; a test or an image build names a tree. The
	// drop-ins name the bundle by its path within the tree.
	Root string
	// Path is the list of directories (as in $PATH, within Root) where
	// the update commands are looked for; "" is $PATH followed by the
	// sbin directories, which sudo may leave out.
	Path string
	// Run runs the update command; nil runs it for real when Root is the
	// running system's, and fails otherwise (the command of another tree
	// would still update this system's store).
	Run Runner
}

// Installed is what Install did: paths are within the root.
type Installed struct {
	Store   string   // the trust store's name, e.g. "Debian/Ubuntu"
	Anchor  string   // the CA as an anchor of the store
	Bundle  string   // BundlePath
	DropIns []string // ProfileDropIn, EnvironmentDropIn
	Command []string // the update command that ran, and its arguments
}

func (o InstallOptions) root() string {
	if o.Root == "" {
		return "/"
	}
	return o.Root
}

func (o InstallOptions) path(p string) string { return filepath.Join(o.root(), p) }

func (o InstallOptions) runner() Runner {
	if o.Run != nil {
		return o.Run
	}
	if o.root() != "/" {
		// The command found in another tree would update this system's
		// store (its paths are absolute): it runs only when asked to.
		return RunnerFunc(func(name string, _ ...string) error {
			return fmt.Errorf("%s under root %s: no Runner given, not run", filepath.Base(name), o.root())
		})
	}
	return RunnerFunc(runCommand)
}

// lookCommand finds name in the PATH directories within the root.
func (o InstallOptions) lookCommand(name string) (string, bool) {
	dirs := o.Path
	if dirs == "" {
		dirs = os.Getenv("PATH") + ":/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin"
	}
	for _, d := range filepath.SplitList(dirs) {
		if d == "" || !filepath.IsAbs(d) {
			continue // a relative PATH entry means the working directory: never trusted here
		}
		p := o.path(filepath.Join(d, name))
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

// detect returns the system's trust store and its update command's path.
func (o InstallOptions) detect() (trustStore, string, error) {
	var looked []string
	for _, s := range trustStores() {
		looked = append(looked, fmt.Sprintf("%s and %s (%s)", s.command[0], s.anchorDir, s.name))
		cmd, ok := o.lookCommand(s.command[0])
		if !ok {
			continue
		}
		if fi, err := os.Stat(o.path(s.anchorDir)); err != nil || !fi.IsDir() {
			continue
		}
		return s, cmd, nil
	}
	return trustStore{}, "", fmt.Errorf("certs: looked for %s: %w", strings.Join(looked, ", "), ErrNoTrustStore)
}

// Install makes the system trust ca: it adds ca to the system trust store
// (as an anchor, then runs the store's update command), writes BundlePath
// (the system roots and ca) and the drop-ins that point the usual trust
// variables (TrustEnvNames) at the bundle for new login shells and systemd
// user sessions. Running it again rewrites the same files: nothing is
// added twice, and a CA already in the system roots is not repeated in the
// bundle. Nothing is written when the store is unknown or the system has
// no roots. macOS is not handled here (see docs): on systems other than
// Linux, Install on the running system fails with errors.ErrUnsupported.
func Install(ca *CA, opts InstallOptions) (Installed, error) {
	if opts.root() == "/" {
		if err := systemStoreSupported(); err != nil {
			return Installed{}, fmt.Errorf("certs: install: %w", err)
		}
	}
	store, cmd, err := opts.detect()
	if err != nil {
		return Installed{}, fmt.Errorf("certs: install: %w", err)
	}
	files := systemRootFiles()
	for i, f := range files {
		files[i] = opts.path(f)
	}
	roots, err := readRoots(files)
	if err != nil {
		return Installed{}, fmt.Errorf("certs: install: %w", err)
	}

	// Directories Install creates are recorded in the drop-ins, with
	// those a former Install created, so that Uninstall removes them.
	created := opts.createdDirs()
	mkdir := func(dir string) error {
		var missing []string
		for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
			if _, err := os.Stat(opts.path(d)); err == nil {
				break
			}
			missing = append(missing, d)
		}
		if err := os.MkdirAll(opts.path(dir), 0o755); err != nil {
			return err
		}
		for _, d := range missing {
			if !slices.Contains(created, d) {
				created = append(created, d)
			}
		}
		return nil
	}
	anchor := filepath.Join(store.anchorDir, store.anchor)
	inst := Installed{Store: store.name, Anchor: anchor, Bundle: BundlePath,
		DropIns: []string{ProfileDropIn, EnvironmentDropIn}, Command: append([]string{cmd}, store.command[1:]...)}
	for _, d := range []string{filepath.Dir(BundlePath), filepath.Dir(ProfileDropIn), filepath.Dir(EnvironmentDropIn)} {
		if err := mkdir(d); err != nil {
			return Installed{}, fmt.Errorf("certs: install: %w", err)
		}
	}
	slices.Sort(created)
	for _, f := range []struct {
		path string
		data []byte
	}{
		{anchor, ca.PEM()},
		{BundlePath, trustBundle(roots, ca)},
		{ProfileDropIn, profileDropIn(BundlePath, created)},
		{EnvironmentDropIn, environmentDropIn(BundlePath, created)},
	} {
		if err := writeFileAtomic(opts.path(f.path), f.data, 0o644); err != nil {
			return Installed{}, fmt.Errorf("certs: install: %w", err)
		}
	}
	if err := opts.runner().Run(cmd, store.command[1:]...); err != nil {
		return inst, fmt.Errorf("certs: install: update the %s trust store: %w", store.name, err)
	}
	return inst, nil
}

// Uninstall removes what Install wrote, and only that: an anchor that is
// not a Chaperone CA, a bundle that does not end with one, a drop-in
// without Install's marker are left as they are, whoever edited them.
// The directories Install created are removed when empty. Then the
// store's update command runs again (Debian's with --fresh, which also
// removes the link to the anchor from /etc/ssl/certs). Uninstalling what is not installed
// does nothing but that command; on an unknown system, it removes the
// files and runs no command.
func Uninstall(opts InstallOptions) error {
	if opts.root() == "/" {
		if err := systemStoreSupported(); err != nil {
			return fmt.Errorf("certs: uninstall: %w", err)
		}
	}
	created := opts.createdDirs()
	var errs []error
	remove := func(p string, ours func([]byte) bool) {
		data, err := os.ReadFile(opts.path(p))
		if errors.Is(err, fs.ErrNotExist) {
			return
		}
		if err == nil && !ours(data) {
			return
		}
		if err == nil {
			err = os.Remove(opts.path(p))
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	isDropIn := func(b []byte) bool { return bytes.HasPrefix(b, []byte(dropInMarker+"\n")) }
	remove(ProfileDropIn, isDropIn)
	remove(EnvironmentDropIn, isDropIn)
	remove(BundlePath, endsWithChaperoneCA)
	for _, s := range trustStores() {
		remove(filepath.Join(s.anchorDir, s.anchor), isChaperoneCA)
	}
	// The deepest first: a directory Install created may hold another.
	slices.SortFunc(created, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, d := range created {
		if ents, err := os.ReadDir(opts.path(d)); err != nil || len(ents) > 0 {
			continue // gone, or holds what is not Install's
		}
		if err := os.Remove(opts.path(d)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("certs: uninstall: %w", err)
	}
	store, cmd, err := opts.detect()
	if err != nil {
		return nil // no store: nothing of it to update
	}
	if err := opts.runner().Run(cmd, store.updateAfterRemove()[1:]...); err != nil {
		return fmt.Errorf("certs: uninstall: update the %s trust store: %w", store.name, err)
	}
	return nil
}

// createdDirs reads the directories a former Install created from its
// drop-ins.
func (o InstallOptions) createdDirs() []string {
	var dirs []string
	for _, p := range []string{ProfileDropIn, EnvironmentDropIn} {
		data, err := os.ReadFile(o.path(p))
		if err != nil || !bytes.HasPrefix(data, []byte(dropInMarker+"\n")) {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			rest, ok := strings.CutPrefix(sc.Text(), createdMarker)
			if !ok {
				continue
			}
			for _, d := range strings.Fields(rest) {
				// Only what Install itself can create: an absolute,
				// clean path above one of its files.
				if filepath.IsAbs(d) && filepath.Clean(d) == d && d != "/" && isInstallDir(d) && !slices.Contains(dirs, d) {
					dirs = append(dirs, d)
				}
			}
		}
	}
	return dirs
}

// isInstallDir reports whether d is a directory that holds (at some
// depth) a file Install writes.
func isInstallDir(d string) bool {
	for _, f := range []string{BundlePath, ProfileDropIn, EnvironmentDropIn} {
		if strings.HasPrefix(f, d+"/") {
			return true
		}
	}
	return false
}

// profileDropIn is the /etc/profile.d script: one export per trust
// variable, each value quoted for the shell.
func profileDropIn(bundle string, created []string) []byte {
	var b bytes.Buffer
	dropInHeader(&b, created)
	for _, n := range TrustEnvNames() {
		fmt.Fprintf(&b, "export %s=%s\n", n, shellQuote(bundle))
	}
	return b.Bytes()
}

// environmentDropIn is the environment.d(5) file: KEY=VALUE lines, which
// systemd reads with shell-like quoting.
func environmentDropIn(bundle string, created []string) []byte {
	var b bytes.Buffer
	dropInHeader(&b, created)
	for _, n := range TrustEnvNames() {
		fmt.Fprintf(&b, "%s=%s\n", n, shellQuote(bundle))
	}
	return b.Bytes()
}

func dropInHeader(b *bytes.Buffer, created []string) {
	b.WriteString(dropInMarker + "\n")
	b.WriteString("# The trust variables name a bundle of the system roots and Chaperone's CA.\n")
	if len(created) > 0 {
		b.WriteString(createdMarker + " " + strings.Join(created, " ") + "\n")
	}
}

// shellQuote quotes s for a POSIX shell: in single quotes, where nothing
// is special but the single quote, written '\”.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// trustBundle is roots followed by ca, without a copy of ca that roots
// already hold (once ca is in the system store, the system's bundle has
// it).
func trustBundle(roots []byte, ca *CA) []byte {
	var buf bytes.Buffer
	if containsCert(roots, ca.cert.Raw) {
		for rest := roots; ; {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				break
			}
			if block.Type == "CERTIFICATE" && bytes.Equal(block.Bytes, ca.cert.Raw) {
				continue
			}
			pem.Encode(&buf, block)
		}
	} else {
		buf.Write(roots)
		if len(roots) > 0 && roots[len(roots)-1] != '\n' {
			buf.WriteByte('\n')
		}
	}
	buf.Write(ca.pem)
	return buf.Bytes()
}

func containsCert(b, der []byte) bool {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return false
		}
		if block.Type == "CERTIFICATE" && bytes.Equal(block.Bytes, der) {
			return true
		}
	}
}

// isChaperoneCA reports whether b is one PEM certificate that is a
// Chaperone CA (as LoadOrCreate makes them): what Install writes as the
// anchor.
func isChaperoneCA(b []byte) bool {
	block, rest := pem.Decode(b)
	return block != nil && len(bytes.TrimSpace(rest)) == 0 && isChaperoneCABlock(block)
}

// endsWithChaperoneCA reports whether the last PEM block of b is a
// Chaperone CA: the bundle Install writes.
func endsWithChaperoneCA(b []byte) bool {
	var last *pem.Block
	for {
		block, rest := pem.Decode(b)
		if block == nil {
			break
		}
		last, b = block, rest
	}
	return last != nil && len(bytes.TrimSpace(b)) == 0 && isChaperoneCABlock(last)
}

func isChaperoneCABlock(block *pem.Block) bool {
	if block.Type != "CERTIFICATE" {
		return false
	}
	c, err := x509.ParseCertificate(block.Bytes)
	return err == nil && c.IsCA && strings.HasPrefix(c.Subject.CommonName, caCommonNamePrefix) &&
		c.CheckSignatureFrom(c) == nil
}
