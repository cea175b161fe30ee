//go:build linux

package fileexec

import (
	"os"
	"path"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/chaperone-dev/chaperone/event"
)

// aheadOf marks ahead, on a goroutine of its own, more of the files of
// the directory of path, a file whose open was just ignore-marked (st its
// stat): a tree walked for the first time (grep -r, an indexer, a build)
// then costs a few round trips per directory, not one per file. Each file
// is marked exactly as if it had been opened and allowed: only when
// Static (or Ignore) says every open of it for reading and writing is
// allowed, a regular file with one link — or more when StaticLinked
// allows —, not protected and not another path to a protected file
// (Alias), its inode checked after it was opened. A file made in the
// directory later is not marked: its first open is decided. Not in a
// session that made mount namespaces of its own (Nested): its paths are
// not the session's.
//
// The bet is that a directory one file was opened in will see more of
// them opened; a wrong one costs a few microseconds an entry (a cache
// directory of thousands, a few of them used). So each mark in the
// directory walks twice as far as the one before: 16 entries, then 32,
// 64 and so on up to Ahead, and marking ahead stops at half CacheSize
// marks, where it would start evicting the marks of opens.
func (f *Files) aheadOf(p string, st *unix.Stat_t, gen uint64) {
	if f.o.Ahead <= 0 || f.mainRoot < 0 || f.nestedSeen.Load() || f.o.Static == nil {
		return
	}
	dir, base := path.Split(p)
	if dir != "/" {
		dir = dir[:len(dir)-1]
	}
	f.markMu.Lock()
	a := f.ahead[dir]
	if a == nil || a.gen != gen {
		if len(f.ahead) >= f.o.CacheSize {
			clear(f.ahead)
		}
		a = &aheadDir{gen: gen}
		f.ahead[dir] = a
	}
	a.marks++
	limit := min(f.o.Ahead, firstAhead<<min(a.marks-1, 20))
	if a.walking || a.done >= limit || f.gen.Load() != gen || f.closing || len(f.marked) >= f.o.CacheSize/2 {
		f.markMu.Unlock()
		return
	}
	a.walking = true
	from := a.done
	f.markMu.Unlock()
	f.handlers.Add(1) // from a handler: Close waits for both
	go func() {
		defer f.handlers.Done()
		done := f.markAhead(dir, base, from, limit, st, gen)
		f.markMu.Lock()
		a.walking = false
		a.done = max(a.done, done)
		f.markMu.Unlock()
	}()
}

// firstAhead is how many entries a directory's first mark walks.
const firstAhead = 16

// aheadDir is what was marked ahead of one directory (by its path), under
// one policy (gen): marks counts the opens marked in it, done the entries
// walked. markMu guards it.
type aheadDir struct {
	gen         uint64
	marks, done int
	walking     bool
}

// markAhead marks the entries from the from-th to the limit-th of dir,
// where base is the file of stat st just opened, and returns how far it
// got: limit, Ahead when the directory has no more, or from when it could
// not be walked.
func (f *Files) markAhead(dir, base string, from, limit int, st *unix.Stat_t, gen uint64) int {
	// The directory as the session sees it, and the file's parent: its
	// entry base is the inode that was opened.
	dfd, err := unix.Openat2(f.mainRoot, dir, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		f.log.Debug("fileexec: directory to mark ahead not opened", "path", dir, "err", err)
		return from
	}
	d := os.NewFile(uintptr(dfd), dir)
	defer d.Close()
	var est unix.Stat_t
	if unix.Fstatat(dfd, base, &est, unix.AT_SYMLINK_NOFOLLOW) != nil || est.Dev != st.Dev || est.Ino != st.Ino {
		return from
	}
	entries, _ := d.ReadDir(limit) // what could be read
	if len(entries) < limit {
		limit = f.o.Ahead // no more to walk
	}
	for _, e := range entries[min(from, len(entries)):] {
		if f.ctx.Err() != nil || f.gen.Load() != gen {
			return from
		}
		if name := e.Name(); name != base && e.Type().IsRegular() && !f.markEntry(dfd, dir, name, uint64(st.Dev), gen) {
			return limit // no more marks to be had
		}
	}
	return limit
}

// markEntry ignore-marks file name of directory dfd (dir, on device dev)
// for FAN_OPEN_PERM when the file qualifies as markStatic's do. It
// reports false when no more may be marked ahead (half CacheSize).
func (f *Files) markEntry(dfd int, dir, name string, dev, gen uint64) bool {
	p := dir + "/" + name
	if dir == "/" {
		p = dir + name
	}
	if f.o.Ignore == nil || !f.o.Ignore(p) {
		k := staticKey{path: p}
		if f.notStatic.Contains(k) {
			return true
		}
		// No open was decided: every access is the policy's to answer.
		if !f.o.Static(p, "", event.Verdict{}) {
			f.markMu.Lock()
			if f.gen.Load() == gen {
				f.notStatic.Add(k, struct{}{})
			}
			f.markMu.Unlock()
			return true
		}
	}
	fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return true
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || uint64(st.Dev) != dev || !f.linksAllowed(&st, p, "") {
		return true
	}
	id := fileID{uint64(st.Dev), st.Ino}
	if f.o.Protected.Protects(id, p) {
		return true
	}
	if f.o.Alias != nil {
		if _, ok := f.o.Alias(id.dev, id.ino, p); ok {
			return true
		}
	}
	f.markMu.Lock()
	full := len(f.marked) >= f.o.CacheSize/2
	f.markMu.Unlock()
	if full {
		return false
	}
	// fanotify_mark takes no O_PATH fd as its object: its magic link.
	f.ignoreMark(inodeKey{dev: id.dev, ino: id.ino}, unix.FAN_OPEN_PERM, gen, f.procFD, strconv.Itoa(fd), p)
	return true
}
