package execs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeMem is an address space with data mapped at base and nothing else.
type fakeMem struct {
	base uint64
	data []byte
}

func (m fakeMem) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || uint64(off) < m.base || uint64(off)-m.base >= uint64(len(m.data)) {
		return 0, io.EOF
	}
	n := copy(p, m.data[uint64(off)-m.base:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

const memBase = 0x10000

// layout builds memory with the argv array at memBase (pointers of size
// ptr, NULL-terminated unless open) followed by the strings.
func layout(ptr int, args []string, open bool) fakeMem {
	n := len(args)
	if !open {
		n++
	}
	strs := memBase + uint64(n*ptr)
	var arr, data []byte
	for _, a := range args {
		if ptr == 8 {
			arr = binary.NativeEndian.AppendUint64(arr, strs+uint64(len(data)))
		} else {
			arr = binary.NativeEndian.AppendUint32(arr, uint32(strs+uint64(len(data))))
		}
		data = append(append(data, a...), 0)
	}
	if !open {
		arr = append(arr, make([]byte, ptr)...)
	}
	return fakeMem{base: memBase, data: append(arr, data...)}
}

func TestReadArgv(t *testing.T) {
	tests := []struct {
		name    string
		mem     fakeMem
		addr    uint64
		ptr     int
		want    []string
		wantErr error
	}{
		{name: "argv", mem: layout(8, []string{"git", "push", ""}, false), addr: memBase, ptr: 8, want: []string{"git", "push", ""}},
		{name: "32-bit", mem: layout(4, []string{"ls", "-l"}, false), addr: memBase, ptr: 4, want: []string{"ls", "-l"}},
		{name: "NULL argv", mem: layout(8, nil, false), addr: 0, ptr: 8},
		{name: "no arguments", mem: layout(8, nil, false), addr: memBase, ptr: 8},
		{name: "long strings", mem: layout(8, []string{strings.Repeat("a", 5000), strings.Repeat("b", 70000)}, false), addr: memBase, ptr: 8, want: []string{strings.Repeat("a", 5000), strings.Repeat("b", 70000)}},
		{name: "unmapped array", mem: layout(8, []string{"x"}, false), addr: 0x1000, ptr: 8, wantErr: errFault},
		{name: "array runs off the mapping", mem: layout(8, []string{"x"}, true), addr: memBase, ptr: 8, wantErr: errFault},
		{name: "string runs off the mapping", mem: fakeMem{base: memBase, data: append(binary.NativeEndian.AppendUint64(binary.NativeEndian.AppendUint64(nil, memBase+16), 0), 'x')}, addr: memBase, ptr: 8, wantErr: errFault},
		{name: "too many", mem: layout(8, make([]string, maxArgs+1), false), addr: memBase, ptr: 8, wantErr: errArgvTooLarge},
		{name: "most allowed", mem: layout(8, make([]string, maxArgs), false), addr: memBase, ptr: 8, want: make([]string, maxArgs)},
		{name: "too large", mem: layout(8, []string{strings.Repeat("a", maxArgvBytes-1), "b"}, false), addr: memBase, ptr: 8, wantErr: errArgvTooLarge},
		{name: "largest", mem: layout(8, []string{strings.Repeat("a", maxArgvBytes-3), "b"}, false), addr: memBase, ptr: 8, want: []string{strings.Repeat("a", maxArgvBytes-3), "b"}},
		{name: "kernel address", mem: layout(8, nil, false), addr: 1 << 63, ptr: 8, wantErr: errFault},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readArgv(tt.mem, tt.addr, tt.ptr)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExpect(t *testing.T) {
	h := func(s string) uint64 {
		f := fnv.New64a()
		f.Write([]byte(s))
		return f.Sum64()
	}
	tests := []struct {
		name string
		argv []string
		file string
		want expectation
	}{
		{name: "args", argv: []string{"git", "push", ""}, file: "/usr/bin/git",
			want: expectation{ArgvHash: h("git\x00push\x00\x00"), ArgvLen: 10, TailHash: h("push\x00\x00"), TailLen: 6, FileHash: h("/usr/bin/git"), FileLen: 12}},
		{name: "one", argv: []string{"ls"}, file: "ls",
			want: expectation{ArgvHash: h("ls\x00"), ArgvLen: 3, TailHash: h(""), FileHash: h("ls"), FileLen: 2}},
		{name: "empty argv gets one empty string", argv: nil, file: "/dev/fd/3",
			want: expectation{ArgvHash: h("\x00"), ArgvLen: 1, TailHash: h(""), FileHash: h("/dev/fd/3"), FileLen: 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, expect(tt.argv, tt.file)); diff != "" {
				t.Errorf("expect (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKernelFilename(t *testing.T) {
	tests := []struct {
		dirfd int32
		path  string
		want  string
	}{
		{atFDCWD, "./x", "./x"},
		{atFDCWD, "/bin/ls", "/bin/ls"},
		{3, "/bin/ls", "/bin/ls"},
		{3, "", "/dev/fd/3"},
		{7, "sub/x", "/dev/fd/7/sub/x"},
	}
	for _, tt := range tests {
		if got := kernelFilename(tt.dirfd, tt.path); got != tt.want {
			t.Errorf("kernelFilename(%d, %q) = %q, want %q", tt.dirfd, tt.path, got, tt.want)
		}
	}
}

// FuzzReadArgv reads argv out of arbitrary memory: it never panics, keeps
// to the limits, and what it returns lays out as the kernel would.
func FuzzReadArgv(f *testing.F) {
	f.Add(layout(8, []string{"git", "push", "--force"}, false).data, uint64(0), true)
	f.Add(layout(4, []string{"a", ""}, false).data, uint64(0), false)
	f.Add(layout(8, []string{"x"}, true).data, uint64(0), true)
	f.Add([]byte{0x10, 0, 1, 0, 0, 0, 0, 0}, uint64(0), true)
	f.Add([]byte{}, uint64(8), false)
	f.Fuzz(func(t *testing.T, data []byte, off uint64, wide bool) {
		ptr := 4
		if wide {
			ptr = 8
		}
		argv, err := readArgv(fakeMem{base: memBase, data: data}, memBase+off%64, ptr)
		if err != nil {
			if argv != nil {
				t.Errorf("argv %q with error %v", argv, err)
			}
			return
		}
		if len(argv) > maxArgs {
			t.Errorf("%d args", len(argv))
		}
		area := argvArea(argv)
		if len(argv) > 0 && len(area) > maxArgvBytes {
			t.Errorf("%d bytes of argv", len(area))
		}
		if e := expect(argv, ""); int(e.ArgvLen) != len(area) || e.TailLen > e.ArgvLen {
			t.Errorf("expectation %+v for %d bytes", e, len(area))
		}
	})
}

// readCounter counts reads of a fakeMem and the bytes they asked for.
type readCounter struct {
	fakeMem
	reads, asked int
}

func (c *readCounter) ReadAt(p []byte, off int64) (int, error) {
	c.reads++
	c.asked += len(p)
	return c.fakeMem.ReadAt(p, off)
}

// The strings are read through a window that starts small and grows: a
// short argv costs a few KiB of reading, thousands of arguments a read per
// 64 KiB or so, not one per argument.
func TestReadArgvWindow(t *testing.T) {
	many := make([]string, 5000)
	for i := range many {
		many[i] = fmt.Sprintf("tree/d%02d/f%04d.go", i/1000, i%1000)
	}
	for _, tt := range []struct {
		name               string
		args               []string
		maxReads, maxAsked int
	}{
		{"short", []string{"git", "status", "--porcelain"}, 2, 8 << 10},
		{"thousands", append([]string{"cat"}, many...), 14, 1 << 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := &readCounter{fakeMem: layout(8, tt.args, false)}
			got, err := readArgv(m, memBase, 8)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.args) || got[len(got)-1] != tt.args[len(tt.args)-1] {
				t.Fatalf("read %d args, want %d", len(got), len(tt.args))
			}
			if m.reads > tt.maxReads || m.asked > tt.maxAsked {
				t.Errorf("%d reads asking %d bytes, want at most %d and %d", m.reads, m.asked, tt.maxReads, tt.maxAsked)
			}
		})
	}
}
