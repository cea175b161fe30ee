package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"

	"github.com/chaperone-dev/chaperone/event"
)

// EngineOptions are the collaborators of an Engine. Every field is
// optional, but a policy that uses the judge needs Judge, and one with
// plugins needs Plugins (which is only asked when the policy lists
// plugins).
type EngineOptions struct {
	Judge   Judge
	Plugins Plugins
	Logger  *slog.Logger     // discards when nil
	Now     func() time.Time // time.Now when nil
	// CacheSize bounds how many judge decisions are remembered; 4096 when
	// zero or less.
	CacheSize int
	// CacheTTL is how long a judge decision is reused; 10 minutes when zero
	// or less.
	CacheTTL time.Duration
	// Task returns a session's current task (what the agent was last asked
	// to do, from its most recent LLM request), for the judge; optional.
	// The task is context, not part of the decision cache's key.
	Task func(session string) string
}

// Stats counts what an Engine did.
type Stats struct {
	CacheHits    uint64 // judge decisions reused
	CacheMisses  uint64
	CacheEntries int
	JudgeCalls   uint64 // calls made to the judge
	JudgeErrors  uint64 // calls that failed and gave the judge's on_error
	EvalErrors   uint64 // rule conditions that failed at run time (the rule did not match)
}

// Engine decides events by a Policy. It is safe for concurrent use.
type Engine struct {
	pol     *Policy
	schema  *schema
	rules   []engineRule
	byKind  map[event.Kind][]int
	anyKind []int // rules without on:, for kinds this version does not know
	pool    sync.Pool

	judge        Judge
	task         func(string) string
	judgeTimeout time.Duration
	judgeOnError event.Action
	judgeName    string
	plugins      Plugins
	defaultV     event.Verdict
	defaultJudge bool
	// fileStatic: no rule on file events reads a field that depends on the
	// process, and no plugin is offered file events (see FileStatic).
	fileStatic bool

	log     *slog.Logger
	cache   *decisionCache
	flights flights

	judgeCalls, judgeErrors, evalErrors atomic.Uint64
}

type engineRule struct {
	name    string
	prog    cel.Program // nil: always matches
	guards  []guard     // tested before prog runs
	judge   bool
	verdict event.Verdict
	params  map[string]any
}

