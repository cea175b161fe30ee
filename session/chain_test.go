package session

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/ask"
	"github.com/chaperone-dev/chaperone/policy"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// chainPolicy asks about ask.test, allows the rest, and counts what it is
// asked about in a plugin-free engine.
const chainPolicy = `
default: allow
rules:
  - name: ask-me
    on: connect
    when: host == "ask.test"
    action: ask
  - name: never
    on: connect
    when: host == "never.test"
    action: deny
`

// TestChainOrder checks the decision chain's order, link by link, with
// the real links: an audit log, deny_hosts, a policy engine and an ask
// broker a person answers.
func TestChainOrder(t *testing.T) {
	p, err := policy.Parse("chain", []byte(chainPolicy))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.NewEngine(p, policy.EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var policyAsked atomic.Int32
	countingPolicy := event.DeciderFunc(func(ctx context.Context, e *event.Event) event.Verdict {
		policyAsked.Add(1)
		return eng.Decide(ctx, e)
	})
	deny, err := policy.NewBuiltin([]string{"denied.test"})
	if err != nil {
		t.Fatal(err)
	}
	good, err := telemetry.OpenAuditLog(filepath.Join(t.TempDir(), "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	full, err := telemetry.OpenAuditLog("/dev/full")
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	defer full.Close()
	full.Write(&event.Event{Kind: event.KindConnect, Connect: &event.Connect{Host: "x.test"}})
	if err := full.Flush(); err == nil {
		t.Fatal("writing to /dev/full succeeded")
	}

	connect := func(host string) *event.Event {
		return &event.Event{Kind: event.KindConnect, Session: "s1", Connect: &event.Connect{Host: host, Port: 443}}
	}
	open := make(chan struct{})
	close(open)
	tests := []struct {
		name        string
		started     bool // the session's start is recorded
		ended       bool // the session ended (Close)
		audit       *telemetry.AuditLog
		answer      *ask.Answer // a person's answer to a question; nil: none asked
		e           *event.Event
		want        event.Verdict
		policyAsked bool
	}{
		{name: "allowed by the policy's default", started: true, audit: good, e: connect("api.test"), policyAsked: true,
			want: event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByDefault}},
		{name: "1 started: the session ends before its start is recorded", ended: true, audit: good, e: connect("api.test"),
			want: event.Verdict{Action: event.Deny, DecidedBy: event.DecidedByDefault, Reason: "the session ended before its start was recorded"}},
		{name: "2 audit before deny_hosts", started: true, audit: full, e: connect("denied.test"),
			want: event.Verdict{Action: event.Deny, Rule: ruleAuditLog, DecidedBy: event.DecidedByDefault, Reason: "the audit log cannot be written, so nothing is allowed"}},
		{name: "2 audit before the policy", started: true, audit: full, e: connect("api.test"),
			want: event.Verdict{Action: event.Deny, Rule: ruleAuditLog, DecidedBy: event.DecidedByDefault, Reason: "the audit log cannot be written, so nothing is allowed"}},
		{name: "3 deny_hosts before the policy", started: true, audit: good, e: connect("denied.test"),
			want: event.Verdict{Action: event.Deny, Rule: policy.RuleDenyHosts, DecidedBy: event.DecidedByRule, Reason: "denied.test is listed in deny_hosts"}},
		{name: "4 the policy denies", started: true, audit: good, e: connect("never.test"), policyAsked: true,
			want: event.Verdict{Action: event.Deny, Rule: "never", DecidedBy: event.DecidedByRule}},
		{name: "5 the policy's ask is put to a person who allows", started: true, audit: good, e: connect("ask.test"), policyAsked: true,
			answer: &ask.Answer{Allow: true, By: "the test"},
			want:   event.Verdict{Action: event.Allow, Rule: "ask-me", DecidedBy: event.DecidedByHuman}},
		{name: "5 the policy's ask is put to a person who denies", started: true, audit: good, e: connect("ask.test"), policyAsked: true,
			answer: &ask.Answer{By: "the test"},
			want:   event.Verdict{Action: event.Deny, Rule: "ask-me", DecidedBy: event.DecidedByHuman}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			policyAsked.Store(0)
			var broker *ask.Broker
			asked := make(chan ask.Question, 1)
			broker = ask.NewBroker(ask.Options{Session: "s1", NewID: func() string { return "q1" }, Timeout: time.Minute,
				Notify: func(q ask.Question) { asked <- q }})
			defer broker.Close()
			c := &chain{started: make(chan struct{}), ended: make(chan struct{}), audit: tt.audit, denyHosts: deny, policy: countingPolicy, ask: broker}
			if tt.started {
				c.started = open
			}
			if tt.ended {
				c.ended = open
			}
			if tt.answer != nil {
				go func() {
					q := <-asked
					if err := broker.Answer(q.ID, *tt.answer); err != nil {
						t.Error(err)
					}
				}()
			}
			got := c.Decide(context.Background(), tt.e)
			got.Reason = reasonOf(tt.want, got)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
			if n := policyAsked.Load(); (n > 0) != tt.policyAsked {
				t.Errorf("the policy was asked %d times, want asked: %v", n, tt.policyAsked)
			}
			select {
			case q := <-asked:
				if tt.answer == nil {
					t.Errorf("a person was asked %q though the chain decided before the ask", q.Summary)
				}
			default:
			}
		})
	}
}

// reasonOf is got's reason when want states one, else "": the policy's
// and the person's reasons are theirs to word.
func reasonOf(want, got event.Verdict) string {
	if want.Reason == "" {
		return ""
	}
	return got.Reason
}

// TestChainWaitsForStart checks that a decision asked before the
// session's start is recorded waits for it, and one whose context ends
// first is denied.
func TestChainWaitsForStart(t *testing.T) {
	started := make(chan struct{})
	c := &chain{started: started, ended: make(chan struct{}), audit: noAuditError{},
		policy: event.DeciderFunc(func(context.Context, *event.Event) event.Verdict { return event.Verdict{Action: event.Allow} })}
	e := &event.Event{Kind: event.KindConnect, Connect: &event.Connect{Host: "api.test"}}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if v := c.Decide(ctx, e); v.Action != event.Deny {
		t.Errorf("context ended before the start: %v, want a deny", v)
	}

	got := make(chan event.Verdict, 1)
	go func() { got <- c.Decide(context.Background(), e) }()
	select {
	case v := <-got:
		t.Fatalf("decided %v before the session's start was recorded", v)
	case <-time.After(50 * time.Millisecond):
	}
	close(started)
	if v := <-got; v.Action != event.Allow {
		t.Errorf("after the start: %v, want the policy's allow", v)
	}
}

type noAuditError struct{}

func (noAuditError) Err() error { return nil }
