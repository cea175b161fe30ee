package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/telemetry"
)

func newEventsCommand(e env) *cobra.Command {
	var (
		follow       bool
		session      string
		kinds        []string
		verdicts     []string
		since, until string
		asJSON       bool
		all          bool
	)
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print the audit log readably",
		Long: "Print the audit log (JSON Lines, see docs/events.md), optionally filtered by session, kind,\n" +
			"verdict and time. --since and --until take an RFC 3339 time (2025-03-01T13:04:05Z) or a\n" +
			"duration back from now (10m, 1h30m). Routine file reads (shared libraries, locale data, the\n" +
			"working tree, the agent's caches: docs/events.md) are one counted line unless --all.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, e)
			if err != nil {
				return err
			}
			f, err := eventsFilter(session, kinds, verdicts, since, until, time.Now())
			if err != nil {
				return usageError{err}
			}
			out := cmd.OutOrStdout()
			enc := json.NewEncoder(out)
			line := func(r telemetry.Record) error {
				telemetry.FormatRecord(out, r)
				return nil
			}
			// The sessions' starts are read also when not shown: they say
			// which reads are routine (their working tree and home).
			read := f
			if len(f.Kinds) > 0 && !asJSON {
				read.Kinds = append(slices.Clone(f.Kinds), event.KindSessionStart)
				read.Verdicts, read.Since, read.Until = nil, time.Time{}, time.Time{}
			}
			fold := telemetry.ViewFold{All: all}
			print := func(r telemetry.Record) error {
				if asJSON {
					return enc.Encode(r) // the records as the log has them
				}
				if !f.Match(r) {
					fold.Note(r)
					return nil
				}
				return fold.Add(r, line)
			}
			path := cfg.AuditLogPath()
			if follow {
				err := telemetry.Follow(cmd.Context(), path, read, 200*time.Millisecond, print)
				fold.Flush(line)
				return err
			}
			file, err := os.Open(path)
			if err != nil {
				return fmt.Errorf("events: %w", err)
			}
			defer file.Close()
			if err := telemetry.ReadRecords(file, read, print); err != nil {
				return err
			}
			return fold.Flush(line)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing events as they are written")
	cmd.Flags().StringVar(&session, "session", "", "only this session's events (an id or its prefix)")
	cmd.Flags().StringArrayVar(&kinds, "kind", nil, "only events of this kind (repeatable): "+fmt.Sprint(event.Kinds)+"; file includes file_reads (folded routine reads); process shows process records")
	cmd.Flags().StringArrayVar(&verdicts, "verdict", nil, "only events with this verdict (repeatable): allow, deny, rewrite, ask")
	cmd.Flags().StringVar(&since, "since", "", "only events at or after this time (RFC 3339, or a duration before now: 10m)")
	cmd.Flags().StringVar(&until, "until", "", "only events at or before this time (RFC 3339, or a duration before now: 10m)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the JSON records instead of lines (as the log has them: never folded)")
	cmd.Flags().BoolVar(&all, "all", false, "show every routine file read on a line of its own, each file of a file_reads record too")
	return cmd
}

// eventsFilter builds the filter of the events command's flags; durations
// count back from now.
func eventsFilter(session string, kinds, verdicts []string, since, until string, now time.Time) (telemetry.Filter, error) {
	f := telemetry.Filter{Session: session}
	for _, k := range kinds {
		if kind := event.Kind(k); !kind.Valid() && kind != telemetry.KindFileReads && kind != telemetry.KindProcess {
			return f, fmt.Errorf("events: --kind %q: want one of %v, %s or %s", k, event.Kinds, telemetry.KindFileReads, telemetry.KindProcess)
		}
		f.Kinds = append(f.Kinds, event.Kind(k))
	}
	for _, v := range verdicts {
		a, err := event.ParseAction(v)
		if err != nil {
			return f, fmt.Errorf("events: --verdict %q: want allow, deny, rewrite or ask", v)
		}
		f.Verdicts = append(f.Verdicts, a)
	}
	var err error
	if f.Since, err = parseTimeFlag(since, now); err != nil {
		return f, fmt.Errorf("events: --since: %w", err)
	}
	if f.Until, err = parseTimeFlag(until, now); err != nil {
		return f, fmt.Errorf("events: --until: %w", err)
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return f, errors.New("events: --until is before --since")
	}
	return f, nil
}

// parseTimeFlag reads an RFC 3339 time, or a duration that means that long
// before now. "" is the zero time (no bound).
func parseTimeFlag(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2025-03-01T13:04:05Z) nor a duration (10m)", s)
	}
	if d < 0 {
		return time.Time{}, fmt.Errorf("%q: the duration counts back from now and cannot be negative", s)
	}
	return now.Add(-d), nil
}
