//go:build linux

package fileexec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxProtected bounds the files of the trees remembered by inode.
const maxProtected = 4096

// NewProtected makes the set of files list names, as they are now, and
// remembers the files aliases names (the user's credential files) by
// their inode for Alias. Paths are made absolute and their symbolic links
// resolved; one that does not exist is left out, as is a file that is not
// a regular file (an audit log written to a pipe) and a tree that is not a
// directory. When two entries name the same file the stricter holds; a
// file in a tree is the tree's.
func NewProtected(list []Protect, aliases []string) (*Protected, error) {
	p := &Protected{
		files: map[string]*protectedFile{}, ids: map[fileID]*protectedFile{},
		names: map[string]bool{}, nameIDs: map[fileID]string{}, aliases: map[fileID]string{},
	}
	var trees, files []*protectedFile
	for _, pr := range list {
		if pr.Protection != NoWrite && pr.Protection != NoAccess {
			return nil, fmt.Errorf("fileexec: protect %s: no protection given", pr.Path)
		}
		if pr.Path == "" {
			continue
		}
		abs, err := filepath.Abs(pr.Path)
		if err != nil {
			return nil, fmt.Errorf("fileexec: protect %s: %w", pr.Path, err)
		}
		real, err := filepath.EvalSymlinks(abs)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("fileexec: protect %s: %w", pr.Path, err)
		}
		var st unix.Stat_t
		if err := unix.Stat(real, &st); err != nil {
			return nil, fmt.Errorf("fileexec: protect %s: %w", pr.Path, err)
		}
		f := &protectedFile{Protect: pr, real: real, prefix: real + "/"}
		switch typ := st.Mode & unix.S_IFMT; {
		case pr.Tree && typ == unix.S_IFDIR:
			trees = append(trees, f)
		case !pr.Tree && typ == unix.S_IFREG:
			files = append(files, f)
		}
	}
	// Trees first: a file in one is the tree's.
	for _, t := range trees {
		if old := p.files[t.real]; old != nil {
			old.Protection = max(old.Protection, t.Protection)
			continue
		}
		p.files[t.real] = t
		p.trees = append(p.trees, t)
	}
	for _, t := range p.trees {
		if p.inOtherTree(t) {
			continue
		}
		n := 0
		filepath.WalkDir(t.real, func(path string, d fs.DirEntry, err error) error {
			if err != nil || n >= maxProtected {
				return nil
			}
			var st unix.Stat_t
			if unix.Lstat(path, &st) == nil {
				p.ids[fileID{uint64(st.Dev), st.Ino}] = t
				n++
			}
			return nil
		})
		p.addNames(t.real)
	}
	for _, f := range files {
		if p.inTree(f.real) != nil {
			continue
		}
		if old := p.files[f.real]; old != nil {
			old.Protection = max(old.Protection, f.Protection)
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(f.real, &st); err != nil {
			return nil, fmt.Errorf("fileexec: protect %s: %w", f.Path, err)
		}
		p.files[f.real] = f
		p.ids[fileID{uint64(st.Dev), st.Ino}] = f
		p.addNames(filepath.Dir(f.real))
	}
	for _, a := range aliases {
		real, err := filepath.EvalSymlinks(a)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if len(p.aliases) < maxProtected && unix.Stat(real, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			p.aliases[fileID{uint64(st.Dev), st.Ino}] = real
		}
	}
	p.mounts = p.plan()
	return p, nil
}

// inOtherTree reports whether tree t lies inside another tree of p.
func (p *Protected) inOtherTree(t *protectedFile) bool {
	for _, o := range p.trees {
		if o != t && strings.HasPrefix(t.real, o.real+"/") {
			return true
		}
	}
	return false
}

// addNames remembers dir and the directories above it, up to "/"
// excluded, as names that must stay.
func (p *Protected) addNames(dir string) {
	for d := dir; d != "/" && d != "." && !p.names[d]; d = filepath.Dir(d) {
		p.names[d] = true
		var st unix.Stat_t
		if unix.Stat(d, &st) == nil {
			p.nameIDs[fileID{uint64(st.Dev), st.Ino}] = d
		}
	}
}

// plan lists the mounts that protect p: each directory whose name must
// stay over itself, as it is (read-write); each tree and file over itself,
// read-only; from the root down, so that each is made through the mounts
// above it.
func (p *Protected) plan() []Mount {
	var ms []Mount
	for d := range p.names {
		if t := p.inTree(d); t == nil || d == t.real {
			if _, isTree := p.files[d]; !isTree {
				ms = append(ms, Mount{Path: d})
			}
		}
	}
	for path := range p.files {
		ms = append(ms, Mount{Path: path, ReadOnly: true})
	}
	slices.SortFunc(ms, func(a, b Mount) int {
		if da, db := strings.Count(a.Path, "/"), strings.Count(b.Path, "/"); da != db {
			return da - db
		}
		return strings.Compare(a.Path, b.Path)
	})
	return ms
}

// MountProtection makes p's mounts (see Mounts) in the mount namespace of
// process pid, which must be a private one of its own that nothing runs in
// yet but the process itself, waiting (the session's, before its gate
// opens): that process must enter its working directory again afterwards,
// by its path, to see them from there. A mount that cannot be made is an
// error, and the namespace is then left as far as it got.
//
// The mounts are made by a thread of this process that enters that
// namespace and never leaves it: it ends with the call.
func MountProtection(pid int, p *Protected) error {
	if p == nil || len(p.mounts) == 0 {
		return nil
	}
	ns, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
	if err != nil {
		return fmt.Errorf("fileexec: protect: %w", err)
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, no longer like the others, ends
		// with this goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			errc <- fmt.Errorf("fileexec: protect: unshare the thread's fs: %w", err)
			return
		}
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNS); err != nil {
			errc <- fmt.Errorf("fileexec: protect: enter the session's mount namespace: %w", err)
			return
		}
		for _, m := range p.mounts {
			if err := mountOver(m); err != nil {
				errc <- fmt.Errorf("fileexec: protect %s: %w", m.Path, err)
				return
			}
		}
		errc <- nil
	}()
	return <-errc
}

// mountOver mounts m.Path over itself (with what is mounted under it),
// then, for ReadOnly, makes that mount read-only, keeping its other flags.
// Paths go through descriptors, so that each call acts on what was
// checked.
func mountOver(m Mount) error {
	fd, err := unix.Open(m.Path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	before, err := mountID(fd)
	unix.Close(fd)
	if err != nil {
		return err
	}
	if err := unix.Mount(m.Path, m.Path, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	if fd, err = unix.Open(m.Path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
		return err
	}
	defer unix.Close(fd)
	after, err := mountID(fd)
	if err != nil {
		return err
	}
	if after == before {
		return errors.New("the path does not reach the new mount")
	}
	if !m.ReadOnly {
		return nil
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return err
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
	for _, f := range [][2]uintptr{
		{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(sfs.Flags)&f[0] != 0 {
			flags |= f[1]
		}
	}
	if err := unix.Mount("", "/proc/self/fd/"+strconv.Itoa(fd), "", flags, ""); err != nil {
		return fmt.Errorf("make read-only: %w", err)
	}
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return err
	}
	if sfs.Flags&unix.ST_RDONLY == 0 {
		return errors.New("still writable")
	}
	return nil
}

// mountID is the id of the mount fd is on.
func mountID(fd int) (uint64, error) {
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &st); err != nil {
		return 0, err
	}
	if st.Mask&unix.STATX_MNT_ID == 0 {
		return 0, errors.New("statx: no mount id")
	}
	return st.Mnt_id, nil
}
