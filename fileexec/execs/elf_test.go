package execs

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tinyELF builds a 64-bit little-endian ELF file of type typ with one
// PT_INTERP holding interp (as is, so a test may leave its NUL out), or
// none when interp is nil.
func tinyELF(typ elf.Type, interp []byte) []byte {
	const ehsize, phsize = 64, 56
	var b bytes.Buffer
	hdr := elf.Header64{
		Type: uint16(typ), Machine: uint16(elf.EM_X86_64), Version: 1,
		Phoff: ehsize, Ehsize: ehsize, Phentsize: phsize, Phnum: 1,
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS], hdr.Ident[elf.EI_DATA], hdr.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), 1
	binary.Write(&b, binary.LittleEndian, hdr)
	p := elf.Prog64{Type: uint32(elf.PT_LOAD)}
	if interp != nil {
		p = elf.Prog64{Type: uint32(elf.PT_INTERP), Off: ehsize + phsize, Filesz: uint64(len(interp)), Memsz: uint64(len(interp))}
	}
	binary.Write(&b, binary.LittleEndian, p)
	b.Write(interp)
	return b.Bytes()
}

func TestReadELFHeader(t *testing.T) {
	tests := []struct {
		name string
		file []byte
		want elfHeader
		ok   bool
	}{
		{name: "interpreter", file: tinyELF(elf.ET_DYN, []byte("/lib/ld.so\x00")),
			want: elfHeader{class: elf.ELFCLASS64, machine: elf.EM_X86_64, typ: elf.ET_DYN, interp: "/lib/ld.so", hasInterp: true}, ok: true},
		{name: "NUL inside: the name ends there", file: tinyELF(elf.ET_EXEC, []byte("/x\x00y\x00")),
			want: elfHeader{class: elf.ELFCLASS64, machine: elf.EM_X86_64, typ: elf.ET_EXEC, interp: "/x", hasInterp: true}, ok: true},
		{name: "static", file: tinyELF(elf.ET_EXEC, nil), want: elfHeader{class: elf.ELFCLASS64, machine: elf.EM_X86_64, typ: elf.ET_EXEC}, ok: true},
		{name: "interpreter without a NUL", file: tinyELF(elf.ET_DYN, []byte("/lib/ld.so")), ok: false},
		{name: "interpreter of one byte", file: tinyELF(elf.ET_DYN, []byte("\x00")), ok: false},
		{name: "interpreter past the end", file: tinyELF(elf.ET_DYN, []byte("/lib/ld.so\x00"))[:130], ok: false},
		{name: "relocatable object", file: tinyELF(elf.ET_REL, nil), ok: false},
		{name: "not ELF", file: []byte("#!/bin/sh\n"), ok: false},
		{name: "empty", ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := readELFHeader(bytes.NewReader(tt.file))
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(elfHeader{})); tt.ok && diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestReadELFHeaderSystem reads real programs: the shell names a loader,
// and that loader names none and says what it is in its SONAME.
func TestReadELFHeaderSystem(t *testing.T) {
	f, err := os.Open("/bin/sh")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	h, ok := readELFHeader(f)
	if !ok || !h.hasInterp || !nativeMachine(h.machine) {
		t.Skipf("/bin/sh: %+v %v: not a native dynamically linked program", h, ok)
	}
	ld, err := os.Open(h.interp)
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Close()
	st, _ := ld.Stat()
	lh, ok := readELFHeader(ld)
	if !ok || lh.hasInterp || lh.typ != elf.ET_DYN || !loaderSONAME(ld, st.Size()) {
		t.Errorf("%s: %+v, ok %v, loader by its SONAME %v", h.interp, lh, ok, loaderSONAME(ld, st.Size()))
	}
	self, _ := os.Executable()
	sf, _ := os.Open(self)
	defer sf.Close()
	sst, _ := sf.Stat()
	if loaderSONAME(sf, sst.Size()) {
		t.Error("the test binary is taken for a loader")
	}
}

// FuzzReadELFHeader compares readELFHeader with debug/elf: where both
// read a file, they agree on its class, type, machine and first
// PT_INTERP.
func FuzzReadELFHeader(f *testing.F) {
	f.Add(tinyELF(elf.ET_DYN, []byte("/lib/ld.so\x00")))
	f.Add(tinyELF(elf.ET_EXEC, nil))
	f.Add(tinyELF(elf.ET_DYN, []byte("/x\x00y\x00")))
	if b, err := os.ReadFile("/bin/true"); err == nil && len(b) < 1<<20 {
		f.Add(b[:min(len(b), 4096)])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := readELFHeader(bytes.NewReader(b))
		loaderSONAME(bytes.NewReader(b), int64(len(b))) // must not panic
		ef, err := elf.NewFile(bytes.NewReader(b))
		if !ok || err != nil {
			return
		}
		if got.class != ef.Class || got.typ != ef.Type || got.machine != ef.Machine {
			t.Fatalf("header %+v, debug/elf %v %v %v", got, ef.Class, ef.Type, ef.Machine)
		}
		for _, p := range ef.Progs {
			if p.Type != elf.PT_INTERP {
				continue
			}
			data := make([]byte, p.Filesz)
			if _, err := p.ReadAt(data, 0); err != nil {
				return
			}
			if want := cString(data); !got.hasInterp || got.interp != want {
				t.Fatalf("interpreter %q (%v), debug/elf %q", got.interp, got.hasInterp, want)
			}
			return
		}
		if got.hasInterp {
			t.Fatalf("interpreter %q, debug/elf none", got.interp)
		}
	})
}
