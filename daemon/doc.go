// Package daemon finds every agent the machine runs and makes each a
// session of one machine-wide session.Session: the matchers that tell an
// agent from its command line and environment, the control socket through
// which `chaperone run`, `attach` and `daemon sessions` reach it, and the
// daemon's life (reloads, memory given back once started, removal of its
// kernel hooks).
//
// The kernel side (marks at exec and fork, hooks at the cgroup root) is
// package redirect's; the sessions' assembly, package session's
// (session.Machine). docs/daemon.md says what is covered, and how.
package daemon
