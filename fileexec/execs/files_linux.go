//go:build linux

package execs

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// fileKey names a version of a file: a write changes ctime, and ctime
// cannot be set back from user space.
type fileKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

// fileInfo is what an exec needs to know of one version of a file, read
// once.
type fileInfo struct {
	digest string // "sha256:<hex>"
	size   int64

	script   shebang
	isScript bool

	elf   elfHeader
	isELF bool
	// loaderByName: an ELF shared object without PT_INTERP whose SONAME
	// says it is a dynamic loader.
	loaderByName bool
	// knownLoader: the content of a loader the system's own programs name
	// in their PT_INTERP (Serve reads them when it starts).
	knownLoader bool

	// identity says what of the file's inode the verifier can compare:
	// its filesystem reports the inode's own numbers through stat.
	identity identityCheck
}

// loader reports whether the file is a dynamic loader: run as a command,
// it loads and runs the program its argv names.
func (i *fileInfo) loader() bool { return i.knownLoader || i.loaderByName }

// native reports whether the kernel runs the file itself (an ELF file of
// this machine) or as a #! script; anything else fails with ENOEXEC
// unless a binfmt_misc handler takes it.
func (i *fileInfo) native() bool { return i.isScript || i.isELF && nativeMachine(i.elf.machine) }

// identityCheck is what the verifier compares of the file the kernel ran.
type identityCheck uint8

const (
	identityNone   identityCheck = iota // an unknown filesystem: nothing
	identityInode                       // inode number, size, ctime
	identityDevice                      // and the device
)

// headSize is how much of a file is kept to recognise it: the kernel reads
// binprmBufSize; an ELF file's program headers usually follow its header.
const headSize = 4096

// files caches a fileInfo per fileKey. Bounded: when full, an arbitrary
// entry goes. Safe for concurrent use.
type files struct {
	mu      sync.Mutex
	max     int
	m       map[fileKey]*fileInfo
	reading map[fileKey]*fileRead // reads in flight: one per version
	loaders map[string]bool       // digests of the system's loaders
	fs      map[uint64]identityCheck
	reals   map[realKey]string
	// read reads a file (c.read); a test counts the reads.
	read func(fd int) (*fileInfo, error)
}

// fileRead is a read in flight, which later askers for the same version
// wait for: an exec that a signal interrupts is notified again, each time
// for the same file, and a large program (Claude Code's is 373 MB) must
// not be hashed once per notification.
type fileRead struct {
	done    chan struct{}
	info    *fileInfo
	err     error
	waiters int // askers waiting for it; guarded by files.mu
}

func newFiles(max int) *files {
	c := &files{max: max, m: make(map[fileKey]*fileInfo), reading: make(map[fileKey]*fileRead), loaders: make(map[string]bool),
		fs: make(map[uint64]identityCheck), reals: make(map[realKey]string)}
	c.read = c.readFile
	return c
}

// errNotRegular is an exec of something that is not a regular file: the
// kernel refuses it (EACCES).
var errNotRegular = errors.New("not a regular file")

// of returns the fileInfo of fd, an O_PATH descriptor of a regular file,
// with its version and link count: a version seen before costs an fstat;
// a new one is reopened and read.
func (c *files) of(fd int) (*fileInfo, fileKey, uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fileKey{}, 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fileKey{}, 0, errNotRegular
	}
	k := fileKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
	c.mu.Lock()
	info, ok := c.m[k]
	r := c.reading[k]
	if !ok && r == nil {
		r = &fileRead{done: make(chan struct{})}
		c.reading[k] = r
		c.mu.Unlock()
		r.info, r.err = c.readVersion(fd, st.Dev, k)
		c.mu.Lock()
		delete(c.reading, k)
		close(r.done)
	} else if !ok {
		r.waiters++
	}
	c.mu.Unlock()
	if ok {
		return info, k, uint64(st.Nlink), nil
	}
	<-r.done
	if r.err == nil {
		return r.info, k, uint64(st.Nlink), nil
	}
	// The reader's error may be its own descriptor's: read this one.
	info, err := c.readVersion(fd, st.Dev, k)
	if err != nil {
		return nil, k, 0, err
	}
	return info, k, uint64(st.Nlink), nil
}

