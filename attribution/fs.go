package attribution

import (
	"io/fs"
	"os"
)

// FS is the view of /proc the package reads. Names are slash-separated and
// relative to the root of /proc: "net/tcp", "1234/stat", "1234/fd/3".
// ReadDir(".") lists the root.
type FS interface {
	ReadFile(name string) ([]byte, error)
	ReadDir(name string) ([]fs.DirEntry, error)
	// Readlink returns the target of the symbolic link name, without
	// following it.
	Readlink(name string) (string, error)
}

// Opener is implemented by an FS that can also open a file for reading, as
// ExeDigest needs: opening PID/exe through /proc reaches the file the process
// runs even after the path on disk was replaced or removed. DirFS and OSProc
// implement it.
type Opener interface {
	Open(name string) (fs.File, error)
}

// DirFS returns an FS rooted at the directory root, which holds a tree laid
// out like /proc (tests build one under t.TempDir or testdata). Readlink reads
// a symbolic link inside root; its target need not exist. It is an Opener:
// Open follows symbolic links, so PID/exe may be a regular file or a link to
// one.
func DirFS(root string) FS { return dirFS(root) }

type dirFS string

func (d dirFS) path(op, name string) (string, error) {
	if !fs.ValidPath(name) {
		return "", &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		return string(d), nil
	}
	return string(d) + "/" + name, nil
}

func (d dirFS) ReadFile(name string) ([]byte, error) {
	p, err := d.path("read", name)
	if err != nil {
		return nil, err
	}
	return readFile(p)
}

func (d dirFS) ReadDir(name string) ([]fs.DirEntry, error) {
	p, err := d.path("readdir", name)
	if err != nil {
		return nil, err
	}
	return os.ReadDir(p)
}

// nameLister is implemented by an FS that lists a directory's names
// without sorting them or reading their types: a /proc/PID/fd of thousands
// of entries costs a fraction of ReadDir's time then.
type nameLister interface {
	ReadDirNames(name string) ([]string, error)
}

func (d dirFS) ReadDirNames(name string) ([]string, error) {
	p, err := d.path("readdir", name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

func (d dirFS) Readlink(name string) (string, error) {
	p, err := d.path("readlink", name)
	if err != nil {
		return "", err
	}
	return os.Readlink(p)
}

func (d dirFS) Open(name string) (fs.File, error) {
	p, err := d.path("open", name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err // never a typed nil *os.File in the interface
	}
	return f, nil
}
