package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"github.com/chaperone-dev/chaperone/internal/ask"
	"github.com/chaperone-dev/chaperone/session"
)

func newApproveCommand(e env, allow bool) *cobra.Command {
	var always, watch bool
	use, short := "approve [ID]", "Allow an action a session is asking about (no ID: list the questions waiting)"
	if !allow {
		use, short = "deny ID", "Deny an action a session is asking about"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + ".\nA policy rule with action ask holds the action until a person answers, on the session's\n" +
			"terminal or with this command from another one (as the user who runs chaperone).",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(cmd, e)
			if err != nil {
				return err
			}
			dir := session.AskDir(cfg.StateDir)
			if watch {
				if !allow || len(args) > 0 {
					return usageError{errors.New("approve --watch takes no question ID")}
				}
				out := cmd.OutOrStdout()
				fmt.Fprintln(out, "watching for questions (the sessions' asks wait for an answer while this runs; ^C to stop)")
				ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
				defer stop()
				return ask.Watch(ctx, dir, 250*time.Millisecond, func(q ask.Question) { printQuestion(out, q) },
					func(s string) { fmt.Fprintf(out, "watching session %s\n", s) })
			}
			if len(args) == 0 {
				if !allow {
					return usageError{errors.New("deny: which question? chaperone deny ID (chaperone approve lists them)")}
				}
				qs, err := ask.List(dir)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if len(qs) == 0 {
					fmt.Fprintln(out, "no questions waiting")
				}
				for _, q := range qs {
					printQuestion(out, q)
				}
				return nil
			}
			if err := ask.Send(dir, args[0], allow, always, ""); err != nil {
				return err
			}
			word := "denied"
			if allow {
				word = "approved"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", word, args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&always, "always", false, "answer the same question (rule, program and target) this way for the rest of the session")
	if allow {
		cmd.Flags().BoolVar(&watch, "watch", false, "print questions as the sessions ask them, until interrupted; while it runs, asks wait for an answer instead of ask.unattended")
	}
	return cmd
}

// printQuestion prints q as `chaperone approve` lists it.
func printQuestion(out io.Writer, q ask.Question) {
	fmt.Fprintf(out, "%s  session %s  %s\n      rule %s: %s (%s left)\n", q.ID, q.Session, q.Summary,
		q.Rule, q.Reason, time.Until(q.Deadline).Round(time.Second))
}
