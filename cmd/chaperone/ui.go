package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"

	"github.com/spf13/cobra"

	"github.com/chaperone-dev/chaperone/config"
	"github.com/chaperone-dev/chaperone/session"
	"github.com/chaperone-dev/chaperone/ui"
)

func newUICommand(e env) *cobra.Command {
	return &cobra.Command{
		Use:   "ui [LOG...]",
		Short: "Serve the live view: the sessions, their events and questions, in a browser on loopback",
		Long: "Serve the live view on loopback (--ui-listen, default a free port of 127.0.0.1) until\n" +
			"interrupted: every session of the audit log (--log, and the logs named as arguments),\n" +
			"live, and the questions of the running sessions, to answer there. It prints a URL with a\n" +
			"one-time token: open it in a browser on this machine.",
		Example: "  chaperone ui\n  chaperone ui --log /tmp/audit.jsonl --ui-listen 127.0.0.1:8090",
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(cmd, e)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			s, err := startUI(ctx, e, cfg, args, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			<-ctx.Done()
			return s.Close()
		},
	}
}

// startUI serves the live view over the configured audit log and logs,
// and prints its URL on w.
func startUI(ctx context.Context, e env, cfg config.Config, logs []string, w io.Writer) (*ui.Server, error) {
	s, err := ui.New(ui.Options{
		Logs:   append([]string{cfg.AuditLogPath()}, logs...),
		AskDir: session.AskDir(cfg.StateDir),
		Listen: cfg.UI.Listen,
		Logger: slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: cfg.SlogLevel()})),
	})
	if err != nil {
		return nil, usageError{err}
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "live view: %s\n", s.URL())
	return s, nil
}
