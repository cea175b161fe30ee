package ask

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

func httpEvent(host string) *event.Event {
	return &event.Event{
		Kind: event.KindHTTP, Session: "s1",
		Process: &event.Process{PID: 42, Exe: "/usr/bin/curl", LineageNames: []string{"bash", "curl"}},
		HTTP:    &event.HTTP{Method: "GET", URL: "https://" + host + "/x", Host: host},
	}
}

var askVerdict = event.Verdict{Action: event.Ask, Rule: "ask-net", Reason: "a person decides", DecidedBy: event.DecidedByRule}

// newTestBroker returns a broker whose questions are sent on the returned
// channel as they start waiting.
func newTestBroker(timeout time.Duration, onTimeout event.Action) (*Broker, chan Question) {
	qs := make(chan Question, 16)
	var n atomic.Int64
	b := NewBroker(Options{
		Session: "s1", Timeout: timeout, OnTimeout: onTimeout,
		Notify: func(q Question) { qs <- q },
		NewID:  func() string { return fmt.Sprintf("q%d", n.Add(1)) },
	})
	return b, qs
}

// decideAsync runs Decide and returns its verdict on a channel.
func decideAsync(ctx context.Context, b *Broker, e *event.Event) chan event.Verdict {
	c := make(chan event.Verdict, 1)
	go func() { c <- b.Decide(ctx, e, askVerdict) }()
	return c
}

func TestAnswers(t *testing.T) {
	tests := []struct {
		name   string
		answer Answer
		want   event.Verdict
	}{
		{"approve", Answer{Allow: true, By: "the terminal"}, event.Verdict{Action: event.Allow, Rule: "ask-net", DecidedBy: event.DecidedByHuman, Reason: "approved by the terminal (ask q1)"}},
		{"deny", Answer{By: "uid 7"}, event.Verdict{Action: event.Deny, Rule: "ask-net", DecidedBy: event.DecidedByHuman, Reason: "denied by uid 7 (ask q1)"}},
		{"always", Answer{Allow: true, Always: true, By: "x"}, event.Verdict{Action: event.Allow, Rule: "ask-net", DecidedBy: event.DecidedByHuman, Reason: "approved for the session by x (ask q1)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, qs := newTestBroker(time.Minute, event.Deny)
			got := decideAsync(context.Background(), b, httpEvent("example.com"))
			q := <-qs
			if q.ID != "q1" || q.Rule != "ask-net" || q.Session != "s1" {
				t.Fatalf("question = %+v", q)
			}
			if err := b.Answer(q.ID, tt.answer); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, <-got); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
			if err := b.Answer(q.ID, tt.answer); !errors.Is(err, ErrUnknown) {
				t.Errorf("second answer: err = %v, want ErrUnknown", err)
			}
			if n := len(b.Pending()); n != 0 {
				t.Errorf("%d questions still pending", n)
			}
		})
	}
}

func TestAlwaysSettlesTheSameQuestionOnly(t *testing.T) {
	b, qs := newTestBroker(time.Minute, event.Deny)
	got := decideAsync(context.Background(), b, httpEvent("example.com"))
	q := <-qs
	if err := b.Answer(q.ID, Answer{Always: true, By: "x"}); err != nil {
		t.Fatal(err)
	}
	first := <-got
	// The same question is answered at once, without asking.
	if v := b.Decide(context.Background(), httpEvent("example.com"), askVerdict); v != first {
		t.Errorf("repeat verdict = %v, want %v", v, first)
	}
	// Another host is another question.
	other := decideAsync(context.Background(), b, httpEvent("example.org"))
	q2 := <-qs
	if !strings.Contains(q2.Summary, "example.org") {
		t.Errorf("summary %q does not name the host", q2.Summary)
	}
	b.Answer(q2.ID, Answer{Allow: true})
	if v := <-other; v.Action != event.Allow {
		t.Errorf("other host: %v", v)
	}
	select {
	case extra := <-qs:
		t.Errorf("asked again: %+v", extra)
	default:
	}
}

