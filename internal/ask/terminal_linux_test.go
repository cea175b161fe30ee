package ask

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/testpty"
)

// lockedBuffer is an output shared by the terminal and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestTerminal(t *testing.T) {
	master, slave := testpty.Open(t)
	if IsTerminal(os.Stdin) && os.Stdin.Name() == slave.Name() {
		t.Skip("stdin is the test's terminal")
	}
	var out lockedBuffer
	var term *Terminal
	b := NewBroker(Options{Session: "s1", Timeout: time.Minute, NewID: func() string { return "q1" },
		Notify: func(q Question) { term.Notify(q) }})
	term, err := OpenTerminal(b, slave, &out)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go term.Run(ctx)

	// Typed while nothing waits: the terminal is the agent's, not read.
	master.Write([]byte("for the agent\n"))
	time.Sleep(300 * time.Millisecond)
	slave.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, err := slave.Read(buf)
	if err != nil || string(buf[:n]) != "for the agent\n" {
		t.Fatalf("the agent read %q, %v; want its own input", buf[:n], err)
	}

	got := decideAsync(ctx, b, httpEvent("example.com"))
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(out.String(), "allow? [y]es"); {
		if time.Now().After(deadline) {
			t.Fatalf("no prompt; output %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "ask q1: curl (bash > curl): http GET https://example.com/x") {
		t.Errorf("prompt %q does not say who does what", out.String())
	}
	master.Write([]byte("maybe\n"))
	master.Write([]byte("y\n"))
	select {
	case v := <-got:
		want := event.Verdict{Action: event.Allow, Rule: "ask-net", DecidedBy: event.DecidedByHuman, Reason: "approved by the terminal (ask q1)"}
		if v != want {
			t.Errorf("verdict %v, want %v", v, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no answer taken; output %q", out.String())
	}
	if !strings.Contains(out.String(), "answer y, n, a or v") {
		t.Errorf("a bad answer was not explained: %q", out.String())
	}
}
