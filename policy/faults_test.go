package policy

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

// The fault tests put the engine's collaborators in trouble (a judge that
// is down or silent, a plugin that exits or hangs) through the real judge
// client and plugin runner: each decision that needs them gets the
// configured on_error verdict, with a reason, within a bound, and decisions
// that do not need them go on being made meanwhile.

// faultWait bounds how long a test waits for a decision: a guard against a
// hang, not a measurement.
const faultWait = 20 * time.Second

// ruleDecided is an event that the fault tests' policies decide by a rule.
var ruleDecided = &event.Event{Kind: event.KindConnect, Session: "s1", Connect: &event.Connect{Host: "github.com", Port: 443}}

const faultRules = "rules: [{name: github, on: connect, when: 'host == \"github.com\"', action: allow}]\n"

// decideWithin runs Decide in a goroutine and fails the test if it does
// not return within faultWait.
func decideWithin(t *testing.T, e *Engine, ev *event.Event) <-chan event.Verdict {
	t.Helper()
	ch := make(chan event.Verdict, 1)
	go func() { ch <- e.Decide(context.Background(), ev) }()
	return ch
}

func await(t *testing.T, ch <-chan event.Verdict) event.Verdict {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(faultWait):
		t.Fatalf("no decision within %v", faultWait)
		return event.Verdict{}
	}
}

func assertRuleStillDecides(t *testing.T, e *Engine) {
	t.Helper()
	want := ruleV(event.Allow, "github", "matched rule github")
	if d := cmp.Diff(want, e.Decide(context.Background(), ruleDecided)); d != "" {
		t.Errorf("rule decision during the fault (-want +got):\n%s", d)
	}
}

// TestJudgeDownOnError: the judge's endpoint is a closed port, or accepts
// and never answers. A decision that needs the judge gets on_error, saying
// the judge is unreachable or timed out; rules keep deciding.
func TestJudgeDownOnError(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			accepted <- c // read nothing, answer nothing
		}
	}()
	t.Cleanup(func() {
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	})

	tests := []struct {
		name, addr, onError string
		want                event.Verdict
	}{
		{"closed port, default on_error", closedAddr, "",
			event.Verdict{Action: event.Deny, Rule: "m", Reason: "judge unreachable; on_error deny", DecidedBy: event.DecidedByJudge}},
		{"closed port, on_error allow", closedAddr, "allow",
			event.Verdict{Action: event.Allow, Rule: "m", Reason: "judge unreachable; on_error allow", DecidedBy: event.DecidedByJudge}},
		{"closed port, on_error ask", closedAddr, "ask",
			event.Verdict{Action: event.Ask, Rule: "m", Reason: "judge unreachable; on_error ask", DecidedBy: event.DecidedByJudge}},
		{"silent server", silent.Addr().String(), "deny",
			event.Verdict{Action: event.Deny, Rule: "m", Reason: "judge timed out; on_error deny", DecidedBy: event.DecidedByJudge}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := newTestJudge(t, JudgeConfig{Provider: judgeOpenAI, Model: "m", APIKeyEnv: testJudgeKeyEnv, URL: "http://" + tt.addr + "/v1"}, nil)
			src := faultRules + "default: judge\njudge: {provider: openai, model: m, timeout: 500ms}\n"
			if tt.onError != "" {
				src = strings.Replace(src, "}\n", ", on_error: "+tt.onError+"}\n", 1)
			}
			e := mustEngine(t, src, EngineOptions{Judge: j})
			pending := decideWithin(t, e, testEvents()[event.KindHTTP])
			assertRuleStillDecides(t, e)
			if d := cmp.Diff(tt.want, await(t, pending)); d != "" {
				t.Errorf("Decide (-want +got):\n%s", d)
			}
			if s := e.Stats(); s.JudgeErrors != 1 || s.CacheEntries != 0 {
				t.Errorf("Stats = %+v, want one judge error and nothing cached", s)
			}
		})
	}
}

// TestPluginDownOnError: a plugin that exits at once, crashes on its first
// request or never answers. A decision offered to it gets its on_error
// within its timeout, saying what failed; rules keep deciding meanwhile,
// and while it restarts the next decision gets on_error at once.
func TestPluginDownOnError(t *testing.T) {
	tests := []struct {
		name    string
		command []string
		timeout time.Duration // long where the test waits for an exit: a loaded machine starts a process slowly
		onError Action
		want    event.Action
		reason  string
	}{
		{"exits at start", helperCommand("no-such-mode"), time.Minute, "", event.Deny, "exited"},
		{"crashes on a request", helperCommand("crash", "0"), time.Minute, ActionAllow, event.Allow, "exited (exit status 3)"},
		{"hangs", helperCommand("hang"), 500 * time.Millisecond, ActionAsk, event.Ask, "gave no answer within 500ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := testOptions()
			opts.backoffMin, opts.backoffMax = time.Hour, time.Hour // no restart during the test
			r := startTest(t, opts, PluginConfig{Name: "bad", Command: tt.command, Timeout: tt.timeout, OnError: tt.onError})
			e := mustEngine(t, faultRules+"plugins: [{name: bad, command: x}]\ndefault: allow\n", EngineOptions{Plugins: r})
			other := &event.Event{Kind: event.KindConnect, Session: "s1", Connect: &event.Connect{Host: "example.test", Port: 443}}
			pending := decideWithin(t, e, other)
			assertRuleStillDecides(t, e)
			check := func(what string, v event.Verdict, reason string) {
				t.Helper()
				if v.Action != tt.want || v.DecidedBy != event.DecidedByPlugin || v.Rule != "plugin:bad" || !strings.Contains(v.Reason, reason) {
					t.Errorf("%s: %+v, want %v by plugin:bad saying %q", what, v, tt.want, reason)
				}
			}
			check("Decide", await(t, pending), tt.reason)
			check("Decide while it restarts", await(t, decideWithin(t, e, other)), "is restarting after it")
			assertRuleStillDecides(t, e)
		})
	}
}