// NewEngine checks p and compiles its rules. It refuses a policy that
// Parse would refuse, and one that needs a judge or plugins it was not
// given.
func NewEngine(p *Policy, o EngineOptions) (*Engine, error) {
	if p == nil {
		return nil, errors.New("policy: no policy")
	}
	s, err := newSchema()
	if err != nil {
		return nil, err
	}
	progs, errs := check(s, p, nil)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	e := &Engine{pol: p, schema: s, byKind: map[event.Kind][]int{}, log: o.Logger, judge: o.Judge, task: o.Task}
	if len(p.Plugins) > 0 {
		e.plugins = o.Plugins
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	size, ttl := o.CacheSize, o.CacheTTL
	if size <= 0 {
		size = 4096
	}
	if ttl <= 0 {
		ttl = 10 * time.Minute
	}
	e.cache = newDecisionCache(size, ttl, now)

	usesJudge := p.Default == ActionJudge
	for i, r := range p.Rules {
		er := engineRule{name: r.Name, prog: progs[i].prog, guards: progs[i].guards, params: r.Rewrite}
		if r.Action == ActionJudge {
			er.judge, usesJudge = true, true
		} else {
			act, _ := r.Action.EventAction()
			reason := r.Reason
			if reason == "" {
				reason = "matched rule " + r.Name
			}
			er.verdict = event.Verdict{Action: act, Rule: r.Name, Reason: reason, DecidedBy: event.DecidedByRule}
		}
		e.rules = append(e.rules, er)
		if len(r.On) == 0 {
			e.anyKind = append(e.anyKind, i)
			for _, k := range event.Kinds {
				e.byKind[k] = append(e.byKind[k], i)
			}
			continue
		}
		seen := map[event.Kind]bool{}
		for _, k := range r.On {
			if !seen[k] {
				seen[k] = true
				e.byKind[k] = append(e.byKind[k], i)
			}
		}
	}
	if usesJudge && o.Judge == nil {
		return nil, errors.New("policy: the policy uses the judge but the engine was given none")
	}
	if len(p.Plugins) > 0 && o.Plugins == nil {
		return nil, errors.New("policy: the policy has plugins but the engine was given no plugin runner")
	}
	e.judgeTimeout = p.Judge.Timeout
	if e.judgeTimeout <= 0 {
		e.judgeTimeout = DefaultJudgeTimeout
	}
	e.judgeOnError = event.Deny
	if a, ok := p.Judge.OnError.EventAction(); ok {
		e.judgeOnError = a
	}
	e.judgeName = p.Judge.Model
	if e.judgeName == "" {
		e.judgeName = "judge"
	}
	e.defaultJudge = p.Default == ActionJudge
	if act, ok := p.Default.EventAction(); ok {
		e.defaultV = event.Verdict{Action: act, DecidedBy: event.DecidedByDefault, Reason: "no rule matched; default " + string(p.Default)}
	}
	if e.fileStatic, err = fileKindStatic(s, p); err != nil {
		return nil, err
	}
	nf := len(s.fields)
	e.pool.New = func() any { return &activation{s: s, vals: make([]ref.Val, nf)} }
	return e, nil
}

// Policy returns the policy the engine decides by.
func (e *Engine) Policy() *Policy { return e.pol }

// RewriteParams returns a copy of the rewrite parameters of the named rule,
// or nil when it has none.
func (e *Engine) RewriteParams(rule string) map[string]any {
	for i := range e.rules {
		if e.rules[i].name == rule {
			return maps.Clone(e.rules[i].params)
		}
	}
	return nil
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	return Stats{
		CacheHits:    e.cache.hits.Load(),
		CacheMisses:  e.cache.misses.Load(),
		CacheEntries: e.cache.lru.Len(),
		JudgeCalls:   e.judgeCalls.Load(),
		JudgeErrors:  e.judgeErrors.Load(),
		EvalErrors:   e.evalErrors.Load(),
	}
}

// Decide returns the verdict about ev: the first matching rule decides
// (action judge asks the judge); otherwise the plugins; otherwise the judge
// when the default is judge; otherwise the default. Decide never returns
// an unset verdict: anything that fails denies, or gives the configured
// on_error. ev is only read.
//
// A file event whose access is event.FileUnknown (an open whose mode could
// not be seen) is decided as a read and as a write: see decideUnknownAccess.
func (e *Engine) Decide(ctx context.Context, ev *event.Event) event.Verdict {
	if ev == nil {
		return event.Verdict{Action: event.Deny, Reason: "no event to decide"}
	}
	if ev.File != nil && ev.File.Access == event.FileUnknown && ev.Kind == event.KindFile {
		return e.decideUnknownAccess(ctx, ev)
	}
	if i, matched := e.firstRule(ev); matched {
		return e.ruleVerdict(ctx, ev, i)
	}
	return e.undecided(ctx, ev)
}

// ruleVerdict is the verdict of rule i, which matched ev.
func (e *Engine) ruleVerdict(ctx context.Context, ev *event.Event, i int) event.Verdict {
	r := &e.rules[i]
	if r.judge {
		return e.askJudge(ctx, ev, r.name)
	}
	return r.verdict
}

// undecided is the verdict about ev when no rule matched: the plugins',
// else the judge's when the default is judge, else the default.
func (e *Engine) undecided(ctx context.Context, ev *event.Event) event.Verdict {
	if e.plugins != nil {
		if v, answered := e.plugins.Ask(ctx, ev); answered {
			return v
		}
	}
	if e.defaultJudge {
		return e.askJudge(ctx, ev, "")
	}
	return e.defaultV
}

// unknownAccesses are what an open of unknown access is decided as.
var unknownAccesses = [2]event.FileAccess{event.FileRead, event.FileWrite}

// decideUnknownAccess decides ev, a file open whose access could not be
// seen, as a read and as a write, and returns the stricter verdict: a deny
// for either denies, else an ask for either asks (the person is shown the
// event itself, access unknown), else it is allowed. The rules see
// file.access "read", then "write"; plugins and the judge, which are asked
// at most once each (when no rule matched one of the two, or a rule hands
// over to the judge), see the event as it is, access "unknown". A rule's
// deny for either access is returned without asking a plugin or the judge.
func (e *Engine) decideUnknownAccess(ctx context.Context, ev *event.Event) event.Verdict {
	var matched [2]bool
	var idx [2]int
	for k, a := range unknownAccesses {
		f := *ev.File
		f.Access = a
		c := *ev
		c.File = &f
		idx[k], matched[k] = e.firstRule(&c)
		if matched[k] && !e.rules[idx[k]].judge && e.rules[idx[k]].verdict.Action == event.Deny {
			return unknownVerdict(e.rules[idx[k]].verdict, a)
		}
	}
	var rest *event.Verdict // plugins, judge or default, asked once
	var vs [2]event.Verdict
	for k := range unknownAccesses {
		switch {
		case matched[k]:
			vs[k] = e.ruleVerdict(ctx, ev, idx[k])
		case rest != nil:
			vs[k] = *rest
		default:
			vs[k] = e.undecided(ctx, ev)
			rest = &vs[k]
		}
	}
	switch {
	case stricter(vs[0], vs[1]):
		return unknownVerdict(vs[0], event.FileRead)
	case stricter(vs[1], vs[0]):
		return unknownVerdict(vs[1], event.FileWrite)
	}
	return unknownVerdict(vs[0], "")
}

// stricter reports whether a is a stricter verdict than b: deny over ask
// over the rest.
func stricter(a, b event.Verdict) bool {
	rank := func(v event.Verdict) int {
		switch v.Action {
		case event.Deny:
			return 2
		case event.Ask:
			return 1
		}
		return 0
	}
	return rank(a) > rank(b)
}

// unknownVerdict is v, reached for an open of unknown access decided as
// access a ("": as both alike), with a reason that says so.
func unknownVerdict(v event.Verdict, a event.FileAccess) event.Verdict {
	why := "the access could not be seen, so the open was decided as a read and as a write"
	if a != "" {
		why += "; as a " + string(a)
	}
	if v.Reason != "" {
		why += ": " + v.Reason
	}
	v.Reason = why
	return v
}

// firstRule returns the index of the first rule that applies to ev's kind
// and whose condition holds.
func (e *Engine) firstRule(ev *event.Event) (int, bool) {
	idx, ok := e.byKind[ev.Kind]
	if !ok {
		idx = e.anyKind
	}
	if len(idx) == 0 {
		return 0, false
	}
	act := e.pool.Get().(*activation)
	act.reset(ev)
	i, matched := e.match(act, idx)
	// The activation goes back to the pool holding no part of ev.
	act.reset(nil)
	e.pool.Put(act)
	return i, matched
}

// match returns the first of the rules idx whose condition holds.
func (e *Engine) match(act *activation, idx []int) (int, bool) {
	// One execution frame serves every rule of the event that passes its
	// guards: the programs use no cost tracking or async calls, which
	// would keep state in it.
	var frame *interpreter.ExecutionFrame
	defer func() {
		if frame != nil {
			frame.Close()
		}
	}()
	for _, i := range idx {
		r := &e.rules[i]
		if r.prog == nil {
			return i, true
		}
		if !act.passes(r.guards) {
			continue
		}
		if frame == nil {
			var err error
			if frame, err = interpreter.NewExecutionFrame(act); err != nil {
				e.evalErrors.Add(1)
				e.log.Warn("policy: cannot evaluate rules", "err", err)
				return 0, false
			}
		}
		out, _, err := r.prog.Eval(frame)
		if err != nil {
			e.evalErrors.Add(1)
			e.log.Warn("policy: rule condition failed; rule skipped", "rule", r.name, "err", err)
			continue
		}
		if out == types.True {
			return i, true
		}
	}
	return 0, false
}

// askJudge returns the judge's verdict about ev, from the cache when the
// same question was answered recently. Concurrent identical questions
// share one call. rule names the rule that handed over ("" for the
// default).
func (e *Engine) askJudge(ctx context.Context, ev *event.Event, rule string) event.Verdict {
	k := keyOf(rule, ev)
	if v, ok := e.cache.get(k); ok {
		return v
	}
	c, leader := e.flights.join(k)
	if leader {
		// A call that ended between the cache's miss and the join has
		// put its verdict in the cache before it let its flight go (the
		// question counts as the miss it was).
		if v, ok := e.cache.lookup(k); ok {
			e.flights.finish(k, c, v)
			return v
		}
		// The call outlives a caller that gives up, so that its answer
		// still reaches the cache; it works on a copy of the event, which
		// the caller may go on to change.
		evc := *ev
		go e.callJudge(context.WithoutCancel(ctx), k, c, &evc)
	}
	select {
	case <-c.done:
		return c.v
	case <-ctx.Done():
		return e.judgeFailed(ctx.Err())
	}
}

func (e *Engine) callJudge(ctx context.Context, k cacheKey, c *flight, ev *event.Event) {
	ctx, cancel := context.WithTimeout(ctx, e.judgeTimeout)
	defer cancel()
	e.judgeCalls.Add(1)
	var lineage []string
	if ev.Process != nil {
		lineage = ev.Process.LineageNames
	}
	req := JudgeRequest{Intent: e.pol.Intent, Event: ev, Lineage: lineage}
	if e.task != nil {
		req.Task = e.task(ev.Session)
	}
	v, err := e.safeJudge(ctx, req)
	if err != nil {
		e.judgeErrors.Add(1)
		e.log.Warn("policy: judge failed; applying on_error", "on_error", e.judgeOnError.String(), "err", err)
		e.flights.finish(k, c, e.judgeFailed(err))
		return
	}
	v.DecidedBy = event.DecidedByJudge
	switch v.Action {
	case event.Allow, event.Deny, event.Ask:
	default:
		v = event.Verdict{Action: event.Deny, Reason: "the judge answered " + v.Action.String() + ", which it may not", DecidedBy: event.DecidedByJudge}
	}
	if v.Rule == "" {
		v.Rule = e.judgeName
	}
	e.cache.put(k, v)
	e.flights.finish(k, c, v)
}

// safeJudge turns a panicking judge into an error.
func (e *Engine) safeJudge(ctx context.Context, req JudgeRequest) (v event.Verdict, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("policy: judge panicked: %v", r)
		}
	}()
	return e.judge.Judge(ctx, req)
}

// judgeFailed is the on_error verdict. Its reason names the class of the
// error only: the error's text may hold addresses or answers that do not
// belong in an audit log.
func (e *Engine) judgeFailed(err error) event.Verdict {
	class := "failed"
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		class = "timed out"
	case errors.Is(err, context.Canceled):
		class = "canceled"
	case errors.As(err, &ne):
		class = "unreachable"
	}
	return event.Verdict{
		Action:    e.judgeOnError,
		Rule:      e.judgeName,
		Reason:    "judge " + class + "; on_error " + e.judgeOnError.String(),
		DecidedBy: event.DecidedByJudge,
	}
}
