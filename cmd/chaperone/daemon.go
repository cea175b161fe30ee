package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/chaperone-dev/chaperone/certs"
	"github.com/chaperone-dev/chaperone/config"
	"github.com/chaperone-dev/chaperone/daemon"
	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/session"
)

func newDaemonCommand(e env) *cobra.Command {
	var pinDir, group string
	var serveUI bool
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Find every agent the machine runs and make each a session, with no wrapper (root, Linux)",
		Long: "Run in the foreground, as root, once per machine. Every process that runs an agent\n" +
			"(Claude Code, Codex, Gemini CLI, aider, Cursor, goose, opencode, Copilot, the config's\n" +
			"agents, or anything started with CHAPERONE_AGENT=<name>) becomes a session as it starts,\n" +
			"and it and everything it starts go through the proxy. Other processes are not touched.\n" +
			"SIGHUP reloads the agents from the config file. When the daemon stops, the agents'\n" +
			"connections fail until it runs again (`daemon remove` lets them go unmediated).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, e)
			if err != nil {
				return err
			}
			file := configFile(cmd, e)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			if serveUI {
				s, err := startUI(ctx, e, cfg, nil, e.stderr)
				if err != nil {
					return err
				}
				defer s.Close()
			}
			return daemon.Run(ctx, daemon.Options{
				Settings: cfg, ConfigFile: file, PinDir: pinDir, Group: group,
				Reload: func() (config.Config, error) { return loadConfig(cmd, e) },
				Deps:   session.Deps{Getenv: e.getenv, Stderr: e.stderr},
				Ready: func(d *daemon.Daemon) {
					fmt.Fprintf(e.stderr, "chaperone: daemon ready: control socket %s, audit log %s\n", d.Socket(), d.Session().AuditLog())
				},
			})
		},
	}
	cmd.Flags().StringVar(&pinDir, "pin-dir", daemon.DefaultPinDir, "where the kernel hooks are pinned (bpffs): they outlive the daemon")
	cmd.Flags().BoolVar(&serveUI, "ui", false, "serve the live view while the daemon runs (see chaperone ui; --ui-listen sets its address)")
	cmd.Flags().StringVar(&group, "group", "", "a group whose members may use the control socket (list and adopt sessions) besides root")
	remove := &cobra.Command{
		Use:   "remove",
		Short: "Take the daemon's kernel hooks away: the agents it marked then connect unmediated",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return daemon.Remove(pinDir)
		},
	}
	remove.Flags().StringVar(&pinDir, "pin-dir", daemon.DefaultPinDir, "where the daemon pinned its kernel hooks")
	list := &cobra.Command{
		Use:   "sessions",
		Short: "List the running daemon's live sessions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, e)
			if err != nil {
				return err
			}
			rep, err := daemon.Call(cfg.DaemonSocketPath(), daemon.Request{Op: "sessions"})
			if err != nil {
				return err
			}
			printLiveSessions(e, rep.Sessions)
			return nil
		},
	}
	cmd.AddCommand(remove, list)
	return cmd
}

func newAttachCommand(e env) *cobra.Command {
	var agent string
	cmd := &cobra.Command{
		Use:   "attach PID",
		Short: "Make a running agent and its descendants a session of the daemon",
		Long:  "The daemon adopts process PID and every process under it: their next connections and\nDNS queries go through the proxy. Only the process's owner or root may attach it.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, err := strconv.Atoi(args[0])
			if err != nil || pid <= 0 {
				return usageError{fmt.Errorf("attach: %q is not a process id", args[0])}
			}
			cfg, err := loadConfig(cmd, e)
			if err != nil {
				return err
			}
			rep, err := daemon.Call(cfg.DaemonSocketPath(), daemon.Request{Op: "adopt", PID: pid, Agent: agent})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "session %s: %s (pid %d) and its descendants\n", rep.Session.ID, rep.Session.Agent, pid)
			return nil
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "the agent's name (default: detected from its command line)")
	return cmd
}

// joinDaemon runs argv in a session of the daemon listening at the
// configuration's socket, if one does: the process asks for the session
// and then becomes the agent (exec), so the agent and its children are the
// session's from their first instruction. ok is false when no daemon
// listens: the caller runs a session of its own.
func joinDaemon(e env, cfg config.Config, agent string, argv []string) (ok bool, err error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return false, nil // the session of its own reports it as a shell would
	}
	info, trust, ok, err := daemon.Join(cfg.DaemonSocketPath(), agent)
	if !ok || err != nil {
		return ok, err
	}
	fmt.Fprintf(e.stderr, "chaperone: session %s of the daemon (%s); its audit log has it\n", info.ID, info.Agent)
	// The daemon's trust replaces any the environment had: a program
	// reads the first of two values.
	env := slices.DeleteFunc(e.environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(certs.TrustEnvNames(), k)
	})
	return true, syscall.Exec(path, argv, append(env, trust...))
}

// printLiveSessions prints a daemon's live sessions.
func printLiveSessions(e env, ss []event.Session) {
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SESSION\tAGENT\tPID\tUID\tTTY\tSTARTED\tCOMMAND")
	for _, s := range ss {
		tty := s.TTY
		if tty == "" {
			tty = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", s.ID, s.Agent, s.RootPID, s.UID, tty, s.Started.Format(time.TimeOnly), strings.Join(s.Command, " "))
	}
	w.Flush()
}

// configFile is the config file the command was given, if any.
func configFile(cmd *cobra.Command, e env) string {
	f, _ := cmd.Flags().GetString("config")
	if f == "" {
		f = e.getenv(config.EnvConfigFile)
	}
	return f
}
