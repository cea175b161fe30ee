package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/proxy/internal/reqctx"
)

type countCancel struct{ n atomic.Int32 }

func (c *countCancel) Cancelled() { c.n.Add(1) }

// TestOutgoingContextDerived: contexts derived from an outgoing request's
// context (the upstream handshake's timeout, say) are cancelled with the
// request without a goroutine each, and its upstream watch takes the fast
// path.
func TestOutgoingContextDerived(t *testing.T) {
	for _, traced := range []bool{false, true} {
		t.Run(map[bool]string{false: "h1.Transport", true: "http.Transport"}[traced], func(t *testing.T) {
			testOutgoingContextDerived(t, traced)
		})
	}
}

func testOutgoingContextDerived(t *testing.T, traced bool) {
	rc := reqctx.New(context.Background())
	r := httptest.NewRequest(http.MethodGet, "https://example.com/", nil).WithContext(rc)
	x := &exchange{}
	out := x.outgoing(r, traced)
	goroutines := runtime.NumGoroutine()
	var derived []context.Context
	for range 10 {
		ctx, cancel := context.WithTimeout(out.Context(), time.Hour)
		defer cancel()
		derived = append(derived, ctx)
	}
	if n := runtime.NumGoroutine() - goroutines; n > 0 {
		t.Errorf("%d goroutines for 10 contexts derived from the outgoing request's", n)
	}
	if w := reqctx.OnCancel(out.Context(), &countCancel{}); w.Context() != rc {
		t.Error("the outgoing request's context did not take the fast path")
	}
	rc.Cancel()
	for i, ctx := range derived {
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("derived context %d not done after the request's cancel", i)
		}
	}
	switch trace := httptrace.ContextClientTrace(out.Context()); {
	case traced && trace != &x.trace:
		t.Error("the outgoing request's context lost its client trace")
	case !traced && out.Context() != rc:
		t.Error("the outgoing request to h1.Transport has a context of its own, not the request's")
	}
}
