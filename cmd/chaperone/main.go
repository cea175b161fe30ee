// Command chaperone runs AI coding agents inside a dynamic sandbox: every
// connection of the agent and of its children goes through Chaperone's
// TLS-intercepting proxy, is decided by the policy and lands in the audit log.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/chaperone-dev/chaperone/internal/privdrop"
	"github.com/chaperone-dev/chaperone/session"
)

// exitError carries a process exit status up to main without printing
// anything more.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError marks a mistake in how chaperone was invoked (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// env is what a command needs from the outside world, passed in so tests can
// run commands in-process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	environ        func() []string
}

func main() {
	// The agent's own start: drop privileges, then exec it (never returns).
	if privdrop.RunShim() {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	e := env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, environ: os.Environ}
	os.Exit(execute(ctx, e, os.Args[1:]))
}

// execute runs the command line args and returns the exit status.
func execute(ctx context.Context, e env, args []string) int {
	root := newRootCommand(e)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		fmt.Fprintln(e.stderr, "chaperone:", err)
		var ue usageError
		var se session.UsageError
		if errors.As(err, &ue) || errors.As(err, &se) {
			return 2
		}
		return 1
	}
}

func newRootCommand(e env) *cobra.Command {
	root := &cobra.Command{
		Use:           "chaperone",
		Short:         "A dynamic sandbox for AI coding agents",
		Long:          "Chaperone runs an agent and every process it starts behind a TLS-intercepting proxy,\ndecides on every connection and request, and records each decision in an audit log.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	// The configuration flags belong to every command, before or after its name.
	addConfigFlags(root.PersistentFlags())
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		newRunCommand(e),
		newDaemonCommand(e),
		newAttachCommand(e),
		newConfigCommand(e),
		newCACommand(e),
		newEventsCommand(e),
		newSessionsCommand(e),
		newDemoCommand(e),
		newUICommand(e),
		newPolicyCommand(e),
		newApproveCommand(e, true),
		newApproveCommand(e, false),
	)
	return root
}
