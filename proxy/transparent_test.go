package proxy

import (
	"bufio"
	stdtls "crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/policy"
)

// transparentEnv serves a transparent listener whose origins come from a
// table the test fills: what the kernel's redirection would report.
type transparentEnv struct {
	*env
	addr    string
	origins map[netip.AddrPort]Tunnel // keyed by the client's local address
	done    chan error
}

func newTransparentEnv(t *testing.T, o envOptions) *transparentEnv {
	e := &transparentEnv{env: newEnv(t, o), origins: map[netip.AddrPort]Tunnel{}, done: make(chan error, 1)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	var mu = &e.namesMu
	go func() {
		e.done <- e.p.ServeTransparent(ln, OriginFinderFunc(func(client netip.AddrPort) (Tunnel, error) {
			// The test registers a client's origin once its dial returns,
			// which may be after the accept: wait for it a little.
			for range 100 {
				mu.Lock()
				tun, ok := e.origins[client]
				mu.Unlock()
				if ok {
					return tun, nil
				}
				time.Sleep(10 * time.Millisecond)
			}
			return Tunnel{}, errors.New("no redirect record")
		}))
	}()
	t.Cleanup(func() {
		e.p.Close()
		select {
		case err := <-e.done:
			if err != nil {
				t.Errorf("ServeTransparent returned %v after Close", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("ServeTransparent did not return after Close")
		}
	})
	return e
}

// dial connects to the transparent listener as a redirected client whose
// original destination was dst.
func (e *transparentEnv) dial(t *testing.T, dst netip.AddrPort, register bool) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if register {
		local := c.LocalAddr().(*net.TCPAddr).AddrPort()
		e.namesMu.Lock()
		e.origins[local] = Tunnel{Session: testSession, Dst: dst, Process: &event.Process{PID: 4242}}
		e.namesMu.Unlock()
	}
	return c
}

// get does one HTTPS GET over c, as a client that believes it talks to
// name at dst.
func (e *transparentEnv) get(t *testing.T, c net.Conn, name string, dst netip.AddrPort) (int, string) {
	t.Helper()
	tc := stdtls.Client(c, &stdtls.Config{RootCAs: e.caPool, ServerName: name})
	req, _ := http.NewRequest("GET", "https://"+name+":"+itoa(dst.Port())+"/t", nil)
	if err := req.Write(tc); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestTransparentIntercepts(t *testing.T) {
	e := newTransparentEnv(t, envOptions{})
	up := e.upstream(upstream.Options{Name: "api.example.test", CA: e.upCA})
	c := e.dial(t, up.Addr, true)
	status, body := e.get(t, c, "api.example.test", up.Addr)
	if status != 200 || !strings.Contains(body, "hello from api.example.test") {
		t.Fatalf("got %d %q", status, body)
	}
	reqs := up.Requests()
	if len(reqs) != 1 || reqs[0].ServerName != "api.example.test" {
		t.Fatalf("upstream received %+v", reqs)
	}
	ev := e.rec.wait(t, "transparent connect", func(ev *event.Event) bool {
		return ev.Kind == event.KindConnect && ev.Connect.Via == "transparent"
	})
	if ev.Session != testSession || ev.Connect.Dst != up.Addr || ev.Process == nil || ev.Process.PID != 4242 || !ev.Verdict.Allowed() {
		t.Errorf("connect event %+v %+v", ev, ev.Connect)
	}
	e.rec.wait(t, "http", func(ev *event.Event) bool {
		return ev.Kind == event.KindHTTP && ev.HTTP.Status == 200 && strings.HasPrefix(ev.HTTP.URL, "https://api.example.test:")
	})
}

func TestTransparentDeniedDestination(t *testing.T) {
	e := newTransparentEnv(t, envOptions{deny: []string{"127.0.0.2"}})
	up := e.upstream(upstream.Options{Name: "evil.example.test", CA: e.upCA})
	c := e.dial(t, up.Addr, true)
	status, body := e.get(t, c, "evil.example.test", up.Addr)
	if status != http.StatusForbidden || !strings.Contains(body, policy.RuleDenyHosts) {
		t.Fatalf("got %d %q, want 403 naming the rule", status, body)
	}
	if n := len(up.Requests()); n != 0 {
		t.Errorf("denied upstream received %d requests", n)
	}
}

func TestTransparentUnknownOrigin(t *testing.T) {
	e := newTransparentEnv(t, envOptions{})
	up := e.upstream(upstream.Options{Name: "api.example.test", CA: e.upCA})
	c := e.dial(t, up.Addr, false)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("a connection without an origin got %d bytes", n)
	}
	ev := e.rec.wait(t, "refusal", func(ev *event.Event) bool {
		return ev.Kind == event.KindConnect && ev.Verdict.Rule == ruleNoOrigin
	})
	if ev.Verdict.Allowed() || ev.Session != "" {
		t.Errorf("refusal event %+v", ev)
	}
	if n := len(up.Requests()); n != 0 {
		t.Errorf("upstream received %d requests", n)
	}
}

func TestTransparentUnspecifiedDestination(t *testing.T) {
	e := newTransparentEnv(t, envOptions{})
	c := e.dial(t, netip.MustParseAddrPort("0.0.0.0:443"), true)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	// Nothing to answer in: a ClientHello is met with a 403 tunnel, so
	// speak plain HTTP.
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("status %d, want 403", resp.StatusCode)
	}
}

// TLS to a passthrough host is not intercepted: the client sees the
// upstream's own certificate, and the tls event says so.
func TestPassthroughHost(t *testing.T) {
	e := newEnv(t, envOptions{passthrough: func(host string, _ netip.Addr) bool { return host == "pinned.example.test" }})
	pinned := e.upstream(upstream.Options{Name: "pinned.example.test", CA: e.upCA})
	other := e.upstream(upstream.Options{Name: "api.example.test", CA: e.upCA, Addr: "127.0.0.3:0"})
	get := func(u string, roots *x509.CertPool) error {
		c := &http.Client{Transport: &http.Transport{
			Proxy:           http.ProxyURL(e.proxyURL(proxyUser, testToken)),
			TLSClientConfig: &stdtls.Config{RootCAs: roots},
		}}
		resp, err := c.Get(u)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	// Trusting only the upstream's CA works for the pinned host alone.
	if err := get(pinned.URL+"/", e.upCA.Pool); err != nil {
		t.Fatalf("pinned host through passthrough: %v", err)
	}
	if err := get(other.URL+"/", e.upCA.Pool); err == nil {
		t.Fatal("an intercepted host verified against the upstream's CA")
	}
	if reqs := pinned.Requests(); len(reqs) != 1 || reqs[0].ServerName != "pinned.example.test" {
		t.Errorf("pinned upstream received %+v", reqs)
	}
	ev := e.rec.wait(t, "tls event", func(ev *event.Event) bool {
		return ev.Kind == event.KindTLS && ev.TLS.ServerName == "pinned.example.test"
	})
	if ev.TLS.Intercepted || !ev.Verdict.Allowed() {
		t.Errorf("tls event %+v, want allowed and not intercepted", ev.TLS)
	}
}

// An address answers for many names, and the name a session (or the
// process) last looked it up as is no connection's name: each connection
// is named by its own SNI, or its plain HTTP request's Host when the
// session resolved that name to the address; the remembered name only
// stands for a connection that names nothing. SNI and Host must agree.
func TestTransparentConnectionNamesItself(t *testing.T) {
	const api, denied = "api.example.test", "denied.example.test"
	var shared netip.Addr // the address both names resolve to
	e := newTransparentEnv(t, envOptions{deny: []string{denied}, tune: func(o *Options) {
		o.Names = ResolverMemoryFunc(func(session, host string, addr netip.Addr) bool {
			return session == testSession && (host == api || host == denied) && addr == shared
		})
	}})
	tlsUp := e.upstream(upstream.Options{Name: api, CA: e.upCA, Addr: "127.0.28.2:0"})
	plainUp := e.upstream(upstream.Options{Name: "plain.example.test", Addr: "127.0.28.2:0"})
	shared = tlsUp.Addr.Addr()
	// Every connection comes from a process whose last lookup of the
	// address was the denied name.
	dial := func(t *testing.T, dst netip.AddrPort) net.Conn {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		e.namesMu.Lock()
		e.origins[c.LocalAddr().(*net.TCPAddr).AddrPort()] = Tunnel{Session: testSession, Host: denied, Dst: dst, Process: &event.Process{PID: 4343}}
		e.namesMu.Unlock()
		return c
	}
	plainGet := func(t *testing.T, c net.Conn, host string) int {
		io.WriteString(c, "GET /plain HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	plainPort := itoa(plainUp.Addr.Port())
	tests := []struct {
		name        string
		do          func(t *testing.T) int
		status      int
		connectHost string
		allowed     bool
	}{
		{"TLS named by its SNI", func(t *testing.T) int {
			status, _ := e.get(t, dial(t, tlsUp.Addr), api, tlsUp.Addr)
			return status
		}, 200, api, true},
		{"TLS to the denied name", func(t *testing.T) int {
			status, _ := e.get(t, dial(t, tlsUp.Addr), denied, tlsUp.Addr)
			return status
		}, http.StatusForbidden, denied, false},
		{"plain HTTP named by its Host", func(t *testing.T) int {
			return plainGet(t, dial(t, plainUp.Addr), api+":"+plainPort)
		}, 200, api, true},
		{"plain HTTP to the address", func(t *testing.T) int {
			return plainGet(t, dial(t, plainUp.Addr), plainUp.Addr.String())
		}, 200, "", true},
		{"plain HTTP to a name not resolved to the address", func(t *testing.T) int {
			return plainGet(t, dial(t, plainUp.Addr), "other.example.test:"+plainPort)
		}, http.StatusForbidden, denied, false},
		{"a connection that names nothing: the remembered name", func(t *testing.T) int {
			c := dial(t, plainUp.Addr)
			io.WriteString(c, "SSH-2.0-OpenSSH_9.6\r\n")
			if _, err := c.Read(make([]byte, 1)); err == nil {
				t.Error("a denied connection was passed through")
			}
			return 0
		}, 0, denied, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(e.rec.kinds(event.KindConnect))
			if got := tt.do(t); got != tt.status {
				t.Errorf("status %d, want %d", got, tt.status)
			}
			// The connect event is published before anything is answered.
			conns := e.rec.kinds(event.KindConnect)
			if len(conns) != before+1 {
				t.Fatalf("%d connect events, want 1", len(conns)-before)
			}
			if ev := conns[before]; ev.Connect.Host != tt.connectHost || ev.Verdict.Allowed() != tt.allowed || ev.Process.PID != 4343 {
				t.Errorf("connect event: host %q, verdict %v, process %+v; want host %q, allowed %v", ev.Connect.Host, ev.Verdict, ev.Process, tt.connectHost, tt.allowed)
			}
		})
	}
	// Domain fronting stays refused: a request for another name inside a
	// tunnel named by its SNI.
	c := dial(t, tlsUp.Addr)
	tc := stdtls.Client(c, &stdtls.Config{RootCAs: e.caPool, ServerName: api, NextProtos: []string{"http/1.1"}})
	io.WriteString(tc, "GET /fronted HTTP/1.1\r\nHost: "+denied+":"+itoa(tlsUp.Addr.Port())+"\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("fronted request: %d, want 421", res.StatusCode)
	}
	for _, r := range append(tlsUp.Requests(), plainUp.Requests()...) {
		if r.Path == "/fronted" || r.Host != api+":"+itoa(tlsUp.Addr.Port()) && r.Host != api+":"+plainPort && r.Host != plainUp.Addr.String() {
			t.Errorf("upstream received %s for %s", r.Path, r.Host)
		}
	}
}

// A transparent client over TCP gets an origin's Alt-Svc with its h3
// alternatives when the session's QUIC comes to the proxy too
// (QUICClients), and without them when it does not (QUIC refused or let
// through unmediated), as an explicit-mode client does.
func TestTransparentAltSvcH3(t *testing.T) {
	const altSvc = `h3=":443"; ma=60, h2=":443"`
	for _, tc := range []struct {
		quicClients bool
		want        []string
	}{
		{true, []string{altSvc}},
		{false, []string{`h2=":443"`}},
	} {
		t.Run(fmt.Sprintf("QUICClients=%v", tc.quicClients), func(t *testing.T) {
			e := newTransparentEnv(t, envOptions{tune: func(o *Options) { o.QUICClients = tc.quicClients }})
			up := e.upstream(upstream.Options{Name: "api.example.test", CA: e.upCA, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Alt-Svc", altSvc)
				io.WriteString(w, "ok")
			})})
			c := e.dial(t, up.Addr, true)
			tc2 := stdtls.Client(c, &stdtls.Config{RootCAs: e.caPool, ServerName: "api.example.test"})
			req, _ := http.NewRequest("GET", "https://api.example.test:"+itoa(up.Addr.Port())+"/", nil)
			if err := req.Write(tc2); err != nil {
				t.Fatal(err)
			}
			res, err := http.ReadResponse(bufio.NewReader(tc2), req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if diff := cmp.Diff(tc.want, res.Header.Values("Alt-Svc")); diff != "" {
				t.Errorf("client's Alt-Svc (-want +got):\n%s", diff)
			}
		})
	}
}
