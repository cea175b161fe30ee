package policy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/plugin"
)

// Timings and bounds of the plugin runner.
const (
	pluginBackoffMin = 100 * time.Millisecond
	pluginBackoffMax = 10 * time.Second
	// pluginGrace is how long Close waits for a plugin to exit after its
	// stdin closes before killing it.
	pluginGrace = 2 * time.Second

	maxAnswerLine  = 64 << 10
	maxStderrLine  = 512
	maxStderrLines = 100 // per process; the rest is read and dropped
	maxPluginRule  = 128
	maxReason      = 512
)

// PluginRunner runs the policy's plugin processes, offers them events and
// restarts those that fail. It implements Plugins; Ask is safe for
// concurrent use.
//
// A plugin process is started with a minimal environment (PATH and HOME of
// Chaperone, nothing of any session) and with pipes that only Chaperone
// holds as its stdin and stdout; its stderr is logged, line by line and
// bounded, and never parsed.
type PluginRunner struct {
	logger *slog.Logger
	opts   runnerOptions
	procs  []*pluginProc

	wg        sync.WaitGroup // the goroutines of every process and the pending restarts
	closeOnce sync.Once
}

var _ Plugins = (*PluginRunner)(nil)

// runnerOptions are the runner's timings, fixed at start.
type runnerOptions struct {
	backoffMin, backoffMax time.Duration
	grace                  time.Duration
	env                    []string
}

// StartPlugins starts one process for each of cfgs. ctx bounds the start
// only: the processes run until Close. If a plugin cannot be started, the
// ones already started are stopped and the error says which failed.
func StartPlugins(ctx context.Context, cfgs []PluginConfig, logger *slog.Logger) (*PluginRunner, error) {
	var env []string
	for _, k := range []string{"PATH", "HOME"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return startPlugins(ctx, cfgs, logger, runnerOptions{
		backoffMin: pluginBackoffMin,
		backoffMax: pluginBackoffMax,
		grace:      pluginGrace,
		env:        env,
	})
}

func startPlugins(ctx context.Context, cfgs []PluginConfig, logger *slog.Logger, opts runnerOptions) (*PluginRunner, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &PluginRunner{logger: logger, opts: opts}
	for i, c := range cfgs {
		p, err := r.newProc(c)
		if err == nil {
			err = ctx.Err()
		}
		if err == nil {
			p.mu.Lock()
			err = p.startLocked()
			p.mu.Unlock()
		}
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("policy: plugin %d (%s): %w", i+1, pluginName(c), err)
		}
		r.procs = append(r.procs, p)
	}
	return r, nil
}

func pluginName(c PluginConfig) string {
	if c.Name != "" {
		return c.Name
	}
	if len(c.Command) > 0 {
		return filepath.Base(c.Command[0])
	}
	return "unnamed"
}

func (r *PluginRunner) newProc(c PluginConfig) (*pluginProc, error) {
	if len(c.Command) == 0 || c.Command[0] == "" {
		return nil, errors.New("no command")
	}
	onError := event.Deny
	if c.OnError != "" {
		act, ok := c.OnError.EventAction()
		if !ok || act == event.Rewrite {
			return nil, fmt.Errorf("on_error %q: want allow, deny or ask", c.OnError)
		}
		onError = act
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultPluginTimeout
	}
	name := pluginName(c)
	return &pluginProc{
		r:       r,
		name:    name,
		argv:    slices.Clone(c.Command),
		on:      slices.Clone(c.On),
		timeout: timeout,
		onError: onError,
		logger:  r.logger.With("plugin", name),
	}, nil
}

// Ask offers e to the plugins whose On includes e.Kind (all of them when On
// is empty), in order, until one decides. A plugin that abstains passes e to
// the next; answered is false when all abstain or none matches. A plugin
// that fails (no answer within its timeout, exited, an answer that is not a
// verdict) decides with its on_error verdict and is restarted. When ctx ends
// first, the verdict is a deny that says so, whatever on_error is.
func (r *PluginRunner) Ask(ctx context.Context, e *event.Event) (event.Verdict, bool) {
	if r == nil {
		return event.Verdict{}, false
	}
	var body []byte // the event's JSON, encoded once for every plugin
	for _, p := range r.procs {
		if len(p.on) > 0 && !slices.Contains(p.on, e.Kind) {
			continue
		}
		if body == nil {
			b, err := json.Marshal(plugin.EventFrom(e))
			if err != nil {
				return p.failed("cannot encode the event: " + err.Error()), true
			}
			body = b
		}
		if v, ok := p.ask(ctx, body); ok {
			return v, true
		}
	}
	return event.Verdict{}, false
}

