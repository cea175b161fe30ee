package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/policy"
	"github.com/chaperone-dev/chaperone/proxy"
)

// livePolicy decides with the policy file as it is now: a reload (SIGHUP,
// or the file changing) swaps the whole decider at once; a file that does
// not load keeps the old policy, and says why.
type livePolicy struct {
	path    string
	deny    proxy.Decider // deny_hosts, decided first
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
}

type loadedPolicy struct {
	pol   *policy.Policy
	d     proxy.Decider
	close func() error
}

func newLivePolicy(ctx context.Context, path string, deny proxy.Decider, log *slog.Logger, stderr io.Writer, getenv, task func(string) string) (*livePolicy, error) {
	l := &livePolicy{path: path, deny: deny, log: log, stderr: stderr, getenv: getenv, task: task}
	if err := l.load(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// Decide implements proxy.Decider with the current policy.
func (l *livePolicy) Decide(ctx context.Context, e *event.Event) event.Verdict {
	return l.cur.Load().d.Decide(ctx, e)
}

// FileStaticGiven asks the current policy whether every open of path for
// the accesses given is allowed whatever the process, an open for decided
// having just been given v (see policy.Engine.FileStaticGiven).
func (l *livePolicy) FileStaticGiven(path string, sess *event.Session, decided event.FileAccess, v event.Verdict, accesses ...event.FileAccess) bool {
	if fs, ok := l.cur.Load().d.(interface {
		FileStaticGiven(string, *event.Session, event.FileAccess, event.Verdict, ...event.FileAccess) bool
	}); ok {
		return fs.FileStaticGiven(path, sess, decided, v, accesses...)
	}
	return false
}

// Policy returns the current policy.
func (l *livePolicy) Policy() *policy.Policy { return l.cur.Load().pol }

// load reads the file and, if it is a whole policy, makes it current.
func (l *livePolicy) load(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st, err := os.Stat(l.path); err == nil {
		l.modTime = st.ModTime()
	}
	p, err := policy.Load(l.path)
	if err != nil {
		return usageError{err}
	}
	d, closeFn, err := newPolicyDecider(ctx, p, l.deny, l.log, l.getenv, l.task)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	old := l.cur.Swap(&loadedPolicy{pol: p, d: d, close: closeFn})
	if l.onLoad != nil {
		l.onLoad(p) // after the swap: it may ask the new policy
	}
	if old != nil {
		// Decisions in flight may still use the old plugins for a moment.
		l.retired = append(l.retired, old.close)
		time.AfterFunc(5*time.Second, func() { old.close() })
	}
	return nil
}

// reload loads the file again and reports the outcome on stderr.
func (l *livePolicy) reload(ctx context.Context, why string) {
	if err := l.load(ctx); err != nil {
		fmt.Fprintf(l.stderr, "chaperone: policy reload (%s) failed, the old policy stays: %v\n", why, err)
		return
	}
	fmt.Fprintf(l.stderr, "chaperone: policy reloaded from %s (%s)\n", l.path, why)
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
