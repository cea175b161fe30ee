package execs

// binprmBufSize is BINPRM_BUF_SIZE: how much of a file the kernel reads
// to choose how to run it (the rest of its buffer is zeros).
const binprmBufSize = 256

// maxScripts is how many #! scripts the kernel follows in one exec: the
// sixth interpreter that is itself a script fails the exec with ELOOP
// (fs/exec.c exec_binprm runs the format handlers at depths 0 to 5, the
// last of which must load a binary).
const maxScripts = 5

// shebang is a script's #! line as the kernel reads it.
type shebang struct {
	name   string // the interpreter, as written (relative to the cwd when not absolute)
	arg    string // its one optional argument: the rest of the line, spaces inside kept
	hasArg bool
}

// parseShebang reads the #! line at the start of head (the first bytes
// of a file; only binprmBufSize count) exactly as fs/binfmt_script.c
// load_script does. ok is false where the kernel would not run the file
// as a script (ENOEXEC): no "#!", no interpreter, or an interpreter name
// that does not end within the buffer.
func parseShebang(head []byte) (sb shebang, ok bool) {
	var buf [binprmBufSize]byte
	copy(buf[:], head)
	if buf[0] != '#' || buf[1] != '!' {
		return shebang{}, false
	}
	const last = binprmBufSize - 1 // buf_end
	// strnchr stops at a NUL.
	iEnd := -1
	for i, c := range buf {
		if c == 0 {
			break
		}
		if c == '\n' {
			iEnd = i
			break
		}
	}
	if iEnd < 0 {
		p := nextNonSpacetab(&buf, 2, last)
		if p < 0 {
			return shebang{}, false // all spaces and tabs
		}
		// No newline: the name must end before the buffer does, or it
		// may be truncated.
		if nextTerminator(&buf, p, last) < 0 {
			return shebang{}, false
		}
		iEnd = last
	}
	for spacetab(buf[iEnd-1]) {
		iEnd--
	}
	iName := nextNonSpacetab(&buf, 2, iEnd)
	if iName < 0 || iName == iEnd {
		return shebang{}, false
	}
	iArg := -1
	iSep := nextTerminator(&buf, iName, iEnd)
	if iSep >= 0 && buf[iSep] != 0 {
		iArg = nextNonSpacetab(&buf, iSep, iEnd)
	}
	buf[iEnd] = 0
	if iArg >= 0 {
		buf[iSep] = 0
		sb.arg, sb.hasArg = cString(buf[iArg:]), true
	}
	sb.name = cString(buf[iName:])
	return sb, true
}

func spacetab(c byte) bool { return c == ' ' || c == '\t' }

// nextNonSpacetab is the index of the first byte in buf[first:last+1]
// that is not a space or a tab, or -1.
func nextNonSpacetab(buf *[binprmBufSize]byte, first, last int) int {
	for ; first <= last; first++ {
		if !spacetab(buf[first]) {
			return first
		}
	}
	return -1
}

// nextTerminator is the index of the first space, tab or NUL in
// buf[first:last+1], or -1.
func nextTerminator(buf *[binprmBufSize]byte, first, last int) int {
	for ; first <= last; first++ {
		if spacetab(buf[first]) || buf[first] == 0 {
			return first
		}
	}
	return -1
}

// cString is b up to its first NUL.
func cString(b []byte) string {
	if i := indexNUL(b); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// scriptArgv is the argv the kernel gives the interpreter of a script:
// its name, its argument if any, then the script's name (what the kernel
// calls it: the exec's file name, or the previous interpreter's name in a
// chain) in place of argv[0]. An empty argv counts as one empty string,
// as the kernel makes it.
func scriptArgv(sb shebang, scriptName string, argv []string) []string {
	out := []string{sb.name}
	if sb.hasArg {
		out = append(out, sb.arg)
	}
	out = append(out, scriptName)
	if len(argv) > 1 {
		out = append(out, argv[1:]...)
	}
	return out
}
