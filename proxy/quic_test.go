package proxy

import (
	"context"
	stdtls "crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// quicEnv serves ServeQUIC on 127.0.42.1, every client's origin being
// the Tunnel the test sets: what the kernel's redirection would report.
type quicEnv struct {
	*env
	pc     net.PacketConn
	mu     sync.Mutex
	origin Tunnel
	err    error // the OriginFinder's answer when set
	done   chan error
}

func newQUICEnv(t *testing.T, o envOptions) *quicEnv {
	t.Helper()
	e := &quicEnv{env: newEnv(t, o), done: make(chan error, 1)}
	pc, err := net.ListenPacket("udp", "127.0.42.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.pc = pc
	go func() {
		e.done <- e.p.ServeQUIC(pc, OriginFinderFunc(func(netip.AddrPort) (Tunnel, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.origin, e.err
		}))
	}()
	t.Cleanup(func() {
		e.p.Close()
		select {
		case err := <-e.done:
			if err != nil {
				t.Errorf("ServeQUIC returned %v after Close", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("ServeQUIC did not return after Close")
		}
	})
	return e
}

// redirect makes every client connection's origin dst (named name by the
// process's own lookup, as the kernel's record would say).
func (e *quicEnv) redirect(dst netip.AddrPort) {
	e.mu.Lock()
	e.origin = Tunnel{Session: testSession, Dst: dst, Process: &event.Process{PID: 4242}}
	e.mu.Unlock()
}

// client returns an HTTP/3 client whose every connection goes to the
// proxy's QUIC listener (as the kernel would send it) and trusts
// Chaperone's CA.
func (e *quicEnv) client(t *testing.T) *http.Client {
	t.Helper()
	proxy := e.pc.LocalAddr().String()
	tr := &http3.Transport{
		TLSClientConfig: &stdtls.Config{RootCAs: e.caPool},
		Dial: func(ctx context.Context, _ string, tc *stdtls.Config, qc *quic.Config) (*quic.Conn, error) {
			return quic.DialAddr(ctx, proxy, tc, qc)
		},
	}
	t.Cleanup(func() { tr.Close() })
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, string, error) {
	t.Helper()
	res, err := c.Get(url)
	if err != nil {
		return nil, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res, string(b), err
}

// An HTTP/3 request through ServeQUIC reaches the origin the connection
// was redirected from, and is recorded as over TCP: connect (udp,
// transparent), tls, then http with proto HTTP/3.0.
func TestQUICAllowed(t *testing.T) {
	e := newQUICEnv(t, envOptions{})
	up := e.upstream(upstream.Options{Name: "api.example.test", Addr: "127.0.42.2:0", CA: e.upCA})
	e.redirect(up.Addr)
	res, body, err := get(t, e.client(t), "https://"+hostPort(up)+"/hello")
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Proto != "HTTP/3.0" || !strings.HasPrefix(body, "hello from api.example.test") {
		t.Fatalf("got %d %s %q, want 200 over HTTP/3.0 from the origin", res.StatusCode, res.Proto, body)
	}
	h := e.rec.wait(t, "http", func(ev *event.Event) bool { return ev.Kind == event.KindHTTP })
	if h.HTTP.Proto != "HTTP/3.0" || h.HTTP.Status != 200 || !h.Verdict.Allowed() || h.Session != testSession {
		t.Errorf("http event: proto %q status %d verdict %s session %q", h.HTTP.Proto, h.HTTP.Status, h.Verdict, h.Session)
	}
	c := e.rec.wait(t, "connect", func(ev *event.Event) bool { return ev.Kind == event.KindConnect })
	want := event.Connect{Dst: up.Addr, Host: "api.example.test", Port: up.Addr.Port(), Transport: event.UDP, Via: "transparent"}
	if *c.Connect != want || !c.Verdict.Allowed() {
		t.Errorf("connect event %+v %s, want %+v allowed", *c.Connect, c.Verdict, want)
	}
	tl := e.rec.wait(t, "tls", func(ev *event.Event) bool { return ev.Kind == event.KindTLS })
	if tl.TLS.ServerName != "api.example.test" || !tl.TLS.Intercepted || tl.TLS.Version != "1.3" {
		t.Errorf("tls event %+v", *tl.TLS)
	}
}

// A connection whose host the policy denies is closed once its handshake
// is done, and the client's error carries the rule and reason.
func TestQUICDeniedHost(t *testing.T) {
	e := newQUICEnv(t, envOptions{deny: []string{"denied.example.test"}})
	e.redirect(netip.MustParseAddrPort("127.0.42.3:443"))
	_, _, err := get(t, e.client(t), "https://denied.example.test/")
	var ae *quic.ApplicationError
	if !errors.As(err, &ae) || !ae.Remote || !strings.Contains(ae.ErrorMessage, "chaperone: denied by rule") || !strings.Contains(ae.ErrorMessage, "denied.example.test") {
		t.Fatalf("error %v, want a CONNECTION_CLOSE naming the rule and the host", err)
	}
	c := e.rec.wait(t, "connect", func(ev *event.Event) bool { return ev.Kind == event.KindConnect })
	if c.Verdict.Allowed() || c.Connect.Host != "denied.example.test" || c.Connect.Transport != event.UDP {
		t.Errorf("connect event %+v %s, want denied.example.test over udp denied", *c.Connect, c.Verdict)
	}
}

// A client without an origin (not redirected by a session's hooks) is
// refused, with a connect event that says so.
func TestQUICUnknownOrigin(t *testing.T) {
	e := newQUICEnv(t, envOptions{})
	e.mu.Lock()
	e.err = errors.New("no redirect record")
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := quic.DialAddr(ctx, e.pc.LocalAddr().String(), &stdtls.Config{RootCAs: e.caPool, ServerName: "x.test", NextProtos: []string{"h3"}}, nil)
	if err == nil {
		t.Fatal("handshake succeeded without an origin")
	}
	c := e.rec.wait(t, "connect", func(ev *event.Event) bool { return ev.Kind == event.KindConnect })
	if c.Verdict.Rule != ruleNoOrigin || c.Connect.Transport != event.UDP {
		t.Errorf("connect event %+v %s, want rule %s over udp", *c.Connect, c.Verdict, ruleNoOrigin)
	}
}
