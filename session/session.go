package session

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
	"sync"
	"sync/atomic"
	"time"

	"github.com/chaperone-dev/chaperone/attribution"
	"github.com/chaperone-dev/chaperone/certs"
	"github.com/chaperone-dev/chaperone/config"
	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/privdrop"
	"github.com/chaperone-dev/chaperone/policy"
	"github.com/chaperone-dev/chaperone/proxy"
	"github.com/chaperone-dev/chaperone/rewrite/inject"
	"github.com/chaperone-dev/chaperone/telemetry"
	chtls "github.com/chaperone-dev/chaperone/tls"
)

// Config is one session: Chaperone's configuration and what the command
// that starts the session adds to it.
type Config struct {
	// Settings is Chaperone's configuration, validated (config.Validate).
	Settings config.Config
	// ConfigFile is the configuration file loaded, if any: protected from
	// the agent like the policy file.
	ConfigFile string
	// User is who the agent runs as (a name or uid); "" means the user who
	// ran sudo, else Chaperone's own user.
	User string
	// Agent is the agent's name in events and traces (AgentName tells it
	// from a command line).
	Agent string
	// KillOnExit, in transparent mode, kills what the agent left in the
	// session when it exits; else the session waits for it.
	KillOnExit bool
	// Machine, when set, makes the session the machine's daemon
	// (machine.go): Run is not for it; its agents are found, or adopted.
	Machine *Machine
}

// Deps is what a session takes from the process that runs it.
type Deps struct {
	// Getenv reads Chaperone's environment (SUDO_UID, credentials'
	// variables, OTEL_*, the judge's key); nil means os.Getenv.
	Getenv func(string) string
	// Stdin, when it is a terminal, is where a person answers the
	// session's questions (asks); they are also put on the control socket.
	Stdin io.Reader
	// Stderr gets the notices a person running the session reads (the
	// mode chosen, what is not mediated, reloads, questions); nil discards.
	Stderr io.Writer
	// Logger is the diagnostic log (not the audit log); nil means a text
	// log on Stderr at Settings.LogLevel.
	Logger *slog.Logger
}

// UsageError marks an error in how the session was asked for (the
// configuration, the policy file, a flag) rather than in the machine that
// runs it. Its text is its error's.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Session is one agent session: its proxy and resolver, the kernel hooks
// that send its connections to them, file and exec mediation, its
// decision chain and its sinks. See the package documentation for its
// lifecycle.
type Session struct {
	cfg        config.Config
	configFile string
	user       string
	agent      string
	killOnExit bool
	machine    *machineScope // the daemon's, when Config.Machine
	getenv     func(string) string
	stdin      io.Reader
	stderr     io.Writer
	log        *slog.Logger

	id       string
	token    string // the explicit proxy's credentials: only ever in the agent's environment
	who      privdrop.Options
	resolves []config.Resolve
	// passthrough lists the hosts whose TLS is never intercepted.
	passthrough func(string, netip.Addr) bool
	denyHosts   *policy.Builtin
	tasks       *taskBoard
	bus         *event.Bus
	procs       *attribution.Table
	chain       *chain
	// beforeStep, in tests, fails Start at a step.
	beforeStep func(step string) error

	// Set by Start, each left zero (nil) until its step opens it; Close
	// closes what is set.
	mode      string // config.ModeProxy or config.ModeTransparent, once chosen
	trustDir  string
	bundle    string // the trust bundle in trustDir
	ca        *certs.CA
	policy    *livePolicy
	asker     *asker
	hup       chan os.Signal // reload signals, while watched
	stopWatch context.CancelFunc
	audit     *telemetry.AuditLog
	auditDone chan error // the audit log's writer's end
	tracer    *sessionTracer
	ln        net.Listener // the explicit proxy's
	proxyAdr  netip.AddrPort
	proxyURL  string // with credentials: only ever put in the agent's environment
	rw        *proxy.Rewrites
	agentEnv  []string            // NAME=placeholder for brokered credentials
	creds     []inject.Credential // the brokered credentials, for a daemon's agents' rewrites
	hideEnv   []string            // variables the agent must not inherit
	proxy     *proxy.Proxy
	serveDone chan error                         // the proxy's Serve's end, once serving
	ts        atomic.Pointer[transparentSession] // set once, by Start; read by the proxy and the control socket
	stopDebug func()
	// forgetFiles, once file mediation runs, drops what it learnt of the
	// old policy when a new one loads.
	forgetFiles atomic.Pointer[func()]

	// The agent's life: set by Run.
	rootPID       atomic.Int64 // 0 until the agent started
	info          *event.Session
	recordedStart chan struct{} // closed once the session's start is recorded
	recordOnce    sync.Once
	ended         chan struct{} // closed by Close: decisions still waiting for the start deny
	endOnce       sync.Once
	exitCode      int
	ran           bool
	undoProtect   func()
	started       bool // Start ran every step
	closed        bool
}

