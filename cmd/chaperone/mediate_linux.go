package main

import (
	"errors"
	"fmt"
	"os"

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
		InSession: o.inSession,
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
