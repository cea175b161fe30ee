package attribution

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
)

const (
	// maxDigests bounds the digest cache; an arbitrary entry is evicted when
	// it is full. A session runs a few hundred distinct programs at most.
	maxDigests = 1024
	// digestBufSize is the read size when hashing: executables are read in
	// chunks, never whole into memory.
	digestBufSize = 64 << 10
)

// exeKey identifies one version of one file. A file rewritten in place
// changes its mtime and ctime; one replaced by rename changes its inode.
type exeKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // nanoseconds since the epoch
}

// digestCall is a hash in progress that concurrent callers for the same
// file wait for instead of reading the file again.
type digestCall struct {
	done   chan struct{}
	digest string
	err    error
}

// ExeDigest returns "sha256:" and the hex SHA-256 of the executable pid runs
// now. It opens PID/exe through the FS, which on /proc is the file the
// kernel executed, even if its path was since replaced, renamed or removed.
//
// Digests are cached by the file's device, inode, size, mtime and ctime, so
// a program run many times (a compiler in a build) is read once; concurrent
// calls for the same file share one read. A cache hit costs an open and an
// fstat. Where the FS gives no such identity (not Linux), every call reads
// the file.
//
// The error wraps ErrNotFound when pid does not exist or has no executable
// (a kernel thread), and errors.ErrUnsupported when the FS is not an Opener.
func (t *Table) ExeDigest(pid int) (string, error) {
	op, ok := t.fsys.(Opener)
	if !ok {
		return "", fmt.Errorf("attribution: process %d: open exe: fs cannot open files: %w", pid, errors.ErrUnsupported)
	}
	if pid <= 0 {
		return "", fmt.Errorf("%w: process %d", ErrNotFound, pid)
	}
	if d, ok := t.cachedDigest(pid); ok {
		return d, nil
	}
	f, err := op.Open(strconv.Itoa(pid) + "/exe")
	if err != nil {
		return "", notFound(fmt.Errorf("attribution: process %d: open exe: %w", pid, err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("attribution: process %d: stat exe: %w", pid, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("attribution: process %d: exe is not a regular file (%v)", pid, fi.Mode().Type())
	}
	key, ok := exeKeyOf(fi)
	if !ok {
		d, _, err := hashExe(f, fi)
		if err != nil {
			return "", fmt.Errorf("attribution: process %d: %w", pid, err)
		}
		return d, nil
	}

	t.mu.Lock()
	if d, ok := t.digests[key]; ok {
		t.mu.Unlock()
		return d, nil
	}
	if c := t.digesting[key]; c != nil {
		t.mu.Unlock()
		<-c.done
		if c.err == nil {
			return c.digest, nil
		}
		// The other caller's read failed; its error may be its own (a
		// file that changed under it), so read through our fd.
		return t.digestAndStore(pid, f, fi, key)
	}
	c := &digestCall{done: make(chan struct{})}
	t.digesting[key] = c
	t.mu.Unlock()

	c.digest, c.err = t.digestAndStore(pid, f, fi, key)
	t.mu.Lock()
	delete(t.digesting, key)
	t.mu.Unlock()
	close(c.done)
	return c.digest, c.err
}

// cachedDigest looks pid's executable up in the cache without opening it
// for reading, where the FS can (statPath): an open for reading of a file
// on a mount watched by fanotify permission events, as the session's are,
// waits for the watcher, which may be this very process.
func (t *Table) cachedDigest(pid int) (string, bool) {
	sp, ok := t.fsys.(interface {
		statPath(name string) (fs.FileInfo, error)
	})
	if !ok {
		return "", false
	}
	fi, err := sp.statPath(strconv.Itoa(pid) + "/exe")
	if err != nil || !fi.Mode().IsRegular() {
		return "", false
	}
	key, ok := exeKeyOf(fi)
	if !ok {
		return "", false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	d, ok := t.digests[key]
	return d, ok
}

// digestAndStore hashes f and caches the digest under key when the file was
// the same version (same key) after the read as before it.
func (t *Table) digestAndStore(pid int, f fs.File, fi fs.FileInfo, key exeKey) (string, error) {
	d, after, err := hashExe(f, fi)
	if err != nil {
		return "", fmt.Errorf("attribution: process %d: %w", pid, err)
	}
	if k, ok := exeKeyOf(after); !ok || k != key {
		return "", fmt.Errorf("attribution: process %d: exe changed while it was read", pid)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.digests[key]; !ok && len(t.digests) >= maxDigests {
		for k := range t.digests {
			delete(t.digests, k)
			break
		}
	}
	t.digests[key] = d
	return d, nil
}

// hashExe reads f from its current offset (the start: it was just opened)
// to the end and returns its digest and its FileInfo after the read. The
// read must cover fi.Size() bytes exactly: a file that grew or shrank while
// read has no one digest.
func hashExe(f fs.File, fi fs.FileInfo) (string, fs.FileInfo, error) {
	h := sha256.New()
	buf := make([]byte, digestBufSize)
	// io.CopyBuffer would hand the copy to *os.File's WriterTo, which
	// ignores buf; a plain Reader keeps reads to buf's size.
	n, err := io.CopyBuffer(h, struct{ io.Reader }{f}, buf)
	if err != nil {
		return "", nil, fmt.Errorf("read exe: %w", err)
	}
	after, err := f.Stat()
	if err != nil {
		return "", nil, fmt.Errorf("stat exe: %w", err)
	}
	if n != fi.Size() || after.Size() != fi.Size() {
		return "", nil, fmt.Errorf("exe changed while it was read: read %d bytes of %d", n, fi.Size())
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), after, nil
}
