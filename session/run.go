package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/chaperone-dev/chaperone/attribution"
	"github.com/chaperone-dev/chaperone/certs"
	"github.com/chaperone-dev/chaperone/config"
	"github.com/chaperone-dev/chaperone/dns"
	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/fileexec"
	"github.com/chaperone-dev/chaperone/internal/privdrop"
	"github.com/chaperone-dev/chaperone/policy"
)

// Command is a program Run starts as the session's agent.
type Command struct {
	Argv []string
	// Env is the environment it starts from: the session drops the proxy
	// and trust variables of its own, and any CHAPERONE_* variable, and
	// adds the session's.
	Env            []string
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Adopt makes a process that is already running, and its descendants, an
// agent's session of the daemon's (Config.Machine): their connections and
// DNS go through the daemon from their next call on. name is the agent's
// name; "" tells it from the process's command line. It returns the new
// session; a process already in one is an error.
func (s *Session) Adopt(ctx context.Context, pid int, name string) (event.Session, error) {
	if s.machine == nil || !s.started {
		return event.Session{}, fmt.Errorf("session: adopt pid %d: only a started daemon adopts processes", pid)
	}
	info, err := s.machine.adopt(pid, name)
	if err != nil {
		return info, fmt.Errorf("session: adopt pid %d: %w", pid, err)
	}
	return info, nil
}

// Sessions lists the daemon's live agent sessions, oldest first; nil for
// a session that is not a daemon.
func (s *Session) Sessions() []event.Session {
	if s.machine == nil {
		return nil
	}
	return s.machine.sessions()
}

// SetCandidates replaces the command names whose exec the daemon's kernel
// hooks mark for a look (Machine.Candidates), for a reload.
func (s *Session) SetCandidates(names []string) error {
	if s.machine == nil || s.machine.ts == nil {
		return errors.New("session: set candidates: not a started daemon")
	}
	return s.machine.setCandidates(names)
}

// Trust is the trust bundle the session's agents are given: the system's
// roots and Chaperone's CA.
func (s *Session) Trust() string { return s.bundle }

// Run starts cmd as the session's agent, confined (its own cgroup in
// transparent mode, file and exec mediation as root, no capabilities) and
// waits for it: it returns its exit status (128+n for a signal, 126 or 127
// when it could not be started, as shells do). The session's start is
// recorded before anything of the agent's is decided. When the agent
// exits, what it left in the session is killed (KillOnExit) or waited for;
// Close records the session's end. Run may be called once, after Start.
// An error means the agent could not be given its session.
func (s *Session) Run(ctx context.Context, c Command) (code int, err error) {
	switch {
	case !s.started:
		return 0, errors.New("session: run: the session is not started")
	case s.ran:
		return 0, errors.New("session: run: the session already ran its agent")
	case len(c.Argv) == 0:
		return 0, errors.New("session: run: no command")
	}
	s.ran = true
	ts := s.ts.Load()
	forward := forwardedSignals
	if reloadSignal != nil && s.cfg.Policy == "" {
		forward = append(forward, reloadSignal)
	}
	started := time.Now()
	cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, c.Stdout, c.Stderr
	cmd.Env = childEnv(c.Env, s, s.mode == config.ModeProxy, s.agentEnv, s.hideEnv)
	info := &event.Session{ID: s.id, Agent: s.agent, Command: c.Argv, Mode: s.mode, Started: started, StateDir: s.cfg.StateDir}
	if wd, err := os.Getwd(); err == nil {
		info.Workdir = wd
	}
	var cgroupFD *os.File
	if ts != nil {
		if cgroupFD, err = ts.cg.Open(); err == nil {
			err = startInCgroup(cmd, int(cgroupFD.Fd()))
		}
		if err != nil {
			return 0, fmt.Errorf("session: %w", err)
		}
	}

	var gate *privdrop.Gate
	// In every mode: read-only cgroup mounts and the session's filter.
	who := s.who
	who.Confine = os.Geteuid() == 0
	mediate := s.cfg.MediateFiles
	if ok, why := CanMediateFiles(); mediate && !ok {
		fmt.Fprintf(s.stderr, "chaperone: %s; only the network is mediated\n", why)
		mediate = false
	}
	if mediate {
		who.MountNS, who.ExecNotify = true, true
		if gate, err = privdrop.WrapGated(cmd, who); err != nil {
			cmd.Err = err
		}
	} else if err := privdrop.Wrap(cmd, who); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		// Most often: the command is not on PATH. Report it as a shell
		// would, after the session's start and end are recorded.
		cmd.Err = err
	}
	if undo, err := privdrop.ProtectSelf(who); err != nil {
		cmd.Err = err
	} else {
		s.undoProtect = undo
	}
	if cmd.Err != nil && gate != nil {
		gate.Close()
		gate = nil
	}
	info.Home = envValue(cmd.Env, "HOME") // as the agent's user has it
	stopMediation := func() {}
	agentIDs := agentIdentity(who)
	fileStatic := s.policy.FileStaticGiven
	code, runErr := runChild(ctx, cmd, forward, func(pid int) {
		if cgroupFD != nil {
			cgroupFD.Close()
		}
		s.rootPID.Store(int64(pid))
		if ts != nil {
			ts.rootPID.Store(int64(pid))
		}
		info.RootPID = pid
		s.info = info
		publishSession(s.bus, event.KindSessionStart, *info, s.log)
		s.recordOnce.Do(func() { close(s.recordedStart) })
		if gate != nil && pid > 0 {
			protect := protectedFiles(s.cfg, s.configFile, s.audit.Path(), s.policy.Policy(), info.Workdir)
			s.audit.SetWholeReads(protectedPath(protect))
			stop, err := openGate(ctx, gate, pid, mediationOptions{
				session: s.id, info: info, inSession: s.inSession,
				protect: protect,
				process: newProcessCache(func(p int) (*event.Process, error) { return describeProcess(s.procs, p, pid) }, time.Second).process,
				decider: s.chain, publish: s.bus.Publish, log: s.log, stderr: s.stderr,
				cgroup: sessionCgroup(ts), agentRoot: agentIDs.uid == 0,
				noAhead: s.cfg.Audit.FileReads == config.AuditReadsAll,
				static: func(path string, access event.FileAccess, v event.Verdict) bool {
					// Nothing is let past without a record while the audit
					// log fails. A file the agent may not write is static
					// when its reads are: the kernel refuses the write
					// before the policy would be asked.
					if s.audit.Err() != nil {
						return false
					}
					if access == event.FileExec {
						return fileStatic(path, info, access, v, event.FileExec)
					}
					if fileStatic(path, info, access, v, event.FileRead, event.FileWrite) {
						return true
					}
					return writeDenied(path, agentIDs) && fileStatic(path, info, access, v, event.FileRead)
				},
				// Another link to a file gives the agent nothing this one
				// does not when it cannot write it (the C library and the
				// loader have two here); an exec is decided by its path
				// whatever the link.
				staticLinked: func(path string, access event.FileAccess) bool {
					return access == event.FileExec || writeDenied(path, agentIDs)
				},
				forget: func(f func()) { s.forgetFiles.Store(&f) },
			})
			stopMediation = stop
			if err != nil {
				fmt.Fprintf(s.stderr, "chaperone: %v\n", err)
			}
		} else if gate != nil {
			gate.Close()
		}
	}, s.log)
	if runErr != nil {
		// The command could not be started: report it as a shell would.
		fmt.Fprintf(s.stderr, "chaperone: %v\n", runErr)
		code = 126
		if errors.Is(runErr, exec.ErrNotFound) || errors.Is(runErr, os.ErrNotExist) {
			code = 127
		}
	}
	s.exitCode = code

	// What the command left behind: killed or waited for (transparent
	// mode), or on its own (proxy mode). Then its opens and execs are no
	// longer decided.
	if ts != nil {
		if err := ts.end(ctx, s.killOnExit); err != nil {
			s.log.Warn("end session", "err", err)
		}
	}
	stopMediation()
	if ts != nil {
		if n := ts.quicRefused(); n > 0 {
			fmt.Fprintf(s.stderr, "chaperone: refused %d QUIC datagrams; clients fall back to TCP through the proxy\n", n)
		}
	}
	return code, nil
}