// Close stops every plugin: it closes their stdin, kills those still
// running after a grace period, and returns once all are reaped and their
// goroutines have ended. Requests still waiting get their plugin's on_error
// verdict. Close may be called more than once, and after a partial start.
func (r *PluginRunner) Close() error {
	r.closeOnce.Do(func() {
		var stopping []*pluginInstance
		for _, p := range r.procs {
			p.mu.Lock()
			p.closed = true
			if p.timer != nil && p.timer.Stop() {
				r.wg.Done() // the restart that will not run
			}
			p.timer = nil
			if p.cur != nil {
				stopping = append(stopping, p.cur)
				p.cur = nil
			}
			p.mu.Unlock()
		}
		var wg sync.WaitGroup
		for _, in := range stopping {
			wg.Go(func() { in.stop(r.opts.grace) })
		}
		wg.Wait()
		r.wg.Wait()
	})
	return nil
}

// pluginProc is one configured plugin and its current process.
type pluginProc struct {
	r       *PluginRunner
	name    string
	argv    []string
	on      []event.Kind
	timeout time.Duration
	onError event.Action
	logger  *slog.Logger

	nextID atomic.Uint64

	mu       sync.Mutex
	cur      *pluginInstance // nil while waiting to restart, and once closed
	closed   bool
	failures int         // consecutive processes that failed without a good answer
	timer    *time.Timer // the pending restart
	lastErr  string      // why the last process failed
}

func (p *pluginProc) rule() string { return "plugin:" + p.name }

// failed is the plugin's on_error verdict, saying what failed.
func (p *pluginProc) failed(reason string) event.Verdict {
	return event.Verdict{
		Action:    p.onError,
		Rule:      p.rule(),
		Reason:    oneLine("plugin "+p.name+" "+reason, maxReason) + "; on_error " + p.onError.String(),
		DecidedBy: event.DecidedByPlugin,
	}
}

// ask sends one request to the plugin and waits for its answer; ok is false
// when the plugin abstained.
func (p *pluginProc) ask(ctx context.Context, body []byte) (v event.Verdict, ok bool) {
	if err := ctx.Err(); err != nil {
		return p.canceled(err), true
	}
	p.mu.Lock()
	in, closed, lastErr := p.cur, p.closed, p.lastErr
	p.mu.Unlock()
	switch {
	case closed:
		return p.failed("is stopped"), true
	case in == nil:
		return p.failed("is restarting after it " + lastErr), true
	}

	id := p.nextID.Add(1)
	ch := in.register(id)
	if ch == nil {
		return p.failed(in.reason), true
	}
	line := make([]byte, 0, len(body)+40)
	line = append(line, `{"id":`...)
	line = strconv.AppendUint(line, id, 10)
	line = append(line, `,"event":`...)
	line = append(line, body...)
	line = append(line, "}\n"...)

	deadline := time.Now().Add(p.timeout)
	if err := in.send(line, deadline); err != nil {
		in.fail("did not read its request: " + err.Error())
		return p.failed(in.reason), true
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case a := <-ch:
		return p.verdict(a)
	case <-in.dead:
		select { // an answer that came just before the failure still counts
		case a := <-ch:
			return p.verdict(a)
		default:
		}
		return p.failed(in.reason), true
	case <-timer.C:
		in.fail("gave no answer within " + p.timeout.String())
		return p.failed(in.reason), true
	case <-ctx.Done():
		// The entry stays pending so that a late answer is not taken for
		// nonsense; the caller no longer waits for the verdict.
		return p.canceled(ctx.Err()), true
	}
}

func (p *pluginProc) canceled(err error) event.Verdict {
	return event.Verdict{Action: event.Deny, Rule: p.rule(), Reason: "plugin " + p.name + " not asked: " + err.Error(), DecidedBy: event.DecidedByPlugin}
}

// verdict turns a checked answer into a verdict.
func (p *pluginProc) verdict(a plugin.Verdict) (event.Verdict, bool) {
	if a.Verdict == plugin.Abstain {
		return event.Verdict{}, false
	}
	act, err := event.ParseAction(a.Verdict)
	if err != nil { // the reader lets only verdict words through
		return p.failed("answered " + strconv.Quote(a.Verdict)), true
	}
	rule := p.rule()
	if r := oneLine(a.Rule, maxPluginRule); r != "" {
		rule += "/" + r
	}
	reason := oneLine(a.Reason, maxReason)
	if reason == "" {
		reason = "plugin " + p.name + " said " + a.Verdict
	}
	return event.Verdict{Action: act, Rule: rule, Reason: reason, DecidedBy: event.DecidedByPlugin}, true
}

