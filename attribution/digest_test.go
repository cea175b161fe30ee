package attribution

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// countingFS counts what ExeDigest opens and reads through it.
type countingFS struct {
	FS
	// onRead, when set, runs before each Read of an opened file.
	onRead func()

	mu      sync.Mutex
	opens   int
	read    int64 // bytes
	maxRead int   // the largest single Read
}

func (c *countingFS) Open(name string) (fs.File, error) {
	f, err := c.FS.(Opener).Open(name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.opens++
	c.mu.Unlock()
	return &countingFile{File: f, c: c}, nil
}

func (c *countingFS) counts() (opens int, read int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opens, c.read
}

type countingFile struct {
	fs.File
	c *countingFS
}

func (f *countingFile) Read(p []byte) (int, error) {
	if f.c.onRead != nil {
		f.c.onRead()
	}
	n, err := f.File.Read(p)
	f.c.mu.Lock()
	f.c.read += int64(n)
	f.c.maxRead = max(f.c.maxRead, len(p))
	f.c.mu.Unlock()
	return n, err
}

// noOpenFS hides the Opener of the FS it wraps.
type noOpenFS struct{ FS }

func sha256Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func writeFile(t testing.TB, name string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestExeDigestFake(t *testing.T) {
	f := newFakeProc(t)
	bins := t.TempDir()
	small := []byte("#!/bin/true\n")
	large := make([]byte, 5*digestBufSize+123) // read in several chunks
	for i := range large {
		large[i] = byte(i * 7)
	}
	writeFile(t, filepath.Join(bins, "tool"), small)
	writeFile(t, filepath.Join(bins, "big"), large)
	writeFile(t, filepath.Join(bins, "empty"), nil)
	// A regular file standing in for the exe link, and links to files.
	writeFile(t, filepath.Join(f.root, "10/exe"), small)
	f.add(fakeProcess{pid: 11, ppid: 1, comm: "tool", startTicks: 2, exe: filepath.Join(bins, "tool")})
	f.add(fakeProcess{pid: 12, ppid: 1, comm: "big", startTicks: 2, exe: filepath.Join(bins, "big")})
	f.add(fakeProcess{pid: 13, ppid: 1, comm: "empty", startTicks: 2, exe: filepath.Join(bins, "empty")})
	f.add(fakeProcess{pid: 14, ppid: 1, comm: "gone", startTicks: 2, exe: filepath.Join(bins, "missing")})
	f.add(fakeProcess{pid: 15, ppid: 1, comm: "dir", startTicks: 2, exe: bins})
	f.add(fakeProcess{pid: 16, ppid: 2, comm: "kworker", startTicks: 2}) // no exe

	tests := []struct {
		name    string
		fsys    FS
		pid     int
		want    string
		wantErr error // nil: no error; errAny: some error
	}{
		{name: "regular file", pid: 10, want: sha256Digest(small)},
		{name: "link", pid: 11, want: sha256Digest(small)},
		{name: "large", pid: 12, want: sha256Digest(large)},
		{name: "empty", pid: 13, want: sha256Digest(nil)},
		{name: "target gone", pid: 14, wantErr: ErrNotFound},
		{name: "no exe", pid: 16, wantErr: ErrNotFound},
		{name: "no process", pid: 999, wantErr: ErrNotFound},
		{name: "pid 0", pid: 0, wantErr: ErrNotFound},
		{name: "directory", pid: 15, wantErr: errAny},
		{name: "fs without Opener", fsys: noOpenFS{DirFS(f.root)}, pid: 10, wantErr: errors.ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := tt.fsys
			if fsys == nil {
				fsys = DirFS(f.root)
			}
			got, err := NewTable(fsys).ExeDigest(tt.pid)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("ExeDigest(%d) error = %v", tt.pid, err)
			case tt.wantErr == errAny && err == nil, tt.wantErr != nil && tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Fatalf("ExeDigest(%d) = %q, %v; want error %v", tt.pid, got, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("ExeDigest(%d) = %q, want %q", tt.pid, got, tt.want)
			}
		})
	}
}

var errAny = errors.New("any error")

// needFileIdentity skips a test of the digest cache where files have no
// identity to cache by.
func needFileIdentity(t *testing.T, name string) {
	t.Helper()
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := exeKeyOf(fi); !ok {
		t.Skip("no file identity (device, inode, times) on this system: ExeDigest does not cache")
	}
}

func TestExeDigestStreams(t *testing.T) {
	f := newFakeProc(t)
	big := make([]byte, 3<<20)
	writeFile(t, filepath.Join(f.root, "10/exe"), big)
	c := &countingFS{FS: DirFS(f.root)}
	got, err := NewTable(c).ExeDigest(10)
	if err != nil {
		t.Fatal(err)
	}
	if want := sha256Digest(big); got != want {
		t.Errorf("ExeDigest = %q, want %q", got, want)
	}
	if _, read := c.counts(); read != int64(len(big)) || c.maxRead > digestBufSize {
		t.Errorf("read %d bytes in reads of up to %d, want %d in reads of up to %d", read, c.maxRead, len(big), digestBufSize)
	}
}

func TestExeDigestCache(t *testing.T) {
	f := newFakeProc(t)
	bins := t.TempDir()
	tool := filepath.Join(bins, "tool")
	v1, v2, v3 := []byte("version one"), []byte("version two"), []byte("version three")
	writeFile(t, tool, v1)
	needFileIdentity(t, tool)
	// Two processes running the same file: the second is a cache hit.
	f.add(fakeProcess{pid: 10, ppid: 1, comm: "tool", startTicks: 2, exe: tool})
	f.add(fakeProcess{pid: 11, ppid: 1, comm: "tool", startTicks: 3, exe: tool})
	c := &countingFS{FS: DirFS(f.root)}
	tbl := NewTable(c)

	steps := []struct {
		name     string
		change   func(t *testing.T)
		pid      int
		want     string
		wantRead int64 // bytes read by this step
	}{
		{name: "cold", pid: 10, want: sha256Digest(v1), wantRead: int64(len(v1))},
		{name: "same pid", pid: 10, want: sha256Digest(v1)},
		{name: "other pid same file", pid: 11, want: sha256Digest(v1)},
		{name: "rewritten in place, same size", change: func(t *testing.T) {
			writeFile(t, tool, []byte("version 1ne"))
			// Filesystems with coarse timestamps would keep the mtime.
			if err := os.Chtimes(tool, time.Time{}, time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
		}, pid: 10, want: sha256Digest([]byte("version 1ne")), wantRead: int64(len(v1))},
		{name: "replaced by rename", change: func(t *testing.T) {
			writeFile(t, tool+".new", v2)
			if err := os.Rename(tool+".new", tool); err != nil {
				t.Fatal(err)
			}
		}, pid: 11, want: sha256Digest(v2), wantRead: int64(len(v2))},
		{name: "grown", change: func(t *testing.T) {
			writeFile(t, tool, v3)
		}, pid: 11, want: sha256Digest(v3), wantRead: int64(len(v3))},
		{name: "warm again", pid: 10, want: sha256Digest(v3)},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.change != nil {
				s.change(t)
			}
			opens0, read0 := c.counts()
			got, err := tbl.ExeDigest(s.pid)
			if err != nil {
				t.Fatal(err)
			}
			if got != s.want {
				t.Errorf("ExeDigest(%d) = %q, want %q", s.pid, got, s.want)
			}
			opens, read := c.counts()
			if opens-opens0 != 1 || read-read0 != s.wantRead {
				t.Errorf("ExeDigest opened %d times and read %d bytes, want 1 and %d", opens-opens0, read-read0, s.wantRead)
			}
		})
	}
}

