package execs

import (
	"context"
	"log/slog"
	"time"

	"github.com/chaperone-dev/chaperone/event"
)

// ExecOptions configures Serve.
type ExecOptions struct {
	// Session is the session id put on every event.
	Session string
	// InSession reports whether process pid belongs to the session. Execs
	// of other processes are let through at once, never decided nor
	// published. Required.
	InSession func(pid int) bool
	// Process describes process pid (the process before the exec) for the
	// event; nil, or an error, leaves the event's Process nil.
	Process func(pid int) (*event.Process, error)
	// Decider decides each exec. Its context is canceled by Close. It
	// should resolve ask itself: anything but allow or rewrite denies.
	// Required.
	Decider event.Decider
	// Publish receives every decided exec, with its Verdict set, after the
	// process was answered; and a second, denying event for an allowed
	// exec the verifier killed. Nil drops them.
	Publish func(*event.Event)
	// Logger receives warnings (the verifier is off) and debug lines; nil
	// discards them.
	Logger *slog.Logger
	// Now is the clock for the events' Time; time.Now when nil.
	Now func() time.Time
	// Other, when set, answers the notifications of system calls that are
	// not execs (the filter may hand over others for someone else to
	// decide): it is called on the notification's own goroutine, with a
	// context Close cancels, and must answer n exactly once. Nil lets
	// them run.
	Other func(ctx context.Context, n Notification)
}

// Stats counts what Serve answered.
type Stats struct {
	Events  uint64 // execs decided (and published)
	Denied  uint64 // of which denied with EPERM
	Killed  uint64 // allowed execs the verifier killed: argv, path, interpreter or program changed after the check
	Outside uint64 // execs of processes outside the session, let through undecided
}

// Reasons of the events the package writes itself.
const (
	reasonDeniedSuffix = "(denied with EPERM)"
	reasonUnverified   = "(argv unverified: the exec verifier is off)"
	reasonClosed       = "exec mediation stopped before a decision"
	reasonArmFailed    = "the exec verifier could not be armed"
	reasonKilledArgv   = "argv changed after the check; killed before it ran"
	reasonKilledPath   = "path changed after the check; killed before it ran"
	reasonKilledRead   = "argv unreadable at exec; killed before it ran"
	reasonKilledInterp = "interpreter changed after the check; killed before it ran"
	reasonKilledProg   = "program changed after the check; killed before it ran"
)

// withSuffix appends a parenthesized note to a verdict's reason.
func withSuffix(reason, suffix string) string {
	if reason == "" {
		return suffix
	}
	return reason + " " + suffix
}