// startLocked starts a process for p. p.mu is held.
func (p *pluginProc) startLocked() error {
	var files []*os.File // every end, closed on failure
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		files = append(files, r, w)
		return r, w, err
	}
	closeAll := func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}
	inR, inW, err1 := pipe()
	outR, outW, err2 := pipe()
	errR, errW, err3 := pipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		closeAll()
		return fmt.Errorf("pipe: %w", err)
	}
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = p.r.opts.env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	if err := cmd.Start(); err != nil {
		closeAll()
		return fmt.Errorf("start: %w", err)
	}
	// The child holds its own copies now; only Chaperone's ends stay here.
	inR.Close()
	outW.Close()
	errW.Close()

	in := &pluginInstance{
		p:          p,
		cmd:        cmd,
		stdin:      inW,
		stdout:     outR,
		stderr:     errR,
		pending:    map[uint64]chan plugin.Verdict{},
		dead:       make(chan struct{}),
		exited:     make(chan struct{}),
		readerDone: make(chan struct{}),
		stderrDone: make(chan struct{}),
	}
	p.cur = in
	p.r.wg.Add(3)
	go in.wait()
	go in.readAnswers()
	go in.logStderr()
	p.logger.Debug("plugin started", "pid", cmd.Process.Pid)
	return nil
}

// instanceFailed replaces a failed process by a restart after a backoff.
func (p *pluginProc) instanceFailed(in *pluginInstance, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != in || p.closed {
		return // stopped by Close, or already replaced
	}
	p.cur = nil
	p.lastErr = reason
	if in.answered.Load() {
		p.failures = 0
	}
	p.failures++
	delay := p.backoff()
	p.logger.Warn("plugin failed; restarting", "reason", reason, "pid", in.cmd.Process.Pid, "in", delay)
	p.scheduleLocked(delay)
}

// backoff is the wait before the next restart: backoffMin doubling with
// each consecutive failure, up to backoffMax.
func (p *pluginProc) backoff() time.Duration {
	d := p.r.opts.backoffMin
	for i := 1; i < p.failures && d < p.r.opts.backoffMax; i++ {
		d *= 2
	}
	return min(d, p.r.opts.backoffMax)
}

func (p *pluginProc) scheduleLocked(delay time.Duration) {
	p.r.wg.Add(1)
	p.timer = time.AfterFunc(delay, p.restart)
}

func (p *pluginProc) restart() {
	defer p.r.wg.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.timer = nil
	if p.closed || p.cur != nil {
		return
	}
	if err := p.startLocked(); err != nil {
		p.failures++
		p.lastErr = "could not be restarted: " + err.Error()
		delay := p.backoff()
		p.logger.Warn("plugin restart failed", "err", err, "retry_in", delay)
		p.scheduleLocked(delay)
	}
}

// pluginInstance is one running process of a plugin.
type pluginInstance struct {
	p      *pluginProc
	cmd    *exec.Cmd
	stdin  *os.File
	stdout *os.File
	stderr *os.File

	wmu sync.Mutex // one request line at a time

	mu      sync.Mutex
	pending map[uint64]chan plugin.Verdict

	answered atomic.Bool // at least one good answer

	failOnce   sync.Once
	reason     string        // why it failed; set before dead closes
	dead       chan struct{} // closed when it failed or was stopped
	exited     chan struct{} // closed once reaped
	readerDone chan struct{}
	stderrDone chan struct{}
}

// register makes room for the answer to id; nil if the process failed.
func (in *pluginInstance) register(id uint64) chan plugin.Verdict {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.pending == nil {
		return nil
	}
	ch := make(chan plugin.Verdict, 1)
	in.pending[id] = ch
	return ch
}

// take removes and returns the waiter for id.
func (in *pluginInstance) take(id uint64) (chan plugin.Verdict, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	ch, ok := in.pending[id]
	delete(in.pending, id)
	return ch, ok
}

func (in *pluginInstance) send(line []byte, deadline time.Time) error {
	in.wmu.Lock()
	defer in.wmu.Unlock()
	_ = in.stdin.SetWriteDeadline(deadline) // pipes support deadlines on the platforms that matter; elsewhere the timeout still applies to the answer
	_, err := in.stdin.Write(line)
	return err
}

