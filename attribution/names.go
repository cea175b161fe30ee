package attribution

import (
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/chaperone-dev/chaperone/event"
)

// LineageNames names the programs from a session's root process down to p:
// root first, p last, e.g. ["claude", "bash", "python3"]. The chain is p's
// Lineage, cut after root; when root is not among p's ancestors (p is
// outside the session, or root is 0) it is the whole of p.Lineage.
//
// A name is the base name of the process's executable, or its comm when the
// executable cannot be read (another user's process, a kernel thread), or ""
// for an ancestor that no longer exists. p's own name comes from p.Exe when
// set. Ancestors are read as they are now: a pid reused since p was read
// names the new process.
func (t *Table) LineageNames(p *event.Process, root int) []string {
	if p == nil {
		return nil
	}
	chain := p.Lineage
	if p.PID == root {
		chain = nil
	} else if i := slices.Index(chain, root); i >= 0 {
		chain = chain[:i+1]
	}
	names := make([]string, 0, len(chain)+1)
	for _, pid := range slices.Backward(chain) {
		names = append(names, t.programName(pid))
	}
	self := exeName(p.Exe)
	if self == "" {
		self = t.programName(p.PID)
	}
	if self == "" && len(p.Argv) > 0 {
		// Gone already: what it was started as is the best name left.
		self = path.Base(p.Argv[0])
	}
	return append(names, self)
}

// programName names pid by its executable, else its comm, else "".
func (t *Table) programName(pid int) string {
	if pid <= 0 {
		return ""
	}
	if exe, err := t.fsys.Readlink(strconv.Itoa(pid) + "/exe"); err == nil {
		if name := exeName(exe); name != "" {
			return name
		}
	}
	if st, err := t.stat(pid); err == nil {
		return st.comm
	}
	return ""
}

// exeName is the base name of an exe link's target, without the
// " (deleted)" the kernel appends when the file was removed.
func exeName(exe string) string {
	exe = strings.TrimSuffix(exe, " (deleted)")
	if exe == "" {
		return ""
	}
	return path.Base(exe)
}
