package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/chaperone-dev/chaperone/telemetry"
)

func newSessionsCommand(e env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "List the sessions in the audit log",
		Long: "List the sessions the audit log holds, oldest first: id, agent, start and end (UTC),\n" +
			"exit code, and counts of requests, denials, redacted secrets and LLM tokens.\n" +
			"A session without a session_end record is shown as running.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := auditLogPath(cmd, e)
			if err != nil {
				return err
			}
			list, err := readSessions(path)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				for _, s := range list {
					if err := enc.Encode(s); err != nil {
						return err
					}
				}
				return nil
			}
			return printSessions(cmd.OutOrStdout(), list)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per session instead of a table")
	cmd.AddCommand(newSessionsShowCommand(e))
	return cmd
}

func newSessionsShowCommand(e env) *cobra.Command {
	var asJSON, all bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one session as a tree of its processes and their actions",
		Long: "Show a session of the audit log (its id, or a prefix of it that names one session):\n" +
			"its command, duration and exit code, then its processes nested by parentage, each\n" +
			"with its actions in time order; denials are marked DENY with their rule and reason.\n" +
			"Routine file reads (docs/events.md) are one counted line unless --all.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := auditLogPath(cmd, e)
			if err != nil {
				return err
			}
			list, err := readSessions(path)
			if err != nil {
				return err
			}
			s, err := findSession(list, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(s)
			}
			var recs []telemetry.Record
			err = readLog(path, telemetry.Filter{Session: s.ID}, func(r telemetry.Record) error {
				if r.Session == s.ID {
					recs = append(recs, r)
				}
				return nil
			})
			if err != nil {
				return err
			}
			printSessionTree(cmd.OutOrStdout(), s, telemetry.FoldView(recs, all))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the session's summary as JSON (the records: chaperone events --session ID --json)")
	cmd.Flags().BoolVar(&all, "all", false, "show every routine file read on a line of its own, each file of a file_reads record too")
	return cmd
}

func auditLogPath(cmd *cobra.Command, e env) (string, error) {
	cfg, err := loadConfig(cmd, e)
	if err != nil {
		return "", err
	}
	return cfg.AuditLogPath(), nil
}

func readLog(path string, f telemetry.Filter, fn func(telemetry.Record) error) error {
	file, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sessions: %w", err)
	}
	defer file.Close()
	return telemetry.ReadRecords(file, f, fn)
}

// readSessions summarises every session of the audit log at path, oldest
// first.
func readSessions(path string) ([]telemetry.SessionSummary, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sessions: %w", err)
	}
	defer file.Close()
	return telemetry.Sessions(file)
}

// findSession returns the session whose id is id, or else the one whose id
// starts with it.
func findSession(list []telemetry.SessionSummary, id string) (telemetry.SessionSummary, error) {
	var matches []telemetry.SessionSummary
	for _, s := range list {
		if s.ID == id {
			return s, nil
		}
		if id != "" && strings.HasPrefix(s.ID, id) {
			matches = append(matches, s)
		}
	}
	switch len(matches) {
	case 1:
		return matches[0], nil
	case 0:
		return telemetry.SessionSummary{}, usageError{fmt.Errorf("sessions: no session %q in the audit log", telemetry.Printable(id))}
	}
	ids := make([]string, 0, 5)
	for i, s := range matches {
		if i == 4 {
			ids = append(ids, "…")
			break
		}
		ids = append(ids, telemetry.Printable(s.ID))
	}
	return telemetry.SessionSummary{}, usageError{fmt.Errorf("sessions: %q names %d sessions (%s): give more of the id",
		telemetry.Printable(id), len(matches), strings.Join(ids, ", "))}
}

// printSessions writes the table of sessions, at most 100 columns wide:
// longer ids and agent names are cut (show takes a prefix of the id).
func printSessions(w io.Writer, list []telemetry.SessionSummary) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(w, "no sessions in the audit log")
		return err
	}
	rows := [][]string{{"SESSION", "AGENT", "START (UTC)", "END", "EXIT", "REQUESTS", "DENIED", "REDACTED", "TOKENS"}}
	for _, s := range list {
		end, exit := "running", "-"
		if s.End != nil {
			end = endTime(s.Start, *s.End)
		}
		if s.ExitCode != nil {
			exit = strconv.Itoa(*s.ExitCode)
		}
		rows = append(rows, []string{fit(telemetry.Printable(s.ID), 12), fit(sessionAgent(s), 10),
			s.Start.UTC().Format(time.DateTime), end, exit, strconv.Itoa(s.Requests), strconv.Itoa(s.Denials),
			strconv.Itoa(s.Redactions), tokens(s.Tokens)})
	}
	_, err := io.WriteString(w, table(rows, 4))
	return err
}

// table lays rows out in columns two spaces apart, the first left columns
// aligned left, the others (numbers) right.
func table(rows [][]string, left int) string {
	var width []int
	for _, row := range rows {
		for i, cell := range row {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(cell))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		var line strings.Builder
		for i, cell := range row {
			if i > 0 {
				line.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(cell))
			if i < left {
				line.WriteString(cell + pad)
			} else {
				line.WriteString(pad + cell)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
	return b.String()
}

// endTime shows end as a time of day when it is on start's day.
func endTime(start, end time.Time) string {
	start, end = start.UTC(), end.UTC()
	if y1, m1, d1 := start.Date(); y1 == end.Year() && m1 == end.Month() && d1 == end.Day() {
		return end.Format(time.TimeOnly)
	}
	return end.Format("01-02 15:04")
}

// sessionAgent names a session's agent, or its command when no agent was
// recorded.
func sessionAgent(s telemetry.SessionSummary) string {
	switch {
	case s.Agent != "":
		return telemetry.Printable(s.Agent)
	case len(s.Command) > 0:
		return telemetry.Printable(filepath.Base(s.Command[0]))
	}
	return "?"
}

// tokens shows a token count in at most 6 characters.
func tokens(n int64) string {
	switch {
	case n < 10_000:
		return strconv.FormatInt(n, 10)
	case n < 1_000_000:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 1, 64) + "k"
	default:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + "M"
	}
}

// fit cuts s to n runes, marking the cut.
func fit(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
