package execs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"strings"
)

// Limits of what is read out of a blocked process. An exec beyond them is
// denied: what cannot be read whole cannot be checked.
const (
	maxArgs      = 1 << 20 // argv pointers
	maxArgvBytes = 6 << 20 // argv strings with their NULs; bpf/verify.c's MAX_ARGV
	maxPath      = 4096    // PATH_MAX with the NUL; bpf/verify.c's MAX_FILENAME
)

var (
	errArgvTooLarge = errors.New("argv too large to check")
	errPathTooLong  = errors.New("path too long to check")
	// errFault is an address the process could not have passed to the
	// kernel either: the exec would fail with EFAULT.
	errFault = errors.New("bad address")
)

// readString reads the NUL-terminated string at addr in m. The string and
// its NUL take at most limit bytes, else errTooLong.
func readString(m io.ReaderAt, addr uint64, limit int, errTooLong error) (string, error) {
	var sb strings.Builder
	buf := make([]byte, 256)
	for sb.Len() < limit {
		chunk := buf[:min(len(buf), limit-sb.Len())]
		if addr > math.MaxInt64-uint64(len(chunk)) {
			return "", errFault
		}
		n, err := m.ReadAt(chunk, int64(addr))
		if i := indexNUL(chunk[:n]); i >= 0 {
			sb.Write(chunk[:i])
			return sb.String(), nil
		}
		if n == 0 || err != nil && n < len(chunk) {
			return "", errFault
		}
		sb.Write(chunk[:n])
		addr += uint64(n)
		if len(buf) < 16<<10 {
			buf = make([]byte, 2*len(buf))
		}
	}
	return "", errTooLong
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

// readArgv reads the NULL-terminated array of string pointers at addr (a
// process's argv), with pointers of ptrSize bytes (4 or 8) in the host's
// byte order. A NULL addr is an empty argv, as for the kernel.
func readArgv(m io.ReaderAt, addr uint64, ptrSize int) ([]string, error) {
	if ptrSize != 4 && ptrSize != 8 {
		return nil, fmt.Errorf("pointer size %d", ptrSize)
	}
	if addr == 0 {
		return nil, nil
	}
	var ptrs []uint64
	// 64 pointers first (most argvs are short), doubling on each read up
	// to 8,192: find -exec cat {} + passes thousands, which were read 64
	// at a time, one pread of the process's memory each.
	buf := make([]byte, 64*ptrSize)
	for done := false; !done; {
		if len(ptrs) > 0 && len(buf) < 8192*ptrSize {
			buf = make([]byte, 2*len(buf))
		}
		if addr > math.MaxInt64-uint64(len(buf)) {
			return nil, errFault
		}
		n, _ := m.ReadAt(buf, int64(addr))
		n -= n % ptrSize
		if n == 0 {
			return nil, errFault
		}
		for off := 0; off < n; off += ptrSize {
			var p uint64
			if ptrSize == 8 {
				p = binary.NativeEndian.Uint64(buf[off:])
			} else {
				p = uint64(binary.NativeEndian.Uint32(buf[off:]))
			}
			if p == 0 {
				done = true
				break
			}
			if len(ptrs) == maxArgs {
				return nil, errArgvTooLarge
			}
			ptrs = append(ptrs, p)
		}
		addr += uint64(n)
	}
	var argv []string
	used := 0
	// The strings usually lie one after the other: read them through a
	// window, one pread per 64 KiB rather than one per argument (find
	// -exec cat {} + passes thousands).
	w := window{m: m}
	for _, p := range ptrs {
		s, ok := w.str(p)
		if !ok {
			var err error
			if s, err = readString(m, p, maxArgvBytes-used, errArgvTooLarge); err != nil {
				return nil, err
			}
		}
		if used+len(s)+1 > maxArgvBytes {
			return nil, errArgvTooLarge
		}
		used += len(s) + 1
		argv = append(argv, s)
	}
	return argv, nil
}

// window is a read-ahead buffer over a process's memory.
type window struct {
	m    io.ReaderAt
	at   uint64
	buf  []byte
	n    int
	fill int // reads made
}

// The window starts small (a typical argv is a few hundred bytes, and
// what is read is copied page by page out of the process) and doubles on
// each refill, up to windowSize.
const (
	firstWindow = 4 << 10
	windowSize  = 64 << 10
)

// str returns the NUL-terminated string at addr when it lies wholly in
// the window (reading the window at addr when it does not yet); ok is
// false when it does not fit, and the caller reads it on its own.
func (w *window) str(addr uint64) (string, bool) {
	if s, ok := w.lookup(addr); ok {
		return s, true
	}
	if addr > math.MaxInt64-windowSize {
		return "", false
	}
	switch {
	case w.buf == nil:
		w.buf = make([]byte, firstWindow)
	case len(w.buf) < windowSize:
		w.buf = make([]byte, 2*len(w.buf))
	}
	// A read that runs past the end of the mapping returns what there was.
	n, _ := w.m.ReadAt(w.buf, int64(addr))
	w.at, w.n = addr, n
	w.fill++
	return w.lookup(addr)
}

func (w *window) lookup(addr uint64) (string, bool) {
	if w.n == 0 || addr < w.at || addr >= w.at+uint64(w.n) {
		return "", false
	}
	b := w.buf[addr-w.at : w.n]
	i := indexNUL(b)
	if i < 0 {
		return "", false
	}
	return string(b[:i]), true
}

// argvArea is what the kernel lays out between mm->arg_start and arg_end
// for argv: each string followed by its NUL. An empty argv gets one empty
// string (Linux 5.18 and later), so its area is a single NUL.
func argvArea(argv []string) []byte {
	if len(argv) == 0 {
		return []byte{0}
	}
	n := 0
	for _, a := range argv {
		n += len(a) + 1
	}
	b := make([]byte, 0, n)
	for _, a := range argv {
		b = append(b, a...)
		b = append(b, 0)
	}
	return b
}

// expectation is what the verifier compares at exec time (struct
// expectation in bpf/verify.c): FNV-1a 64 hashes and lengths of the argv
// area the new image gets, of its tail argv[1:], of the file name the
// kernel records and of the last #! interpreter's name; and the inode of
// the file the kernel loads.
type expectation struct {
	ArgvHash, TailHash, FileHash, InterpHash uint64
	ArgvLen, TailLen, FileLen, InterpLen     uint32
	Flags                                    uint32
	Ino                                      uint64
	Size                                     int64
	CtimeSec                                 int64
	CtimeNsec                                uint32
	Dev                                      uint32 // the kernel's dev_t: major << 20 | minor
}

// Expectation flags (bpf/verify.c EXPECT_*).
const (
	// expectInterp: a #! interpreter replaces the program, and
	// bprm->interp must be InterpHash; without it, bprm->interp must be
	// the file name (no binfmt handler ran).
	expectInterp = 1 << 0
	// expectLenient: the kernel may hand the file to a handler user space
	// does not know (binfmt_misc); the interpreter is not checked, and
	// when one ran only argv[1:] is compared.
	expectLenient = 1 << 1
	// expectInode: the loaded file's inode number, size and ctime must
	// be Ino, Size and CtimeSec/CtimeNsec; expectDevice: and its device
	// Dev.
	expectInode  = 1 << 2
	expectDevice = 1 << 3
)

// expect is the expectation for an exec of kernelFilename whose new image
// gets argv.
func expect(argv []string, kernelFilename string) expectation {
	area := argvArea(argv)
	tail := area[len(area):]
	if len(argv) > 1 {
		tail = area[len(argv[0])+1:]
	}
	return expectation{
		ArgvHash: fnv64a(area),
		TailHash: fnv64a(tail),
		FileHash: fnv64a([]byte(kernelFilename)),
		ArgvLen:  uint32(len(area)),
		TailLen:  uint32(len(tail)),
		FileLen:  uint32(len(kernelFilename)),
	}
}

// withInterp expects the #! interpreter named name (as written in the
// last script's #! line).
func (e expectation) withInterp(name string) expectation {
	e.Flags |= expectInterp
	e.InterpHash, e.InterpLen = fnv64a([]byte(name)), uint32(len(name))
	return e
}

func fnv64a(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// atFDCWD is AT_FDCWD, as the int the system call receives.
const atFDCWD = -100

// kernelFilename is the name the kernel records for the exec (bprm->
// filename, fs/exec.c alloc_bprm): the path as passed, unless execveat
// resolved a relative path against a directory descriptor.
func kernelFilename(dirfd int32, path string) string {
	if dirfd == atFDCWD || strings.HasPrefix(path, "/") {
		return path
	}
	if path == "" {
		return fmt.Sprintf("/dev/fd/%d", dirfd)
	}
	return fmt.Sprintf("/dev/fd/%d/%s", dirfd, path)
}