// protectedFiles lists the files a session protects from its agent,
// whatever the policy (fileexec.Protected does the rest): the policy file,
// the config file and the plugins the policy runs (read and run only), the
// audit log and Chaperone's state directory (not opened at all).
func protectedFiles(cfg config.Config, configFile, auditLog string, pol *policy.Policy, workdir string) []fileexec.Protect {
	list := []fileexec.Protect{
		{Path: cfg.Policy, What: "the policy file", Protection: fileexec.NoWrite},
		{Path: configFile, What: "the config file", Protection: fileexec.NoWrite},
		{Path: auditLog, What: "the audit log", Protection: fileexec.NoAccess},
		{Path: cfg.StateDir, What: "Chaperone's state", Protection: fileexec.NoAccess, Tree: true},
	}
	if pol != nil {
		for _, f := range pol.PluginFiles(workdir) {
			list = append(list, fileexec.Protect{Path: f, What: "a plugin of the policy", Protection: fileexec.NoWrite})
		}
	}
	return list
}

// protectedPath reports whether a path is one of list's, or under one of
// its trees, as named or with symbolic links resolved: the audit log
// records every read of them whole.
func protectedPath(list []fileexec.Protect) func(string) bool {
	files := map[string]bool{}
	var trees []string
	for _, p := range list {
		if p.Path == "" {
			continue
		}
		names := []string{filepath.Clean(p.Path)}
		if real, err := filepath.EvalSymlinks(p.Path); err == nil && real != names[0] {
			names = append(names, real)
		}
		for _, n := range names {
			if p.Tree {
				trees = append(trees, strings.TrimSuffix(n, "/")+"/")
			}
			files[n] = true
		}
	}
	return func(path string) bool {
		if files[path] {
			return true
		}
		for _, t := range trees {
			if strings.HasPrefix(path, t) {
				return true
			}
		}
		return false
	}
}

