package session

import (
	"context"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/ask"
)

// ruleAuditLog names the refusals made because the audit log failed.
const ruleAuditLog = "audit_log"

// chain is the session's decision chain: the one event.Decider that the
// proxy, the session's resolver and file and exec mediation ask. Its
// links decide in this order, each one's verdict final unless it passes
// the event on:
//
//  1. started: nothing is decided before the session's start is recorded
//     (the agent's first connection may race the recording); the session
//     ending first denies.
//  2. audit: nothing is allowed while the audit log cannot be written.
//  3. deny_hosts: the configuration's deny_hosts deny; the rest pass.
//  4. policy: the policy as it is now (rules, plugins, judge, default;
//     a reload swaps it whole).
//  5. ask: an ask verdict of the policy is put to a person, whose answer
//     (or the timeout's action) is the verdict: what leaves the chain is
//     never ask.
type chain struct {
	started <-chan struct{} // closed once the session's start is recorded; nil: started
	ended   <-chan struct{} // closed when the session ends
	audit   interface{ Err() error }
	// denyHosts is the configuration's deny_hosts (policy.Builtin);
	// nil: none.
	denyHosts event.Decider
	policy    event.Decider
	ask       *ask.Broker // nil: an ask stays ask (and is enforced as a deny)
}

func (c *chain) Decide(ctx context.Context, e *event.Event) event.Verdict {
	if c.started != nil {
		select {
		case <-c.started: // at once once the session started: ctx.Done would allocate
		default:
			select {
			case <-c.started:
			case <-c.ended:
				return event.Verdict{Action: event.Deny, DecidedBy: event.DecidedByDefault, Reason: "the session ended before its start was recorded"}
			case <-ctx.Done():
				return event.Verdict{Action: event.Deny, DecidedBy: event.DecidedByDefault, Reason: "the session ended before its start was recorded"}
			}
		}
	}
	if c.audit.Err() != nil {
		return event.Verdict{Action: event.Deny, Rule: ruleAuditLog, DecidedBy: event.DecidedByDefault,
			Reason: "the audit log cannot be written, so nothing is allowed"}
	}
	if c.denyHosts != nil {
		if v := c.denyHosts.Decide(ctx, e); !v.Allowed() {
			return v
		}
	}
	v := c.policy.Decide(ctx, e)
	if v.Action == event.Ask && c.ask != nil {
		return c.ask.Decide(ctx, e, v)
	}
	return v
}
