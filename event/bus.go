package event

import (
	"sync"
	"sync/atomic"
	"time"
)

// Bus fans published events out to subscribers (the audit log, telemetry,
// the live view, the session summary).
//
// Who may block whom: Publish never waits for a lossy subscriber; when its
// queue is full the event is dropped for that subscriber and counted. A
// Lossless subscriber (the audit log) is never dropped from: Publish waits
// for room in its queue, so a slow audit log slows the data path rather than
// lose an entry. Every subscriber must therefore read its channel until it is
// closed.
//
// A Bus is safe for concurrent use. Events are delivered to each subscriber
// in the order Publish calls returned for one goroutine; calls from different
// goroutines are not ordered.
type Bus struct {
	mu     sync.RWMutex
	subs   []*Subscription
	closed bool
}

// NewBus returns an empty, open Bus.
func NewBus() *Bus { return &Bus{} }

// SubscribeOptions configures a subscription.
type SubscribeOptions struct {
	// Queue is the channel's capacity; 1024 when zero.
	Queue int
	// Lossless makes Publish wait instead of dropping when the queue is
	// full. Only the audit log should ask for this.
	Lossless bool
}

// Subscription is one subscriber's queue.
type Subscription struct {
	name     string
	ch       chan *Event
	lossless bool
	dropped  atomic.Uint64
	// nudge ends Receive's pause early once the queue is half full, so
	// that a burst neither waits on a Lossless subscriber's pause nor
	// overflows a lossy one's queue.
	nudge chan struct{}
}

// Name returns the name given to Subscribe.
func (s *Subscription) Name() string { return s.name }

// Events returns the channel the subscriber reads. It is closed by
// Bus.Close or Bus.Unsubscribe.
func (s *Subscription) Events() <-chan *Event { return s.ch }

// Receive calls each with every event, in order, until the channel is
// closed, and returns then. It wakes for an event, takes every event queued
// behind it, calls batch (when not nil), then pauses before it waits again:
// the events of a busy moment queue up during the pause instead of waking
// the subscriber, and a thread to run it, one by one (one request at a
// time, a wake per request and subscriber cost a tenth of the proxy's CPU
// per request). The pause lasts pause, or until the queue is half full: a
// burst is taken at once rather than left to block the publishers of a
// Lossless subscriber or overflow a lossy one. An event waits at most pause
// plus the batch before it. Closing the channel ends the pause too: the
// subscriber takes what is left and returns.
func (s *Subscription) Receive(pause time.Duration, each func(*Event), batch func()) {
	t := time.NewTimer(pause)
	t.Stop()
	for {
		e, open := <-s.ch
	drain:
		for open {
			each(e)
			select {
			case e, open = <-s.ch:
			default:
				break drain
			}
		}
		if batch != nil {
			batch()
		}
		if !open {
			return
		}
		t.Reset(pause)
		select {
		case <-t.C:
		case <-s.nudge:
			t.Stop()
		}
	}
}

// Dropped returns how many events this lossy subscriber missed because its
// queue was full.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Subscribe adds a subscriber. Subscribing to a closed Bus returns a
// subscription whose channel is already closed.
func (b *Bus) Subscribe(name string, opts SubscribeOptions) *Subscription {
	if opts.Queue <= 0 {
		opts.Queue = 1024
	}
	s := &Subscription{
		name:     name,
		ch:       make(chan *Event, opts.Queue),
		lossless: opts.Lossless,
		nudge:    make(chan struct{}, 1),
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		close(s.ch)
		return s
	}
	b.subs = append(b.subs, s)
	return s
}

// Unsubscribe removes s and closes its channel. The subscriber must keep
// reading until then.
func (b *Bus) Unsubscribe(s *Subscription) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, v := range b.subs {
		if v == s {
			b.subs = append(b.subs[:i:i], b.subs[i+1:]...)
			close(s.ch)
			s.wake()
			return
		}
	}
}

// Publish delivers e to every subscriber. e must not be modified afterwards.
// Publishing to a closed Bus does nothing.
func (b *Bus) Publish(e *Event) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return
	}
	for _, s := range b.subs {
		if s.lossless {
			s.ch <- e
		} else {
			select {
			case s.ch <- e:
			default:
				s.dropped.Add(1)
				continue
			}
		}
		if len(s.ch) >= cap(s.ch)/2 {
			s.wake()
		}
	}
}

// wake ends the subscriber's pause, or its next one.
func (s *Subscription) wake() {
	select {
	case s.nudge <- struct{}{}:
	default:
	}
}

// Close closes every subscriber's channel once the events already published
// are queued; later Publish calls do nothing. Close is idempotent.
func (b *Bus) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for _, s := range b.subs {
		close(s.ch)
		s.wake()
	}
	b.subs = nil
}