// New checks cfg and returns a session ready to Start. It opens nothing:
// a session that is never started needs no Close.
func New(cfg Config, deps Deps) (*Session, error) {
	c := cfg.Settings
	switch c.Mode {
	case config.ModeAuto, config.ModeProxy, config.ModeTransparent:
	default:
		return nil, UsageError{fmt.Errorf("session: mode %q is not available", c.Mode)}
	}
	s := &Session{
		cfg: c, configFile: cfg.ConfigFile, user: cfg.User, agent: cfg.Agent, killOnExit: cfg.KillOnExit, getenv: deps.Getenv, stdin: deps.Stdin, stderr: deps.Stderr, log: deps.Logger,
		id: newID(6), token: newID(24), tasks: &taskBoard{}, bus: event.NewBus(),
		recordedStart: make(chan struct{}), ended: make(chan struct{}),
	}
	if s.getenv == nil {
		s.getenv = os.Getenv
	}
	if s.stderr == nil {
		s.stderr = io.Discard
	}
	if s.log == nil {
		s.log = newLogger(s.stderr, c.LogLevel)
	}
	var err error
	if s.who, err = agentUser(s.user, s.getenv); err != nil {
		return nil, UsageError{err}
	}
	if s.resolves, err = c.Resolves(); err != nil {
		return nil, UsageError{err}
	}
	if s.denyHosts, err = policy.NewBuiltin(c.DenyHosts); err != nil {
		return nil, UsageError{err}
	}
	if len(c.TLSPassthrough) > 0 {
		pinned, err := policy.NewHostList(c.TLSPassthrough)
		if err != nil {
			return nil, UsageError{fmt.Errorf("session: tls_passthrough: %w", err)}
		}
		s.passthrough = pinned.Match
	}
	if c.Policy != "" {
		// The policy is watched at its real path: a symbolic link on the
		// way to it is not a file the session can protect from the agent.
		if real, err := filepath.EvalSymlinks(c.Policy); err == nil {
			if real, err = filepath.Abs(real); err == nil {
				s.cfg.Policy = real
			}
		}
	}
	s.procs = attribution.NewTable(attribution.OSProc(), attribution.WithSocketLookup(attribution.SockDiag))
	if cfg.Machine != nil {
		if cfg.Machine.Classify == nil {
			return nil, UsageError{errors.New("session: daemon: no classifier")}
		}
		s.machine = newMachineScope(s, cfg.Machine)
	}
	return s, nil
}

// AgentName is the agent's name for a session that runs argv: claude,
// codex, cursor, aider, gemini, …, else the command's base name.
func AgentName(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	exe, _ := exec.LookPath(argv[0])
	return attribution.DetectAgent(argv, exe)
}

// ID is the session's id.
func (s *Session) ID() string { return s.id }

// Mode is how the session captures the agent's connections
// (config.ModeTransparent or config.ModeProxy), once Start chose it.
func (s *Session) Mode() string { return s.mode }