// readVersion reads fd, version k of a file on device dev, and caches
// what it found.
func (c *files) readVersion(fd int, dev uint64, k fileKey) (*fileInfo, error) {
	info, err := c.read(fd)
	if err != nil {
		return nil, err
	}
	info.identity = c.identity(fd, dev)
	c.mu.Lock()
	defer c.mu.Unlock()
	info.knownLoader = c.loaders[info.digest]
	if len(c.m) >= c.max {
		for old := range c.m {
			delete(c.m, old)
			break
		}
	}
	c.m[k] = info
	return info, nil
}

// readFile hashes the file and recognises its format.
func (c *files) readFile(fd int) (*fileInfo, error) {
	rf, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer rf.Close()
	h := sha256.New()
	head := make([]byte, headSize)
	n, err := io.ReadFull(rf, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	head = head[:n]
	h.Write(head)
	rest, err := io.Copy(h, rf)
	if err != nil {
		return nil, err
	}
	info := &fileInfo{digest: "sha256:" + hex.EncodeToString(h.Sum(nil)), size: int64(n) + rest}
	info.script, info.isScript = parseShebang(head)
	if !info.isScript {
		info.elf, info.isELF = readELFHeader(rf)
		if info.isELF && !info.elf.hasInterp && info.elf.typ == elf.ET_DYN {
			info.loaderByName = loaderSONAME(rf, info.size)
		}
	}
	return info, nil
}

// realPath is the path of the file open in fd as /proc shows it (symlinks
// resolved; "/memfd:NAME (deleted)" for a memfd), remembered for the name
// it was opened by and its version: readlink of a descriptor is one of
// the dearer calls of an exec.
func (c *files) realPath(fd int, name string, k fileKey, nlink uint64) string {
	if nlink == 0 {
		real, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)) // no name to remember it by
		return real
	}
	rk := realKey{name: name, key: k}
	c.mu.Lock()
	real, ok := c.reals[rk]
	c.mu.Unlock()
	if ok {
		return real
	}
	real, _ = os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	c.mu.Lock()
	if len(c.reals) >= c.max {
		clear(c.reals)
	}
	c.reals[rk] = real
	c.mu.Unlock()
	return real
}

// realKey is a file's version and the name it was opened by.
type realKey struct {
	name string
	key  fileKey
}

// identity says what the verifier may compare of files on f's
// filesystem, where stat reports the inode's own numbers.
func (c *files) identity(fd int, dev uint64) identityCheck {
	c.mu.Lock()
	id, ok := c.fs[dev]
	c.mu.Unlock()
	if ok {
		return id
	}
	var s unix.Statfs_t
	if unix.Fstatfs(fd, &s) != nil {
		return identityNone
	}
	switch uint32(s.Type) {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.TMPFS_MAGIC, unix.RAMFS_MAGIC, unix.HUGETLBFS_MAGIC,
		unix.SQUASHFS_MAGIC, unix.EROFS_SUPER_MAGIC_V1, unix.F2FS_SUPER_MAGIC, unix.ISOFS_SUPER_MAGIC,
		unix.MSDOS_SUPER_MAGIC, unix.EXFAT_SUPER_MAGIC:
		id = identityDevice
	case unix.BTRFS_SUPER_MAGIC:
		id = identityInode // stat reports a subvolume's device, not the superblock's
	default:
		id = identityNone // overlayfs, network and FUSE filesystems: stat may not be the inode's
	}
	c.mu.Lock()
	c.fs[dev] = id
	c.mu.Unlock()
	return id
}

// markLoader records info, read from one of the system's loaders, as a
// known loader: other files with its content are loaders too.
func (c *files) markLoader(info *fileInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loaders[info.digest] = true
	for _, i := range c.m {
		if i.digest == info.digest {
			i.knownLoader = true
		}
	}
}
