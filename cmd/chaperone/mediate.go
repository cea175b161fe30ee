package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/privdrop"
	"github.com/chaperone-dev/chaperone/proxy"
)

// mediationOptions is what file and exec mediation need from the session.
type mediationOptions struct {
	session   string
	info      *event.Session
	inSession func(pid int) bool
	process   func(pid int) (*event.Process, error)
	decider   proxy.Decider
	publish   func(*event.Event)
	log       *slog.Logger
	stderr    io.Writer
}

// decide is the decider as file and exec events see it: every event
// carries the session (its working tree, home and state directory, for
// the policy), and what is left of an ask is a deny.
func (o mediationOptions) decide(ctx context.Context, e *event.Event) event.Verdict {
	if e.SessionInfo == nil {
		e.SessionInfo = o.info
	}
	return o.decider.Decide(ctx, e).Enforced()
}

// canMediateFiles says whether this process can mediate files and execs,
// and why not.
func canMediateFiles() (bool, string) {
	switch {
	case runtime.GOOS != "linux":
		return false, "file and exec mediation is built for Linux only"
	case os.Geteuid() != 0:
		return false, "file and exec mediation needs root (fanotify and a mount namespace)"
	}
	return true, ""
}

// ignoredPath says which opens are not decided: the kernel's pseudo
// files, which programs open by the hundred and which hold nothing of the
// user's.
func ignoredPath(path string) bool {
	for _, p := range []string{"/proc/", "/sys/", "/dev/"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return path == "/dev/null"
}

// openGate sets up mediation around the shim (pid) waiting at gate, then
// lets it exec the agent. A mediation that cannot start is reported and
// left off (the network is still mediated), except exec mediation once
// its filter is in place: unserved, every exec would fail, so then the
// session does not start.
func openGate(ctx context.Context, gate *privdrop.Gate, pid int, o mediationOptions) (stop func(), err error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	listener, err := gate.Ready(rctx)
	if err != nil {
		gate.Close()
		return func() {}, fmt.Errorf("run: start the agent: %w", err)
	}
	stops, err := startMediation(pid, listener, o)
	if err != nil {
		gate.Close()
		for _, s := range stops {
			s()
		}
		return func() {}, err
	}
	if err := gate.Open(); err != nil {
		for _, s := range stops {
			s()
		}
		return func() {}, fmt.Errorf("run: start the agent: %w", err)
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}, nil
}
