package event

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestBusLosslessGetsEverything(t *testing.T) {
	b := NewBus()
	audit := b.Subscribe("audit", SubscribeOptions{Queue: 1, Lossless: true})
	const publishers, each = 8, 500
	got := make(chan int)
	go func() {
		n := 0
		for range audit.Events() {
			n++
		}
		got <- n
	}()
	var wg sync.WaitGroup
	for range publishers {
		wg.Go(func() {
			for range each {
				b.Publish(&Event{Kind: KindHTTP})
			}
		})
	}
	wg.Wait()
	b.Close()
	if n := <-got; n != publishers*each {
		t.Fatalf("lossless subscriber got %d events, want %d", n, publishers*each)
	}
	if audit.Dropped() != 0 {
		t.Errorf("lossless subscriber dropped %d", audit.Dropped())
	}
}

func TestBusLossyNeverBlocks(t *testing.T) {
	b := NewBus()
	slow := b.Subscribe("slow", SubscribeOptions{Queue: 4}) // never read until the end
	done := make(chan struct{})
	go func() {
		for range 100 {
			b.Publish(&Event{Kind: KindConnect})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Publish blocked on a lossy subscriber")
	}
	b.Close()
	n := 0
	for range slow.Events() {
		n++
	}
	if n != 4 || slow.Dropped() != 96 {
		t.Errorf("lossy subscriber got %d and dropped %d, want 4 and 96", n, slow.Dropped())
	}
}

func TestBusOrderPerPublisher(t *testing.T) {
	b := NewBus()
	s := b.Subscribe("s", SubscribeOptions{Queue: 100, Lossless: true})
	for i := range 50 {
		b.Publish(&Event{Session: string(rune('a' + i%26)), Time: time.Unix(int64(i), 0)})
	}
	b.Close()
	i := 0
	for e := range s.Events() {
		if e.Time.Unix() != int64(i) {
			t.Fatalf("event %d arrived at position %d", e.Time.Unix(), i)
		}
		i++
	}
}

func TestBusUnsubscribeAndClose(t *testing.T) {
	b := NewBus()
	a := b.Subscribe("a", SubscribeOptions{})
	c := b.Subscribe("c", SubscribeOptions{})
	b.Unsubscribe(a)
	if _, ok := <-a.Events(); ok {
		t.Fatal("unsubscribed channel still open")
	}
	b.Publish(&Event{})
	b.Close()
	b.Close() // idempotent
	b.Publish(&Event{})
	n := 0
	for range c.Events() {
		n++
	}
	if n != 1 {
		t.Errorf("got %d events, want 1 (publish after Close must do nothing)", n)
	}
	late := b.Subscribe("late", SubscribeOptions{})
	if _, ok := <-late.Events(); ok {
		t.Error("subscription to a closed bus is open")
	}
}

func BenchmarkBusPublish(b *testing.B) {
	bus := NewBus()
	s := bus.Subscribe("audit", SubscribeOptions{Lossless: true, Queue: 4096})
	go func() {
		for range s.Events() {
		}
	}()
	e := &Event{Kind: KindHTTP}
	b.ReportAllocs()
	for b.Loop() {
		bus.Publish(e)
	}
	bus.Close()
}

// TestSubscriptionReceive: the events published while the subscriber
// pauses after a batch arrive together in the next one, no sooner than the
// pause; order is kept; Close ends Receive after a last batch.
func TestSubscriptionReceive(t *testing.T) {
	const pause = 300 * time.Millisecond
	b := NewBus()
	s := b.Subscribe("r", SubscribeOptions{Lossless: true})
	var (
		got      []int
		batches  [][2]time.Time // first event, batch end
		first    time.Time
		returned = make(chan struct{})
		batched  = make(chan struct{}, 10)
	)
	go func() {
		defer close(returned)
		s.Receive(pause, func(e *Event) {
			if first.IsZero() {
				first = time.Now()
			}
			got = append(got, e.Process.PID)
		}, func() {
			batches = append(batches, [2]time.Time{first, time.Now()})
			first = time.Time{}
			batched <- struct{}{}
		})
	}()

	b.Publish(&Event{Process: &Process{PID: 0}})
	<-batched // the subscriber now pauses
	for i := 1; i <= 100; i++ {
		b.Publish(&Event{Process: &Process{PID: i}})
	}
	<-batched
	b.Close()
	<-returned

	if len(got) != 101 {
		t.Fatalf("received %d events, want 101", len(got))
	}
	for i, id := range got {
		if id != i {
			t.Fatalf("event %d has id %d: order lost", i, id)
		}
	}
	// Two batches, and the final one for Close (which may find nothing).
	if len(batches) < 2 || len(batches) > 3 {
		t.Fatalf("%d batches, want the first event alone, then the other 100 together (and one at Close)", len(batches))
	}
	if wait := batches[1][0].Sub(batches[0][1]); wait < pause {
		t.Errorf("second batch began %v after the first ended, want at least the pause, %v", wait, pause)
	}
}

// TestSubscriptionReceiveBurst: a burst ends the pause once the queue is
// half full, so that a Lossless subscriber's publishers do not wait for
// the pause and a lossy one drops nothing; Close ends the pause too.
func TestSubscriptionReceiveBurst(t *testing.T) {
	const pause = time.Hour // longer than any test: only a nudge ends it
	for _, lossless := range []bool{true, false} {
		t.Run(fmt.Sprintf("lossless=%v", lossless), func(t *testing.T) {
			b := NewBus()
			s := b.Subscribe("r", SubscribeOptions{Lossless: lossless, Queue: 8})
			var got []int
			batched := make(chan struct{}, 100)
			returned := make(chan struct{})
			go func() {
				defer close(returned)
				s.Receive(pause, func(e *Event) { got = append(got, e.Process.PID) },
					func() { batched <- struct{}{} })
			}()
			b.Publish(&Event{Process: &Process{PID: 0}})
			<-batched // the subscriber now pauses

			// Lossless: 100 events through a queue of 8 cannot wait out the
			// pause. Lossy: half the queue wakes the subscriber.
			n := 100
			if !lossless {
				n = 4
			}
			published := make(chan struct{})
			go func() {
				for i := 1; i <= n; i++ {
					b.Publish(&Event{Process: &Process{PID: i}})
				}
				close(published)
			}()
			select {
			case <-published:
			case <-time.After(10 * time.Second):
				t.Fatal("publishers still blocked after 10 s: the burst did not end the pause")
			}
			if !lossless {
				select {
				case <-batched:
				case <-time.After(10 * time.Second):
					t.Fatal("no batch 10 s after the queue was half full")
				}
			}
			b.Close()
			select {
			case <-returned:
			case <-time.After(10 * time.Second):
				t.Fatal("Receive still pausing 10 s after Close")
			}
			if len(got) != n+1 {
				t.Fatalf("received %d events, want %d (dropped %d)", len(got), n+1, s.Dropped())
			}
			for i, id := range got {
				if id != i {
					t.Fatalf("event %d has id %d: order lost", i, id)
				}
			}
		})
	}
}
