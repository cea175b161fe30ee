//go:build linux

package fileexec

import (
	"os"
	"path"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/chaperone-dev/chaperone/event"
)

// aheadOf marks ahead, on a goroutine of its own, the other files of the
// directory of path, a file whose open was just ignore-marked (st its
// stat): a tree walked for the first time (grep -r, an indexer, a build)
// then costs one round trip per directory, not one per file. Each file is
// marked exactly as if it had been opened and allowed: only when Static
// (or Ignore) says every open of it for reading and writing is allowed, a
// regular file with one link — or more when StaticLinked allows —, its
// inode checked after it was opened. A file
// made in the directory later is not marked: its first open is decided.
// Not in a session that made mount namespaces of its own (Nested): its
// paths are not the session's.
func (f *Files) aheadOf(p string, st *unix.Stat_t, gen uint64) {
	if f.o.Ahead <= 0 || f.mainRoot < 0 || f.nestedSeen.Load() || f.o.Static == nil {
		return
	}
	f.handlers.Add(1) // from a handler: Close waits for both
	go func() {
		defer f.handlers.Done()
		f.markAhead(p, st, gen)
	}()
}

// markAhead is aheadOf's work, once per directory (until Forget or the
// marks' bound clears them all).
func (f *Files) markAhead(p string, st *unix.Stat_t, gen uint64) {
	dir, base := path.Split(p)
	if dir != "/" {
		dir = dir[:len(dir)-1]
	}
	// The directory as the session sees it, and the file's parent: its
	// entry base is the inode that was opened.
	dfd, err := unix.Openat2(f.mainRoot, dir, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		f.log.Debug("fileexec: directory to mark ahead not opened", "path", dir, "err", err)
		return
	}
	d := os.NewFile(uintptr(dfd), dir)
	defer d.Close()
	var dst, est unix.Stat_t
	if unix.Fstat(dfd, &dst) != nil || unix.Fstatat(dfd, base, &est, unix.AT_SYMLINK_NOFOLLOW) != nil ||
		est.Dev != st.Dev || est.Ino != st.Ino {
		return
	}
	key := inodeKey{dev: uint64(dst.Dev), ino: dst.Ino}
	f.markMu.Lock()
	if g, ok := f.ahead[key]; (ok && g == gen) || f.gen.Load() != gen || f.closing {
		f.markMu.Unlock()
		return
	}
	if len(f.ahead) >= f.o.CacheSize {
		clear(f.ahead)
	}
	f.ahead[key] = gen
	f.markMu.Unlock()

	entries, _ := d.ReadDir(f.o.Ahead) // what could be read
	for _, e := range entries {
		if f.ctx.Err() != nil || f.gen.Load() != gen {
			return
		}
		if name := e.Name(); name != base && e.Type().IsRegular() {
			f.markEntry(dfd, dir, name, uint64(st.Dev), gen)
		}
	}
}

// markEntry ignore-marks file name of directory dfd (dir, on device dev)
// for FAN_OPEN_PERM when the file qualifies as markStatic's do.
func (f *Files) markEntry(dfd int, dir, name string, dev, gen uint64) {
	p := dir + "/" + name
	if dir == "/" {
		p = dir + name
	}
	if f.o.Ignore == nil || !f.o.Ignore(p) {
		k := staticKey{path: p}
		if f.notStatic.Contains(k) {
			return
		}
		// No open was decided: every access is the policy's to answer.
		if !f.o.Static(p, "", event.Verdict{}) {
			f.markMu.Lock()
			if f.gen.Load() == gen {
				f.notStatic.Add(k, struct{}{})
			}
			f.markMu.Unlock()
			return
		}
	}
	fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || uint64(st.Dev) != dev || !f.linksAllowed(&st, p, "") {
		return
	}
	id := fileID{uint64(st.Dev), st.Ino}
	if f.o.Protected.Protects(id, p) {
		return
	}
	if f.o.Alias != nil {
		if _, ok := f.o.Alias(id.dev, id.ino, p); ok {
			return
		}
	}
	// fanotify_mark takes no O_PATH fd as its object: its magic link.
	f.ignoreMark(inodeKey{dev: id.dev, ino: id.ino}, unix.FAN_OPEN_PERM, gen, f.procFD, strconv.Itoa(fd), p)
}
