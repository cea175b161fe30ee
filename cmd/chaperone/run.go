package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/chaperone-dev/chaperone/attribution"
	"github.com/chaperone-dev/chaperone/certs"
	"github.com/chaperone-dev/chaperone/config"
	"github.com/chaperone-dev/chaperone/dns"
	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/fileexec"
	"github.com/chaperone-dev/chaperone/internal/privdrop"
	"github.com/chaperone-dev/chaperone/policy"
	"github.com/chaperone-dev/chaperone/proxy"
	"github.com/chaperone-dev/chaperone/redirect"
	"github.com/chaperone-dev/chaperone/telemetry"
	chtls "github.com/chaperone-dev/chaperone/tls"
)

func newRunCommand(e env) *cobra.Command {
	var (
		killOnExit bool
		user       string
		agent      string
	)
	cmd := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARGS...]",
		Short: "Run a command (an agent) and everything it starts inside a Chaperone session",
		Long: "Run COMMAND in a new session. Its connections, and those of every process it starts,\n" +
			"go through Chaperone's proxy, are decided by the policy and written to the audit log.\n" +
			"Exits with COMMAND's exit status.",
		Example: "  chaperone run -- python3 agent.py\n  chaperone run --deny-host '*.pastebin.com' -- claude",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{errors.New("run: no command given: chaperone run [flags] -- COMMAND [ARGS...]")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(cmd, e)
			if err != nil {
				return err
			}
			configFile, _ := cmd.Flags().GetString("config")
			if configFile == "" {
				configFile = e.getenv(config.EnvConfigFile)
			}
			code, err := runSession(cmd.Context(), sessionOptions{
				cfg:        cfg,
				configFile: configFile,
				user:       user,
				agent:      agent,
				getenv:     e.getenv,
				killOnExit: killOnExit,
				argv:       args,
				stdin:      e.stdin,
				stdout:     e.stdout,
				stderr:     e.stderr,
				env:        e.environ(),
			})
			if err != nil {
				return err
			}
			if code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	// Everything after the command's name belongs to the command.
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().StringVar(&agent, "agent", "", "the agent's name in events and traces (default: detected from the command: claude, codex, cursor, aider, gemini, …)")
	cmd.Flags().StringVar(&user, "user", "", "run the command as this user (name or uid); default: the user who ran sudo, else unchanged")
	cmd.Flags().BoolVar(&killOnExit, "kill-on-exit", true, "transparent mode: when the command exits, kill every process it left in the session (else wait for them)")
	return cmd
}

// sessionOptions is one session to run.
type sessionOptions struct {
	cfg            config.Config
	configFile     string              // the config file loaded, if any: protected from the agent
	user           string              // --user: run the agent as this user; "" = the sudo user, else as is
	agent          string              // --agent: the agent\'s name; "" = detected from the command
	getenv         func(string) string // SUDO_UID and friends
	killOnExit     bool                // transparent mode: kill what the command leaves behind
	argv           []string
	stdin          io.Reader
	stdout, stderr io.Writer
	env            []string // the environment the command starts from
	// afterStart, when set, is called with the session once the proxy
	// listens (the demo uses it to print where things are).
	afterStart func(s *session)
}

// session is a running session's wiring.
type session struct {
	id       string
	token    string
	proxyURL string // with credentials: only ever put in the child's environment
	proxyAdr netip.AddrPort
	auditLog string
	bundle   string
	rootPID  atomic.Int64 // 0 until the command started
}

