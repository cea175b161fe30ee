//go:build linux

package execs

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Why a program other than the one the exec names runs (program.role).
const (
	roleExec        = ""
	roleInterpreter = "the #! interpreter"
	roleELFInterp   = "the ELF interpreter"
	roleLoader      = "the program the dynamic loader runs"
	roleDescriptor  = "the file the descriptor names"
	roleSameContent = "an installed program with the same content"
)

// maxLoaders bounds loaders run by loaders ("ld.so ld.so ld.so prog").
const maxLoaders = 4

// program is one program an exec runs, as it is decided.
type program struct {
	path string   // as named: by the exec, a #! line, a loader's argv
	argv []string // what it receives
	role string
	info *fileInfo
	key  fileKey
	real string // the opened file's own path (symlinks resolved), as /proc shows it
}

// plan is what one exec runs, as far as can be known before it does.
type plan struct {
	// views are the programs that run, the exec's own first: each is
	// decided as an exec of its own, and the exec is denied if any is.
	views []program
	// final is the file the kernel loads (bprm->file): the exec's or the
	// last #! interpreter's (a loader's program is loaded by the loader).
	final program
	// kernelArgv is the argv the kernel gives final.
	kernelArgv []string
	// interp is the last #! interpreter as written (bprm->interp);
	// hasInterp false when the exec runs no script.
	interp    string
	hasInterp bool
	// native is false when the kernel would not run final itself (not an
	// ELF file of this machine): binfmt_misc may hand it to a program
	// nobody decided.
	native bool

	// For the event: the program that actually runs, the #! (or ELF)
	// interpreter, the program's digest.
	program, interpreter, digest string

	// deny, when set, denies the exec without a decision: what runs cannot
	// be known.
	deny string
	// errno, when set, fails the exec as the kernel would, undecided.
	errno unix.Errno
}

// errMagicLink is a path that reaches a file through a /proc link in a
// way only the process itself can follow.
var errMagicLink = errors.New("the path reaches a file through a /proc link of the process")

// open opens name (as the process names it for an exec, relative to
// dirfd or to its cwd) the way the process would: inside its root;
// /proc/self, /proc/thread-self, /dev/fd and /dev/std* are the process's;
// a /proc link reached any other way is refused (errMagicLink), since
// Chaperone following it would reach its own files. It returns an O_PATH
// descriptor (no read, so no fanotify event; files.of reopens a file to
// read it), which the caller closes.
func (r *request) open(name string, dirfd int32) (int, error) {
	const flags = unix.O_PATH | unix.O_CLOEXEC
	if p, ok := procPath(name, r.tid, r.tgid); ok {
		return unix.Open(p, flags, 0)
	}
	var d int
	how := &unix.OpenHow{Flags: flags, Resolve: unix.RESOLVE_NO_MAGICLINKS}
	switch {
	case filepath.IsAbs(name):
		root, err := r.rootFD()
		if err != nil {
			return -1, err
		}
		d = root
		how.Resolve |= unix.RESOLVE_IN_ROOT
	default:
		dir := "/proc/" + strconv.Itoa(r.tid) + "/cwd"
		if dirfd != atFDCWD {
			dir = "/proc/" + strconv.Itoa(r.tid) + "/fd/" + strconv.Itoa(int(dirfd))
		}
		var err error
		if d, err = unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return -1, err
		}
		defer unix.Close(d)
	}
	fd, err := unix.Openat2(d, name, how)
	if errors.Is(err, unix.ELOOP) {
		// A loop, or a magic link (RESOLVE_IN_ROOT refuses those too): an
		// open that follows them tells which.
		if fd2, err2 := unix.Openat(d, name, flags, 0); err2 == nil {
			unix.Close(fd2)
			return -1, errMagicLink
		}
	}
	return fd, err
}

