package attribution

import (
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// OSProc returns the real /proc.
func OSProc() FS { return dirFS("/proc") }

// readFile reads the file at p whole. Files under /proc are read for every
// new process of a session: this costs an open, reads and a close, without
// the poller registration and stat of os.ReadFile.
func readFile(p string) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 1024)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: p, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// statPath stats the file name leads to (following links, as PID/exe is
// one) through an O_PATH descriptor: the file is not opened for reading,
// so no fanotify permission event is raised.
func (d dirFS) statPath(name string) (fs.FileInfo, error) {
	p, err := d.path("stat", name)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	return f.Stat()
}