func TestIdenticalQuestionsShareOneAnswer(t *testing.T) {
	b, qs := newTestBroker(time.Minute, event.Deny)
	const n = 5
	var wg sync.WaitGroup
	verdicts := make(chan event.Verdict, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			verdicts <- b.Decide(context.Background(), httpEvent("example.com"), askVerdict)
		}()
	}
	q := <-qs
	// Wait until every caller joined the one question.
	for deadline := time.Now().Add(5 * time.Second); ; {
		b.mu.Lock()
		w := b.pending[q.ID].waiters
		b.mu.Unlock()
		if w == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d callers waiting", w, n)
		}
		time.Sleep(time.Millisecond)
	}
	b.Answer(q.ID, Answer{Allow: true})
	wg.Wait()
	close(verdicts)
	for v := range verdicts {
		if v.Action != event.Allow {
			t.Errorf("verdict %v", v)
		}
	}
	if len(qs) != 0 {
		t.Errorf("%d extra questions were asked", len(qs))
	}
}

func TestTimeout(t *testing.T) {
	for _, on := range []event.Action{event.Deny, event.Allow} {
		t.Run(on.String(), func(t *testing.T) {
			b, qs := newTestBroker(50*time.Millisecond, on)
			v := b.Decide(context.Background(), httpEvent("example.com"), askVerdict)
			q := <-qs
			want := event.Verdict{Action: on, Rule: "ask-net", DecidedBy: event.DecidedByDefault,
				Reason: "nobody answered within 50ms; on_timeout " + on.String() + " (ask " + q.ID + ")"}
			if diff := cmp.Diff(want, v); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
			if len(b.Pending()) != 0 {
				t.Error("the question still waits")
			}
		})
	}
}

func TestAbandonedAndClosed(t *testing.T) {
	b, qs := newTestBroker(time.Minute, event.Allow)
	ctx, cancel := context.WithCancel(context.Background())
	got := decideAsync(ctx, b, httpEvent("example.com"))
	q := <-qs
	cancel()
	if v := <-got; v.Action != event.Deny || !strings.Contains(v.Reason, "abandoned") {
		t.Errorf("abandoned: %v", v)
	}
	if err := b.Answer(q.ID, Answer{Allow: true}); !errors.Is(err, ErrUnknown) {
		t.Errorf("answer after abandon: %v", err)
	}

	got = decideAsync(context.Background(), b, httpEvent("example.org"))
	<-qs
	b.Close()
	if v := <-got; v.Action != event.Deny || !strings.Contains(v.Reason, "session ended") {
		t.Errorf("closed: %v", v)
	}
}

func TestSummaryIsPrintable(t *testing.T) {
	e := &event.Event{
		Kind:    event.KindExec,
		Process: &event.Process{PID: 9, Exe: "/bin/sh\x1b[2J", LineageNames: []string{"claude", "sh"}},
		Exec:    &event.Exec{Argv: []string{"rm", "-rf", "/\r\nchaperone: ask q9 approved"}},
	}
	got := Summary(e)
	want := "sh?[2J (claude > sh): exec rm -rf /??chaperone: ask q9 approved"
	if got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
	long := Summary(httpEvent(strings.Repeat("a", 500) + ".com"))
	if n := len([]rune(long)); n > 120+2+240+2 {
		t.Errorf("summary of a long URL is %d runes", n)
	}
}

// Writes into one directory by one program are one question.
func TestFileQuestionsByDirectory(t *testing.T) {
	b, qs := newTestBroker(time.Minute, event.Deny)
	file := func(path string) *event.Event {
		return &event.Event{Kind: event.KindFile, Session: "s1", Process: &event.Process{PID: 3, Exe: "/usr/bin/pip"},
			File: &event.File{Path: path, Access: event.FileWrite}}
	}
	first := decideAsync(context.Background(), b, file("/home/u/.local/lib/a.py"))
	q := <-qs
	if !strings.Contains(q.Summary, "/home/u/.local/lib/a.py") {
		t.Errorf("summary %q does not name the file", q.Summary)
	}
	b.Answer(q.ID, Answer{Allow: true, Always: true})
	if v := <-first; v.Action != event.Allow {
		t.Fatalf("first: %v", v)
	}
	if v := b.Decide(context.Background(), file("/home/u/.local/lib/b.py"), askVerdict); v.Action != event.Allow || v.DecidedBy != event.DecidedByHuman {
		t.Errorf("same directory: %v", v)
	}
	other := decideAsync(context.Background(), b, file("/home/u/.bashrc"))
	q2 := <-qs
	b.Answer(q2.ID, Answer{})
	if v := <-other; v.Action != event.Deny {
		t.Errorf("another directory was not asked: %v", v)
	}
}
