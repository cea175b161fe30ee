package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/chaperone-dev/chaperone/config"
	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/redirect"
	"github.com/chaperone-dev/chaperone/session"
)

// DefaultPinDir is where the daemon pins its kernel hooks on bpffs.
const DefaultPinDir = "/sys/fs/bpf/chaperone"

// Options is one daemon.
type Options struct {
	// Settings is Chaperone's configuration, validated.
	Settings   config.Config
	ConfigFile string
	// Reload reads the configuration again, on SIGHUP: the matchers
	// change; a configuration that does not load leaves the last good one
	// in place. Nil: no reload.
	Reload func() (config.Config, error)
	// PinDir (on bpffs) holds the kernel hooks, which outlive the
	// daemon; empty: DefaultPinDir. The control socket is the
	// configuration's DaemonSocketPath.
	PinDir string
	// Group may use the control socket besides root; "" for root only.
	Group string
	Deps  session.Deps
	// Ready, when set, is called once the daemon serves its socket.
	Ready func(*Daemon)
}

// Daemon is a running daemon.
type Daemon struct {
	s        *session.Session
	matchers atomic.Pointer[Matchers]
	socket   string
}

// Socket is the daemon's control socket.
func (d *Daemon) Socket() string { return d.socket }

// Session is the daemon's session (for tests and the command's summary).
func (d *Daemon) Session() *session.Session { return d.s }

// Run runs the daemon until ctx is done: every agent the machine execs
// (the configuration's matchers) becomes a session, its connections and
// DNS mediated, until it exits. When it returns, the kernel hooks stay:
// the agents' connections fail until a daemon runs again (Remove takes
// them away).
func Run(ctx context.Context, o Options) error {
	if os.Geteuid() != 0 {
		return errors.New("daemon: runs as root: it loads eBPF programs for the whole machine")
	}
	if o.PinDir == "" {
		o.PinDir = DefaultPinDir
	}
	d := &Daemon{socket: o.Settings.DaemonSocketPath()}
	m := NewMatchers(o.Settings)
	d.matchers.Store(&m)
	s, err := session.New(session.Config{
		Settings: o.Settings, ConfigFile: o.ConfigFile, Agent: "daemon",
		Machine: &session.Machine{
			Candidates: m.Candidates(),
			PinDir:     o.PinDir,
			Classify:   func(pid int) (string, bool) { return d.matchers.Load().Classify(pid) },
		},
	}, o.Deps)
	if err != nil {
		return err
	}
	d.s = s
	defer s.Close()
	if err := s.Start(ctx); err != nil {
		return err
	}
	ln, err := listen(d.socket, o.Group)
	if err != nil {
		return err
	}
	defer ln.Close()
	go serve(ln, d.handle)
	// Starting compiles the secret rules and the policy: most of what the
	// heap grew to is garbage now. An idle daemon gives it back.
	debug.FreeOSMemory()
	releaseStartupPages()
	if o.Ready != nil {
		o.Ready(d)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			d.reload(o)
		}
	}
}

// reload swaps the matchers for the configuration's, if it loads; either
// way, the reload is an audit event.
func (d *Daemon) reload(o Options) {
	if o.Reload == nil {
		return
	}
	r := event.PolicyReload{Path: o.ConfigFile, Trigger: "SIGHUP"}
	c, err := o.Reload()
	if err != nil {
		r.Error = err.Error()
	} else if err := d.s.SetCandidates(NewMatchers(c).Candidates()); err != nil {
		r.Error = err.Error()
	} else {
		m := NewMatchers(c)
		d.matchers.Store(&m)
	}
	d.s.RecordReload(r)
}

// handle answers one control request.
func (d *Daemon) handle(req Request, pid, uid int) Reply {
	switch req.Op {
	case "sessions":
		return Reply{Sessions: d.s.Sessions()}
	case "adopt":
		if uid != 0 {
			owner, err := processOwner(req.PID)
			if err != nil {
				return Reply{Error: fmt.Sprintf("daemon: adopt: %v", err)}
			}
			if owner != uid {
				return Reply{Error: fmt.Sprintf("daemon: adopt: process %d is not yours", req.PID)}
			}
		}
		info, err := d.s.Adopt(context.Background(), req.PID, req.Agent)
		if err != nil {
			return Reply{Error: err.Error()}
		}
		return Reply{Session: &info}
	case "run":
		info, err := d.s.Adopt(context.Background(), pid, req.Agent)
		if err != nil {
			return Reply{Error: err.Error()}
		}
		return Reply{Session: &info, Trust: d.s.Trust()}
	}
	return Reply{Error: fmt.Sprintf("daemon: unknown op %q", req.Op)}
}

// processOwner is the real uid of a process.
func processOwner(pid int) (int, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return -1, fmt.Errorf("no process %d", pid)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				return strconv.Atoi(f[0])
			}
		}
	}
	return -1, fmt.Errorf("process %d: no uid", pid)
}

// Remove takes the daemon's kernel hooks away from the machine: marked
// processes then connect unmediated. Run a daemon again instead to keep
// them mediated.
func Remove(pinDir string) error {
	if pinDir == "" {
		pinDir = DefaultPinDir
	}
	return redirect.RemoveMachine(pinDir)
}