// startOnOwnThread starts cmd from an OS thread that nothing else uses
// until done is closed. The kernel counts a child's parent as the thread
// that forked it: a parent-death signal the program sets for itself
// (bubblewrap's --die-with-parent) fires when that thread ends, and
// Chaperone ends threads (file mediation enters a session's mount
// namespaces on threads it then lets go).
func startOnOwnThread(cmd *exec.Cmd, done <-chan struct{}) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			<-done // the thread stays the child's parent, and alive
		}
	}()
	return <-started
}

// runChild starts cmd, calls started with its pid, forwards signals and
// waits. It returns the exit status (128+n for a signal, as shells do).
func runChild(ctx context.Context, cmd *exec.Cmd, forward []os.Signal, started func(pid int), log *slog.Logger) (int, error) {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forward...)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	if err := startOnOwnThread(cmd, done); err != nil {
		started(0)
		return 127, err
	}
	started(cmd.Process.Pid)
	go func() {
		for {
			select {
			case sig := <-sigs:
				if !shouldForward(sig) {
					continue
				}
				if err := cmd.Process.Signal(sig); err != nil {
					log.Debug("forward signal", "signal", sig, "err", err)
				}
			case <-ctx.Done():
				// The context ends with SIGTERM (or a test's cancel): pass it on.
				_ = cmd.Process.Signal(syscall.SIGTERM)
				<-done
				return
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return 1, err
}

// childEnv is the command's environment: the caller's, without any proxy or
// trust settings of its own nor the variables in hide (real credentials),
// plus the session's: the trust variables, the proxy variables when the
// session uses the explicit proxy, and extra (credential placeholders).
func childEnv(base []string, s *Session, explicitProxy bool, extra, hide []string) []string {
	drop := map[string]bool{"NO_PROXY": true, "no_proxy": true, "GIT_HTTP_PROXY_AUTHMETHOD": explicitProxy, "CHAPERONE_SESSION": true}
	for _, k := range hide {
		drop[k] = true
	}
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		drop[k] = true
	}
	for _, k := range proxyVars {
		drop[k] = true
	}
	for _, k := range certs.TrustEnvNames() {
		drop[k] = true
	}
	env := make([]string, 0, len(base)+24)
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if drop[k] || strings.HasPrefix(k, "CHAPERONE_") {
			continue
		}
		env = append(env, kv)
	}
	if explicitProxy {
		for _, k := range proxyVars {
			env = append(env, k+"="+s.proxyURL)
		}
		// git asks the proxy without credentials first unless told
		// its method (http.proxyAuthMethod, "anyauth"), and each such
		// CONNECT is challenged and logged as refused: basic is what
		// the proxy takes.
		env = append(env, "NO_PROXY=", "no_proxy=", "GIT_HTTP_PROXY_AUTHMETHOD=basic")
	}
	env = append(env, "CHAPERONE_SESSION="+s.id)
	env = append(env, extra...)
	return append(env, certs.TrustEnv(s.bundle)...)
}

