package fileexec

import (
	"slices"
	"strings"

	"github.com/chaperone-dev/chaperone/event"
)

// RuleProtected names the refusals made because a file is one a session
// protects whatever its policy says.
const RuleProtected = "protected_file"

// Protection is what a session's processes may not do to a file that
// Chaperone protects, whatever the policy says.
type Protection uint8

const (
	// NoWrite: the file may be read and run, never written, truncated,
	// linked, renamed or removed (the policy file, the config file, a
	// plugin).
	NoWrite Protection = iota + 1
	// NoAccess: not opened at all either (the audit log, Chaperone's state).
	NoAccess
)

// Protect names a file, or a directory tree, that a session protects.
type Protect struct {
	// Path is the file or directory; relative paths and symbolic links
	// are resolved when the set is made. A path that does not exist then
	// is left out.
	Path string
	// What it is, for reasons and events: "the policy file".
	What       string
	Protection Protection
	// Tree: Path is a directory, and every file under it, at any depth, is
	// protected as Protection (by path, and by inode for those there when
	// the set is made); no name in it may be removed, renamed or linked.
	Tree bool
}

// fileID names a file by its device and inode, as stat reports them.
type fileID struct{ dev, ino uint64 }

type protectedFile struct {
	Protect
	real   string // Path resolved
	prefix string // real + "/", for a tree
}

// Protected is the set of files a session protects, made by NewProtected
// when the session starts: each by its path and by its inode (a hard link
// made before, or the file reached after its directory was renamed, is
// still the file), with the directories on the way to each, whose names
// must stay. Besides, it remembers files the policy decides (the user's
// credential files) by their inode, so that one reached by another path is
// decided as itself (Alias).
//
// What it refuses it refuses whatever the policy: opens (FileOptions.
// Protected), and links, renames and truncations (Calls). In the
// session's mount namespace (MountProtection) each protected file is also
// mounted read-only over itself, and each directory on the way to it over
// itself, so that the kernel refuses writes (EROFS), removals and renames
// (EBUSY) and links (EXDEV) by any path and any means, io_uring's
// included. Its methods are safe for concurrent use; it does not change.
type Protected struct {
	files   map[string]*protectedFile // by real path (a tree by its root)
	ids     map[fileID]*protectedFile // by inode, the files of trees included
	trees   []*protectedFile
	names   map[string]bool   // directories on the way to a protected file (and tree roots), by real path
	nameIDs map[fileID]string // the same, by inode
	aliases map[fileID]string // files decided as themselves by the policy
	mounts  []Mount
}

// Mount is one mount MountProtection makes in the session's namespace,
// in order: the path over itself, read-only or not, with what is mounted
// under it (MS_BIND|MS_REC).
type Mount struct {
	Path     string
	ReadOnly bool
}

// Mounts returns the mounts that protect the set, in the order they are
// made: directories first, from the root down, then the files and trees.
func (p *Protected) Mounts() []Mount { return slices.Clone(p.mounts) }

// find returns the protected file that path (resolved) or id is, or the
// tree path is in.
func (p *Protected) find(id fileID, path string) *protectedFile {
	if p == nil {
		return nil
	}
	if f, ok := p.ids[id]; ok && id != (fileID{}) {
		return f
	}
	if f, ok := p.files[path]; ok {
		return f
	}
	return p.inTree(path)
}

// inTree returns the tree path is in, or nil.
func (p *Protected) inTree(path string) *protectedFile {
	if p == nil {
		return nil
	}
	for _, t := range p.trees {
		if path == t.real || strings.HasPrefix(path, t.prefix) {
			return t
		}
	}
	return nil
}

// refusal is why a protected file is refused to an action.
func (f *protectedFile) refusal(verb string) event.Verdict {
	what := f.What
	if what == "" {
		what = "a file Chaperone protects"
	}
	return event.Verdict{
		Action:    event.Deny,
		Rule:      RuleProtected,
		DecidedBy: event.DecidedByRule,
		Reason:    "the file is " + what + " (" + f.real + "), which the agent may not " + verb,
	}
}

// Open returns the verdict about an open of the file id at path for
// access, and true, when it is protected: NoAccess files are never
// opened; NoWrite files are opened to be read or run, not to be written
// (an access that could not be seen may be a write).
func (p *Protected) Open(id fileID, path string, access event.FileAccess) (event.Verdict, bool) {
	f := p.find(id, path)
	if f == nil {
		return event.Verdict{}, false
	}
	switch {
	case f.Protection == NoAccess:
		return f.refusal("open"), true
	case access == event.FileWrite || access == event.FileUnknown:
		return f.refusal("write"), true
	}
	return event.Verdict{}, false
}

// Protects reports whether the file id at path is protected, or is a
// directory whose name must stay: such a file is never ignore-marked.
func (p *Protected) Protects(id fileID, path string) bool {
	if p == nil {
		return false
	}
	_, name := p.nameIDs[id]
	return p.find(id, path) != nil || name || p.names[path]
}

// Alias returns the path the policy knew the file id by, when it is one of
// the files remembered for that (the user's credential files) and path is
// not that path: see FileOptions.Alias.
func (p *Protected) Alias(dev, ino uint64, path string) (string, bool) {
	if p == nil {
		return "", false
	}
	orig, ok := p.aliases[fileID{dev, ino}]
	return orig, ok && orig != path
}

// change is a link, rename or truncation as Files.Call sees it.
type change struct {
	op        string // "link", "rename" or "truncate"
	src       fileID
	srcPath   string // resolved
	dst       fileID // the target when it exists (rename over it, or RENAME_EXCHANGE)
	dstPath   string // the target's path: its directory resolved, and its name
	dstExists bool
}

// change returns the verdict about c when it touches a protected file:
// a protected file is never linked, renamed, renamed over or truncated; a
// directory on the way to one is never renamed nor renamed over; no name
// is added to, removed from or moved out of a protected tree.
func (p *Protected) change(c change) (event.Verdict, bool) {
	if p == nil {
		return event.Verdict{}, false
	}
	verb := map[string]string{"link": "link", "rename": "rename", "truncate": "truncate"}[c.op]
	if f := p.find(c.src, c.srcPath); f != nil {
		return f.refusal(verb), true
	}
	if c.op == "truncate" {
		return event.Verdict{}, false
	}
	if c.op == "rename" {
		if v, ok := p.nameRefusal(c.src, c.srcPath); ok {
			return v, true
		}
	}
	if c.dstExists {
		if f := p.find(c.dst, c.dstPath); f != nil {
			return f.refusal("replace"), true
		}
		if v, ok := p.nameRefusal(c.dst, c.dstPath); ok {
			return v, true
		}
	}
	if f := p.inTree(c.dstPath); f != nil {
		return f.refusal("add a name to"), true
	}
	return event.Verdict{}, false
}

// nameRefusal refuses moving a directory on the way to a protected file.
func (p *Protected) nameRefusal(id fileID, path string) (event.Verdict, bool) {
	name, ok := p.nameIDs[id]
	if !ok || id == (fileID{}) {
		if !p.names[path] {
			return event.Verdict{}, false
		}
		name = path
	}
	return event.Verdict{
		Action:    event.Deny,
		Rule:      RuleProtected,
		DecidedBy: event.DecidedByRule,
		Reason:    "the directory " + name + " leads to a file Chaperone protects: its name must stay",
	}, true
}
