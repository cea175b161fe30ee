package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/chaperone-dev/chaperone/fileexec"
	"github.com/chaperone-dev/chaperone/fileexec/execs"
)

// startMediation watches the mounts of pid's mount namespace for file
// opens and serves the exec notifications of listener.
func startMediation(pid int, listener *os.File, o mediationOptions) (stops []func(), err error) {
	inSession := o.inSession
	if o.fileInSession != nil {
		inSession = o.fileInSession
	}
	files, err := fileexec.WatchMounts(pid, fileexec.FileOptions{
		Session:   o.session,
		InSession: inSession,
		Process:   o.process,
		Decide:    o.decide,
		Publish:   o.publish,
		Logger:    o.log,
		Ignore:    ignoredPath,
		Static:    o.static,
		Alias:     protectedFiles(o.info.Home, o.info.StateDir).alias,
	})
	switch {
	case errors.Is(err, fileexec.ErrUnavailable):
		fmt.Fprintf(o.stderr, "chaperone: file opens are not mediated: %v\n", err)
	case err != nil:
		return nil, fmt.Errorf("run: file mediation: %w", err)
	default:
		stops = append(stops, func() { files.Close() })
		if o.forget != nil {
			o.forget(func() {
				if err := files.Forget(); err != nil {
					o.log.Warn("file mediation: forget the old policy's marks", "err", err)
				}
			})
		}
	}
	if listener == nil {
		return stops, nil
	}
	x, err := execs.Serve(listener, execs.ExecOptions{
		Session:   o.session,
		InSession: inSession, // the filter is the session's: its mount namespace says it at once
		Process:   o.process,
		Decide:    o.decide,
		Publish:   o.publish,
		Logger:    o.log,
	})
	if err != nil {
		listener.Close()
		return stops, fmt.Errorf("run: exec mediation: %w", err)
	}
	return append(stops, func() { x.Close() }), nil
}

// writeDenied reports whether the kernel refuses the agent a write open of
// path by the file's permission bits, before fanotify would ask. A file
// with an access control list, or one that cannot be examined, is not
// known to be.
func writeDenied(path string, id ids) bool {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	if _, err := unix.Getxattr(path, "system.posix_acl_access", nil); !errors.Is(err, unix.ENODATA) {
		return false // an ACL (or xattrs we cannot read): the bits are not the whole story
	}
	return modeDeniesWrite(int(st.Uid), int(st.Gid), st.Mode, id)
}

// fileID names a file by its device and inode.
type fileID struct{ dev, ino uint64 }

// protected maps the files a policy guards by their path, as they are when
// the session starts, to that path: the user's credential files and
// Chaperone's state. A hard link to one, or the file renamed (or its
// directory), keeps the inode, and is decided as the original.
type protected map[fileID]string

// maxProtected bounds the files of the state directory remembered.
const maxProtected = 4096

// protectedFiles finds the files to protect under home and stateDir.
func protectedFiles(home, stateDir string) protected {
	p := protected{}
	add := func(path string) {
		if real, err := filepath.EvalSymlinks(path); err == nil {
			path = real
		}
		var st unix.Stat_t
		if len(p) < maxProtected && unix.Stat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			p[fileID{uint64(st.Dev), st.Ino}] = path
		}
	}
	if home != "" {
		for _, rel := range []string{".aws/credentials", ".netrc", ".config/gh/hosts.yml", ".docker/config.json", ".git-credentials"} {
			add(filepath.Join(home, rel))
		}
		keys, _ := filepath.Glob(filepath.Join(home, ".ssh", "id_*"))
		for _, k := range keys {
			if !strings.HasSuffix(k, ".pub") {
				add(k)
			}
		}
	}
	if stateDir != "" {
		filepath.WalkDir(stateDir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				add(path)
			}
			return nil
		})
	}
	return p
}

// alias implements fileexec.FileOptions.Alias.
func (p protected) alias(dev, ino uint64, path string) (string, bool) {
	orig, ok := p[fileID{dev, ino}]
	return orig, ok && orig != path
}
