package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/chaperone-dev/chaperone/internal/demo"
)

func newDemoCommand(e env) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show what Chaperone does in one screen, offline",
		Long: "Start local servers (a fake LLM API and a host the policy denies, with a CA of their own),\n" +
			"run a scripted agent (sh, python3, curl, cat) in a real session, transparent when it can be\n" +
			"(root on Linux), and show a secret stripped from a prompt and restored in the answer, the\n" +
			"identity headers the API received, a denied host, a denied read of ~/.aws/credentials, the\n" +
			"lineage of what was denied, and where to watch it live. Nothing leaves the machine.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), e, dir)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory for the demo's state, audit log and the agent's home (default: a new temporary directory)")
	return cmd
}

func runDemo(ctx context.Context, e env, dir string) error {
	err := demo.Run(ctx, demo.Options{Dir: dir, Stdout: e.stdout, Stderr: e.stderr, Getenv: e.getenv, Environ: e.environ()})
	if x := (demo.ExitError{}); errors.As(err, &x) {
		return exitError{x.Code}
	}
	return err
}
