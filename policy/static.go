package policy

import (
	"fmt"
	"slices"

	"github.com/chaperone-dev/chaperone/event"
)

// fileStaticField reports whether a field's value, for a file event, is
// the same for every process of a session. agent is not: when the session
// does not name its agent, it comes from the process's lineage.
func fileStaticField(name string) bool {
	switch name {
	case "kind", "session.id", "session.workdir", "session.home", "session.state_dir",
		"file.path", "file.access":
		return true
	}
	return false
}

// fileKindStatic reports whether the decision about a file event can only
// depend on the session, the path and the access: no rule that applies to
// file events reads another field, and no plugin is offered file events.
func fileKindStatic(s *schema, p *Policy) (bool, error) {
	for _, pc := range p.Plugins {
		if len(pc.On) == 0 || slices.Contains(pc.On, event.KindFile) {
			return false, nil
		}
	}
	for i, r := range p.Rules {
		if len(r.On) > 0 && !slices.Contains(r.On, event.KindFile) {
			continue
		}
		refs, err := s.fieldRefs(r.When)
		if err != nil {
			return false, fmt.Errorf("policy: %s: %w", ruleLabel(r.Name, i), err)
		}
		for _, f := range refs {
			if !fileStaticField(f) {
				return false, nil
			}
		}
	}
	return true, nil
}

// fieldRefs returns the names of the fields a condition reads, from the
// checker's references; names that are not fields (comprehension
// variables, functions, types) are left out. An empty condition reads
// none.
func (s *schema) fieldRefs(src string) ([]string, error) {
	if src == "" {
		return nil, nil
	}
	ast, iss := s.env.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("condition: %w", iss.Err())
	}
	var out []string
	for _, r := range ast.NativeRep().ReferenceMap() {
		if r == nil || r.Name == "" {
			continue
		}
		if _, ok := s.lookup(r.Name); ok && !slices.Contains(out, r.Name) {
			out = append(out, r.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// FileStatic reports whether every open of path, for reading or for
// writing, by any process of the session described by sess, is allowed by
// p's rules and default alone — and that this cannot depend on the
// process: no rule that applies to file events references a field other
// than kind, session.*, file.path, file.access (and the literal
// constants), the policy has no plugin that is offered file events, and
// neither a matching rule nor the default hands the event to the judge or
// asks a person. It never calls the judge or a plugin.
//
// Opens for executing are not covered. A rule whose condition fails at
// run time is skipped, as in Decide, and counted in Stats.EvalErrors.
func (e *Engine) FileStatic(path string, sess *event.Session) bool {
	return e.FileStaticFor(path, sess, event.FileRead, event.FileWrite)
}

// FileStaticFor is FileStatic for the accesses given only: the caller
// knows the others cannot happen (the kernel refuses a write to a file the
// agent has no permission to write before the policy is asked).
func (e *Engine) FileStaticFor(path string, sess *event.Session, accesses ...event.FileAccess) bool {
	if len(accesses) == 0 {
		return false
	}
	return e.allowedForAll(path, sess, accesses)
}

// FileStaticGiven is FileStaticFor right after an open of path for decided
// was given v, which saves evaluating the rules for that access again: v
// counts as the rules' answer when they or the default reached it (not a
// plugin, the judge or a person), and as a "no" otherwise. v must come
// from this policy.
func (e *Engine) FileStaticGiven(path string, sess *event.Session, decided event.FileAccess, v event.Verdict, accesses ...event.FileAccess) bool {
	if len(accesses) == 0 {
		return false
	}
	rest := make([]event.FileAccess, 0, len(accesses))
	for _, a := range accesses {
		if a != decided {
			rest = append(rest, a)
			continue
		}
		if v.Action != event.Allow || (v.DecidedBy != event.DecidedByRule && v.DecidedBy != event.DecidedByDefault) {
			return false
		}
	}
	return e.allowedForAll(path, sess, rest)
}

// allowedForAll reports whether file decisions cannot depend on the process
// and p's rules and default allow every open of path for accesses (all of
// them, vacuously so for none).
func (e *Engine) allowedForAll(path string, sess *event.Session, accesses []event.FileAccess) bool {
	if !e.fileStatic {
		return false
	}
	f := event.File{Path: path}
	ev := event.Event{Kind: event.KindFile, SessionInfo: sess, File: &f}
	if sess != nil {
		ev.Session = sess.ID
	}
	for _, a := range accesses {
		f.Access = a
		if !e.allowedByRules(&ev) {
			return false
		}
	}
	return true
}

// allowedByRules reports whether the first matching rule, or the default
// when none matches, allows ev outright. Plugins are not asked: the caller
// knows none is offered ev's kind.
func (e *Engine) allowedByRules(ev *event.Event) bool {
	if i, matched := e.firstRule(ev); matched {
		r := &e.rules[i]
		return !r.judge && r.verdict.Action == event.Allow
	}
	return !e.defaultJudge && e.defaultV.Action == event.Allow
}