// runSession runs one agent command in a session and returns its exit
// status. An error means the session could not be set up (or torn down).
func runSession(ctx context.Context, o sessionOptions) (code int, err error) {
	cfg := o.cfg
	log := newLogger(o.stderr, cfg.LogLevel)
	mode := cfg.Mode
	switch mode {
	case config.ModeAuto, config.ModeProxy, config.ModeTransparent:
	default:
		return 0, usageError{fmt.Errorf("run: mode %q is not available", cfg.Mode)}
	}

	ca, _, err := certs.LoadOrCreate(cfg.StateDir, time.Now, rand.Reader)
	if err != nil {
		return 0, fmt.Errorf("run: %w", err)
	}
	// The bundle lives outside the state directory, which only Chaperone
	// may enter: the agent may run as another user and must read it.
	trustDir, err := os.MkdirTemp("", "chaperone-trust-")
	if err != nil {
		return 0, fmt.Errorf("run: %w", err)
	}
	defer os.RemoveAll(trustDir)
	if err := os.Chmod(trustDir, 0o755); err != nil {
		return 0, fmt.Errorf("run: %w", err)
	}
	bundle, err := certs.WriteTrustBundle(trustDir, ca)
	if err != nil {
		return 0, fmt.Errorf("run: %w", err)
	}
	who, err := agentUser(o.user, o.getenv)
	if err != nil {
		return 0, usageError{err}
	}
	if who.UID == -1 && os.Geteuid() == 0 {
		fmt.Fprintln(o.stderr, "chaperone: the agent runs as root, without capabilities; use sudo or --user to run it as an ordinary user")
	}
	roots, err := chtls.LoadRoots(true, cfg.UpstreamCA...)
	if err != nil {
		return 0, fmt.Errorf("run: %w", err)
	}
	resolves, err := cfg.Resolves()
	if err != nil {
		return 0, usageError{err}
	}
	builtin, err := policy.NewBuiltin(cfg.DenyHosts)
	if err != nil {
		return 0, usageError{err}
	}
	var decider event.Decider
	var currentPolicy func() *policy.Policy
	tasks := &taskBoard{}
	sessionID := newID(6)
	// inSession tells whether a pid belongs to the session, once it runs:
	// the session's own processes may not answer its questions.
	var inSession atomic.Pointer[func(pid int) bool]
	forward := forwardedSignals
	if reloadSignal != nil && cfg.Policy == "" {
		forward = append(forward, reloadSignal)
	}
	var live *livePolicy
	watchPolicy := func(*event.Bus) {} // a policy file's watcher, once there are sinks
	var fileStatic func(path string, sess *event.Session, decided event.FileAccess, v event.Verdict, accesses ...event.FileAccess) bool
	// forgetFiles, once file mediation runs, drops what it learnt of the
	// old policy when a new one loads.
	var forgetFiles atomic.Pointer[func()]
	if cfg.Policy != "" {
		// The policy is watched at its real path: a symbolic link on the
		// way to it is not a file the session can protect from the agent.
		if real, err := filepath.EvalSymlinks(cfg.Policy); err == nil {
			if real, err = filepath.Abs(real); err == nil {
				cfg.Policy = real
			}
		}
		// A policy that does not load stops the session before it starts:
		// never half a policy.
		live, err = newLivePolicy(ctx, cfg.Policy, builtin, log, o.stderr, o.getenv, tasks.get)
		if err != nil {
			return 0, err
		}
		defer live.Close()
		currentPolicy, decider, fileStatic = live.Policy, live, live.FileStaticGiven
	} else {
		// No policy file: the embedded default policy, after deny_hosts.
		def, err := policy.Parse("default policy", policy.DefaultPolicyYAML())
		if err != nil {
			return 0, fmt.Errorf("run: %w", err)
		}
		d, closeFn, err := newPolicyDecider(ctx, def, builtin, log, o.getenv, tasks.get)
		if err != nil {
			return 0, fmt.Errorf("run: %w", err)
		}
		defer closeFn()
		currentPolicy, decider = func() *policy.Policy { return def }, d
		fileStatic = d.(engineDecider).FileStaticGiven
	}
	// An ask holds the action for a person: on the terminal, or through
	// the session's control socket.
	ak, err := startAsker(ctx, cfg.StateDir, sessionID, o.stdin, o.stderr, func(pid int) bool {
		f := inSession.Load()
		return f != nil && (*f)(pid)
	})
	if err != nil {
		return 0, fmt.Errorf("run: %w", err)
	}
	defer ak.stop()
	configureAsk := func(p *policy.Policy) {
		on, _ := p.Ask.OnTimeout.EventAction()
		ak.broker.Configure(p.Ask.Timeout, on)
	}
	configureAsk(currentPolicy())
	decider = asking{decider: decider, broker: ak.broker}
	if live != nil {
		live.onLoad = func(p *policy.Policy) {
			configureAsk(p)
			if f := forgetFiles.Load(); f != nil {
				(*f)()
			}
		}
		hup := make(chan os.Signal, 1)
		if reloadSignal != nil {
			signal.Notify(hup, reloadSignal)
			defer signal.Stop(hup)
		}
		// Watched from when the sinks below are subscribed: each reload
		// is an audit event.
		watchCtx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		watchPolicy = func(bus *event.Bus) {
			live.onReload = func(r event.PolicyReload) { publishPolicyReload(bus, sessionID, r) }
			go live.watch(watchCtx, hup, 2*time.Second)
		}
	}
	var passthrough func(string, netip.Addr) bool
	if len(cfg.TLSPassthrough) > 0 {
		pinned, err := policy.NewHostList(cfg.TLSPassthrough)
		if err != nil {
			return 0, usageError{fmt.Errorf("run: tls_passthrough: %w", err)}
		}
		passthrough = pinned.Match
	}

	audit, err := telemetry.OpenAuditLog(cfg.AuditLogPath())
	if err != nil {
		return 0, fmt.Errorf("run: %w", err)
	}
	bus := event.NewBus()
	auditDone := make(chan error, 1)
	// Subscribe before anything can publish: a subscription made inside
	// the goroutine could miss the session's first events.
	auditSub := bus.Subscribe("audit", event.SubscribeOptions{Lossless: true, Queue: 4096})
	go func() { auditDone <- audit.Run(auditSub) }()
	sum := newSummary(bus.Subscribe("summary", event.SubscribeOptions{Queue: 4096}))
	tracer, err := startTracer(ctx, cfg, getenvOr(o.getenv), bus, log)
	if err != nil {
		fmt.Fprintf(o.stderr, "chaperone: traces are not exported: %v\n", err)
	}
	watchPolicy(bus)
	// stopSinks closes the bus and waits until every event is written and
	// counted (and the trace sent, as far as the collector takes it).
	stopSinks := func() error {
		bus.Close()
		err := <-auditDone
		if cerr := audit.Close(); err == nil {
			err = cerr
		}
		sum.wait()
		tracer.stop()
		return err
	}
	// Nothing is decided before the session's start is recorded: the
	// command's first connection may race the recording of its start.
	sessionRecorded := make(chan struct{})
	var recordOnce sync.Once
	markRecorded := func() { recordOnce.Do(func() { close(sessionRecorded) }) }
	defer markRecorded()
	guarded := auditGuard{decider: decider, audit: audit, ready: sessionRecorded}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		stopSinks()
		return 0, fmt.Errorf("run: listen %s: %w", cfg.Listen, err)
	}
	s := &session{
		id:       sessionID,
		token:    newID(24),
		proxyAdr: ln.Addr().(*net.TCPAddr).AddrPort(),
		auditLog: audit.Path(),
		bundle:   bundle,
	}
	s.proxyURL = (&url.URL{Scheme: "http", User: url.UserPassword("chaperone", s.token), Host: s.proxyAdr.String()}).String()

	agent := o.agent
	if agent == "" {
		exe, _ := exec.LookPath(o.argv[0])
		agent = attribution.DetectAgent(o.argv, exe)
	}
	getenv := o.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	rw, agentEnv, hideEnv, err := sessionRewrites(cfg, currentPolicy(), currentPolicy, sessionID, agent, tasks, getenv)
	if err != nil {
		ln.Close()
		stopSinks()
		return 0, err
	}
	// Command lines and URLs often carry tokens: the log gets the same
	// placeholders as the prompts.
	audit.SetRedactor(memoize(func(s string) string {
		out, _ := rw.Redactor.Redact(s)
		return out
	}, 8192))

	procs := attribution.NewTable(attribution.OSProc(), attribution.WithSocketLookup(attribution.SockDiag))
	names := &sessionNames{} // the transparent session's resolver, once started
	p, err := proxy.New(proxy.Options{
		Logger:        log,
		Decider:       guarded,
		Publish:       bus.Publish,
		Certs:         certs.NewLeaves(ca, certs.LeafOptions{}),
		UpstreamRoots: roots,
		Resolve:       resolver(resolves),
		Names:         names,
		Processes: proxy.ProcessFinderFunc(func(client, _ netip.AddrPort, _ string) (*event.Process, error) {
			// The client's socket: local = its ephemeral address, remote = the proxy.
			root := int(s.rootPID.Load())
			pid, err := procs.SessionSocketOwner(client, s.proxyAdr, root)
			if err != nil {
				return nil, err
			}
			return describeProcess(procs, pid, root)
		}),
		Passthrough: passthrough,
		Rewrites: func(id string) *proxy.Rewrites {
			if id == sessionID {
				return rw
			}
			return nil
		},
		Now: time.Now,
	})
	if err != nil {
		ln.Close()
		stopSinks()
		return 0, fmt.Errorf("run: %w", err)
	}
	p.AddSession(s.id, s.token)
	// auto: transparent when this machine and user allow it, else the
	// explicit proxy, saying why.
	var ts *transparentSession
	switch {
	case mode == config.ModeTransparent || (mode == config.ModeAuto && os.Geteuid() == 0):
		ts, err = startTransparent(s.id, transparentOptions{
			procs: procs, decider: guarded, publish: bus.Publish, log: log,
			static: staticNames(resolves), upstreams: dnsUpstreams(cfg, o.stderr),
			allowQUIC: cfg.QUIC == config.QUICAllow, allowUDP: cfg.UDP == config.UDPAllow,
		})
		switch {
		case err == nil:
			mode = config.ModeTransparent
			names.ts.Store(ts)
			ts.serve(p)
		case mode == config.ModeAuto:
			fmt.Fprintf(o.stderr, "chaperone: transparent mode unavailable (%v)\n", err)
			mode = config.ModeProxy
		default:
			p.Close()
			ln.Close()
			stopSinks()
			return 0, err
		}
	case mode == config.ModeAuto && runtime.GOOS != "linux":
		fmt.Fprintf(o.stderr, "chaperone: transparent capture is built for Linux only (this is %s; see docs/platforms.md)\n", runtime.GOOS)
		mode = config.ModeProxy
	case mode == config.ModeAuto:
		fmt.Fprintln(o.stderr, "chaperone: transparent mode needs root")
		mode = config.ModeProxy
	}
	member := func(pid int) bool {
		if root := int(s.rootPID.Load()); root > 0 && (pid == root || procs.IsDescendant(pid, root)) {
			return true
		}
		if ts != nil {
			in, _ := redirect.Contains(ts.cg.Path, pid)
			return in
		}
		return false
	}
	inSession.Store(&member)
	defer startDebug(getenv(debugAddrEnv), ts, log)()
	if mode == config.ModeProxy {
		fmt.Fprintln(o.stderr, "chaperone: proxy mode: programs that ignore HTTP_PROXY/HTTPS_PROXY are not covered (transparent mode needs root on Linux)")
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- p.Serve(ln) }()

	started := time.Now()
	cmd := exec.Command(o.argv[0], o.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.stdin, o.stdout, o.stderr
	cmd.Env = childEnv(o.env, s, mode == config.ModeProxy, agentEnv, hideEnv)
	info := &event.Session{ID: s.id, Agent: agent, Command: o.argv, Mode: mode, Started: started, StateDir: cfg.StateDir}
	if wd, err := os.Getwd(); err == nil {
		info.Workdir = wd
	}
	var cgroupFD *os.File
	if ts != nil {
		if cgroupFD, err = ts.cg.Open(); err == nil {
			err = startInCgroup(cmd, int(cgroupFD.Fd()))
		}
		if err != nil {
			p.Close()
			ts.Close()
			stopSinks()
			return 0, fmt.Errorf("run: %w", err)
		}
	}

	var gate *privdrop.Gate
	// In every mode: read-only cgroup mounts and the session's filter.
	who.Confine = os.Geteuid() == 0
	mediate := cfg.MediateFiles
	if ok, why := canMediateFiles(); mediate && !ok {
		fmt.Fprintf(o.stderr, "chaperone: %s; only the network is mediated\n", why)
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
		defer undo()
	}
	if cmd.Err != nil && gate != nil {
		gate.Close()
		gate = nil
	}
	info.Home = envValue(cmd.Env, "HOME") // as the agent's user has it
	stopMediation := func() {}
	agentIDs := agentIdentity(who)
	code, runErr := runChild(ctx, cmd, forward, func(pid int) {
		if cgroupFD != nil {
			cgroupFD.Close()
		}
		s.rootPID.Store(int64(pid))
		if ts != nil {
			ts.rootPID.Store(int64(pid))
		}
		info.RootPID = pid
		publishSession(bus, event.KindSessionStart, *info, log)
		markRecorded()
		if gate != nil && pid > 0 {
			stop, err := openGate(ctx, gate, pid, mediationOptions{
				session: s.id, info: info, inSession: member,
				protect: protectedFiles(cfg, o.configFile, audit.Path(), currentPolicy(), info.Workdir),
				process: newProcessCache(func(p int) (*event.Process, error) { return describeProcess(procs, p, pid) }, time.Second).process,
				decider: guarded, publish: bus.Publish, log: log, stderr: o.stderr,
				static: func(path string, access event.FileAccess, v event.Verdict) bool {
					// Nothing is let past without a record while the audit
					// log fails. A file the agent may not write is static
					// when its reads are: the kernel refuses the write
					// before the policy would be asked.
					if audit.Err() != nil {
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
				forget: func(f func()) { forgetFiles.Store(&f) },
			})
			stopMediation = stop
			if err != nil {
				fmt.Fprintf(o.stderr, "chaperone: %v\n", err)
			}
		} else if gate != nil {
			gate.Close()
		}
		if o.afterStart != nil {
			o.afterStart(s)
		}
	}, log)
	if runErr != nil {
		// The command could not be started: report it as a shell would.
		fmt.Fprintf(o.stderr, "chaperone: %v\n", runErr)
		code = 126
		if errors.Is(runErr, exec.ErrNotFound) || errors.Is(runErr, os.ErrNotExist) {
			code = 127
		}
	}

	// Tear down in order: what the command left behind, then the proxy
	// (no new events after it closes), then the session's end, then the
	// sinks drain.
	if ts != nil {
		if err := ts.end(ctx, o.killOnExit); err != nil {
			log.Warn("end session", "err", err)
		}
	}
	// What the command left behind is gone (transparent mode) or on its
	// own (proxy mode): its opens and execs are no longer decided.
	stopMediation()
	if ts != nil {
		if n := ts.quicRefused(); n > 0 {
			fmt.Fprintf(o.stderr, "chaperone: refused %d QUIC datagrams; clients fall back to TCP through the proxy\n", n)
		}
	}
	if err := p.Close(); err != nil {
		log.Warn("close proxy", "err", err)
	}
	<-serveDone
	if ts != nil {
		if err := ts.Close(); err != nil {
			log.Warn("remove session cgroup", "err", err)
		}
	}
	end := *info
	end.ExitCode = code
	end.Duration = time.Since(started)
	publishSession(bus, event.KindSessionEnd, end, log)
	auditErr := stopSinks()
	sum.print(o.stderr, s, code)
	if n := tracer.dropped(); n > 0 {
		fmt.Fprintf(o.stderr, "chaperone: %d trace events or spans dropped (the collector was slow or down)\n", n)
	}
	if auditErr != nil {
		return code, fmt.Errorf("run: audit log: %w", auditErr)
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

// runChild starts cmd, calls started with its pid, forwards signals and
// waits. It returns the exit status (128+n for a signal, as shells do).
func runChild(ctx context.Context, cmd *exec.Cmd, forward []os.Signal, started func(pid int), log *slog.Logger) (int, error) {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forward...)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		started(0)
		return 127, err
	}
	started(cmd.Process.Pid)
	done := make(chan struct{})
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
func childEnv(base []string, s *session, explicitProxy bool, extra, hide []string) []string {
	drop := map[string]bool{"NO_PROXY": true, "no_proxy": true, "CHAPERONE_SESSION": true}
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
		env = append(env, "NO_PROXY=", "no_proxy=")
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

// publishSession records a session's start or end. They are facts, not
// requests: recorded as allowed, never put to the policy (nor its judge).
func publishSession(bus *event.Bus, kind event.Kind, info event.Session, log *slog.Logger) {
	e := &event.Event{Time: time.Now(), Kind: kind, Session: info.ID, SessionInfo: &info}
	if info.RootPID > 0 {
		e.Process = &event.Process{PID: info.RootPID, PPID: os.Getpid(), Argv: info.Command}
	}
	e.Verdict = event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByDefault, Reason: "recorded"}
	log.Debug("session", "kind", kind, "id", info.ID)
	bus.Publish(e)
}

// publishPolicyReload records a reload of the session's policy file.
func publishPolicyReload(bus *event.Bus, session string, r event.PolicyReload) {
	e := &event.Event{Time: time.Now(), Kind: event.KindPolicyReload, Session: session, Policy: &r}
	e.Verdict = event.Verdict{Action: event.Allow, Reason: "the file is the session's policy now"}
	if r.Error != "" {
		e.Verdict = event.Verdict{Action: event.Deny, Reason: "the old policy stays: " + r.Error}
	}
	bus.Publish(e)
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
// log redacts the same command lines and paths over and over (every
// record of a process repeats its argv). It is called from one goroutine.
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
			return o, fmt.Errorf("run: --user %s: %w", name, err)
		}
		return o, nil
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	return privdrop.FromSudo(getenv)
}

// ruleAuditLog names the refusals made because the audit log failed.
const ruleAuditLog = "audit_log"

// auditGuard fails closed when the audit log cannot be written: an action
// whose decision cannot be recorded is denied.
type auditGuard struct {
	decider event.Decider
	audit   interface{ Err() error }
	ready   <-chan struct{} // closed once the session's start is recorded; nil: ready
}

func (g auditGuard) Decide(ctx context.Context, e *event.Event) event.Verdict {
	if g.ready != nil {
		select {
		case <-g.ready: // at once once the session started: ctx.Done would allocate
		default:
			select {
			case <-g.ready:
			case <-ctx.Done():
				return event.Verdict{Action: event.Deny, DecidedBy: event.DecidedByDefault, Reason: "the session ended before its start was recorded"}
			}
		}
	}
	if g.audit.Err() != nil {
		return event.Verdict{Action: event.Deny, Rule: ruleAuditLog, DecidedBy: event.DecidedByDefault,
			Reason: "the audit log cannot be written, so nothing is allowed"}
	}
	return g.decider.Decide(ctx, e)
}

// newID returns n random bytes in hex.
func newID(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("chaperone: no randomness: " + err.Error())
	}
	return hex.EncodeToString(b)
}
