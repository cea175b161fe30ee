//go:build linux

package execs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/chaperone-dev/chaperone/event"
)

const (
	// maxInFlight bounds the notifications decided at once; more wait in
	// the kernel's queue.
	maxInFlight = 64
	// maxPending bounds the allowed execs remembered for a kill report.
	maxPending = 4096
	// fileCache is the number of executables whose digest and format are
	// kept.
	fileCache = 4096
	// dirCache is the number of program directories listed by size.
	dirCache = 64
)

// Execs answers the exec notifications of one seccomp listener.
type Execs struct {
	o    ExecOptions
	file *os.File
	l    *listener
	// ready is a second descriptor of the listener, non-blocking and in
	// the runtime's poller: loop waits on it without holding a thread in
	// a system call (a thread blocked in poll(2) loses its P, and taking
	// one back on each exec wakes the runtime's monitor, which then polls
	// every 20 µs for a millisecond or more: on a busy machine, a large
	// share of the CPU an exec cost). Closing it wakes loop.
	ready    *os.File
	ctx      context.Context
	cancel   context.CancelFunc
	handlers sync.WaitGroup
	loopDone chan struct{}
	ver      *verifier // nil when off
	verErr   error
	killDone chan struct{}
	files    *files
	dirs     *dirIndex

	mu      sync.Mutex
	pending map[int]*event.Event // allowed execs by tid, for kill reports

	events, denied, killed, outside atomic.Uint64

	closeOnce sync.Once
	closeErr  error
}

// Serve answers the seccomp notifications of listener until Close, and
// takes ownership of it. It loads the verifier; when that fails (no root,
// no BTF, an old kernel) Serve still decides every exec, logs a warning,
// marks allowed events as unverified, and Verifier says why.
func Serve(listener *os.File, o ExecOptions) (*Execs, error) {
	if listener == nil {
		return nil, errors.New("execs: serve: no listener")
	}
	if o.InSession == nil || o.Decider == nil {
		return nil, errors.New("execs: serve: InSession and Decider are required")
	}
	if o.Publish == nil {
		o.Publish = func(*event.Event) {}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	l, err := newListener(int(listener.Fd()))
	if err != nil {
		return nil, err
	}
	ready, err := pollable(l.fd)
	if err != nil {
		return nil, err
	}
	x := &Execs{
		o: o, file: listener, l: l, ready: ready,
		loopDone: make(chan struct{}),
		killDone: make(chan struct{}),
		files:    newFiles(fileCache),
		dirs:     newDirIndex(dirCache),
		pending:  make(map[int]*event.Event),
	}
	x.ctx, x.cancel = context.WithCancel(context.Background())
	x.learnLoaders()
	x.ver, x.verErr = loadVerifier()
	if x.verErr != nil {
		o.Logger.Warn("execs: argv verification is off: an allowed exec's arguments could be changed after the check", "session", o.Session, "err", x.verErr)
		close(x.killDone)
	} else {
		go x.readKilled()
	}
	go x.loop()
	return x, nil
}

// Verifier returns nil when every allowed exec is verified in the kernel
// as it happens, else why the verifier is off.
func (x *Execs) Verifier() error { return x.verErr }

// Stats returns the counts so far.
func (x *Execs) Stats() Stats {
	return Stats{Events: x.events.Load(), Denied: x.denied.Load(), Killed: x.killed.Load(), Outside: x.outside.Load()}
}

// Close stops serving. Execs waiting for a decision are denied with EPERM
// (Close does not wait for Decide to return); the listener is closed, so
// every later exec of the session's processes fails with ENOSYS. Safe to
// call twice.
func (x *Execs) Close() error {
	x.closeOnce.Do(func() {
		x.cancel()
		var errs []error
		errs = append(errs, x.ready.Close()) // wakes loop
		<-x.loopDone
		x.handlers.Wait()
		errs = append(errs, x.file.Close())
		if x.ver != nil {
			errs = append(errs, x.ver.close())
		}
		<-x.killDone
		if err := errors.Join(errs...); err != nil {
			x.closeErr = fmt.Errorf("execs: close: %w", err)
		}
	})
	return x.closeErr
}

// loop receives notifications until Close, or until no process is left
// under the filter (the listener hangs up).
func (x *Execs) loop() {
	defer close(x.loopDone)
	// Up to maxInFlight workers decide notifications; more wait in the
	// kernel's queue.
	work := make(chan seccompNotif)
	defer close(work)
	workers := 0
	rc, cerr := x.ready.SyscallConn()
	if cerr != nil {
		x.o.Logger.Error("execs: wait for the listener", "session", x.o.Session, "err", cerr)
		return
	}
	for {
		var (
			n      seccompNotif
			err    error
			hangup bool
		)
		// Read calls the function until it returns true, waiting in the
		// poller in between. A notification is taken only when poll says
		// one waits: the receive blocks otherwise, whatever O_NONBLOCK.
		werr := rc.Read(func(uintptr) bool {
			revents, perr := x.l.poll()
			switch {
			case perr != nil:
				err = perr
			case revents&unix.POLLIN != 0:
				n, err = x.l.recv()
			case revents&(unix.POLLHUP|unix.POLLERR) != 0:
				hangup = true
			default:
				return false
			}
			return true
		})
		switch {
		case werr != nil:
			if x.ctx.Err() == nil {
				x.o.Logger.Error("execs: wait for the listener", "session", x.o.Session, "err", werr)
			}
			return
		case hangup:
			x.o.Logger.Debug("execs: no process left under the filter", "session", x.o.Session)
			return
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EINTR):
			continue // the process went away meanwhile
		case err != nil:
			x.o.Logger.Error("execs: receive a notification", "session", x.o.Session, "err", err)
			return
		}
		select {
		case work <- n: // an idle worker takes it
			continue
		default:
		}
		if workers < maxInFlight {
			workers++
			x.handlers.Add(1)
			go x.work(n, work)
			continue
		}
		work <- n // all busy: wait for one (they finish quickly once canceled)
	}
}

