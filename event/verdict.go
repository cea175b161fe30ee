package event

import (
	"encoding"
	"fmt"
	"strings"
)

// Action is what happens to the action an event describes. The zero value is
// Deny.
type Action uint8

const (
	Deny    Action = iota // refuse: the connection is closed, the request gets 403, the open fails
	Allow                 // let it through unchanged
	Rewrite               // let it through changed (redacted, credentials injected, headers added)
	Ask                   // hold it until a human answers
)

var actionNames = [...]string{Deny: "deny", Allow: "allow", Rewrite: "rewrite", Ask: "ask"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// ParseAction parses the word form of an Action.
func ParseAction(s string) (Action, error) {
	for i, n := range actionNames {
		if n == s {
			return Action(i), nil
		}
	}
	return Deny, fmt.Errorf("event: unknown action %q (want deny, allow, rewrite or ask)", s)
}

func (a Action) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

func (a *Action) UnmarshalText(b []byte) error {
	v, err := ParseAction(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// DecidedBy says who reached a verdict. The zero value is DecidedByDefault:
// the policy's default, which is also what an unset verdict claims. (The
// type is named after the Verdict field that holds it, as net/http's
// Request.Header is a Header; Decider is the contract of what decides.)
type DecidedBy uint8

const (
	DecidedByDefault DecidedBy = iota // no rule matched; the policy's default applied
	DecidedByRule                     // a rule of the policy matched
	DecidedByPlugin                   // a plugin process answered
	DecidedByJudge                    // the LLM judge answered
	DecidedByHuman                    // a person answered an ask
)

var decidedByNames = [...]string{
	DecidedByDefault: "default",
	DecidedByRule:    "rule",
	DecidedByPlugin:  "plugin",
	DecidedByJudge:   "judge",
	DecidedByHuman:   "human",
}

func (d DecidedBy) String() string {
	if int(d) < len(decidedByNames) {
		return decidedByNames[d]
	}
	return fmt.Sprintf("decider(%d)", uint8(d))
}

// ParseDecidedBy parses the word form of a DecidedBy.
func ParseDecidedBy(s string) (DecidedBy, error) {
	for i, n := range decidedByNames {
		if n == s {
			return DecidedBy(i), nil
		}
	}
	return DecidedByDefault, fmt.Errorf("event: unknown decider %q", s)
}

func (d DecidedBy) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d *DecidedBy) UnmarshalText(b []byte) error {
	v, err := ParseDecidedBy(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Verdict is a decision about one event. Its zero value denies, decided by
// the default, with no rule: a verdict that was never set fails closed.
type Verdict struct {
	Action    Action    `json:"verdict"`
	Rule      string    `json:"rule,omitempty"`   // the rule (or plugin, or judge model) that decided; never a secret
	Reason    string    `json:"reason,omitempty"` // one line a person can read
	DecidedBy DecidedBy `json:"decided_by"`
}

// Allowed reports whether the action may go ahead (allowed or rewritten).
func (v Verdict) Allowed() bool { return v.Action == Allow || v.Action == Rewrite }

func (v Verdict) String() string {
	s := v.Action.String() + " by " + v.DecidedBy.String()
	if v.Rule != "" {
		s += " (" + v.Rule + ")"
	}
	if v.Reason != "" {
		s += ": " + v.Reason
	}
	return s
}

// Enforced is the verdict a path that cannot hold an action for a person
// applies: allow, rewrite and deny stand; ask, and any action this version
// does not know, become a deny that keeps the rule and says why.
func (v Verdict) Enforced() Verdict {
	switch v.Action {
	case Allow, Rewrite, Deny:
		return v
	case Ask:
		v.Reason = strings.TrimSpace("asking is not available here, so denied; " + v.Reason)
	default:
		v.Reason = "unknown verdict " + v.Action.String()
	}
	v.Action = Deny
	return v
}

var (
	_ encoding.TextMarshaler   = Action(0)
	_ encoding.TextUnmarshaler = (*Action)(nil)
	_ encoding.TextMarshaler   = DecidedBy(0)
	_ encoding.TextUnmarshaler = (*DecidedBy)(nil)
)