func TestExeDigestConcurrentReadsOnce(t *testing.T) {
	f := newFakeProc(t)
	tool := filepath.Join(t.TempDir(), "cc")
	content := make([]byte, 1<<20)
	writeFile(t, tool, content)
	needFileIdentity(t, tool)
	const procs = 16
	for i := range procs {
		f.add(fakeProcess{pid: 100 + i, ppid: 1, comm: "cc", startTicks: 2, exe: tool})
	}
	c := &countingFS{FS: DirFS(f.root)}
	tbl := NewTable(c)
	var wg sync.WaitGroup
	errs := make(chan error, procs)
	for i := range procs {
		wg.Go(func() {
			d, err := tbl.ExeDigest(100 + i)
			if err == nil && d != sha256Digest(content) {
				err = errors.New("wrong digest " + d)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if _, read := c.counts(); read != int64(len(content)) {
		t.Errorf("%d concurrent digests read %d bytes, want the file once (%d)", procs, read, len(content))
	}
}

func TestExeDigestChangedWhileRead(t *testing.T) {
	f := newFakeProc(t)
	tool := filepath.Join(t.TempDir(), "tool")
	writeFile(t, tool, make([]byte, 3*digestBufSize))
	f.add(fakeProcess{pid: 10, ppid: 1, comm: "tool", startTicks: 2, exe: tool})
	var once sync.Once
	c := &countingFS{FS: DirFS(f.root), onRead: func() {
		once.Do(func() {
			fh, err := os.OpenFile(tool, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Error(err)
				return
			}
			defer fh.Close()
			if _, err := fh.Write([]byte("appended")); err != nil {
				t.Error(err)
			}
		})
	}}
	tbl := NewTable(c)
	if d, err := tbl.ExeDigest(10); err == nil {
		t.Fatalf("ExeDigest of a file that grew while read = %q, want an error", d)
	}
	// Nothing was cached: the next call reads the file as it is now.
	want, err := os.ReadFile(tool)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tbl.ExeDigest(10)
	if err != nil {
		t.Fatal(err)
	}
	if got != sha256Digest(want) {
		t.Errorf("ExeDigest after the change = %q, want %q", got, sha256Digest(want))
	}
}

func TestExeDigestCacheBounded(t *testing.T) {
	f := newFakeProc(t)
	needFileIdentity(t, f.root)
	const n = maxDigests + 10
	for i := range n {
		writeFile(t, filepath.Join(f.root, strconv.Itoa(100+i), "exe"), []byte(strconv.Itoa(i)))
	}
	tbl := NewTable(DirFS(f.root))
	for i := range n {
		if _, err := tbl.ExeDigest(100 + i); err != nil {
			t.Fatal(err)
		}
	}
	tbl.mu.Lock()
	defer tbl.mu.Unlock()
	if len(tbl.digests) != maxDigests || len(tbl.digesting) != 0 {
		t.Errorf("after %d files the cache holds %d digests and %d in progress, want %d and 0", n, len(tbl.digests), len(tbl.digesting), maxDigests)
	}
}

// BenchmarkExeDigest compares a digest read from the file (cold, a new
// Table each time) with one from the cache (warm) for this test binary.
func BenchmarkExeDigest(b *testing.B) {
	if _, err := os.ReadFile("/proc/self/stat"); err != nil {
		b.Skipf("no readable /proc: %v", err)
	}
	pid := os.Getpid()
	fi, err := os.Stat("/proc/self/exe")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("cold", func(b *testing.B) {
		b.SetBytes(fi.Size())
		for b.Loop() {
			if _, err := NewTable(OSProc()).ExeDigest(pid); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("warm", func(b *testing.B) {
		tbl := NewTable(OSProc())
		if _, err := tbl.ExeDigest(pid); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := tbl.ExeDigest(pid); err != nil {
				b.Fatal(err)
			}
		}
	})
}
