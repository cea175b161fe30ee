package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/chaperone-dev/chaperone/internal/ask"
	"github.com/chaperone-dev/chaperone/policy"
)

// AskDir is where running sessions keep their control sockets, in the
// state directory: `chaperone approve` and `deny` answer through them.
func AskDir(stateDir string) string { return filepath.Join(stateDir, "ask") }

// unattended is what the broker does with a question nobody can answer,
// as the policy's ask.unattended says (deny when unset).
func unattended(a policy.Action) ask.Unattended {
	switch a {
	case policy.ActionAllow:
		return ask.UnattendedAllow
	case policy.AskWait:
		return ask.UnattendedWait
	}
	return ask.UnattendedDeny
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
	sock := filepath.Join(AskDir(stateDir), session+".sock")
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
			b.Attend() // for the whole session
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