// ProxyAddr is where the session's explicit proxy listens, once started.
func (s *Session) ProxyAddr() netip.AddrPort { return s.proxyAdr }

// AuditLog is the path of the session's audit log.
func (s *Session) AuditLog() string {
	if s.audit != nil {
		return s.audit.Path()
	}
	return s.cfg.AuditLogPath()
}

// Subscribe subscribes to the session's events (see event.Bus.Subscribe).
// A subscription made before Start sees every event; the bus closes at
// Close, after the session's end is published.
func (s *Session) Subscribe(name string, o event.SubscribeOptions) *event.Subscription {
	return s.bus.Subscribe(name, o)
}

// TracesDropped counts the trace events and spans the session's trace
// lost (its collector was slow or down); read it after Close.
func (s *Session) TracesDropped() uint64 { return s.tracer.dropped() }

// Start opens the session, in order: its trust bundle, its policy, the
// way it asks a person, its sinks, its policy file's watcher, its
// listener, its rewrites, its proxy, its transparent capture (kernel hooks
// and resolver) and then serves. ctx is the session's: it must last until
// Close (the policy's plugins and the control socket end with it). After
// an error, Close closes what Start opened.
func (s *Session) Start(ctx context.Context) error {
	if s.started || s.closed {
		return errors.New("session: start: already started")
	}
	for _, st := range s.steps() {
		if s.beforeStep != nil {
			if err := s.beforeStep(st.name); err != nil {
				return err
			}
		}
		if err := st.run(ctx); err != nil {
			return err
		}
	}
	s.started = true
	return nil
}

// step is one step of Start.
type step struct {
	name string
	run  func(context.Context) error
}

// steps are Start's steps, in order.
func (s *Session) steps() []step {
	return []step{
		{"trust", s.startTrust},
		{"policy", s.startPolicy},
		{"ask", s.startAsk},
		{"sinks", s.startSinks},
		{"chain", s.startChain},
		{"watch", s.startWatch},
		{"listen", s.startListen},
		{"rewrites", s.startRewrites},
		{"proxy", s.startProxy},
		{"transparent", s.startTransparent},
		{"serve", s.startServe},
	}
}

// startTrust loads (or makes) Chaperone's CA and writes the bundle the
// agent trusts.
func (s *Session) startTrust(context.Context) error {
	ca, _, err := certs.LoadOrCreate(s.cfg.StateDir, time.Now, rand.Reader)
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	s.ca = ca
	// The bundle lives outside the state directory, which only Chaperone
	// may enter: the agent may run as another user and must read it.
	if s.trustDir, err = os.MkdirTemp("", "chaperone-trust-"); err != nil {
		return fmt.Errorf("session: %w", err)
	}
	if err := os.Chmod(s.trustDir, 0o755); err != nil {
		return fmt.Errorf("session: %w", err)
	}
	if s.bundle, err = certs.WriteTrustBundle(s.trustDir, ca); err != nil {
		return fmt.Errorf("session: %w", err)
	}
	if s.who.UID == -1 && os.Geteuid() == 0 && s.machine == nil {
		fmt.Fprintln(s.stderr, "chaperone: the agent runs as root, without capabilities; use sudo or --user to run it as an ordinary user")
	}
	return nil
}

// startPolicy loads the policy file, or the embedded default policy when
// there is none. A policy that does not load stops the session before it
// starts: never half a policy.
func (s *Session) startPolicy(ctx context.Context) error {
	var err error
	if s.cfg.Policy != "" {
		s.policy, err = newLivePolicy(ctx, s.cfg.Policy, s.log, s.stderr, s.getenv, s.tasks.get)
		return err
	}
	def, err := policy.Parse("default policy", policy.DefaultPolicyYAML())
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	if s.policy, err = newFixedPolicy(ctx, def, s.log, s.getenv, s.tasks.get); err != nil {
		return fmt.Errorf("session: %w", err)
	}
	return nil
}

