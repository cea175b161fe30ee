package reqctx

import (
	"context"
	"errors"
	"net/http/httptrace"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

type countCancel struct{ n atomic.Int32 }

func (c *countCancel) Cancelled() { c.n.Add(1) }

type ctxKey struct{}

// TestReqContext: a reqContext behaves as context.WithCancel does, for
// itself and for contexts derived from it, without a goroutine for each.
func TestReqContext(t *testing.T) {
	parent := context.WithValue(context.Background(), ctxKey{}, "tunnel")
	c := New(parent)
	if c.Err() != nil || c.Value(ctxKey{}) != "tunnel" {
		t.Fatalf("fresh: Err %v, Value %v", c.Err(), c.Value(ctxKey{}))
	}
	if _, ok := c.Deadline(); ok {
		t.Error("a deadline from nowhere")
	}
	goroutines := runtime.NumGoroutine()
	derived, cancelDerived := context.WithCancel(c)
	defer cancelDerived()
	timed, cancelTimed := context.WithTimeout(c, time.Hour)
	defer cancelTimed()
	ran := make(chan struct{})
	stopped := context.AfterFunc(c, func() { t.Error("a stopped AfterFunc ran") })
	context.AfterFunc(c, func() { close(ran) })
	if !stopped() {
		t.Error("stop of a pending AfterFunc said false")
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Errorf("%d goroutines for derived contexts, want none (%d before)", n-goroutines, goroutines)
	}
	select {
	case <-c.Done():
		t.Fatal("done before the cancel")
	case <-derived.Done():
		t.Fatal("derived done before the cancel")
	default:
	}
	c.Cancel()
	c.Cancel() // again: nothing
	for name, ctx := range map[string]context.Context{"itself": c, "WithCancel": derived, "WithTimeout": timed} {
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: not done after the cancel", name)
		}
		if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(context.Cause(ctx), context.Canceled) {
			t.Errorf("%s: Err %v, Cause %v, want context.Canceled", name, ctx.Err(), context.Cause(ctx))
		}
	}
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("AfterFunc did not run at the cancel")
	}
	late := make(chan struct{})
	if context.AfterFunc(c, func() { close(late) })() {
		t.Error("stop of an AfterFunc registered after the cancel said true")
	}
	<-late

	// Cancelled before anyone asked for Done: Done is closed all the same.
	c2 := New(parent)
	c2.Cancel()
	select {
	case <-c2.Done():
	default:
		t.Error("Done not closed after a cancel that came first")
	}
}

// TestOnCancel: the hook runs once at the cancel unless stopped, and a
// context derived with a cancel of its own is watched for that cancel
// too (it must not take the reqContext's fast path).
func TestOnCancel(t *testing.T) {
	t.Run("reqContext", func(t *testing.T) {
		c := New(context.Background())
		// As roundTrip sends it: with a client trace, a value over c.
		ctx := httptrace.WithClientTrace(c, &httptrace.ClientTrace{})
		var stoppedX, firedX countCancel
		w1 := OnCancel(ctx, &stoppedX)
		w2 := OnCancel(ctx, &firedX)
		if w1.rc == nil || w2.rc == nil {
			t.Fatal("a value over a reqContext did not take the fast path")
		}
		if !w1.Stop() {
			t.Error("Stop of a pending watch said false")
		}
		c.Cancel()
		if firedX.n.Load() != 1 || stoppedX.n.Load() != 0 {
			t.Errorf("hooks ran %d and %d times (stopped one), want 1 and 0", firedX.n.Load(), stoppedX.n.Load())
		}
		if w2.Stop() {
			t.Error("Stop of a watch that fired said true")
		}
		var after countCancel
		if OnCancel(ctx, &after).Stop() || after.n.Load() != 1 {
			t.Errorf("a watch of a cancelled context: ran %d times, want at once", after.n.Load())
		}
	})
	t.Run("derived with its own cancel", func(t *testing.T) {
		c := New(context.Background())
		derived, cancel := context.WithCancel(c)
		var x countCancel
		w := OnCancel(derived, &x)
		if w.rc != nil {
			t.Fatal("a derived cancellable context took the reqContext's fast path")
		}
		cancel()
		deadline := time.Now().Add(5 * time.Second)
		for x.n.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if x.n.Load() != 1 {
			t.Errorf("the derived context's own cancel ran the hook %d times, want 1", x.n.Load())
		}
	})
	t.Run("other context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var x countCancel
		w := OnCancel(ctx, &x)
		cancel()
		deadline := time.Now().Add(5 * time.Second)
		for x.n.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if x.n.Load() != 1 || w.Stop() {
			t.Errorf("hook ran %d times, want 1, and Stop false after", x.n.Load())
		}
	})
}

// TestOnCancelAllocs: a request's context and its upstream watch cost one
// allocation (the context) and a channel, where context.WithCancel and
// context.AfterFunc cost seven and a map.
func TestOnCancelAllocs(t *testing.T) {
	parent := context.WithValue(context.Background(), ctxKey{}, 1)
	var x countCancel
	n := testing.AllocsPerRun(100, func() {
		c := New(parent)
		OnCancel(c, &x).Stop()
		c.Cancel()
	})
	if n > 1 {
		t.Errorf("%v allocations per request context and watch, want 1, the context's", n)
	}
}

func BenchmarkRequestContext(b *testing.B) {
	parent := context.WithValue(context.Background(), ctxKey{}, 1)
	var trace httptrace.ClientTrace
	b.Run("context", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := context.WithCancel(parent)
			stop := context.AfterFunc(httptrace.WithClientTrace(ctx, &trace), func() {})
			stop()
			cancel()
		}
	})
	b.Run("reqContext", func(b *testing.B) {
		var x countCancel
		b.ReportAllocs()
		for b.Loop() {
			c := New(parent)
			OnCancel(httptrace.WithClientTrace(c, &trace), &x).Stop()
			c.Cancel()
		}
	})
}