var proxyVars = []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"}

// resolver turns --resolve entries into the proxy's lookup.
func resolver(rs []config.Resolve) func(string, uint16) (netip.Addr, bool) {
	if len(rs) == 0 {
		return nil
	}
	return func(host string, port uint16) (netip.Addr, bool) {
		host = strings.ToLower(strings.TrimSuffix(host, "."))
		for _, r := range rs {
			if r.Host == host && (r.Port == 0 || r.Port == port) {
				return r.Addr, true
			}
		}
		return netip.Addr{}, false
	}
}

// staticNames are the --resolve names as the session's resolver answers
// them (a port-specific entry names the host for every port).
func staticNames(rs []config.Resolve) map[string][]netip.Addr {
	m := map[string][]netip.Addr{}
	for _, r := range rs {
		if !slices.Contains(m[r.Host], r.Addr) {
			m[r.Host] = append(m[r.Host], r.Addr)
		}
	}
	return m
}

// dnsUpstreams are where a transparent session's resolver forwards:
// dns_upstreams, else the system's resolvers. With neither, only static
// names resolve.
func dnsUpstreams(cfg config.Config, stderr io.Writer) []netip.AddrPort {
	var ups []netip.AddrPort
	for _, u := range cfg.DNSUpstreams {
		if ap, err := config.ParseDNSUpstream(u); err == nil {
			ups = append(ups, ap)
		}
	}
	if len(ups) > 0 {
		return ups
	}
	conf, err := os.ReadFile("/etc/resolv.conf")
	if err == nil {
		ups, err = dns.SystemUpstreams(conf)
	}
	if err != nil {
		fmt.Fprintf(stderr, "chaperone: no DNS upstream (%v): only --resolve names resolve in the session\n", err)
	}
	return ups
}

// describeProcess is what events say of pid: its details, lineage names
// from the session's root and its executable's digest.
func describeProcess(procs *attribution.Table, pid, root int) (*event.Process, error) {
	// Lineage ends at the session's root: what started Chaperone is not
	// the session's.
	p, err := procs.ProcessUnder(pid, root)
	if err != nil {
		return nil, err
	}
	p.LineageNames = procs.LineageNames(p, root)
	if d, err := procs.ExeDigest(pid); err == nil {
		p.ExeDigest = d
	}
	return p, nil
}

// memoize remembers up to n results of f, which must be pure: the audit
// log redacts the same command lines and paths over and over (a process
// described anew, a file opened again). It is called from one goroutine.
func memoize(f func(string) string, n int) func(string) string {
	m := make(map[string]string, n)
	return func(s string) string {
		if r, ok := m[s]; ok {
			return r
		}
		r := f(s)
		if len(m) >= n {
			clear(m)
		}
		m[s] = r
		return r
	}
}

// envValue returns the value of key in env (KEY=VALUE entries), the last
// one winning as in exec.
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// agentUser says who the agent runs as: --user, else the user who ran
// sudo, else unchanged (UID -1). It always runs without capabilities and
// with no_new_privs.
func agentUser(name string, getenv func(string) string) (privdrop.Options, error) {
	if name != "" {
		o, err := privdrop.ForUser(name)
		if err != nil {
			return o, fmt.Errorf("session: user %s: %w", name, err)
		}
		return o, nil
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	return privdrop.FromSudo(getenv)
}