// work handles n, then each notification loop hands it, until loop ends.
// Workers outlive their notification so that their grown stacks are
// reused: a goroutine per exec paid for growing one each time.
func (x *Execs) work(n seccompNotif, more <-chan seccompNotif) {
	defer x.handlers.Done()
	x.handle(n)
	for n := range more {
		x.handle(n)
	}
}

// handle answers one notification. Every path answers it, unless the
// process is gone.
func (x *Execs) handle(n seccompNotif) {
	log := x.o.Logger.With("session", x.o.Session, "tid", n.Pid)
	call, ok := classify(n.Data)
	if !ok {
		if x.o.Other != nil {
			x.other(log, n)
			return
		}
		x.respond(log, n.ID, x.l.continueCall(n.ID))
		return
	}
	now := x.o.Now()
	tid := int(n.Pid)
	tgid, err := tgidOf(tid)
	if !x.l.valid(n.ID) {
		return // gone
	}
	if err != nil {
		log.Warn("execs: find the process of a thread", "err", err)
		x.respond(log, n.ID, x.l.fail(n.ID, unix.EPERM))
		return
	}
	if !x.o.InSession(tgid) {
		x.outside.Add(1)
		x.respond(log, n.ID, x.l.continueCall(n.ID))
		return
	}
	r, err := readRequest(tid, call, call.args(n.Data))
	if !x.l.valid(n.ID) {
		return // the pid may name another process now: what was read is void
	}
	if r != nil {
		r.tgid = tgid
	}
	switch {
	case errors.Is(err, errFault):
		x.respond(log, n.ID, x.l.fail(n.ID, unix.EFAULT))
		return
	case errors.Is(err, errNoEntry):
		x.respond(log, n.ID, x.l.fail(n.ID, unix.ENOENT))
		return
	}
	ev := &event.Event{Time: now, Kind: event.KindExec, Session: x.o.Session, Exec: &event.Exec{}}
	if x.o.Process != nil {
		if p, perr := x.o.Process(tgid); perr == nil {
			ev.Process = p
		}
	}
	if err != nil {
		// Too large to check, or unreadable: denied without asking.
		log.Debug("execs: cannot read the exec", "err", err)
		if r != nil {
			ev.Exec = &event.Exec{Path: r.resolved, Cwd: r.cwd}
		}
		reason := "cannot read the exec: " + err.Error()
		if errors.Is(err, errArgvTooLarge) || errors.Is(err, errPathTooLong) {
			reason = err.Error()
		}
		x.deny(log, n.ID, ev, event.Verdict{Action: event.Deny, Reason: reason})
		return
	}
	ev.Exec = &event.Exec{Path: r.resolved, Argv: r.argv, Cwd: r.cwd}
	defer r.close()
	fd, oerr := openTarget(r)
	if errno, ok := errors.AsType[unix.Errno](oerr); ok && (errno == unix.ENOENT || errno == unix.ENOTDIR || errno == unix.ELOOP) {
		// Nothing to run there: fail it as the kernel would, without a
		// decision (a shell searching PATH tries a dozen such paths). A
		// file that appears later is another exec, decided then.
		x.respond(log, n.ID, x.l.fail(n.ID, errno))
		return
	}
	if oerr != nil {
		x.deny(log, n.ID, ev, event.Verdict{Action: event.Deny, Reason: "cannot open the program: " + oerr.Error()})
		return
	}
	p := x.plan(r, fd)
	unix.Close(fd)
	if p.errno != 0 {
		x.respond(log, n.ID, x.l.fail(n.ID, p.errno))
		return
	}
	ev.Exec.Program, ev.Exec.Interpreter, ev.Exec.Digest = p.program, p.interpreter, p.digest
	if p.deny != "" {
		x.deny(log, n.ID, ev, event.Verdict{Action: event.Deny, Reason: p.deny})
		return
	}

	v := x.decideAll(ev, p)
	if !v.Allowed() {
		x.deny(log, n.ID, ev, v.Enforced())
		return
	}
	if x.ver == nil {
		v.Reason = withSuffix(v.Reason, reasonUnverified)
	} else if err := x.ver.arm(tid, p.expectation(r)); err != nil {
		log.Warn("execs: arm the verifier", "err", err)
		x.deny(log, n.ID, ev, event.Verdict{Action: event.Deny, Reason: reasonArmFailed})
		return
	}
	ev.Verdict = v
	x.remember(tid, ev) // before the exec can be killed and reported
	if err := x.l.continueCall(n.ID); err != nil {
		if x.ver != nil {
			x.ver.disarm(tid)
		}
		x.forget(tid, ev)
		x.respond(log, n.ID, err)
		return
	}
	x.events.Add(1)
	x.o.Publish(ev)
}