// startAsk opens the session's control socket (and the terminal) for its
// questions, and makes the decision chain that asks them.
func (s *Session) startAsk(ctx context.Context) error {
	ak, err := startAsker(ctx, s.cfg.StateDir, s.id, s.stdin, s.stderr, s.inSession)
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	s.asker = ak
	configure := func(p *policy.Policy) {
		on, _ := p.Ask.OnTimeout.EventAction()
		ak.broker.Configure(p.Ask.Timeout, on, unattended(p.Ask.Unattended))
	}
	configure(s.policy.Policy())
	s.policy.onLoad = func(p *policy.Policy) {
		configure(p)
		if f := s.forgetFiles.Load(); f != nil {
			(*f)()
		}
	}
	return nil
}

// startSinks opens the audit log and the trace exporter and subscribes
// them before anything can publish.
func (s *Session) startSinks(ctx context.Context) error {
	audit, err := telemetry.OpenAuditLog(s.cfg.AuditLogPath())
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	audit.SetFileReads(s.cfg.Audit.FileReads == config.AuditReadsAll)
	s.audit = audit
	s.auditDone = make(chan error, 1)
	// Subscribe before anything can publish: a subscription made inside
	// the goroutine could miss the session's first events.
	sub := s.bus.Subscribe("audit", event.SubscribeOptions{Lossless: true, Queue: 4096})
	go func() { s.auditDone <- audit.Run(sub) }()
	s.tracer, err = startTracer(ctx, s.cfg, s.getenv, s.bus, s.log)
	if err != nil {
		fmt.Fprintf(s.stderr, "chaperone: traces are not exported: %v\n", err)
	}
	return nil
}

// startChain assembles the session's decision chain (chain.go), which
// the proxy, the resolver and file and exec mediation all ask.
func (s *Session) startChain(context.Context) error {
	s.chain = &chain{
		started:   s.recordedStart,
		ended:     s.ended,
		audit:     s.audit,
		denyHosts: s.denyHosts,
		ask:       s.asker.broker,
		policy:    s.policy,
	}
	return nil
}

// startWatch reloads the policy file on the reload signal and when it
// changes, each reload an audit event.
func (s *Session) startWatch(ctx context.Context) error {
	if s.cfg.Policy == "" {
		return nil
	}
	s.hup = make(chan os.Signal, 1)
	if reloadSignal != nil {
		signal.Notify(s.hup, reloadSignal)
	}
	watchCtx, stop := context.WithCancel(ctx)
	s.stopWatch = stop
	s.policy.onReload = func(r event.PolicyReload) { publishPolicyReload(s.bus, s.id, r) }
	go s.policy.watch(watchCtx, s.hup, 2*time.Second)
	return nil
}

// startListen opens the explicit proxy's listener.
func (s *Session) startListen(context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("session: listen %s: %w", s.cfg.Listen, err)
	}
	s.ln = ln
	s.proxyAdr = ln.Addr().(*net.TCPAddr).AddrPort()
	s.proxyURL = (&url.URL{Scheme: "http", User: url.UserPassword("chaperone", s.token), Host: s.proxyAdr.String()}).String()
	return nil
}

// startRewrites makes what the proxy changes in the session's requests.
func (s *Session) startRewrites(context.Context) error {
	rw, agentEnv, hideEnv, creds, err := sessionRewrites(s.cfg, s.policy.Policy(), s.policy.Policy, s.id, s.agent, s.tasks, s.getenv)
	if err != nil {
		return err
	}
	s.rw, s.agentEnv, s.hideEnv, s.creds = rw, agentEnv, hideEnv, creds
	// Command lines and URLs often carry tokens: the log gets the same
	// placeholders as the prompts.
	s.audit.SetRedactor(memoize(func(v string) string {
		out, _ := rw.Redactor.Redact(v)
		return out
	}, 8192))
	return nil
}

