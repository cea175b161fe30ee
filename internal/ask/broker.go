package ask

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/chaperone-dev/chaperone/event"
)

// Question is an action held for a person.
type Question struct {
	ID       string    `json:"id"`
	Session  string    `json:"session"`
	Summary  string    `json:"summary"` // one printable line: who does what
	Rule     string    `json:"rule,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Asked    time.Time `json:"asked"`
	Deadline time.Time `json:"deadline"`
}

// Answer is a person's decision about a question.
type Answer struct {
	Allow bool `json:"allow"`
	// Always settles every identical question (same rule, kind, target and
	// program) the same way for the rest of the session.
	Always bool `json:"always,omitempty"`
	// By says who answered, for the verdict's reason: "the terminal",
	// "uid 1000".
	By string `json:"-"`
}

// ErrUnknown is the error of an answer to a question that is not (or no
// longer) waiting.
var ErrUnknown = errors.New("ask: no such question waiting (answered, timed out or abandoned)")

// Unattended says what becomes of a question when nobody can answer it:
// no terminal, no approver watching (Broker.Attend).
type Unattended uint8

const (
	// UnattendedWait holds the question for the timeout all the same
	// (`chaperone approve ID` may still answer it).
	UnattendedWait Unattended = iota
	// UnattendedDeny and UnattendedAllow decide it at once.
	UnattendedDeny
	UnattendedAllow
)

// Options configure a Broker.
type Options struct {
	Session   string
	Timeout   time.Duration // how long a question waits; 60 s when zero
	OnTimeout event.Action  // the verdict when nobody answers: Allow or Deny
	// Unattended is what a question nobody can answer gets.
	Unattended Unattended
	// Notify is called, without the broker's lock, when a new question
	// starts waiting; it must not block for long.
	Notify func(Question)
	Now    func() time.Time // time.Now when nil
	NewID  func() string    // a short random id; required
}

// Broker holds the questions of one session. It is safe for concurrent
// use.
type Broker struct {
	o Options

	mu       sync.Mutex
	pending  map[string]*question // by id
	byKey    map[string]*question
	always   map[string]event.Verdict
	attended int // Attend calls not released
	watchers map[chan Question]struct{}
}

type question struct {
	q       Question
	key     string
	done    chan struct{}
	v       event.Verdict // set before done closes
	waiters int
}

// NewBroker returns a broker for one session.
func NewBroker(o Options) *Broker {
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	if o.OnTimeout != event.Allow {
		o.OnTimeout = event.Deny
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Broker{o: o, pending: map[string]*question{}, byKey: map[string]*question{}, always: map[string]event.Verdict{},
		watchers: map[chan Question]struct{}{}}
}

// Attend says somebody can answer questions from now on (a terminal, an
// approver watching, a live view) until the returned release is called;
// it may be called more than once.
func (b *Broker) Attend() (release func()) {
	b.mu.Lock()
	b.attended++
	b.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			b.attended--
			b.mu.Unlock()
		})
	}
}

// Watch attends (Attend) and sends each new question to the returned
// channel until release is called; a question the watcher is too slow to
// take is left out of its channel, not held.
func (b *Broker) Watch() (qs <-chan Question, release func()) {
	ch := make(chan Question, 16)
	b.mu.Lock()
	b.attended++
	b.watchers[ch] = struct{}{}
	b.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			b.mu.Lock()
			b.attended--
			delete(b.watchers, ch)
			b.mu.Unlock()
		})
	}
}

// Decide holds e until a person answers the ask verdict v, the timeout
// passes or ctx ends, and returns the verdict that applies: never Ask.
func (b *Broker) Decide(ctx context.Context, e *event.Event, v event.Verdict) event.Verdict {
	key := keyOf(v.Rule, e)
	b.mu.Lock()
	if av, ok := b.always[key]; ok {
		b.mu.Unlock()
		return av
	}
	q, ok := b.byKey[key]
	if !ok && b.attended == 0 && b.o.Unattended != UnattendedWait {
		b.mu.Unlock()
		act, word := event.Deny, "deny"
		if b.o.Unattended == UnattendedAllow {
			act, word = event.Allow, "allow"
		}
		return event.Verdict{Action: act, Rule: v.Rule, DecidedBy: event.DecidedByDefault,
			Reason: "nobody could be asked (no terminal, no approver watching): unattended " + word}
	}
	if !ok {
		now := b.o.Now()
		q = &question{
			key:  key,
			done: make(chan struct{}),
			q: Question{
				ID: b.o.NewID(), Session: b.o.Session, Summary: Summary(e),
				Rule: v.Rule, Reason: Printable(v.Reason, 200),
				Asked: now, Deadline: now.Add(b.o.Timeout),
			},
		}
		b.pending[q.q.ID] = q
		b.byKey[key] = q
		go b.expire(q, b.o.Timeout, b.o.OnTimeout)
		for w := range b.watchers {
			select {
			case w <- q.q:
			default:
			}
		}
	}
	q.waiters++
	b.mu.Unlock()
	if !ok && b.o.Notify != nil {
		b.o.Notify(q.q)
	}

	select {
	case <-q.done:
		return q.v
	case <-ctx.Done():
		b.mu.Lock()
		defer b.mu.Unlock()
		q.waiters--
		select {
		case <-q.done:
			return q.v
		default:
		}
		if q.waiters == 0 {
			b.settle(q, event.Verdict{Action: event.Deny, Rule: v.Rule, DecidedBy: event.DecidedByDefault,
				Reason: "abandoned before anyone answered (ask " + q.q.ID + ")"})
		}
		return event.Verdict{Action: event.Deny, Rule: v.Rule, DecidedBy: event.DecidedByDefault,
			Reason: "abandoned before anyone answered (ask " + q.q.ID + ")"}
	}
}

// Configure changes the timeout, its verdict and what an unattended
// question gets, for questions asked from now on (a reloaded policy may
// change them).
func (b *Broker) Configure(timeout time.Duration, onTimeout event.Action, unattended Unattended) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.o.Unattended = unattended
	if timeout > 0 {
		b.o.Timeout = timeout
	}
	b.o.OnTimeout = event.Deny
	if onTimeout == event.Allow {
		b.o.OnTimeout = event.Allow
	}
}

// expire gives q the timeout verdict when nobody answered in time.
func (b *Broker) expire(q *question, timeout time.Duration, on event.Action) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-q.done:
	case <-t.C:
		b.mu.Lock()
		b.settle(q, event.Verdict{Action: on, Rule: q.q.Rule, DecidedBy: event.DecidedByDefault,
			Reason: fmt.Sprintf("nobody answered within %s; on_timeout %s (ask %s)", timeout, on, q.q.ID)})
		b.mu.Unlock()
	}
}

// settle gives q its verdict and forgets it, once. b.mu is held.
func (b *Broker) settle(q *question, v event.Verdict) bool {
	if _, ok := b.pending[q.q.ID]; !ok {
		return false
	}
	delete(b.pending, q.q.ID)
	delete(b.byKey, q.key)
	q.v = v
	close(q.done)
	return true
}

// Answer decides the waiting question id.
func (b *Broker) Answer(id string, a Answer) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	q, ok := b.pending[id]
	if !ok {
		return ErrUnknown
	}
	by := a.By
	if by == "" {
		by = "a person"
	}
	v := event.Verdict{Action: event.Deny, Rule: q.q.Rule, DecidedBy: event.DecidedByHuman}
	word := "denied"
	if a.Allow {
		v.Action, word = event.Allow, "approved"
	}
	if a.Always {
		word += " for the session"
	}
	v.Reason = word + " by " + by + " (ask " + id + ")"
	if a.Always {
		b.always[q.key] = v
	}
	b.settle(q, v)
	return nil
}

// Pending returns the waiting questions, oldest first.
func (b *Broker) Pending() []Question {
	b.mu.Lock()
	qs := make([]Question, 0, len(b.pending))
	for _, q := range b.pending {
		qs = append(qs, q.q)
	}
	b.mu.Unlock()
	sort.Slice(qs, func(i, j int) bool {
		if !qs[i].Asked.Equal(qs[j].Asked) {
			return qs[i].Asked.Before(qs[j].Asked)
		}
		return qs[i].ID < qs[j].ID
	})
	return qs
}

// Close denies every waiting question and ends every watch: the session
// is ending.
func (b *Broker) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for w := range b.watchers {
		close(w)
		delete(b.watchers, w)
	}
	for _, q := range b.pending {
		b.settle(q, event.Verdict{Action: event.Deny, Rule: q.q.Rule, DecidedBy: event.DecidedByDefault,
			Reason: "the session ended before anyone answered (ask " + q.q.ID + ")"})
	}
}

// keyOf identifies a question: the rule, the kind, what is acted on and by
// which program. Two events with the same key are the same question. For
// a file it is the directory: an install writes hundreds of files into a
// few directories, and a person answers for those, not file by file.
func keyOf(rule string, e *event.Event) string {
	exe := ""
	if e.Process != nil {
		exe = e.Process.Exe
	}
	what := target(e)
	if e.File != nil {
		what = string(e.File.Access) + " " + filepath.Dir(e.File.Path) + "/"
	}
	return strings.Join([]string{rule, string(e.Kind), what, exe}, "\x00")
}

// target is what e acts on, in a form a person reads.
func target(e *event.Event) string {
	switch {
	case e.HTTP != nil:
		return e.HTTP.Method + " " + e.HTTP.Host
	case e.LLM != nil:
		return e.LLM.Provider + " " + e.LLM.Model
	case e.TLS != nil:
		return e.TLS.ServerName
	case e.DNS != nil:
		return e.DNS.Name + " " + e.DNS.Type
	case e.Connect != nil:
		c := e.Connect
		host := c.Host
		if host == "" && c.Dst.IsValid() {
			host = c.Dst.Addr().String()
		}
		return string(c.Transport) + " " + host + ":" + strconv.Itoa(int(c.Port))
	case e.File != nil:
		return string(e.File.Access) + " " + e.File.Path
	case e.Exec != nil:
		return strings.Join(e.Exec.Argv, " ")
	}
	return ""
}

// Summary is one printable line saying which program does what, e.g.
// "curl (bash > curl): http GET example.com/x". Everything in it that the
// agent controls is made printable and clipped.
func Summary(e *event.Event) string {
	who := "unknown process"
	if p := e.Process; p != nil {
		who = filepath.Base(p.Exe)
		if p.Exe == "" {
			who = "pid " + strconv.Itoa(p.PID)
		}
		if len(p.LineageNames) > 0 {
			who += " (" + strings.Join(p.LineageNames, " > ") + ")"
		}
	}
	what := string(e.Kind) + " " + target(e)
	if h := e.HTTP; h != nil {
		what = "http " + h.Method + " " + h.URL
	}
	return Printable(who, 120) + ": " + Printable(what, 240)
}

// Printable returns s with control and other non-printing characters
// replaced by '?', clipped to max runes (with "…").
func Printable(s string, max int) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n == max {
			b.WriteString("…")
			break
		}
		if !unicode.IsPrint(r) {
			r = '?'
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}
