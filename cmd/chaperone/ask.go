package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/ask"
)

// askDir is where running sessions keep their control sockets.
func askDir(stateDir string) string { return filepath.Join(stateDir, "ask") }

// asking holds every ask verdict of decider for a person, through the
// broker: what reaches the proxy is never ask.
type asking struct {
	decider event.Decider
	broker  *ask.Broker
}

func (a asking) Decide(ctx context.Context, e *event.Event) event.Verdict {
	v := a.decider.Decide(ctx, e)
	if v.Action != event.Ask {
		return v
	}
	return a.broker.Decide(ctx, e, v)
}

// asker is a session's way of asking a person: the broker, its control
// socket and, when the session runs on a terminal, the terminal.
type asker struct {
	broker *ask.Broker
	sock   string
	stop   func()
}

// startAsker opens the session's control socket (refusing the session's
// own processes, by the kernel's word for who connects) and, when stdin is
// a terminal, asks there too.
func startAsker(ctx context.Context, stateDir, session string, stdin io.Reader, stderr io.Writer, inSession func(pid int) bool) (*asker, error) {
	var term *ask.Terminal
	b := ask.NewBroker(ask.Options{
		Session: session,
		NewID:   func() string { return newID(3) },
		Notify: func(q ask.Question) {
			if term != nil {
				term.Notify(q)
				return
			}
			fmt.Fprintf(stderr, "chaperone: ask %s: %s\nchaperone:   rule %s: %s; answer with `chaperone approve %s` or `chaperone deny %s` (%s)\n",
				q.ID, q.Summary, q.Rule, q.Reason, q.ID, q.ID, time.Until(q.Deadline).Round(time.Second))
		},
	})
	sock := filepath.Join(askDir(stateDir), session+".sock")
	ln, err := ask.Listen(sock)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Serve(ln, func(pid, uid int) error {
			if inSession(pid) {
				return errors.New("refused: the session's own processes cannot answer its questions")
			}
			return nil
		})
	}()
	if f, ok := stdin.(*os.File); ok && ask.IsTerminal(f) {
		if term, err = ask.OpenTerminal(b, f, stderr); err == nil {
			go term.Run(ctx)
		} else {
			term = nil
		}
	}
	return &asker{broker: b, sock: sock, stop: func() {
		cancel()
		ln.Close()
		<-done
		b.Close()
	}}, nil
}

func newApproveCommand(e env, allow bool) *cobra.Command {
	var always bool
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
			dir := askDir(cfg.StateDir)
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
					fmt.Fprintf(out, "%s  session %s  %s\n      rule %s: %s (%s left)\n", q.ID, q.Session, q.Summary,
						q.Rule, q.Reason, time.Until(q.Deadline).Round(time.Second))
				}
				return nil
			}
			if err := ask.Send(dir, args[0], allow, always); err != nil {
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
	return cmd
}
