package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/policy"
)

// livePolicy decides with the policy file as it is now: a reload (SIGHUP,
// or the file changing) swaps the whole engine at once; a file that does
// not load keeps the old policy, and says why. Without a file (path "")
// it is one policy, never reloaded.
type livePolicy struct {
	path    string
	log     *slog.Logger
	stderr  io.Writer
	getenv  func(string) string
	task    func(string) string // a session's current task, for the judge
	cur     atomic.Pointer[loadedPolicy]
	mu      sync.Mutex // serialises reloads and retired
	modTime time.Time
	retired []func() error // closers of replaced policies' plugins
	// onLoad, when set, is told of each policy made current by a reload.
	onLoad func(*policy.Policy)
	// onReload, when set, is told of every reload's outcome: the file's
	// digest, or the error that kept the old policy.
	onReload func(event.PolicyReload)
}

type loadedPolicy struct {
	pol   *policy.Policy
	eng   *policy.Engine
	close func() error
}

// newLivePolicy loads the policy file at path and returns it live.
func newLivePolicy(ctx context.Context, path string, log *slog.Logger, stderr io.Writer, getenv, task func(string) string) (*livePolicy, error) {
	l := &livePolicy{path: path, log: log, stderr: stderr, getenv: getenv, task: task}
	if _, err := l.load(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// newFixedPolicy returns p as the session's policy, never reloaded.
func newFixedPolicy(ctx context.Context, p *policy.Policy, log *slog.Logger, getenv, task func(string) string) (*livePolicy, error) {
	eng, closeFn, err := NewEngine(ctx, p, log, getenv, task)
	if err != nil {
		return nil, err
	}
	l := &livePolicy{log: log, getenv: getenv, task: task}
	l.cur.Store(&loadedPolicy{pol: p, eng: eng, close: closeFn})
	return l, nil
}

// Decide implements event.Decider with the current policy.
func (l *livePolicy) Decide(ctx context.Context, e *event.Event) event.Verdict {
	return l.cur.Load().eng.Decide(ctx, e)
}

// FileStaticGiven asks the current policy whether every open of path for
// the accesses given is allowed whatever the process, an open for decided
// having just been given v (see policy.Engine.FileStaticGiven).
func (l *livePolicy) FileStaticGiven(path string, sess *event.Session, decided event.FileAccess, v event.Verdict, accesses ...event.FileAccess) bool {
	return l.cur.Load().eng.FileStaticGiven(path, sess, decided, v, accesses...)
}

// Policy returns the current policy.
func (l *livePolicy) Policy() *policy.Policy { return l.cur.Load().pol }

// load reads the file and, if it is a whole policy, makes it current. It
// returns the digest of what it read ("" if it could not read the file).
func (l *livePolicy) load(ctx context.Context) (digest string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st, err := os.Stat(l.path); err == nil {
		l.modTime = st.ModTime()
	}
	data, err := readPolicyFile(l.path)
	if err != nil {
		return "", UsageError{err}
	}
	sum := sha256.Sum256(data)
	digest = "sha256:" + hex.EncodeToString(sum[:])
	p, err := policy.Parse(l.path, data)
	if err != nil {
		return digest, UsageError{err}
	}
	eng, closeFn, err := NewEngine(ctx, p, l.log, l.getenv, l.task)
	if err != nil {
		return digest, fmt.Errorf("session: %w", err)
	}
	old := l.cur.Swap(&loadedPolicy{pol: p, eng: eng, close: closeFn})
	if l.onLoad != nil {
		l.onLoad(p) // after the swap: it may ask the new policy
	}
	if old != nil {
		// Decisions in flight may still use the old plugins for a moment.
		l.retired = append(l.retired, old.close)
		time.AfterFunc(5*time.Second, func() { old.close() })
	}
	return digest, nil
}

// readPolicyFile reads the policy file whole, up to the size a policy may
// have (policy.Parse refuses a larger one).
func readPolicyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, policy.MaxPolicySize+1))
	if err != nil {
		return nil, fmt.Errorf("policy: read %s: %w", path, err)
	}
	return data, nil
}

// reload loads the file again and reports the outcome on stderr and to
// onReload.
func (l *livePolicy) reload(ctx context.Context, why string) {
	digest, err := l.load(ctx)
	r := event.PolicyReload{Path: l.path, Digest: digest, Trigger: why}
	if err != nil {
		r.Error = err.Error()
		fmt.Fprintf(l.stderr, "chaperone: policy reload (%s) failed, the old policy stays: %v\n", why, err)
	} else {
		fmt.Fprintf(l.stderr, "chaperone: policy reloaded from %s (%s)\n", l.path, why)
	}
	if l.onReload != nil {
		l.onReload(r)
	}
}

// watch reloads on every signal from hup and whenever the file's
// modification time changes, until ctx ends.
func (l *livePolicy) watch(ctx context.Context, hup <-chan os.Signal, poll time.Duration) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			l.reload(ctx, "SIGHUP")
		case <-t.C:
			st, err := os.Stat(l.path)
			l.mu.Lock()
			changed := err == nil && !st.ModTime().Equal(l.modTime)
			l.mu.Unlock()
			if changed {
				l.reload(ctx, "file changed")
			}
		}
	}
}

// Close stops the plugins of the current and replaced policies.
func (l *livePolicy) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first error
	for _, c := range append(l.retired, l.cur.Load().close) {
		if err := c(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// NewEngine builds the engine for p: its judge (whose requests never go
// through a session) and its plugins, which close stops. getenv reads the
// judge's key (nil: os.Getenv); task, when set, tells the judge a
// session's current task.
func NewEngine(ctx context.Context, p *policy.Policy, log *slog.Logger, getenv func(string) string, task func(string) string) (*policy.Engine, func() error, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var opts policy.EngineOptions
	opts.Logger = log
	opts.Task = task
	closeFn := func() error { return nil }
	if p.Judge.Configured() {
		j, err := policy.NewJudge(p.Judge, nil, getenv)
		if err != nil {
			return nil, nil, fmt.Errorf("policy: judge: %w", err)
		}
		opts.Judge = j
	}
	if len(p.Plugins) > 0 {
		r, err := policy.StartPlugins(ctx, p.Plugins, log)
		if err != nil {
			return nil, nil, fmt.Errorf("policy: plugins: %w", err)
		}
		opts.Plugins = r
		closeFn = r.Close
	}
	eng, err := policy.NewEngine(p, opts)
	if err != nil {
		closeFn()
		return nil, nil, err
	}
	return eng, closeFn, nil
}