// other hands a notification that is not an exec to o.Other; one it
// panics on is failed with EPERM.
func (x *Execs) other(log *slog.Logger, n seccompNotif) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("execs: answering a notification panicked", "nr", n.Data.Nr, "panic", r)
			x.respond(log, n.ID, x.l.fail(n.ID, unix.EPERM))
		}
	}()
	x.o.Other(x.ctx, Notification{TID: int(n.Pid), Arch: n.Data.Arch, Nr: n.Data.Nr, Args: n.Data.Args, id: n.ID, l: x.l})
}

// decideAll decides every program the exec runs, each as an exec of its
// own (exec.path, exec.argv and exec.digest its own; exec.program and
// exec.interpreter the whole exec's), in order, until one is denied: that
// verdict, its reason saying which program it was, is the exec's. When all
// are allowed, the exec's own verdict is.
func (x *Execs) decideAll(ev *event.Event, p plan) event.Verdict {
	if len(p.views) == 1 {
		return x.decide(ev) // the program is the exec's: its event is the exec's own
	}
	var first event.Verdict
	for i, view := range p.views {
		ve := *ev
		ve.Exec = &event.Exec{Path: view.path, Argv: view.argv, Cwd: ev.Exec.Cwd,
			Program: ev.Exec.Program, Interpreter: ev.Exec.Interpreter, Digest: viewDigest(view, "")}
		v := x.decide(&ve)
		if !v.Allowed() {
			if view.role != roleExec {
				v.Reason = withSuffix(v.Reason, "(as "+view.path+": "+view.role+")")
			}
			return v
		}
		if i == 0 {
			first = v
		}
	}
	return first
}

