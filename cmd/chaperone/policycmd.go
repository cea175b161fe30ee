package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/policy"
	"github.com/chaperone-dev/chaperone/session"
	"github.com/chaperone-dev/chaperone/telemetry"
)

func newPolicyCommand(e env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Write, check and replay policies",
		Long:  "A policy says, in plain words (intent) and in rules, what an agent may do. See docs/policy.md.",
	}
	show := &cobra.Command{
		Use:   "show-default",
		Short: "Print the built-in default policy",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write(policy.DefaultPolicyYAML())
			return err
		},
	}
	check := &cobra.Command{
		Use:   "check FILE",
		Short: "Validate a policy file and list its rules",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := policy.Load(args[0])
			if err != nil {
				return usageError{err}
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s: ok, %d rules, default %s\n", args[0], len(p.Rules), p.Default)
			for _, r := range p.Rules {
				on := "every kind"
				if len(r.On) > 0 {
					kinds := make([]string, len(r.On))
					for i, k := range r.On {
						kinds[i] = string(k)
					}
					on = strings.Join(kinds, ",")
				}
				when := r.When
				if when == "" {
					when = "always"
				}
				fmt.Fprintf(out, "  %-24s %-8s on %s when %s\n", r.Name, r.Action, on, when)
			}
			if p.Judge.Configured() {
				fmt.Fprintf(out, "  judge: %s %s at %s\n", p.Judge.Provider, p.Judge.Model, p.Judge.URL)
			}
			for _, pl := range p.Plugins {
				fmt.Fprintf(out, "  plugin %s: %s\n", pl.Name, strings.Join(pl.Command, " "))
			}
			return nil
		},
	}
	test := &cobra.Command{
		Use:   "test FILE EVENTS.jsonl",
		Short: "Replay recorded audit-log events through a policy and print each verdict",
		Long: "Replay the events of an audit log (chaperone events --json, or the log itself) through\n" +
			"the policy in FILE, offline, and print each verdict and what decided it. The judge and\n" +
			"plugins the policy names are consulted as in a session.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := policy.Load(args[0])
			if err != nil {
				return usageError{err}
			}
			d, closeFn, err := session.NewEngine(cmd.Context(), p, slog.New(slog.NewTextHandler(e.stderr, nil)), e.getenv, nil)
			if err != nil {
				return err
			}
			defer closeFn()
			f, err := os.Open(args[1])
			if err != nil {
				return fmt.Errorf("policy test: %w", err)
			}
			defer f.Close()
			return replay(cmd.Context(), cmd.OutOrStdout(), f, d)
		},
	}
	cmd.AddCommand(show, check, test)
	return cmd
}

// replay decides every record of r with d and prints one line each: the
// recorded verdict, the new one and who decided it. A file_reads record
// (folded routine reads) is decided as a read of each file it names.
func replay(ctx context.Context, w io.Writer, r io.Reader, d event.Decider) error {
	n, changed := 0, 0
	where := map[string]*event.Session{} // the sessions' working trees and homes, from their session_start
	err := telemetry.ReadRecords(r, telemetry.Filter{}, func(rec telemetry.Record) error {
		if rec.Kind == event.KindSessionStart {
			where[rec.Session] = &event.Session{ID: rec.Session, Workdir: rec.Workdir, Home: rec.Home}
		}
		if rec.Kind == event.KindSessionStart || rec.Kind == event.KindSessionEnd {
			return nil
		}
		for _, e := range rec.Events() {
			if s := where[rec.Session]; s != nil && e.SessionInfo == nil {
				e.SessionInfo = s
			}
			line := rec
			if rec.Kind == telemetry.KindFileReads {
				line = telemetry.RecordOf(e)
			}
			v := d.Decide(ctx, e)
			n++
			mark := " "
			if v.Action != line.Verdict {
				mark = "*"
				changed++
			}
			by := v.DecidedBy.String()
			if v.Rule != "" {
				by += " " + v.Rule
			}
			line.Verdict, line.Rule, line.DecidedBy, line.Reason = v.Action, v.Rule, v.DecidedBy, v.Reason
			fmt.Fprintf(w, "%s %-7s %-24s ", mark, v.Action, by)
			telemetry.FormatRecord(w, line)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("policy test: %w", err)
	}
	fmt.Fprintf(w, "%d events, %d verdicts differ from the recorded ones (marked *)\n", n, changed)
	return nil
}
