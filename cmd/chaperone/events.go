package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/telemetry"
)

func newEventsCommand(e env) *cobra.Command {
	var (
		follow  bool
		session string
		kinds   []string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print the audit log readably",
		Long:  "Print the audit log (JSON Lines, see docs/events.md), optionally filtered by session and kind.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, e)
			if err != nil {
				return err
			}
			f := telemetry.Filter{Session: session}
			for _, k := range kinds {
				if !event.Kind(k).Valid() {
					return usageError{fmt.Errorf("events: --kind %q: want one of %v", k, event.Kinds)}
				}
				f.Kinds = append(f.Kinds, event.Kind(k))
			}
			out := cmd.OutOrStdout()
			enc := json.NewEncoder(out)
			print := func(r telemetry.Record) error {
				if asJSON {
					return enc.Encode(r)
				}
				telemetry.FormatRecord(out, r)
				return nil
			}
			path := cfg.AuditLogPath()
			if follow {
				return telemetry.Follow(cmd.Context(), path, f, 200*time.Millisecond, print)
			}
			file, err := os.Open(path)
			if err != nil {
				return fmt.Errorf("events: %w", err)
			}
			defer file.Close()
			return telemetry.ReadRecords(file, f, print)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing events as they are written")
	cmd.Flags().StringVar(&session, "session", "", "only this session's events (an id or its prefix)")
	cmd.Flags().StringArrayVar(&kinds, "kind", nil, "only events of this kind (repeatable): "+fmt.Sprint(event.Kinds))
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the JSON records instead of lines")
	return cmd
}