// fail marks the process failed (once), kills it, and lets the plugin
// restart. Waiting requests see dead and answer with on_error.
func (in *pluginInstance) fail(reason string) {
	in.failOnce.Do(func() {
		in.mu.Lock()
		in.reason = reason
		in.pending = nil
		in.mu.Unlock()
		// Out of service before anyone learns it failed, so that the next
		// request sees the restart pending.
		in.p.instanceFailed(in, reason)
		close(in.dead)
		_ = in.cmd.Process.Kill()
		in.stdin.Close()
	})
}

// stop ends the process for Close: EOF on its stdin first, a kill after
// grace.
func (in *pluginInstance) stop(grace time.Duration) {
	in.stdin.Close()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-in.exited:
	case <-t.C:
		in.p.logger.Warn("plugin did not exit after its stdin closed; killing it", "pid", in.cmd.Process.Pid, "grace", grace)
		_ = in.cmd.Process.Kill()
		<-in.exited
	}
	in.fail("was stopped")
}

// wait reaps the process and, once its readers are done (or a grandchild
// that kept the pipes open has had a second), closes Chaperone's ends.
func (in *pluginInstance) wait() {
	defer in.p.r.wg.Done()
	err := in.cmd.Wait()
	close(in.exited)
	if err != nil {
		in.p.logger.Debug("plugin exited", "pid", in.cmd.Process.Pid, "err", err)
	}
	t := time.NewTimer(time.Second)
	defer t.Stop()
	for _, done := range []chan struct{}{in.readerDone, in.stderrDone} {
		select {
		case <-done:
		case <-t.C:
		}
	}
	in.stdout.Close()
	in.stderr.Close()
	in.stdin.Close()
	in.fail(exitText(err))
}

func exitText(err error) string {
	if err == nil {
		return "exited"
	}
	return "exited (" + err.Error() + ")"
}

// readAnswers reads answer lines and hands each to its waiting request.
// Anything that is not an answer to a pending request fails the process.
func (in *pluginInstance) readAnswers() {
	defer in.p.r.wg.Done()
	defer close(in.readerDone)
	sc := bufio.NewScanner(in.stdout)
	sc.Buffer(make([]byte, 0, 4096), maxAnswerLine)
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		a, err := decodeAnswer(line)
		if err != nil {
			in.fail(err.Error())
			return
		}
		ch, ok := in.take(a.ID)
		if !ok {
			in.fail(fmt.Sprintf("answered request %d, which is not waiting", a.ID))
			return
		}
		in.answered.Store(true)
		ch <- a.Verdict
	}
	switch err := sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		in.fail(fmt.Sprintf("wrote an answer longer than %d bytes", maxAnswerLine))
	case err != nil && !errors.Is(err, os.ErrClosed):
		in.fail("stdout failed: " + err.Error())
	default:
		// EOF: the process closed its stdout, most likely by exiting; give
		// wait a moment to say how.
		t := time.NewTimer(500 * time.Millisecond)
		defer t.Stop()
		select {
		case <-in.exited:
		case <-t.C:
			in.fail("closed its stdout")
		}
	}
}

// decodeAnswer decodes one line of a plugin's stdout; the error says, after
// the plugin's name, what is wrong with it.
func decodeAnswer(line []byte) (plugin.Response, error) {
	var a plugin.Response
	if err := json.Unmarshal(line, &a); err != nil {
		return plugin.Response{}, errors.New("wrote a line that is not a JSON answer")
	}
	if !plugin.ValidVerdict(a.Verdict.Verdict) {
		return plugin.Response{}, fmt.Errorf("answered request %d with the unknown verdict %q", a.ID, oneLine(a.Verdict.Verdict, 32))
	}
	return a, nil
}

// logStderr logs the plugin's stderr: lines cut to maxStderrLine, at most
// maxStderrLines of them per process; the rest is drained unread.
func (in *pluginInstance) logStderr() {
	defer in.p.r.wg.Done()
	defer close(in.stderrDone)
	br := bufio.NewReaderSize(in.stderr, maxStderrLine)
	pid := in.cmd.Process.Pid
	logged, cont := 0, false
	for logged < maxStderrLines {
		chunk, isPrefix, err := br.ReadLine()
		if err != nil {
			return
		}
		if !cont {
			in.p.logger.Info("plugin stderr", "pid", pid, "line", oneLine(string(chunk), maxStderrLine))
			logged++
		}
		cont = isPrefix // the rest of a long line is dropped
	}
	in.p.logger.Warn("plugin stderr: further lines are not logged", "pid", pid, "limit", maxStderrLines)
	_, _ = io.Copy(io.Discard, br)
}

// oneLine makes s safe to show on one line: control characters become
// spaces, invalid UTF-8 is replaced, and it is cut to max bytes.
func oneLine(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s))
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
