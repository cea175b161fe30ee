package session

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/fileexec"
	"github.com/chaperone-dev/chaperone/fileexec/execs"
	"github.com/chaperone-dev/chaperone/policy"
)

// startMediation protects Chaperone's files in pid's mount namespace,
// watches its mounts for file opens and serves the notifications of
// listener: execs, and the links, renames and truncations of fileexec's
// Calls.
func startMediation(pid int, listener *os.File, o mediationOptions) (stops []func(), err error) {
	inSession := o.inSession
	if o.fileInSession != nil {
		inSession = o.fileInSession
	}
	// The agent must not rewrite its own policy nor the record of what it
	// did: without that protection the session does not start.
	prot, err := fileexec.NewProtected(o.protect, policy.CredentialFiles(o.info.Home))
	if err != nil {
		return nil, fmt.Errorf("session: protect Chaperone's files: %w", err)
	}
	if err := fileexec.MountProtection(pid, prot); err != nil {
		return nil, fmt.Errorf("session: protect Chaperone's files: %w", err)
	}
	// A directory of more files than this is marked ahead only this far.
	markAhead := 4096
	if o.noAhead {
		markAhead = 0
	}
	fo := fileexec.FileOptions{
		Session:      o.session,
		InSession:    inSession,
		Process:      o.process,
		Decider:      event.DeciderFunc(o.decide),
		Publish:      o.publish,
		Logger:       o.log,
		Ignore:       ignoredPath,
		Static:       o.static,
		Ahead:        markAhead,
		StaticLinked: o.staticLinked,
		Alias:        prot.Alias,
		Protected:    prot,
	}
	files, err := fileexec.WatchMounts(pid, fo)
	switch {
	case errors.Is(err, fileexec.ErrUnavailable):
		fmt.Fprintf(o.stderr, "chaperone: file opens are not mediated: %v\n", err)
	case err != nil:
		return nil, fmt.Errorf("session: file mediation: %w", err)
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
	calls, err := fileexec.NewCalls(fo, files)
	if err != nil {
		listener.Close()
		return stops, fmt.Errorf("run: file mediation: %w", err)
	}
	// The agent's own sandboxes: the mounts of the namespaces it makes
	// are marked as they appear.
	nested, err := fileexec.NewNested(fileexec.NestedOptions{
		Session: o.session, InSession: inSession, Process: o.process, Publish: o.publish, Logger: o.log,
		Files: files, Cgroup: o.cgroup, NoCgroupNS: o.agentRoot,
	})
	if err != nil {
		listener.Close()
		return stops, fmt.Errorf("session: file mediation: %w", err)
	}
	x, err := execs.Serve(listener, execs.ExecOptions{
		Session:   o.session,
		InSession: inSession, // the filter is the session's: its mount namespace says it at once
		Process:   o.process,
		Decider:   event.DeciderFunc(o.decide),
		Publish:   o.publish,
		Logger:    o.log,
		Other: func(ctx context.Context, n execs.Notification) {
			c := fileexec.Call{TID: n.TID, Arch: n.Arch, Nr: n.Nr, Args: n.Args}
			if nested.Handles(c) {
				nested.Handle(ctx, c, n)
				return
			}
			calls.Handle(ctx, c, n)
		},
	})
	if err != nil {
		listener.Close()
		return stops, fmt.Errorf("session: exec mediation: %w", err)
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
