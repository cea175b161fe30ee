package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/session"
)

func newRunCommand(e env) *cobra.Command {
	var (
		killOnExit bool
		serveUI    bool
		user       string
		agent      string
	)
	cmd := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARGS...]",
		Short: "Run a command (an agent) and everything it starts inside a Chaperone session",
		Long: "Run COMMAND in a new session. Its connections, and those of every process it starts,\n" +
			"go through Chaperone's proxy, are decided by the policy and written to the audit log.\n" +
			"Exits with COMMAND's exit status.",
		Example: "  chaperone run -- python3 agent.py\n  chaperone run --deny-host '*.pastebin.com' -- claude",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{errors.New("run: no command given: chaperone run [flags] -- COMMAND [ARGS...]")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(cmd, e)
			if err != nil {
				return err
			}
			if agent == "" {
				agent = session.AgentName(args)
			}
			if joined, err := joinDaemon(e, cfg, agent, args); joined || err != nil {
				return err // joined: the agent replaced this process; never here
			}
			if serveUI {
				s, err := startUI(cmd.Context(), e, cfg, nil, e.stderr)
				if err != nil {
					return err
				}
				defer s.Close()
			}
			code, err := runSession(cmd.Context(), e, session.Config{
				Settings:   cfg,
				ConfigFile: configFile(cmd, e),
				User:       user,
				Agent:      agent,
				KillOnExit: killOnExit,
			}, args, e.environ(), e.stdout, nil)
			if err != nil {
				return err
			}
			if code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	// Everything after the command's name belongs to the command.
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().StringVar(&agent, "agent", "", "the agent's name in events and traces (default: detected from the command: claude, codex, cursor, aider, gemini, …)")
	cmd.Flags().StringVar(&user, "user", "", "run the command as this user (name or uid); default: the user who ran sudo, else unchanged")
	cmd.Flags().BoolVar(&serveUI, "ui", false, "serve the live view while the session runs (see chaperone ui; --ui-listen sets its address)")
	cmd.Flags().BoolVar(&killOnExit, "kill-on-exit", true, "transparent mode: when the command exits, kill every process it left in the session (else wait for them)")
	return cmd
}

// runSession runs argv as the agent of a new session and prints the
// session's summary when it ends. It returns the agent's exit status; an
// error means the session could not be set up (or its audit log failed).
// afterStart, when set, is called once the session is started, before the
// agent is.
func runSession(ctx context.Context, e env, cfg session.Config, argv, environ []string, stdout io.Writer,
	afterStart func(*session.Session)) (code int, err error) {
	s, err := session.New(cfg, session.Deps{Getenv: e.getenv, Stdin: e.stdin, Stderr: e.stderr})
	if err != nil {
		return 0, err
	}
	sum := newSummary(s.Subscribe("summary", event.SubscribeOptions{Queue: 4096}))
	if err := s.Start(ctx); err != nil {
		s.Close()
		return 0, err
	}
	if afterStart != nil {
		afterStart(s)
	}
	code, err = s.Run(ctx, session.Command{Argv: argv, Env: environ, Stdin: e.stdin, Stdout: stdout, Stderr: e.stderr})
	if err != nil {
		s.Close()
		return 0, err
	}
	auditErr := s.Close()
	sum.wait()
	sum.print(e.stderr, s.ID(), s.AuditLog(), code)
	if n := s.TracesDropped(); n > 0 {
		fmt.Fprintf(e.stderr, "chaperone: %d trace events or spans dropped (the collector was slow or down)\n", n)
	}
	return code, auditErr
}
