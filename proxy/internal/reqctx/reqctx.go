// Package reqctx holds the context of one request the proxy serves: a
// cancel that closes the request's upstream connection without the
// allocations of context.WithCancel.
package reqctx

import (
	"context"
	"slices"
	"sync"
)

// Context is the context of one request read from a tunnel's
// connection: the connection's context (the tunnel; never cancelled by
// itself), cancelled once the request is over or its client went away. It
// is context.WithCancel with a cheaper way to have the request's upstream
// connection closed at the cancel (OnCancel): context.WithCancel and
// context.AfterFunc cost seven allocations and a map a request, the most
// of any step of sending a kept-alive request upstream.
type Context struct {
	context.Context // the connection's

	mu     sync.Mutex
	done   chan struct{} // made by the first Done, or closed (closedChan) at the cancel
	err    error
	hooks  []cancelHook // run at the cancel, in order
	inline [2]cancelHook
	nextID uint64
}

// Canceller is what a hook does at the cancel: close an upstream
// connection. It must not block.
type Canceller interface{ Cancelled() }

type cancelHook struct {
	id uint64
	c  Canceller
	f  func() // AfterFunc's, when c is nil
}

type reqContextKey struct{}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// New returns a request context over parent, the connection's.
func New(parent context.Context) *Context {
	c := &Context{Context: parent}
	c.hooks = c.inline[:0]
	return c
}

func (c *Context) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
	}
	return c.done
}

func (c *Context) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Context) Value(key any) any {
	if key == (reqContextKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// AfterFunc is how the context package has a context derived from c
// cancelled with it (without it, each derived context would cost a
// goroutine). f runs on the goroutine that cancels c: context's own f,
// cancelling the derived context, does not block.
func (c *Context) AfterFunc(f func()) (stop func() bool) {
	id, ok := c.add(cancelHook{f: f})
	if !ok {
		go f()
		return func() bool { return false }
	}
	return func() bool { return c.remove(id) }
}

// Cancel cancels c and runs its hooks; later calls do nothing.
func (c *Context) Cancel() {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = context.Canceled
	if c.done == nil {
		c.done = closedChan
	} else {
		close(c.done)
	}
	hooks := c.hooks
	c.hooks = nil
	c.mu.Unlock()
	for _, h := range hooks {
		if h.c != nil {
			h.c.Cancelled()
		} else {
			h.f()
		}
	}
}

// add registers h; false means c is cancelled already.
func (c *Context) add(h cancelHook) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, false
	}
	c.nextID++
	h.id = c.nextID
	c.hooks = append(c.hooks, h)
	return h.id, true
}

// remove unregisters hook id; false means it has run (or is running).
func (c *Context) remove(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, h := range c.hooks {
		if h.id == id {
			c.hooks = slices.Delete(c.hooks, i, i+1)
			return true
		}
	}
	return false
}

// Values is a context that only adds values to a Context (as
// httptrace.WithClientTrace does) and passes AfterFunc on to it. The
// context package looks for AfterFunc on a derived context's direct parent
// only: without it, each context derived from the values (a handshake's
// timeout, say) would cost a goroutine until it ends.
type Values struct {
	context.Context // the values over rc
	Req             *Context
}

func (c *Values) AfterFunc(f func()) (stop func() bool) { return c.Req.AfterFunc(f) }

// Watch is OnCancel's registration.
type Watch struct {
	rc   *Context
	id   uint64
	stop func() bool // context.AfterFunc's, for any other context
}

// OnCancel has x.Cancelled called once ctx is cancelled, unless the
// watch is stopped first. A Context, or a context that only adds values
// to one, takes it without an allocation; any other context goes through
// context.AfterFunc.
func OnCancel(ctx context.Context, x Canceller) Watch {
	rc, ok := ctx.(*Context) // the request's own: no Done channel to make
	if !ok {
		rc, ok = ctx.Value(reqContextKey{}).(*Context)
		ok = ok && ctx.Done() == rc.Done()
	}
	if ok {
		if id, ok := rc.add(cancelHook{c: x}); ok {
			return Watch{rc: rc, id: id}
		}
		x.Cancelled()
		return Watch{}
	}
	return Watch{stop: context.AfterFunc(ctx, x.Cancelled)}
}

// Context is the request context the watch is registered with, nil when
// it went through context.AfterFunc.
func (w Watch) Context() *Context { return w.rc }

// Stop ends the watch: true if x.Cancelled has not been called and will
// not be, as the stop function of context.AfterFunc.
func (w Watch) Stop() bool {
	switch {
	case w.rc != nil:
		return w.rc.remove(w.id)
	case w.stop != nil:
		return w.stop()
	}
	return false
}
