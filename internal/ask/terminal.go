package ask

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"
)

// Terminal asks questions on the terminal where the session runs. It reads
// the terminal only while a question waits, so the agent keeps its input
// the rest of the time.
type Terminal struct {
	b    *Broker
	in   *os.File // the terminal, opened on its own, non-blocking
	out  io.Writer
	mu   sync.Mutex // serialises writes to out
	wake chan struct{}
}

// OpenTerminal returns a Terminal for tty (the session's stdin), or an
// error when it is not a terminal. Call Notify for every new question
// (Options.Notify) and Run to read the answers.
func OpenTerminal(b *Broker, tty *os.File, out io.Writer) (*Terminal, error) {
	in, err := reopenTerminal(tty)
	if err != nil {
		return nil, err
	}
	return &Terminal{b: b, in: in, out: out, wake: make(chan struct{}, 1)}, nil
}

// Notify prints q with how to answer it, and starts reading the terminal.
func (t *Terminal) Notify(q Question) {
	left := time.Until(q.Deadline).Round(time.Second)
	t.printf("\r\nchaperone: ask %s: %s\r\n", q.ID, q.Summary)
	if q.Rule != "" || q.Reason != "" {
		t.printf("chaperone:   rule %s: %s\r\n", Printable(q.Rule, 80), q.Reason)
	}
	t.printf("chaperone:   allow? [y]es, [n]o, [a]lways, ne[v]er (%s; or `chaperone approve|deny %s`)\r\n", left, q.ID)
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// Run reads answers until ctx ends; it closes the terminal it opened.
func (t *Terminal) Run(ctx context.Context) {
	defer t.in.Close()
	buf := make([]byte, 256)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.wake:
		}
		for len(t.b.Pending()) > 0 && ctx.Err() == nil {
			_ = t.in.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			n, err := t.in.Read(buf)
			if n > 0 {
				t.handle(string(buf[:n]))
			}
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				return // the terminal is gone; chaperone approve still works
			}
		}
	}
}

// handle applies one typed answer to the oldest waiting question, or to
// the one it names ("y 3f2a").
func (t *Terminal) handle(s string) {
	s = strings.TrimSpace(s)
	if s == "" {
		return
	}
	word, id, _ := strings.Cut(s, " ")
	var a Answer
	switch unicode.ToLower([]rune(word)[0]) {
	case 'y':
		a = Answer{Allow: true}
	case 'n':
		a = Answer{}
	case 'a':
		a = Answer{Allow: true, Always: true}
	case 'v':
		a = Answer{Always: true}
	default:
		t.printf("chaperone: answer y, n, a or v\r\n")
		return
	}
	a.By = "the terminal"
	id = strings.TrimSpace(id)
	if id == "" {
		qs := t.b.Pending()
		if len(qs) == 0 {
			return
		}
		id = qs[0].ID
	}
	if err := t.b.Answer(id, a); err != nil {
		t.printf("chaperone: %v\r\n", err)
		return
	}
	word = "denied"
	if a.Allow {
		word = "allowed"
	}
	t.printf("chaperone: ask %s %s\r\n", Printable(id, 32), word)
}

func (t *Terminal) printf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, format, args...)
}
