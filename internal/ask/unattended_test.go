package ask

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

// TestUnattended: a question nobody can answer is decided at once as
// ask.unattended says (wait holds it), while a terminal, a watch or a
// live view attends, it waits for them; releasing the last one makes the
// next question unattended again.
func TestUnattended(t *testing.T) {
	deny := event.Verdict{Action: event.Deny, Rule: "ask-net", DecidedBy: event.DecidedByDefault,
		Reason: "nobody could be asked (no terminal, no approver watching): unattended deny"}
	allow := deny
	allow.Action, allow.Reason = event.Allow, "nobody could be asked (no terminal, no approver watching): unattended allow"
	tests := []struct {
		name       string
		unattended Unattended
		attend     bool
		want       *event.Verdict // nil: the question waits
	}{
		{"deny", UnattendedDeny, false, &deny},
		{"allow", UnattendedAllow, false, &allow},
		{"wait", UnattendedWait, false, nil},
		{"attended", UnattendedDeny, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, qs := newTestBroker(time.Minute, event.Deny)
			b.Configure(time.Minute, event.Deny, tt.unattended)
			if tt.attend {
				release := b.Attend()
				defer release()
			}
			got := decideAsync(context.Background(), b, httpEvent("example.com"))
			if tt.want != nil {
				if diff := cmp.Diff(*tt.want, <-got); diff != "" {
					t.Errorf("verdict (-want +got):\n%s", diff)
				}
				if p := b.Pending(); len(p) != 0 {
					t.Errorf("pending %v, want none", p)
				}
				return
			}
			var q Question
			select {
			case q = <-qs: // it waits: answer it
			case v := <-got:
				t.Fatalf("decided at once: %v; want the question to wait", v)
			}
			if err := b.Answer(q.ID, Answer{Allow: true, By: "x"}); err != nil {
				t.Fatal(err)
			}
			if v := <-got; v.Action != event.Allow || v.DecidedBy != event.DecidedByHuman {
				t.Errorf("verdict %v, want the answer", v)
			}
		})
	}
	t.Run("released", func(t *testing.T) {
		b, _ := newTestBroker(time.Minute, event.Deny)
		b.Configure(time.Minute, event.Deny, UnattendedDeny)
		release := b.Attend()
		release()
		release() // twice is once
		if v := b.Decide(context.Background(), httpEvent("example.com"), askVerdict); v != deny {
			t.Errorf("verdict after release %v, want %v", v, deny)
		}
	})
}

// TestWatchAttends: a client watching the control socket gets the
// questions waiting and each new one, and while it watches nothing is
// unattended; once it closes, the next question is.
func TestWatchAttends(t *testing.T) {
	b, _ := newTestBroker(time.Minute, event.Deny)
	b.Configure(time.Minute, event.Deny, UnattendedDeny)
	dir := serve(t, b, nil)
	ctx, cancel := context.WithCancel(context.Background())
	seen, joined := make(chan Question, 4), make(chan string, 1)
	watched := make(chan error, 1)
	go func() {
		watched <- Watch(ctx, dir, 10*time.Millisecond, func(q Question) { seen <- q }, func(s string) { joined <- s })
	}()
	if s := <-joined; s != "s1" {
		t.Errorf("joined session %q, want s1", s)
	}
	waitAttended(t, b, 1)

	got := decideAsync(context.Background(), b, httpEvent("example.com"))
	var q Question
	select {
	case q = <-seen:
	case v := <-got:
		t.Fatalf("decided at once: %v; want the watcher asked", v)
	}
	if q.Summary != Summary(httpEvent("example.com")) {
		t.Errorf("watched question %+v", q)
	}
	if err := Send(dir, q.ID, true, false, ""); err != nil {
		t.Fatal(err)
	}
	if v := <-got; v.Action != event.Allow || v.DecidedBy != event.DecidedByHuman {
		t.Errorf("verdict %v, want the watcher's answer", v)
	}
	cancel()
	if err := <-watched; err != nil {
		t.Fatal(err)
	}
	waitAttended(t, b, 0)
	if v := b.Decide(context.Background(), httpEvent("example.com"), askVerdict); v.Action != event.Deny || v.DecidedBy != event.DecidedByDefault {
		t.Errorf("verdict after the watch ended %v, want unattended deny", v)
	}
}

// waitAttended polls b until n attend it; a minute without fails t.
func waitAttended(t *testing.T, b *Broker, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		b.mu.Lock()
		got := b.attended
		b.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("attended by %d, want %d", got, n)
		}
	}
}
