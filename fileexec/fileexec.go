package fileexec

import (
	"errors"
	"log/slog"
	"time"

	"github.com/chaperone-dev/chaperone/event"
)

// ErrUnavailable is wrapped by WatchMounts's and WatchFiles's error when fanotify permission
// events cannot be used here: not Linux, not root (CAP_SYS_ADMIN), or a
// kernel without them.
var ErrUnavailable = errors.New("fanotify permission events unavailable (needs linux and root)")

// FileOptions configures WatchMounts and WatchFiles. InSession, Process
// and Decider are required.
type FileOptions struct {
	// Session is the session id put on every event.
	Session string
	// InSession says whether a process (by tgid) belongs to the session.
	// Opens by other processes are allowed at once, never decided nor
	// published. It must return promptly and must not open files.
	InSession func(pid int) bool
	// Process describes a session process. It is called for every open by
	// a session process that is not ignored (its Exe is part of the cache
	// key), so it should be cheap; it must return promptly.
	Process func(pid int) (*event.Process, error)
	// Decider decides a file event. It may take long (a person may be
	// asked); its context is cancelled by Close. Only an allow or rewrite
	// verdict lets the open through.
	Decider event.Decider
	// Publish receives every decided event, with its verdict, after the
	// decision; not the opens answered from the cache. Nil publishes
	// nothing.
	Publish func(*event.Event)
	// Logger gets debug lines (mounts skipped) and warnings (events that
	// could not be read); nil discards them.
	Logger *slog.Logger
	// Now stamps events; time.Now when nil.
	Now func() time.Time
	// CacheSize bounds the verdicts cached per (path, access, exe), and the
	// files ignore-marked for Static at once; 65536 when 0.
	CacheSize int
	// Ignore, when set, names paths that are allowed at once and never
	// decided nor published (for example under /dev/shm).
	Ignore func(path string) bool
	// Static, when set, says whether every open of path by any session
	// process, for reading or writing (access read or write), or for
	// executing (access exec), is allowed whatever the process: then
	// Chaperone stops being asked about such opens of that file (an ignore
	// mark on its inode) until the file is modified or Forget is called.
	// An exec is still decided by the execs package. It is called on
	// handler goroutines after an open of path for access was allowed with
	// v (the verdict it was given, so that access need not be decided
	// again), and must return promptly. Marking ahead (Ahead) asks it
	// about files no open was decided for: access is then empty and v the
	// zero Verdict, and every access is the policy's to answer. WatchFiles
	// does not use it.
	Static func(path string, access event.FileAccess, v event.Verdict) bool
	// StaticLinked, when set, says whether a file with more than one link
	// that Static holds for (opened as path; access FileExec for its
	// opens to be executed, else empty: any open) may be ignore-marked all
	// the same: the mark holds the inode, so its opens by every other path
	// go unasked too. That is sound when those opens can give the session
	// nothing the path's cannot: the session cannot write the file, and
	// reads it here anyway (execs are decided by the execs package,
	// whatever the path). Nil: such files are never marked. It is asked
	// after Static, on handler goroutines, and must return promptly.
	StaticLinked func(path string, access event.FileAccess) bool
	// Ahead, when positive, marks ahead: once an open's file is
	// ignore-marked for Static, more entries of its directory are asked
	// about (Static, or Ignore) and those that qualify are ignore-marked
	// as if each had been opened and allowed, on a goroutine of their own
	// after the open is answered: 16 entries for the directory's first
	// mark, twice as many for each next one, up to Ahead; none once half
	// CacheSize files are marked. A tree walked for the first time then
	// costs a few round trips per directory. A file made in the directory
	// later is decided when first opened. Not in a session whose processes
	// made mount namespaces of their own (Nested). WatchFiles does not use
	// it.
	Ahead int
	// Alias, when set, names the path an opened file (its device and
	// inode) is to be decided as, when that is not the path it was opened
	// by: a protected file hard-linked or renamed elsewhere is decided as
	// itself. It is asked of every open decided or looked up, before the
	// cache, and must return promptly.
	Alias func(dev, ino uint64, path string) (orig string, ok bool)
	// Protected, when set, names the files no session process may open
	// for what its Protection forbids, whatever the policy: such an open is
	// denied (RuleProtected) without a decision, and published. Its files
	// are never ignore-marked. Links, renames and truncations are Call's.
	Protected *Protected
}

// FileStats counts what a Files has answered since WatchMounts or
// WatchFiles.
type FileStats struct {
	Mounts    int    // mounts marked (WatchMounts)
	Files     int    // files and directories marked, each inode once (WatchFiles, AddPaths)
	Events    uint64 // permission events answered, from any process
	Outside   uint64 // allowed at once: the process is not in the session (or is Chaperone itself)
	Ignored   uint64 // allowed at once: Ignore matched the path
	ExecOpens uint64 // allowed at once: an exec's FAN_OPEN_PERM, after its FAN_OPEN_EXEC_PERM was allowed
	CacheHits uint64 // answered from a cached verdict (or a decision another open was waiting for), not published
	Denied    uint64 // answered with deny, for any reason
	Static    uint64 // ignore marks added for Static (a file modified and opened again counts again)
}

const defaultCacheSize = 65536

// maxDeciding bounds the Decide calls running at once; further opens wait
// (their process stays blocked) until one returns.
const maxDeciding = 64

// cacheKey identifies a decision that can be reused: the same program
// opening the same path the same way.
type cacheKey struct {
	path   string
	access event.FileAccess
	exe    string
}

// stoppedVerdict is the verdict of an open still waiting when Close is
// called.
func stoppedVerdict() event.Verdict {
	return event.Verdict{Action: event.Deny, Reason: "file mediation stopped before a decision was reached"}
}
