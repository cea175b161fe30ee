// Package session owns one agent session's whole life: it assembles the
// proxy, the session's resolver, the kernel hooks that send the agent's
// connections to them, file and exec mediation, the decision chain and the
// sinks, runs the agent, and takes it all down again.
//
// Lifecycle:
//
//	s, err := session.New(cfg, deps) // checks the configuration; opens nothing
//	sub := s.Subscribe(...)          // optional: before Start, to see every event
//	err = s.Start(ctx)               // trust bundle, policy, control socket, sinks, proxy, hooks
//	code, err := s.Run(ctx, cmd)     // the agent, confined, until it exits
//	err = s.Close()                  // always, also after a failed Start or Run
//
// A daemon's session (Config.Machine) runs no agent: it finds agents as
// they exec, anywhere on the machine, and makes each (and its descendants)
// a session of its own; Adopt makes one of a process already running, and
// Sessions lists them (machine.go).
//
// Guarantees:
//   - Close closes whatever Start opened, in the order its documentation
//     gives, also after Start failed at any step: no listener, cgroup,
//     BPF program or link, control socket, temporary directory or
//     goroutine is left (TestCloseAfterPartialStart). A nil error from
//     Close means every event of the session reached the audit log.
//   - Every decision of the proxy, the resolver and file and exec
//     mediation goes through one chain, whose order chain.go states and
//     tests: the session's start recorded, the audit log writable,
//     deny_hosts, the policy, then a person for an ask. Its verdicts fail
//     closed: nothing is allowed before the session's start is recorded,
//     or while the audit log fails.
//   - The session's start is recorded before anything of the agent's is
//     decided, and its end after the proxy has closed: no event of the
//     session follows its end.
//   - The data path never waits on a sink but the audit log, which applies
//     backpressure rather than lose an entry; traces and subscribers are
//     lossy and count what they drop.
//   - The agent's environment holds the session's proxy credentials and
//     credential placeholders only, never the real credentials brokered.
//
// Run starts the agent through the running program itself (privdrop's
// shim): a program that runs sessions calls privdrop.RunShim first thing
// in main, as cmd/chaperone does.
//
// This package imports the I/O and kernel packages it assembles; only cmd
// and daemon import it.
package session
