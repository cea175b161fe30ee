//go:build linux

package execs

import (
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// dirIndex lists the regular files of program directories by size, per
// version of the directory (its inode and mtime), so that looking a
// nameless program's content up costs a directory read only when the
// directory changed. Bounded; safe for concurrent use.
type dirIndex struct {
	mu  sync.Mutex
	max int
	m   map[dirKey]map[int64][]string
}

type dirKey struct {
	dev, ino uint64
	mtime    unix.Timespec
}

func newDirIndex(max int) *dirIndex {
	return &dirIndex{max: max, m: make(map[dirKey]map[int64][]string)}
}

// ofSize returns the names of the files in dir (as process r sees it)
// whose size is size, following symlinks.
func (d *dirIndex) ofSize(r *request, dir string, size int64) []string {
	fd, err := r.open(dir, atFDCWD)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	k := dirKey{dev: st.Dev, ino: st.Ino, mtime: st.Mtim}
	d.mu.Lock()
	bySize, ok := d.m[k]
	d.mu.Unlock()
	if !ok {
		bySize = listBySize(fd)
		d.mu.Lock()
		if len(d.m) >= d.max {
			clear(d.m)
		}
		d.m[k] = bySize
		d.mu.Unlock()
	}
	return bySize[size]
}

// listBySize reads the directory open (O_PATH) in fd.
func listBySize(fd int) map[int64][]string {
	bySize := map[int64][]string{}
	dir, err := os.Open("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return bySize
	}
	defer dir.Close()
	names, _ := dir.Readdirnames(-1)
	for _, n := range names {
		var st unix.Stat_t
		if unix.Fstatat(int(dir.Fd()), n, &st, 0) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			bySize[st.Size] = append(bySize[st.Size], n)
		}
	}
	return bySize
}
