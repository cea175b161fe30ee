package event

import "context"

// Decider reaches the verdict for an event: the one contract of the proxy,
// the session's resolver and file and exec mediation with what decides.
// It is called synchronously on the data path, concurrently, with the
// action's context, and the action waits for its answer. Verdict's zero
// value denies: a Decider that cannot reach a decision returns it.
type Decider interface {
	Decide(ctx context.Context, e *Event) Verdict
}

// DeciderFunc adapts a function to Decider.
type DeciderFunc func(ctx context.Context, e *Event) Verdict

// Decide calls f.
func (f DeciderFunc) Decide(ctx context.Context, e *Event) Verdict { return f(ctx, e) }
