package fileexec

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeCall(t *testing.T) {
	const addr1, addr2 = 0x7ffd1000, 0x7ffd2000
	neg := func(n int32) uint64 { return uint64(uint32(n)) | 0xffffffff00000000 }
	for _, tt := range []struct {
		name string
		c    Call
		want callSpec
		ok   bool
	}{
		{"x86_64 link", Call{Arch: auditArchX86_64, Nr: 86, Args: [6]uint64{addr1, addr2}},
			callSpec{op: callLink, oldDir: atFDCWD, oldPath: addr1, newDir: atFDCWD, newPath: addr2}, true},
		{"x86_64 linkat", Call{Arch: auditArchX86_64, Nr: 265, Args: [6]uint64{3, addr1, neg(atFDCWD), addr2, atSymlinkFollow}},
			callSpec{op: callLink, oldDir: 3, oldPath: addr1, newDir: atFDCWD, newPath: addr2, flags: atSymlinkFollow}, true},
		{"x86_64 rename", Call{Arch: auditArchX86_64, Nr: 82, Args: [6]uint64{addr1, addr2}},
			callSpec{op: callRename, oldDir: atFDCWD, oldPath: addr1, newDir: atFDCWD, newPath: addr2}, true},
		{"x86_64 renameat", Call{Arch: auditArchX86_64, Nr: 264, Args: [6]uint64{neg(atFDCWD), addr1, 5, addr2, 0xff}},
			callSpec{op: callRename, oldDir: atFDCWD, oldPath: addr1, newDir: 5, newPath: addr2}, true},
		{"x86_64 renameat2", Call{Arch: auditArchX86_64, Nr: 316, Args: [6]uint64{4, addr1, 5, addr2, renameExchange}},
			callSpec{op: callRename, oldDir: 4, oldPath: addr1, newDir: 5, newPath: addr2, flags: renameExchange}, true},
		{"x86_64 truncate", Call{Arch: auditArchX86_64, Nr: 76, Args: [6]uint64{addr1, 0}},
			callSpec{op: callTruncate, oldDir: atFDCWD, oldPath: addr1}, true},
		{"x86_64 io_uring_setup", Call{Arch: auditArchX86_64, Nr: 425}, callSpec{op: callIOURing}, true},
		{"x86_64 openat is not one", Call{Arch: auditArchX86_64, Nr: 257}, callSpec{}, false},
		{"i386 truncate64 with garbage above", Call{Arch: auditArchI386, Nr: 193, Args: [6]uint64{0xdead00000000 | addr1}},
			callSpec{op: callTruncate, oldDir: atFDCWD, oldPath: addr1}, true},
		{"i386 linkat", Call{Arch: auditArchI386, Nr: 303, Args: [6]uint64{0xffffff9c, addr1, 3, addr2, atEmptyPath}},
			callSpec{op: callLink, oldDir: atFDCWD, oldPath: addr1, newDir: 3, newPath: addr2, flags: atEmptyPath}, true},
		{"aarch64 renameat", Call{Arch: auditArchAArch64, Nr: 38, Args: [6]uint64{neg(atFDCWD), addr1, neg(atFDCWD), addr2}},
			callSpec{op: callRename, oldDir: atFDCWD, oldPath: addr1, newDir: atFDCWD, newPath: addr2}, true},
		{"aarch64 nr 86 is not link", Call{Arch: auditArchAArch64, Nr: 86}, callSpec{}, false},
		{"arm link", Call{Arch: auditArchARM, Nr: 9, Args: [6]uint64{addr1, addr2}},
			callSpec{op: callLink, oldDir: atFDCWD, oldPath: addr1, newDir: atFDCWD, newPath: addr2}, true},
		{"unknown arch", Call{Arch: 0x1234, Nr: 86}, callSpec{}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := decodeCall(tt.c)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if d := cmp.Diff(tt.want, got, cmp.AllowUnexported(callSpec{})); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestSplitLast(t *testing.T) {
	for _, tt := range []struct{ in, dir, name string }{
		{"a", ".", "a"}, {"a/b", "a", "b"}, {"/a", "/", "a"}, {"/a/b/", "/a", "b"},
		{"a//", ".", "a"}, {"/", "/", ""}, {"", "/", ""}, {"../x", "..", "x"}, {"a/..", "a", ".."},
	} {
		if dir, name := splitLast(tt.in); dir != tt.dir || name != tt.name {
			t.Errorf("splitLast(%q) = %q, %q; want %q, %q", tt.in, dir, name, tt.dir, tt.name)
		}
	}
}

func TestOwnDescriptor(t *testing.T) {
	for _, tt := range []struct {
		path string
		want string
		ok   bool
	}{
		{"/proc/self/fd/3", "3", true},
		{"/proc/77/fd/12", "12", true},
		{"/proc/thread-self/fd/0", "0", true},
		{"/proc/77/task/78/fd/4", "4", true},
		{"/proc/78/fd/4", "", false}, // another process
		{"/proc/self/fd/3/x", "", false},
		{"/proc/self/fd/03", "", false},
		{"/proc/self/fd/-1", "", false},
		{"/proc/self/cwd/x", "", false},
	} {
		if got, ok := ownDescriptor(tt.path, 78, 77); got != tt.want || ok != tt.ok {
			t.Errorf("ownDescriptor(%q) = %q, %v; want %q, %v", tt.path, got, ok, tt.want, tt.ok)
		}
	}
}

// memory is a process's memory for readPath: data at base, nothing
// mapped elsewhere.
type memory struct {
	base uint64
	data []byte
}

func (m memory) ReadAt(b []byte, off int64) (int, error) {
	if uint64(off) < m.base || uint64(off) >= m.base+uint64(len(m.data)) {
		return 0, errFault
	}
	n := copy(b, m.data[uint64(off)-m.base:])
	if n < len(b) {
		return n, errFault
	}
	return n, nil
}

func TestReadPath(t *testing.T) {
	long := bytes.Repeat([]byte("a"), pathMax)
	for _, tt := range []struct {
		name string
		m    memory
		addr uint64
		want string
		err  error
	}{
		{"plain", memory{0x1000, []byte("/etc/passwd\x00junk")}, 0x1000, "/etc/passwd", nil},
		{"empty", memory{0x1000, []byte("\x00")}, 0x1000, "", nil},
		{"across a page", memory{0xff0, append(bytes.Repeat([]byte("b"), 100), 0)}, 0xff0, string(bytes.Repeat([]byte("b"), 100)), nil},
		{"before unmapped memory", memory{0x1ff8, []byte("/x\x00")}, 0x1ff8, "/x", nil},
		{"runs into unmapped memory", memory{0x1ff8, []byte("/xyz")}, 0x1ff8, "", errFault},
		{"null", memory{0, []byte("x\x00")}, 0, "", errFault},
		{"too long", memory{0x1000, append(long, 0)}, 0x1000, "", errNameTooLong},
		{"just fits", memory{0x1000, append(long[:pathMax-1], 0)}, 0x1000, string(long[:pathMax-1]), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readPath(tt.m, tt.addr)
			if got != tt.want || err != tt.err {
				t.Errorf("readPath = %q, %v; want %q, %v", got, err, tt.want, tt.err)
			}
		})
	}
}

// readPath reads what a NUL-terminated string at addr holds, as
// bytes.IndexByte over the same memory says, or fails.
func FuzzReadPath(f *testing.F) {
	f.Add([]byte("/etc/passwd\x00"), uint16(0), uint16(0))
	f.Add([]byte("no nul"), uint16(4090), uint16(2))
	f.Fuzz(func(t *testing.T, data []byte, base, skip uint16) {
		m := memory{base: uint64(base) + 1, data: data}
		addr := m.base + uint64(skip)
		got, err := readPath(m, addr)
		if uint64(skip) >= uint64(len(data)) {
			if err == nil {
				t.Fatalf("read %q outside the memory", got)
			}
			return
		}
		rest := data[skip:]
		i := bytes.IndexByte(rest, 0)
		switch {
		case i >= 0 && i < pathMax:
			if err != nil || got != string(rest[:i]) {
				t.Errorf("readPath = %q, %v; want %q", got, err, rest[:i])
			}
		case i < 0 && len(rest) < pathMax:
			if err != errFault {
				t.Errorf("readPath = %q, %v; want a fault", got, err)
			}
		default:
			if err != errNameTooLong {
				t.Errorf("readPath = %q, %v; want too long", got, err)
			}
		}
	})
}