// rootFD is the process's root directory, opened once per request.
func (r *request) rootFD() (int, error) {
	if r.root > 0 {
		return r.root, nil
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(r.tid)+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	r.root = fd
	return fd, nil
}

// close releases what the request holds open.
func (r *request) close() {
	if r.root > 0 {
		unix.Close(r.root)
		r.root = 0
	}
}

// procPath rewrites an absolute path that names the process's own /proc
// entries (or a /proc/PID path) to the /proc path Chaperone opens for it.
func procPath(name string, tid, tgid int) (string, bool) {
	if !filepath.IsAbs(name) {
		return "", false
	}
	c := filepath.Clean(name)
	if !strings.HasPrefix(c, "/proc/") && !strings.HasPrefix(c, "/dev/") {
		return "", false
	}
	pid := "/proc/" + strconv.Itoa(tgid)
	switch c {
	case "/dev/stdin":
		return pid + "/fd/0", true
	case "/dev/stdout":
		return pid + "/fd/1", true
	case "/dev/stderr":
		return pid + "/fd/2", true
	}
	if rest, ok := strings.CutPrefix(c, "/dev/fd/"); ok {
		return pid + "/fd/" + rest, true
	}
	if rest, ok := strings.CutPrefix(c, "/proc/self/"); ok {
		return pid + "/" + rest, true
	}
	if rest, ok := strings.CutPrefix(c, "/proc/thread-self/"); ok {
		return pid + "/task/" + strconv.Itoa(tid) + "/" + rest, true
	}
	if rest, ok := strings.CutPrefix(c, "/proc/"); ok {
		n, _, _ := strings.Cut(rest, "/")
		if _, err := strconv.Atoi(n); err == nil && len(rest) > len(n) {
			return c, true
		}
	}
	return "", false
}

// abs is name made absolute against the process's cwd, for the event
// (name itself when that cannot be done).
func (r *request) abs(name string) string {
	if filepath.IsAbs(name) {
		return filepath.Clean(name)
	}
	if p := joinAbs(r.cwd, name); p != "" {
		return p
	}
	return name
}

// load opens and reads a program named name (relative to the cwd),
// with the argv it gets and the role it plays.
func (x *Execs) load(r *request, name string, argv []string, role string) (program, error) {
	fd, err := r.open(name, atFDCWD)
	if err != nil {
		return program{}, err
	}
	defer unix.Close(fd)
	return x.describe(fd, r.abs(name), argv, role)
}

// describe reads the program open in fd (O_PATH), known as path.
func (x *Execs) describe(fd int, path string, argv []string, role string) (program, error) {
	info, key, nlink, err := x.files.of(fd)
	if err != nil {
		return program{}, err
	}
	return program{path: path, argv: argv, role: role, info: info, key: key, real: x.files.realPath(fd, path, key, nlink)}, nil
}

// plan finds every program the exec runs: the file it names (open in f);
// the #! interpreters the kernel starts for a script, to its limit; the
// ELF interpreter of the binary, when it is not one of the system's
// loaders; the program a loader run as a command loads; and, for a file
// without a name (a memfd, a deleted file), the installed programs with
// its content.
func (x *Execs) plan(r *request, fd int) plan {
	var p plan
	exec, err := x.describe(fd, r.resolved, r.argv, roleExec)
	switch {
	case errors.Is(err, errNotRegular):
		p.errno = unix.EACCES // as the kernel answers an exec of a directory or a device
		return p
	case err != nil:
		p.deny = "cannot read the program: " + err.Error()
		p.views = []program{{path: r.resolved, argv: r.argv}}
		return p
	}
	p.views = append(p.views, exec)
	if _, ok := procPath(r.path, r.tid, r.tgid); ok || r.emptyFD {
		if !nameless(exec.real) && exec.real != r.resolved {
			p.views = append(p.views, program{path: exec.real, argv: r.argv, role: roleDescriptor, info: exec.info, key: exec.key, real: exec.real})
		}
	}

	// The #! chain, as exec_binprm and load_script follow it.
	cur, name, argv := exec, r.kernel, r.argv
	for depth := 0; cur.info.isScript; depth++ {
		if depth == maxScripts {
			p.errno = unix.ELOOP
			return p
		}
		sb := cur.info.script
		argv = scriptArgv(sb, name, argv)
		next, err := x.load(r, sb.name, argv, roleInterpreter)
		if err != nil {
			return p.failed(sb.name, err)
		}
		p.views = append(p.views, next)
		p.interp, p.hasInterp, p.interpreter = sb.name, true, next.path
		cur, name = next, sb.name
	}
	p.final, p.kernelArgv = cur, argv
	p.native = cur.info.native()

	// What the final binary runs: its ELF interpreter, or, when it is a
	// loader, the program in its argv (and that program's interpreter,
	// which a newer glibc chain-loads).
	last := cur
	for depth := 0; ; depth++ {
		if last.info.isELF && last.info.elf.hasInterp {
			ip, err := x.load(r, last.info.elf.interp, last.argv, roleELFInterp)
			if err != nil {
				return p.failed(last.info.elf.interp, err)
			}
			if !ip.info.knownLoader {
				p.views = append(p.views, ip)
				if p.interpreter == "" {
					p.interpreter = ip.path
				}
			}
		}
		if !last.info.loader() {
			break
		}
		run := parseLoaderArgv(last.argv)
		if run.program == "" {
			break
		}
		if depth == maxLoaders {
			p.deny = "too many dynamic loaders in a row to follow"
			return p
		}
		progs, err := x.loaderPrograms(r, run)
		if err != nil {
			p.deny = fmt.Sprintf("the dynamic loader's program %q cannot be read: %v", run.program, err)
			return p
		}
		p.views = append(p.views, progs...)
		last = progs[0]
	}
	p.program, p.digest = programName(last.real, last.path), last.info.digest

	// A file without a name: the installed programs with its content.
	for _, v := range p.views {
		if v.info != nil && nameless(v.real) {
			for _, path := range x.sameContent(r, v) {
				p.views = append(p.views, program{path: path, argv: v.argv, role: roleSameContent, info: v.info, key: v.key, real: path})
			}
		}
	}
	p.views = dedupe(p.views)
	return p
}

// failed ends a plan whose program name could not be opened: a name that
// is not there fails the exec as the kernel would; anything else denies.
func (p plan) failed(name string, err error) plan {
	if errno, ok := errors.AsType[unix.Errno](err); ok && (errno == unix.ENOENT || errno == unix.ENOTDIR || errno == unix.ELOOP) {
		p.errno = errno
		return p
	}
	p.deny = fmt.Sprintf("cannot read %q, which the exec runs: %v", name, err)
	return p
}

// loaderPrograms opens the program a loader run as a command loads: a
// name with a slash, relative to the cwd; a bare name, in the cwd (musl)
// and wherever /etc/ld.so.cache says (glibc searches no directory for its
// program). Every candidate there is counts; none is an error (the loader
// would fail, unless one appears meanwhile).
func (x *Execs) loaderPrograms(r *request, run loaderRun) ([]program, error) {
	names := []string{run.program}
	if !strings.Contains(run.program, "/") {
		names = []string{"./" + run.program}
		if cf, err := r.open("/etc/ld.so.cache", atFDCWD); err == nil {
			b, rerr := os.ReadFile("/proc/self/fd/" + strconv.Itoa(cf))
			unix.Close(cf)
			if rerr == nil {
				paths, _ := ldCacheLookup(b, run.program)
				names = append(names, paths...)
			}
		}
	}
	var progs []program
	var firstErr error
	for _, n := range names {
		pr, err := x.load(r, n, run.argv, roleLoader)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		progs = append(progs, pr)
	}
	if len(progs) == 0 {
		return nil, firstErr
	}
	return progs, nil
}

// nameless reports whether a file's /proc path is not a path: a memfd,
// a deleted file, an anonymous inode.
func nameless(real string) bool {
	return real != "" && (!strings.HasPrefix(real, "/") || strings.HasPrefix(real, "/memfd:") || strings.HasSuffix(real, " (deleted)"))
}

// programName names a program for the event: its own path, or for a
// memfd "memfd:NAME".
func programName(real, path string) string {
	switch {
	case strings.HasPrefix(real, "/memfd:"):
		return "memfd:" + strings.TrimSuffix(strings.TrimPrefix(real, "/memfd:"), " (deleted)")
	case real != "":
		return real
	}
	return path
}

// dedupe drops a program already in views with the same path and argv.
func dedupe(views []program) []program {
	out := views[:0:0]
outer:
	for _, v := range views {
		for _, o := range out {
			if o.path == v.path && equalStrings(o.argv, v.argv) {
				continue outer
			}
		}
		out = append(out, v)
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// programDirs are where installed programs are looked for by content,
// besides the directories of the process's PATH.
var programDirs = [...]string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// maxSameContent bounds the installed programs one nameless file is
// decided as.
const maxSameContent = 8

// sameContent returns the installed programs whose content is v's: files
// of its size and digest in the system's program directories and in those
// of the process's PATH (its environment as it started). A memfd holding
// a copy of /usr/bin/openssl is decided as /usr/bin/openssl too.
func (x *Execs) sameContent(r *request, v program) []string {
	dirs := append([]string(nil), programDirs[:]...)
	if env, err := os.ReadFile("/proc/" + strconv.Itoa(r.tgid) + "/environ"); err == nil {
		for kv := range strings.SplitSeq(string(env), "\x00") {
			if path, ok := strings.CutPrefix(kv, "PATH="); ok {
				for d := range strings.SplitSeq(path, ":") {
					if filepath.IsAbs(d) {
						dirs = append(dirs, filepath.Clean(d))
					}
				}
			}
		}
	}
	var found []string
	seen := map[string]bool{}
	for _, d := range dirs {
		if seen[d] {
			continue
		}
		seen[d] = true
		for _, name := range x.dirs.ofSize(r, d, v.info.size) {
			path := filepath.Join(d, name)
			pr, err := x.load(r, path, nil, roleSameContent)
			if err == nil && pr.info.digest == v.info.digest {
				found = append(found, path)
				if len(found) == maxSameContent {
					return found
				}
			}
		}
	}
	return found
}

// expectation is what the verifier checks when the exec happens: the
// argv the kernel gives the final program, the file name, the #!
// interpreter (or none), and the inode of the final file, where its
// filesystem lets that be compared. For a file the kernel may hand to a
// binfmt_misc handler, only what the old argv keeps is compared.
func (p plan) expectation(r *request) expectation {
	if !p.native || p.final.info == nil {
		e := expect(r.argv, r.kernel)
		e.Flags |= expectLenient
		return e
	}
	e := expect(p.kernelArgv, r.kernel)
	if p.hasInterp {
		e = e.withInterp(p.interp)
	}
	if id := p.final.info.identity; id != identityNone {
		k := p.final.key
		e.Flags |= expectInode
		e.Ino, e.Size, e.CtimeSec, e.CtimeNsec = k.ino, k.size, k.ctime.Sec, uint32(k.ctime.Nsec)
		if id == identityDevice {
			e.Flags |= expectDevice
			e.Dev = unix.Major(k.dev)<<20 | unix.Minor(k.dev)
		}
	}
	return e
}

// learnLoaders reads the system's dynamic loaders, before Serve serves:
// the files the shell and env name in their PT_INTERP, and the loaders at
// the usual places. A file with the content of one is a loader too, and
// an ELF interpreter that is one is not decided on its own (it runs the
// program that names it, which is).
func (x *Execs) learnLoaders() {
	var paths []string
	for _, prog := range []string{"/bin/sh", "/usr/bin/env"} {
		if f, err := os.Open(prog); err == nil {
			if h, ok := readELFHeader(f); ok && h.hasInterp {
				paths = append(paths, h.interp)
			}
			f.Close()
		}
	}
	for _, pattern := range []string{"/lib*/ld-*.so*", "/usr/lib*/ld-*.so*", "/lib/*/ld-*.so*", "/usr/lib/*/ld-*.so*", "/lib*/ld64.so*", "/lib/ld-musl-*.so*"} {
		m, _ := filepath.Glob(pattern)
		paths = append(paths, m...)
	}
	for _, path := range paths {
		fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		info, _, _, err := x.files.of(fd)
		unix.Close(fd)
		if err == nil && info.isELF && !info.elf.hasInterp && info.elf.typ == elf.ET_DYN {
			x.files.markLoader(info)
		}
	}
}
