package policy

import (
	"context"
	"time"

	"github.com/chaperone-dev/chaperone/event"
)

// Action is an action word of the policy file.
type Action string

const (
	ActionAllow   Action = "allow"
	ActionDeny    Action = "deny"
	ActionRewrite Action = "rewrite"
	ActionAsk     Action = "ask"
	// ActionJudge hands the decision to the LLM judge.
	ActionJudge Action = "judge"
)

// EventAction returns the verdict action a (other than judge) stands for;
// ok is false for judge and for words the policy does not know.
func (a Action) EventAction() (act event.Action, ok bool) {
	switch a {
	case ActionAllow:
		return event.Allow, true
	case ActionDeny:
		return event.Deny, true
	case ActionRewrite:
		return event.Rewrite, true
	case ActionAsk:
		return event.Ask, true
	}
	return event.Deny, false
}

// Default values of the judge and plugin sections.
const (
	DefaultJudgeTimeout  = 10 * time.Second
	DefaultPluginTimeout = 2 * time.Second
	DefaultAskTimeout    = 60 * time.Second
)

// Policy is a parsed, checked policy file. Parse never returns a Policy
// with a problem in it; a Policy built by hand is checked by NewEngine.
type Policy struct {
	// Intent says in plain language what the policy protects; the judge
	// reads it.
	Intent string
	// Rules are tried in order; the first whose kinds and condition match
	// decides.
	Rules []Rule
	// Default decides when no rule, plugin or judge did: allow, deny, ask
	// or judge. It is required in a file.
	Default Action
	Judge   JudgeConfig
	Plugins []PluginConfig
	Ask     AskConfig
	Secrets SecretsConfig
	// Source names the file, for messages.
	Source string
}

// Rule is one rule of a policy.
type Rule struct {
	Name string
	// On lists the event kinds the rule applies to; empty means every kind.
	On []event.Kind
	// When is a CEL condition (see docs/policy.md); empty means always.
	When   string
	Action Action
	// Rewrite holds the parameters of action rewrite (e.g. redact_secrets:
	// true) for the rewrite package.
	Rewrite map[string]any
	// Reason is the text of the verdict's reason; "matched rule NAME" when
	// empty.
	Reason string
	// Line is the rule's line in the file (0 when built by hand).
	Line int
}

// JudgeConfig configures the LLM judge. A zero JudgeConfig means the
// policy has no judge.
type JudgeConfig struct {
	// Provider is "openai" (OpenAI-compatible chat completions) or
	// "anthropic".
	Provider string
	// URL is the API's base URL, e.g. https://api.openai.com/v1,
	// http://127.0.0.1:11434/v1 or https://api.anthropic.com.
	URL   string
	Model string
	// APIKeyEnv names the environment variable holding the key; the key
	// itself never appears in the policy.
	APIKeyEnv string
	Timeout   time.Duration // DefaultJudgeTimeout when zero
	OnError   Action        // allow, deny or ask; deny when empty
}

// Configured reports whether the policy has a judge section.
func (j JudgeConfig) Configured() bool { return j.Provider != "" || j.Model != "" || j.URL != "" }

// AskConfig says how long an ask waits for a person, what happens when
// nobody answers in time, and what happens when nobody can be asked.
type AskConfig struct {
	Timeout   time.Duration // DefaultAskTimeout when zero
	OnTimeout Action        // allow or deny; deny when empty
	// Unattended decides at once an ask that nobody can answer (no
	// terminal, no approver watching): allow or deny, or AskWait to hold
	// it for the timeout all the same; deny when empty.
	Unattended Action
}

// AskWait is ask.unattended's "hold the question for the timeout even
// when nobody is watching" (`chaperone approve ID` may still answer it).
const AskWait Action = "wait"

// SecretsConfig tunes secret detection: findings of these rules, and
// these exact values, are never reported or redacted.
type SecretsConfig struct {
	AllowRules    []string
	AllowLiterals []string
}

// PluginConfig configures one plugin process.
type PluginConfig struct {
	Name    string
	Command []string
	On      []event.Kind  // empty means every kind
	Timeout time.Duration // DefaultPluginTimeout when zero
	OnError Action        // allow, deny or ask; deny when empty
	Line    int
}

// JudgeRequest is what the engine asks the judge about.
type JudgeRequest struct {
	Intent  string
	Event   *event.Event
	Lineage []string // executable names, root first
	Task    string   // the agent's current task, from its most recent LLM request, when known
}

// Judge decides an event the rules handed over. The verdict's DecidedBy is
// judge; an error makes the engine apply the judge's on_error.
type Judge interface {
	Judge(ctx context.Context, req JudgeRequest) (event.Verdict, error)
}

// Plugins offers events to the policy's plugin processes.
type Plugins interface {
	// Ask offers e to the plugins whose On matches, in file order;
	// answered=false when none decided (a plugin may abstain). Errors are
	// already turned into each plugin's OnError verdict.
	Ask(ctx context.Context, e *event.Event) (v event.Verdict, answered bool)
}
