package execs

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"io"
	"runtime"
	"strings"
)

// elfHeader is what an exec needs of an ELF file: its kind and the
// interpreter (PT_INTERP) the kernel starts before it.
type elfHeader struct {
	class     elf.Class
	machine   elf.Machine
	typ       elf.Type
	interp    string // PT_INTERP, up to its NUL
	hasInterp bool
}

// pathMax is PATH_MAX, with the NUL.
const pathMax = 4096

// readELFHeader reads an ELF header and program headers from r the way
// fs/binfmt_elf.c load_elf_binary does before it loads anything: ok is
// false where the kernel would refuse the file with ENOEXEC for what is
// read here (no ELF magic, a type other than ET_EXEC or ET_DYN, a program
// header size other than its class's, no program headers or more than 64
// KiB of them, headers past the end of the file, a PT_INTERP shorter than
// 2 bytes, longer than PATH_MAX, past the end of the file or not ending in
// a NUL). Only the first PT_INTERP counts, as for the kernel. The machine
// is not checked: see nativeMachine.
func readELFHeader(r io.ReaderAt) (h elfHeader, ok bool) {
	var ident [elf.EI_NIDENT]byte
	if !readFull(r, ident[:], 0) || !bytes.Equal(ident[:4], []byte(elf.ELFMAG)) {
		return elfHeader{}, false
	}
	var bo binary.ByteOrder
	switch elf.Data(ident[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		bo = binary.LittleEndian
	case elf.ELFDATA2MSB:
		bo = binary.BigEndian
	default:
		return elfHeader{}, false
	}
	h.class = elf.Class(ident[elf.EI_CLASS])
	var phoff uint64
	var phentsize, phnum, wantEntsize int
	switch h.class {
	case elf.ELFCLASS64:
		var eh elf.Header64
		if !readStruct(r, bo, &eh) {
			return elfHeader{}, false
		}
		h.typ, h.machine = elf.Type(eh.Type), elf.Machine(eh.Machine)
		phoff, phentsize, phnum = eh.Phoff, int(eh.Phentsize), int(eh.Phnum)
		wantEntsize = binary.Size(elf.Prog64{})
	case elf.ELFCLASS32:
		var eh elf.Header32
		if !readStruct(r, bo, &eh) {
			return elfHeader{}, false
		}
		h.typ, h.machine = elf.Type(eh.Type), elf.Machine(eh.Machine)
		phoff, phentsize, phnum = uint64(eh.Phoff), int(eh.Phentsize), int(eh.Phnum)
		wantEntsize = binary.Size(elf.Prog32{})
	default:
		return elfHeader{}, false
	}
	if h.typ != elf.ET_EXEC && h.typ != elf.ET_DYN {
		return elfHeader{}, false
	}
	size := phentsize * phnum
	if phentsize != wantEntsize || size == 0 || size > 65536 || phoff > 1<<62 {
		return elfHeader{}, false
	}
	phdrs := make([]byte, size)
	if !readFull(r, phdrs, int64(phoff)) {
		return elfHeader{}, false
	}
	for i := range phnum {
		p := phdrs[i*phentsize:]
		var typ uint32
		var off, filesz uint64
		if h.class == elf.ELFCLASS64 {
			typ, off, filesz = bo.Uint32(p), bo.Uint64(p[8:]), bo.Uint64(p[32:])
		} else {
			typ, off, filesz = bo.Uint32(p), uint64(bo.Uint32(p[4:])), uint64(bo.Uint32(p[16:]))
		}
		if elf.ProgType(typ) != elf.PT_INTERP {
			continue
		}
		if filesz < 2 || filesz > pathMax || off > 1<<62 {
			return elfHeader{}, false
		}
		b := make([]byte, filesz)
		if !readFull(r, b, int64(off)) || b[filesz-1] != 0 {
			return elfHeader{}, false
		}
		h.interp, h.hasInterp = cString(b), true
		break
	}
	return h, true
}

func readFull(r io.ReaderAt, b []byte, off int64) bool {
	n, err := r.ReadAt(b, off)
	return n == len(b) && (err == nil || err == io.EOF)
}

func readStruct(r io.ReaderAt, bo binary.ByteOrder, v any) bool {
	b := make([]byte, binary.Size(v))
	return readFull(r, b, 0) && binary.Read(bytes.NewReader(b), bo, v) == nil
}

// loaderSONAME reports whether an ELF file's DT_SONAME names a dynamic
// loader: glibc's ld-linux*.so.N, ld64.so.N and ld.so.N, or musl's
// libc.so (which is also its loader). A file without PT_INTERP that says
// so is taken for a loader: the program in its argv is decided too.
func loaderSONAME(r io.ReaderAt, size int64) bool {
	f, err := elf.NewFile(io.NewSectionReader(r, 0, size))
	if err != nil {
		return false
	}
	defer f.Close()
	names, err := f.DynString(elf.DT_SONAME)
	if err != nil || len(names) == 0 {
		return false
	}
	n := names[0]
	return strings.HasPrefix(n, "ld-") || strings.HasPrefix(n, "ld64.so") || strings.HasPrefix(n, "ld.so") || n == "libc.so"
}

// nativeMachine reports whether the kernel of this architecture loads ELF
// files of machine m itself (binfmt_elf, or its 32-bit companion). Any
// other ELF file fails with ENOEXEC, unless a binfmt_misc handler takes
// it.
func nativeMachine(m elf.Machine) bool {
	switch runtime.GOARCH {
	case "amd64":
		return m == elf.EM_X86_64 || m == elf.EM_386
	case "386":
		return m == elf.EM_386
	case "arm64":
		return m == elf.EM_AARCH64 || m == elf.EM_ARM
	case "arm":
		return m == elf.EM_ARM
	case "riscv64":
		return m == elf.EM_RISCV
	case "ppc64", "ppc64le":
		return m == elf.EM_PPC64
	case "s390x":
		return m == elf.EM_S390
	case "loong64":
		return m == elf.EM_LOONGARCH
	case "mips64", "mips64le":
		return m == elf.EM_MIPS
	}
	return false
}