func viewDigest(v program, or string) string {
	if v.info == nil {
		return or
	}
	return v.info.digest
}

// decide asks o.Decider, giving up when Close cancels it. Decide gets a
// copy: it may still hold it when ev is published.
func (x *Execs) decide(ev *event.Event) event.Verdict {
	ch := make(chan event.Verdict, 1)
	c := *ev
	go func() { ch <- x.o.Decider.Decide(x.ctx, &c) }()
	select {
	case v := <-ch:
		return v
	case <-x.ctx.Done():
		return event.Verdict{Action: event.Deny, Reason: reasonClosed}
	}
}

// deny fails the exec with EPERM and publishes it.
func (x *Execs) deny(log *slog.Logger, id uint64, ev *event.Event, v event.Verdict) {
	v.Action = event.Deny
	v.Reason = withSuffix(v.Reason, reasonDeniedSuffix)
	if err := x.l.fail(id, unix.EPERM); err != nil {
		x.respond(log, id, err)
		return
	}
	ev.Verdict = v
	x.events.Add(1)
	x.denied.Add(1)
	x.o.Publish(ev)
}

// respond logs a failed answer: ENOENT means the process went away (a
// signal interrupted its exec, which is then notified again).
func (x *Execs) respond(log *slog.Logger, id uint64, err error) {
	if err == nil {
		return
	}
	if errors.Is(err, unix.ENOENT) {
		log.Debug("execs: the process went away before the answer")
		return
	}
	log.Warn("execs: answer a notification", "err", err)
}

// remember keeps an allowed exec's event until its thread's next exec, so
// that a kill report can say what was allowed.
func (x *Execs) remember(tid int, ev *event.Event) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.pending[tid]; !ok && len(x.pending) >= maxPending {
		for k := range x.pending {
			delete(x.pending, k)
			break
		}
	}
	x.pending[tid] = ev
}

func (x *Execs) forget(tid int, ev *event.Event) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.pending[tid] == ev {
		delete(x.pending, tid)
	}
}

// readKilled publishes the execs the verifier killed.
func (x *Execs) readKilled() {
	defer close(x.killDone)
	for {
		r, err := x.ver.next()
		if errors.Is(err, ringbuf.ErrClosed) {
			return
		}
		if err != nil {
			x.o.Logger.Warn("execs: read the verifier", "session", x.o.Session, "err", err)
			continue
		}
		x.mu.Lock()
		allowed := x.pending[int(r.Pid)]
		delete(x.pending, int(r.Pid))
		x.mu.Unlock()
		var ev event.Event
		if allowed != nil {
			ev = *allowed
		} else {
			// Forgotten: more execs were allowed meanwhile than remembered.
			ev = event.Event{Kind: event.KindExec, Session: x.o.Session, Exec: &event.Exec{}}
			if x.o.Process != nil {
				ev.Process, _ = x.o.Process(int(r.Tgid))
			}
		}
		ev.Time = x.o.Now()
		ev.Verdict = event.Verdict{Action: event.Deny, Reason: killedReason(r.Reason)}
		x.killed.Add(1)
		x.o.Publish(&ev)
	}
}

func killedReason(r uint32) string {
	switch r {
	case killedArgv:
		return reasonKilledArgv
	case killedFilename:
		return reasonKilledPath
	case killedInterp:
		return reasonKilledInterp
	case killedProgram:
		return reasonKilledProg
	}
	return reasonKilledRead
}