// startProxy makes the session's proxy.
func (s *Session) startProxy(context.Context) error {
	roots, err := chtls.LoadRoots(true, s.cfg.UpstreamCA...)
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	p, err := proxy.New(proxy.Options{
		Logger:        s.log,
		Decider:       s.chain,
		Publish:       s.bus.Publish,
		Certs:         certs.NewLeaves(s.ca, certs.LeafOptions{}),
		UpstreamRoots: roots,
		Resolve:       resolver(s.resolves),
		Names:         resolverMemory{s},
		Processes: proxy.ProcessFinderFunc(func(client, _ netip.AddrPort, _ string) (*event.Process, error) {
			// The client's socket: local = its ephemeral address, remote = the proxy.
			root := int(s.rootPID.Load())
			pid, err := s.procs.SessionSocketOwner(client, s.proxyAdr, root)
			if err != nil {
				return nil, err
			}
			return describeProcess(s.procs, pid, root)
		}),
		Passthrough: s.passthrough,
		// Only run sessions intercept QUIC; the daemon refuses it.
		QUICClients: s.cfg.QUIC == config.QUICIntercept && s.machine == nil,
		Rewrites: func(id string) *proxy.Rewrites {
			if id == s.id {
				return s.rw
			}
			if s.machine != nil {
				return s.machine.rewrites(id)
			}
			return nil
		},
		Now: time.Now,
	})
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	s.proxy = p
	p.AddSession(s.id, s.token)
	return nil
}

// startTransparent captures the session's connections in the kernel
// when the mode asks for it: transparent, or auto as root on Linux, else
// the explicit proxy, saying why.
func (s *Session) startTransparent(context.Context) error {
	mode := s.cfg.Mode
	if s.machine != nil {
		ts, err := startTransparent(s.id, transparentOptions{
			machine: s.machine,
			procs:   s.procs, decider: s.chain, publish: s.bus.Publish, log: s.log,
			static: staticNames(s.resolves), upstreams: dnsUpstreams(s.cfg, s.stderr),
			allowQUIC: s.cfg.QUIC == config.QUICAllow, allowUDP: s.cfg.UDP == config.UDPAllow,
		})
		if err != nil {
			return err
		}
		s.ts.Store(ts)
		s.mode = ModeDaemon
		// Each agent's start is recorded when it is found, before any of
		// its connections is decided.
		s.recordOnce.Do(func() { close(s.recordedStart) })
		return nil
	}
	switch {
	case mode == config.ModeTransparent || (mode == config.ModeAuto && os.Geteuid() == 0):
		ts, err := startTransparent(s.id, transparentOptions{
			procs: s.procs, decider: s.chain, publish: s.bus.Publish, log: s.log,
			static: staticNames(s.resolves), upstreams: dnsUpstreams(s.cfg, s.stderr),
			allowQUIC: s.cfg.QUIC == config.QUICAllow, allowUDP: s.cfg.UDP == config.UDPAllow,
			interceptQUIC: s.cfg.QUIC == config.QUICIntercept,
		})
		switch {
		case err == nil:
			s.ts.Store(ts)
			s.mode = config.ModeTransparent
		case mode == config.ModeAuto:
			fmt.Fprintf(s.stderr, "chaperone: transparent mode unavailable (%v)\n", err)
			s.mode = config.ModeProxy
		default:
			return err
		}
	case mode == config.ModeAuto && runtime.GOOS != "linux":
		fmt.Fprintf(s.stderr, "chaperone: transparent capture is built for Linux only (this is %s; see docs/platforms.md)\n", runtime.GOOS)
		s.mode = config.ModeProxy
	case mode == config.ModeAuto:
		fmt.Fprintln(s.stderr, "chaperone: transparent mode needs root")
		s.mode = config.ModeProxy
	default:
		s.mode = config.ModeProxy
	}
	return nil
}

