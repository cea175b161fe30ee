package fileexec

import (
	"log/slog"
	"path"
	"strings"
	"time"

	"github.com/chaperone-dev/chaperone/event"
)

// Rules of the refusals Nested makes itself, and of the opens Files
// refuses through a nested namespace's mounts.
const (
	// RuleCgroupNS: a new cgroup namespace is refused to an agent that
	// runs as uid 0.
	RuleCgroupNS = "cgroup_namespace"
	// RuleNestedMounts: a new mount namespace, or a mount in one, that
	// file mediation cannot follow.
	RuleNestedMounts = "nested_mounts"
	// RuleNestedPath: a file opened through a mount of a nested namespace
	// that has no path in the session's own.
	RuleNestedPath = "nested_path"
)

// NestedOptions configures NewNested.
type NestedOptions struct {
	// Session is the session id put on every event.
	Session string
	// InSession says whether a process (by tgid) belongs to the session;
	// the calls of others run at once. Required.
	InSession func(pid int) bool
	// Process describes a session process for the events; nil leaves
	// them without one.
	Process func(pid int) (*event.Process, error)
	// Publish receives every refusal, before the call is answered; nil
	// drops them.
	Publish func(*event.Event)
	// Logger gets debug lines (namespaces marked) and warnings; nil
	// discards them.
	Logger *slog.Logger
	// Now stamps events; time.Now when nil.
	Now func() time.Time
	// Files is the session's file mediation, whose marks are carried into
	// the mount namespaces the session's processes make. Nil when opens
	// are not mediated: then there is nothing to carry, and the calls run
	// (but for NoCgroupNS's). WatchMounts's only: NewNested refuses
	// WatchFiles's.
	Files *Files
	// Cgroup is the session's cgroup v2 directory. Its processes are
	// frozen while a call that makes mounts completes and its mounts are
	// marked. Without it, with Files, a new mount namespace is refused.
	Cgroup string
	// NoCgroupNS refuses new cgroup namespaces: the agent runs as uid 0,
	// and could mount its cgroups afresh, writable, in one.
	NoCgroupNS bool
	// Patience bounds each wait on the session's processes (to stop, to
	// finish the call); 10 s when 0. A call that does not finish in time
	// is killed.
	Patience time.Duration
}

// nsCall is what a notified namespace or mount call does.
type nsCall uint8

const (
	nsNone    nsCall = iota
	nsUnshare        // unshare(flags)
	nsClone          // clone(flags, ...)
	nsMount          // mount, umount2, umount, pivot_root
)

// Namespace flags, the same on every architecture.
const (
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
)

// nsNumbers are the namespace and mount calls the session's filter
// notifies (internal/privdrop's filter lists the same), by ABI.
var nsNumbers = map[callKey]nsCall{
	{auditArchX86_64, 272}: nsUnshare, {auditArchX86_64, 56}: nsClone,
	{auditArchX86_64, 165}: nsMount, {auditArchX86_64, 166}: nsMount, {auditArchX86_64, 155}: nsMount,

	{auditArchI386, 310}: nsUnshare, {auditArchI386, 120}: nsClone,
	{auditArchI386, 21}: nsMount, {auditArchI386, 52}: nsMount, {auditArchI386, 22}: nsMount, {auditArchI386, 217}: nsMount,

	{auditArchAArch64, 97}: nsUnshare, {auditArchAArch64, 220}: nsClone,
	{auditArchAArch64, 40}: nsMount, {auditArchAArch64, 39}: nsMount, {auditArchAArch64, 41}: nsMount,

	{auditArchARM, 337}: nsUnshare, {auditArchARM, 120}: nsClone,
	{auditArchARM, 21}: nsMount, {auditArchARM, 52}: nsMount, {auditArchARM, 218}: nsMount,
}

// decodeNS returns what c does and, for unshare and clone, its flags.
func decodeNS(c Call) (nsCall, uint64) {
	k, ok := nsNumbers[callKey{c.Arch, c.Nr}]
	if !ok {
		return nsNone, 0
	}
	// The namespace flags are in the low half, on every ABI.
	return k, uint64(uint32(c.Args[0]))
}

func (k nsCall) String() string {
	switch k {
	case nsUnshare:
		return "unshare"
	case nsClone:
		return "clone"
	case nsMount:
		return "mount"
	}
	return "?"
}

// ownFS says whether a filesystem mounted afresh inside a nested
// namespace holds only what the agent put there (a tmpfs, or a FUSE
// filesystem whose server is the agent's, reading files through opens
// that are mediated), so that its files are decided by the path they have
// in that namespace. A stacked filesystem (overlayfs, whose files are the
// files of other mounts) is not.
func ownFS(fstype string) bool {
	return fstype == "tmpfs" || fstype == "ramfs" || fstype == "fuse" || strings.HasPrefix(fstype, "fuse.")
}

// userServed says whether a filesystem's lookups may wait on a process
// (a FUSE server), which a frozen session cannot answer.
func userServed(fstype string) bool {
	return fstype == "fuse" || fstype == "fuseblk" || strings.HasPrefix(fstype, "fuse.")
}

// inMount returns the path, in m's filesystem, of p, a path in m's
// namespace under m's mount point; ok is false when p is not under it.
func inMount(m mount, p string) (string, bool) {
	rel, ok := under(m.Point, p)
	if !ok || !strings.HasPrefix(m.Root, "/") {
		return "", false
	}
	return path.Join(m.Root, rel), true
}

// atMount returns the path, in m's namespace, of fsPath, a path in m's
// filesystem; ok is false when m does not show it (fsPath is not under
// the directory m mounts).
func atMount(m mount, fsPath string) (string, bool) {
	if !strings.HasPrefix(m.Root, "/") {
		return "", false
	}
	rel, ok := under(m.Root, fsPath)
	if !ok {
		return "", false
	}
	return path.Join(m.Point, rel), true
}

// under returns p relative to dir ("/" for dir itself) when p is dir or
// below it.
func under(dir, p string) (string, bool) {
	if dir == "/" {
		return p, strings.HasPrefix(p, "/")
	}
	if p == dir {
		return "/", true
	}
	if rest, ok := strings.CutPrefix(p, dir+"/"); ok {
		return "/" + rest, true
	}
	return "", false
}