// startServe serves the proxy's listeners and, in transparent mode, the
// session's resolver.
func (s *Session) startServe(context.Context) error {
	ts := s.ts.Load()
	if ts != nil {
		ts.serve(s.proxy)
	}
	s.stopDebug = startDebug(s.getenv(debugAddrEnv), ts, s.log)
	if s.mode == config.ModeProxy {
		// Why it is not transparent was said when auto fell back; --mode
		// proxy chose it.
		fmt.Fprintln(s.stderr, "chaperone: proxy mode: programs that ignore HTTP_PROXY/HTTPS_PROXY are not covered")
	}
	s.serveDone = make(chan error, 1)
	go func() { s.serveDone <- s.proxy.Serve(s.ln) }()
	return nil
}

// resolverMemory is the proxy's ResolverMemory: the transparent session's
// resolver, once the session has one (the proxy is made first).
type resolverMemory struct{ s *Session }

func (m resolverMemory) Resolved(session, host string, addr netip.Addr) bool {
	ts := m.s.ts.Load()
	return ts != nil && ts.Resolved(session, host, addr)
}

// inSession tells whether a pid belongs to the session, once it runs: the
// session's own processes may not answer its questions.
func (s *Session) inSession(pid int) bool {
	if root := int(s.rootPID.Load()); root > 0 && (pid == root || s.procs.IsDescendant(pid, root)) {
		return true
	}
	if ts := s.ts.Load(); ts != nil {
		_, in := ts.scope.ownerOf(pid)
		return in
	}
	return false
}

// Close ends the session, in order: the proxy (no new events after it),
// the kernel hooks and the session's cgroup, the policy file's watcher,
// the session's end recorded, the sinks drained (every event written),
// then the control socket, the policy's plugins and the trust bundle. It closes whatever Start opened,
// also after a failed Start, and returns the audit log's error, if any:
// then some events may not be recorded.
func (s *Session) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	// Decisions still waiting for the session's start are denied.
	s.endOnce.Do(func() { close(s.ended) })
	if s.proxy != nil {
		if err := s.proxy.Close(); err != nil {
			s.log.Warn("close proxy", "err", err)
		}
	}
	if s.serveDone != nil {
		<-s.serveDone
	}
	if s.ln != nil {
		s.ln.Close() // the proxy closes it once it serves it
	}
	if ts := s.ts.Load(); ts != nil {
		if err := ts.Close(); err != nil {
			s.log.Warn("remove session cgroup", "err", err)
		}
	}
	if s.stopDebug != nil {
		s.stopDebug()
	}
	if s.stopWatch != nil {
		s.stopWatch() // no reload is recorded after the session's end
	}
	if s.hup != nil {
		signal.Stop(s.hup)
	}
	if s.info != nil {
		end := *s.info
		end.ExitCode = s.exitCode
		end.Duration = time.Since(s.info.Started)
		publishSession(s.bus, event.KindSessionEnd, end, s.log)
	}
	// The sinks: the bus closes, and every event is written and counted
	// (and the trace sent, as far as the collector takes it).
	s.bus.Close()
	var auditErr error
	if s.audit != nil {
		if s.auditDone != nil {
			auditErr = <-s.auditDone
		}
		if err := s.audit.Close(); auditErr == nil {
			auditErr = err
		}
	}
	s.tracer.stop()
	if s.asker != nil {
		s.asker.stop()
	}
	if s.policy != nil {
		s.policy.Close()
	}
	if s.undoProtect != nil {
		s.undoProtect()
	}
	if s.trustDir != "" {
		os.RemoveAll(s.trustDir)
	}
	if auditErr != nil {
		return fmt.Errorf("session: audit log: %w", auditErr)
	}
	return nil
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

// newLogger returns the diagnostic logger (not the audit log) at level.
func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// newID returns n random bytes in hex.
func newID(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("chaperone: no randomness: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// RecordReload records a reload of what the session runs by (a daemon's
// configuration): an audit event, with the error when the old one stays.
func (s *Session) RecordReload(r event.PolicyReload) { publishPolicyReload(s.bus, s.id, r) }
