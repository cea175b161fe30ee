package proxy

import (
	"bufio"
	stdtls "crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/proxy"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/policy"
)

// The addresses of the relay tests (loopback, this package's alone).
const (
	relayIP       = "127.0.0.40" // the relays
	relayIP2      = "127.0.0.41" // a second relay, asked through the first
	relayTargetIP = "127.0.0.42" // allowed targets
	relayCanaryIP = "127.0.0.43" // the denied target
)

// relayCanary is a denied target: it records every connection that reaches it.
type relayCanary struct {
	addr netip.AddrPort
	mu   sync.Mutex
	got  []string
}

func startCanary(t *testing.T) *relayCanary {
	c := &relayCanary{}
	c.addr = upstream.ServeTCP(t, relayCanaryIP+":0", func(conn net.Conn) {
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		b, _ := io.ReadAll(io.LimitReader(conn, 512))
		c.mu.Lock()
		c.got = append(c.got, fmt.Sprintf("%s %q", conn.RemoteAddr(), b))
		c.mu.Unlock()
	})
	return c
}

func (c *relayCanary) received() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got...)
}

// relayWorld is a transparent proxy whose client reaches relays outside
// the session (upstream.Relay, which acts on whatever it is sent), with
// allowed targets behind them and a denied canary.
type relayWorld struct {
	*transparentEnv
	relay  *upstream.Relay
	api    *upstream.Server // HTTPS
	plain  *upstream.Server // plain HTTP
	canary *relayCanary
}

func newRelayWorld(t *testing.T, o envOptions, ro upstream.RelayOptions) *relayWorld {
	t.Helper()
	if o.deny == nil && o.decider == nil {
		o.deny = []string{relayCanaryIP, "canary.relay.test"}
	}
	if o.peekTimeout == 0 {
		o.peekTimeout = 100 * time.Millisecond
	}
	w := &relayWorld{transparentEnv: newTransparentEnv(t, o)}
	w.api = w.upstream(upstream.Options{Name: "api.relay.test", Addr: relayTargetIP + ":0", CA: w.upCA})
	w.plain = w.upstream(upstream.Options{Name: "plain.relay.test", Addr: relayTargetIP + ":0"})
	w.canary = startCanary(t)
	names := map[string]netip.Addr{"api.relay.test": w.api.Addr.Addr(), "plain.relay.test": w.plain.Addr.Addr(),
		"canary.relay.test": w.canary.addr.Addr()}
	if ro.Addr == "" {
		ro.Addr = relayIP + ":0"
	}
	ro.Names = names
	w.relay = startRelay(t, ro)
	return w
}

func startRelay(t *testing.T, o upstream.RelayOptions) *upstream.Relay {
	t.Helper()
	r, err := upstream.StartRelay(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// relayEventFor waits for the connect event of a request for target
// through the relay at relayAddr (any relay when invalid).
func (w *relayWorld) relayEventFor(t *testing.T, host string, port uint16, relayAddr netip.AddrPort) *event.Event {
	t.Helper()
	return w.rec.wait(t, "relayed connect to "+host, func(e *event.Event) bool {
		return e.Kind == event.KindConnect && e.Connect.Via == "relay" && e.Connect.Host == host && e.Connect.Port == port &&
			(!relayAddr.IsValid() || strings.HasSuffix(e.Connect.Relay, "://"+relayAddr.String()))
	})
}

// checkNothingRelayed asserts that the relay was told nothing and the
// canary reached by nobody.
func (w *relayWorld) checkNothingRelayed(t *testing.T, r *upstream.Relay) {
	t.Helper()
	for _, c := range r.Conns() {
		if c.Bytes > 0 {
			t.Errorf("BYPASS: the relay received %d bytes from %s", c.Bytes, c.Remote)
		}
	}
	if reqs := r.Requests(); len(reqs) > 0 {
		t.Errorf("BYPASS: the relay was asked %+v", reqs)
	}
	if got := w.canary.received(); len(got) > 0 {
		t.Errorf("BYPASS: the canary received %q", got)
	}
}

func socks4Bytes(host string, port uint16, user string) []byte {
	b := []byte{4, 1}
	b = binary.BigEndian.AppendUint16(b, port)
	if a, err := netip.ParseAddr(host); err == nil {
		b = append(b, a.AsSlice()...)
		return append(append(b, user...), 0)
	}
	b = append(b, 0, 0, 0, 1)
	b = append(append(b, user...), 0)
	return append(append(b, host...), 0)
}

// A client of the transparent proxy that reaches a relay asks it for the
// canary, in every spelling the relay takes: each is decided on the
// canary, refused in the protocol's own terms, with an event naming the
// process, and the relay is told nothing.
func TestRelayDeniedTarget(t *testing.T) {
	w := newRelayWorld(t, envOptions{}, upstream.RelayOptions{})
	c4 := w.canary.addr
	hp := c4.String()
	port := c4.Port()
	get := "GET /leak HTTP/1.1\r\nHost: " + hp + "\r\n\r\n"
	socks5Req := appendSOCKS5Request(nil, socksCmdConnect, relayDest{host: c4.Addr().String(), addr: c4.Addr(), port: port})
	tests := []struct {
		name   string
		send   string
		silent bool   // wait past the sniffing's timeout before sending
		host   string // the target as decided
		scheme string // the relay's, in the event
		check  func(t *testing.T, br *bufio.Reader, c net.Conn)
	}{
		{name: "connect", send: "CONNECT " + hp + " HTTP/1.1\r\nHost: " + hp + "\r\n\r\n" + get},
		{name: "connect-lowercase", send: "connect " + hp + " HTTP/1.1\r\n\r\n"},
		{name: "connect-two-spaces", send: "CONNECT  " + hp + "  HTTP/1.1\r\n\r\n"},
		{name: "connect-tab", send: "CONNECT\t" + hp + "\tHTTP/1.1\r\n\r\n"},
		{name: "connect-leading-crlf", send: "\r\n\r\nCONNECT " + hp + " HTTP/1.1\r\n\r\n"},
		{name: "connect-lf-only", send: "\nCONNECT " + hp + " HTTP/1.1\n\n"},
		{name: "connect-no-version", send: "CONNECT " + hp + "\r\n\r\n"},
		{name: "connect-silent-first", send: "CONNECT " + hp + " HTTP/1.1\r\n\r\n", silent: true},
		{name: "connect-by-name", send: "CONNECT canary.relay.test:" + itoa(port) + " HTTP/1.1\r\n\r\n", host: "canary.relay.test"},
		{name: "connect-decimal-ip", send: "CONNECT 2130706475:" + itoa(port) + " HTTP/1.1\r\n\r\n"}, // 127.0.0.43
		{name: "absolute", send: "GET http://" + hp + "/leak HTTP/1.1\r\nHost: " + hp + "\r\n\r\n"},
		{name: "absolute-two-spaces", send: "GET  http://" + hp + "/leak HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "absolute-lowercase", send: "get http://" + hp + "/leak HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "absolute-tab", send: "GET\thttp://" + hp + "/leak\tHTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "absolute-leading-crlf", send: "\r\nGET http://" + hp + "/leak HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "absolute-http09", send: "GET http://" + hp + "/leak\r\n"},
		{name: "absolute-silent-first", send: "GET http://" + hp + "/leak HTTP/1.1\r\nHost: x\r\n\r\n", silent: true},
		{name: "absolute-after-a-request", send: "GET / HTTP/1.1\r\nHost: " + "RELAY" + "\r\n\r\n" +
			"GET http://" + hp + "/leak HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "socks5", scheme: "socks5", send: "\x05\x01\x00", check: func(t *testing.T, br *bufio.Reader, c net.Conn) {
			var choice [2]byte
			if _, err := io.ReadFull(br, choice[:]); err != nil || choice != [2]byte{5, 0} {
				t.Fatalf("method choice %x, %v", choice, err)
			}
			c.Write(socks5Req)
			var reply [10]byte
			if _, err := io.ReadFull(br, reply[:]); err != nil || reply[1] != socks5NotAllowed {
				t.Fatalf("reply %x, %v; want code 2 (not allowed by ruleset)", reply, err)
			}
		}},
		{name: "socks5-silent-first", scheme: "socks5", silent: true, send: "\x05\x01\x00" + string(socks5Req), check: func(t *testing.T, br *bufio.Reader, _ net.Conn) {
			var reply [12]byte
			if _, err := io.ReadFull(br, reply[:]); err != nil || reply[3] != socks5NotAllowed {
				t.Fatalf("reply %x, %v; want code 2 (not allowed by ruleset)", reply, err)
			}
		}},
		{name: "socks4", scheme: "socks4", send: string(socks4Bytes(c4.Addr().String(), port, "u"))},
		{name: "socks4a", scheme: "socks4", host: "canary.relay.test", send: string(socks4Bytes("canary.relay.test", port, "u"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			relay := startRelay(t, upstream.RelayOptions{Addr: relayIP + ":0",
				Names: map[string]netip.Addr{"canary.relay.test": c4.Addr()}})
			c := w.dial(t, relay.Addr, true)
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if tt.silent {
				// Past the sniffing's timeout the proxy takes the client
				// for one that lets the server speak first and connects to
				// the relay, telling it nothing.
				waitFor(t, "the proxy to connect to the relay", func() bool { return len(relay.Conns()) > 0 })
			}
			io.WriteString(c, strings.ReplaceAll(tt.send, "RELAY", relay.Addr.String()))
			br := bufio.NewReader(c)
			switch {
			case tt.check != nil:
				tt.check(t, br, c)
			case strings.HasPrefix(tt.name, "socks4"):
				var reply [8]byte
				if _, err := io.ReadFull(br, reply[:]); err != nil || reply[1] != socks4Rejected {
					t.Fatalf("reply %x, %v; want 0x5b", reply, err)
				}
			default:
				if tt.name == "absolute-after-a-request" {
					res, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatal(err)
					}
					io.Copy(io.Discard, res.Body)
				}
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(res.Body)
				if res.StatusCode != http.StatusForbidden || !strings.Contains(string(body), policy.RuleDenyHosts) {
					t.Errorf("got %d %q, want 403 naming the rule", res.StatusCode, body)
				}
			}
			host := tt.host
			if host == "" {
				host = c4.Addr().String()
			}
			scheme := tt.scheme
			if scheme == "" {
				scheme = "http"
			}
			e := w.relayEventFor(t, host, port, relay.Addr)
			want := scheme + "://" + relay.Addr.String()
			if e.Connect.Relay != want || e.Verdict.Allowed() || e.Verdict.Rule != policy.RuleDenyHosts ||
				e.Process == nil || e.Process.PID != 4242 || e.Session != testSession {
				t.Errorf("event %+v %+v, want denied by deny_hosts, relay %s, pid 4242", e, *e.Connect, want)
			}
			if host == c4.Addr().String() && e.Connect.Dst != c4 {
				t.Errorf("event's dst %s, want %s", e.Connect.Dst, c4)
			}
			if tt.name == "absolute-after-a-request" {
				// The first request was the relay's own, as a server.
				if rr := relay.Requests(); len(rr) != 1 || rr[0].Target != "/" {
					t.Errorf("BYPASS: the relay was asked %+v", rr)
				}
				if got := w.canary.received(); len(got) > 0 {
					t.Errorf("BYPASS: the canary received %q", got)
				}
				return
			}
			w.checkNothingRelayed(t, relay)
		})
	}
}

// waitFor polls cond until it holds, for 10 seconds at most.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// httpsThrough does TLS for name over c, trusting Chaperone's CA only
// (so the connection was intercepted), and one GET of path.
func (w *relayWorld) httpsThrough(t *testing.T, c net.Conn, name string, port uint16, path string) (int, string) {
	t.Helper()
	tc := stdtls.Client(c, &stdtls.Config{RootCAs: w.caPool, ServerName: name, NextProtos: []string{"http/1.1"}})
	req, _ := http.NewRequest("GET", "https://"+name+":"+itoa(port)+path, nil)
	if err := req.Write(tc); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(tc), req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// An allowed target through each kind of relay: the relay is asked for it
// by the proxy (with the client's credentials for the relay), TLS inside
// is intercepted, and the request is decided and recorded for the target.
func TestRelayAllowedTarget(t *testing.T) {
	w := newRelayWorld(t, envOptions{}, upstream.RelayOptions{User: "relayuser", Password: "relaypass"})
	api := w.api.Addr
	apiHP := "api.relay.test:" + itoa(api.Port())
	tests := []struct {
		name, scheme string
		open         func(t *testing.T, c net.Conn) net.Conn
	}{
		{"connect", "http", func(t *testing.T, c net.Conn) net.Conn {
			io.WriteString(c, "CONNECT "+apiHP+" HTTP/1.1\r\nProxy-Authorization: "+basicAuth("relayuser", "relaypass")+"\r\n\r\n")
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil || res.StatusCode != 200 {
				t.Fatalf("CONNECT: %v %v", res, err)
			}
			return &prefixConn{Conn: c, prefix: buffered(br)}
		}},
		{"connect-odd", "http", func(t *testing.T, c net.Conn) net.Conn {
			io.WriteString(c, "\r\nconnect\t"+apiHP+"  HTTP/1.1\nProxy-Authorization: "+basicAuth("relayuser", "relaypass")+"\n\n")
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil || res.StatusCode != 200 {
				t.Fatalf("CONNECT: %v %v", res, err)
			}
			return &prefixConn{Conn: c, prefix: buffered(br)}
		}},
		{"socks5", "socks5", func(t *testing.T, c net.Conn) net.Conn {
			// golang.org/x/net/proxy's client, not ours.
			d, err := proxy.SOCKS5("tcp", "relay", &proxy.Auth{User: "relayuser", Password: "relaypass"}, connDialer{c})
			if err != nil {
				t.Fatal(err)
			}
			conn, err := d.Dial("tcp", apiHP)
			if err != nil {
				t.Fatalf("SOCKS5: %v", err)
			}
			return conn
		}},
		{"socks4a", "socks4", func(t *testing.T, c net.Conn) net.Conn {
			c.Write(socks4Bytes("api.relay.test", api.Port(), "relayuser"))
			var reply [8]byte
			if _, err := io.ReadFull(c, reply[:]); err != nil || reply[1] != socks4Granted {
				t.Fatalf("SOCKS4a reply %x, %v", reply, err)
			}
			return c
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(w.api.Requests())
			c := w.dial(t, w.relay.Addr, true)
			c.SetDeadline(time.Now().Add(10 * time.Second))
			status, body := w.httpsThrough(t, tt.open(t, c), "api.relay.test", api.Port(), "/"+tt.name)
			if status != 200 || !strings.Contains(body, "hello from api.relay.test") {
				t.Fatalf("got %d %q", status, body)
			}
			reqs := w.api.Requests()
			if len(reqs) != before+1 || reqs[before].Path != "/"+tt.name || reqs[before].ServerName != "api.relay.test" {
				t.Errorf("upstream received %+v", reqs[before:])
			}
			if _, ok := reqs[before].Header["Proxy-Authorization"]; ok {
				t.Error("the relay's credentials reached the target")
			}
			e := w.rec.wait(t, "relayed connect", func(e *event.Event) bool {
				return e.Kind == event.KindConnect && e.Connect.Via == "relay" && strings.HasPrefix(e.Connect.Relay, tt.scheme+"://")
			})
			if want := tt.scheme + "://" + w.relay.Addr.String(); e.Connect.Relay != want || !e.Verdict.Allowed() || e.Process.PID != 4242 {
				t.Errorf("connect event %+v %+v, want allowed through %s", e, *e.Connect, want)
			}
			w.rec.wait(t, "http event", func(e *event.Event) bool {
				return e.Kind == event.KindHTTP && e.HTTP.Status == 200 && e.HTTP.URL == "https://"+apiHP+"/"+tt.name && e.Process.PID == 4242
			})
			w.rec.wait(t, "intercepted tls event", func(e *event.Event) bool {
				return e.Kind == event.KindTLS && e.TLS.ServerName == "api.relay.test" && e.TLS.Intercepted
			})
		})
	}
	rr := w.relay.Requests()
	if len(rr) != len(tests) {
		t.Fatalf("relay asked %d times, want %d: %+v", len(rr), len(tests), rr)
	}
	for _, r := range rr {
		if r.Target != apiHP || !r.Authorized || !r.Opened {
			t.Errorf("relay request %+v, want %s with the client's credentials", r, apiHP)
		}
	}
}

// connDialer is a proxy.Dialer that hands out one connection made before.
type connDialer struct{ c net.Conn }

func (d connDialer) Dial(string, string) (net.Conn, error) { return d.c, nil }

func buffered(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return append([]byte(nil), b...)
}

// Requests in absolute form for another host go to the relay in absolute
// form, decided for their target; a relay's refusal reaches the client.
func TestRelayAbsoluteForm(t *testing.T) {
	w := newRelayWorld(t, envOptions{}, upstream.RelayOptions{User: "relayuser", Password: "relaypass"})
	plainHP := "plain.relay.test:" + itoa(w.plain.Addr.Port())
	c := w.dial(t, w.relay.Addr, true)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	auth := "Proxy-Authorization: " + basicAuth("relayuser", "relaypass") + "\r\n"
	for i, send := range []string{
		"GET http://" + plainHP + "/one HTTP/1.1\r\nHost: " + plainHP + "\r\n" + auth + "\r\n",
		"GET  http://" + plainHP + "/two HTTP/1.1\r\nHost: " + plainHP + "\r\n" + auth + "\r\n", // two spaces: a first request the proxy rewrites
	} {
		if i == 1 {
			c = w.dial(t, w.relay.Addr, true)
			c.SetDeadline(time.Now().Add(10 * time.Second))
			br = bufio.NewReader(c)
		}
		io.WriteString(c, send)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 || !strings.Contains(string(body), "hello from plain.relay.test") {
			t.Fatalf("request %d: %d %q", i, res.StatusCode, body)
		}
	}
	// Kept alive: a second request to the same target is not decided
	// again as a connection, and a wrong password gets the relay's 407.
	io.WriteString(c, "GET http://"+plainHP+"/three HTTP/1.1\r\nHost: "+plainHP+"\r\n"+auth+"\r\n")
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != 200 {
		t.Fatalf("kept-alive request: %v %v", res, err)
	} else {
		io.Copy(io.Discard, res.Body)
	}
	io.WriteString(c, "GET http://"+plainHP+"/four HTTP/1.1\r\nHost: "+plainHP+"\r\nProxy-Authorization: "+basicAuth("relayuser", "wrong")+"\r\n\r\n")
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != http.StatusProxyAuthRequired {
		t.Fatalf("wrong password: %v %v, want 407", res, err)
	}
	var paths []string
	for _, r := range w.plain.Requests() {
		paths = append(paths, r.Path)
		if _, ok := r.Header["Proxy-Authorization"]; ok {
			t.Error("the relay's credentials reached the target")
		}
	}
	if strings.Join(paths, " ") != "/one /two /three" {
		t.Errorf("target received %q", paths)
	}
	for _, r := range w.relay.Requests() {
		if r.Proto != "http-forward" || r.Target != plainHP {
			t.Errorf("relay request %+v, want http-forward of %s", r, plainHP)
		}
	}
	var connects int
	for _, e := range w.rec.kinds(event.KindConnect) {
		if e.Connect.Via == "relay" {
			connects++
			if e.Connect.Host != "plain.relay.test" || !e.Verdict.Allowed() || e.Connect.Relay != "http://"+w.relay.Addr.String() {
				t.Errorf("connect event %+v", *e.Connect)
			}
		}
	}
	if connects != 3 { // one per connection, one for the new credentials
		t.Errorf("%d relayed connect events, want 3", connects)
	}
	w.rec.wait(t, "http event", func(e *event.Event) bool {
		return e.Kind == event.KindHTTP && e.HTTP.URL == "http://"+plainHP+"/three" && e.HTTP.Status == 200
	})
}

// A relay's refusal of what the proxy asked for reaches the client: 407
// with the relay's challenge.
func TestRelayRefusesCredentials(t *testing.T) {
	w := newRelayWorld(t, envOptions{}, upstream.RelayOptions{User: "relayuser", Password: "relaypass"})
	c := w.dial(t, w.relay.Addr, true)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "CONNECT api.relay.test:"+itoa(w.api.Addr.Port())+" HTTP/1.1\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil || res.StatusCode != http.StatusProxyAuthRequired || res.Header.Get("Proxy-Authenticate") == "" {
		t.Fatalf("got %v %v, want 407 with a challenge", res, err)
	}
}

// A policy may refuse relays outright.
func TestRelayDeniedByPolicy(t *testing.T) {
	pol, err := policy.Parse("test", []byte(`
rules:
  - name: no-relays
    on: connect
    when: relay != ""
    action: deny
    reason: connections through relays are not allowed
default: allow
`))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.NewEngine(pol, policy.EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := newRelayWorld(t, envOptions{decider: eng}, upstream.RelayOptions{})
	c := w.dial(t, w.relay.Addr, true)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "CONNECT api.relay.test:"+itoa(w.api.Addr.Port())+" HTTP/1.1\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "no-relays") {
		t.Errorf("got %d %q, want 403 by no-relays", res.StatusCode, body)
	}
	w.checkNothingRelayed(t, w.relay)
	// The connection to the relay itself was allowed: it is no relay's.
	w.rec.wait(t, "connect to the relay", func(e *event.Event) bool {
		return e.Kind == event.KindConnect && e.Connect.Via == "transparent" && e.Connect.Dst == w.relay.Addr && e.Verdict.Allowed()
	})
}

// A CONNECT inside a relayed tunnel is a relay asked through a relay: it
// is decided in turn, and the target reached through both.
func TestRelayNested(t *testing.T) {
	w := newRelayWorld(t, envOptions{}, upstream.RelayOptions{})
	inner := startRelay(t, upstream.RelayOptions{Addr: relayIP2 + ":0",
		Names: map[string]netip.Addr{"api.relay.test": w.api.Addr.Addr(), "canary.relay.test": w.canary.addr.Addr()}})
	connect := func(t *testing.T, c net.Conn, br *bufio.Reader, target string) int {
		t.Helper()
		io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\n\r\n")
		res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode
	}
	t.Run("allowed", func(t *testing.T) {
		c := w.dial(t, w.relay.Addr, true)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		if s := connect(t, c, br, inner.Addr.String()); s != 200 {
			t.Fatalf("CONNECT to the inner relay: %d", s)
		}
		apiHP := "api.relay.test:" + itoa(w.api.Addr.Port())
		if s := connect(t, c, br, apiHP); s != 200 {
			t.Fatalf("CONNECT through both: %d", s)
		}
		status, body := w.httpsThrough(t, &prefixConn{Conn: c, prefix: buffered(br)}, "api.relay.test", w.api.Addr.Port(), "/nested")
		if status != 200 || !strings.Contains(body, "hello from api.relay.test") {
			t.Fatalf("got %d %q", status, body)
		}
		e := w.relayEventFor(t, "api.relay.test", w.api.Addr.Port(), inner.Addr)
		if e.Connect.Relay != "http://"+inner.Addr.String() || !e.Verdict.Allowed() {
			t.Errorf("inner connect event %+v", *e.Connect)
		}
		if rr := inner.Requests(); len(rr) != 1 || rr[0].Target != apiHP {
			t.Errorf("inner relay asked %+v", rr)
		}
	})
	t.Run("denied", func(t *testing.T) {
		before := len(inner.Requests())
		c := w.dial(t, w.relay.Addr, true)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		if s := connect(t, c, br, inner.Addr.String()); s != 200 {
			t.Fatalf("CONNECT to the inner relay: %d", s)
		}
		if s := connect(t, c, br, "canary.relay.test:"+itoa(w.canary.addr.Port())); s != http.StatusForbidden {
			t.Fatalf("CONNECT to the canary through both: %d, want 403", s)
		}
		if rr := inner.Requests(); len(rr) != before {
			t.Errorf("BYPASS: the inner relay was asked %+v", rr[before:])
		}
		if got := w.canary.received(); len(got) > 0 {
			t.Errorf("BYPASS: the canary received %q", got)
		}
	})
}

// Pooled upstream connections do not cross between a relayed tunnel and
// a direct one to the same address: each request goes the way its tunnel
// does.
func TestRelayPoolSeparate(t *testing.T) {
	w := newRelayWorld(t, envOptions{}, upstream.RelayOptions{})
	plain := w.plain.Addr
	direct := func(path string) {
		c := w.dial(t, plain, true)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: "+plain.String()+"\r\n\r\n")
		if res, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || res.StatusCode != 200 {
			t.Fatalf("direct %s: %v %v", path, res, err)
		}
		c.Close()
	}
	relayed := func(path string) {
		c := w.dial(t, w.relay.Addr, true)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		io.WriteString(c, "CONNECT "+plain.String()+" HTTP/1.1\r\n\r\nGET "+path+" HTTP/1.1\r\nHost: "+plain.String()+"\r\n\r\n")
		if res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err != nil || res.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", res, err)
		}
		if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != 200 {
			t.Fatalf("relayed %s: %v %v", path, res, err)
		}
		c.Close()
	}
	direct("/d1")
	relayed("/r1")
	direct("/d2")
	relayed("/r2")
	from := map[string]string{}
	for _, r := range w.plain.Requests() {
		from[r.Path] = r.RemoteAddr
	}
	if from["/d1"] != from["/d2"] || from["/r1"] == from["/d1"] || from["/r2"] == from["/d1"] {
		t.Errorf("requests came from %v: the direct ones on one pooled connection, the relayed ones never on it", from)
	}
	if rr := w.relay.Requests(); len(rr) != 2 {
		t.Errorf("relay asked %d times, want once per relayed tunnel: %+v", len(rr), rr)
	}
}

// SOCKS commands other than CONNECT are refused, with an event.
func TestRelaySOCKSBind(t *testing.T) {
	w := newRelayWorld(t, envOptions{}, upstream.RelayOptions{})
	c := w.dial(t, w.relay.Addr, true)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte{5, 1, 0})
	var choice [2]byte
	io.ReadFull(c, choice[:])
	d, _ := parseRelayDest(w.api.Addr.Addr().String(), w.api.Addr.Port())
	c.Write(appendSOCKS5Request(nil, socksCmdBind, d))
	var reply [10]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil || reply[1] != socks5CmdUnsupported {
		t.Fatalf("reply %x, %v; want command not supported", reply, err)
	}
	e := w.rec.wait(t, "refusal", func(e *event.Event) bool {
		return e.Kind == event.KindConnect && e.Verdict.Rule == ruleRelayUnsupported
	})
	if e.Connect.Relay != "socks5://"+w.relay.Addr.String() || e.Process.PID != 4242 {
		t.Errorf("event %+v", *e.Connect)
	}
	w.checkNothingRelayed(t, w.relay)
}

// Which requests in absolute form are for a relay: those for another
// destination than the tunnel's, over plain HTTP.
func TestRelays(t *testing.T) {
	p := &Proxy{}
	dst := netip.MustParseAddrPort("127.0.0.9:3128")
	named := &tunnel{host: "proxy.example.test", port: 3128, dst: dst, scheme: "http"}
	byAddr := &tunnel{port: 3128, dst: dst, scheme: "http"}
	tlsTun := &tunnel{host: "proxy.example.test", port: 3128, dst: dst, scheme: "https"}
	tests := []struct {
		t      *tunnel
		target string
		want   bool
	}{
		{named, "/x", false},
		{named, "http://proxy.example.test:3128/x", false},
		{named, "http://127.0.0.9:3128/x", false},    // its own address
		{named, "http://proxy.example.test/x", true}, // port 80
		{named, "http://other.example.test:3128/x", true},
		{named, "http://127.0.0.10:3128/x", true},
		{byAddr, "http://127.0.0.9:3128/x", false},
		{byAddr, "http://127.0.0.9/x", true},
		{byAddr, "http://api.example.test/x", true},
		{byAddr, "https://127.0.0.9:3128/x", false},
		{tlsTun, "http://other.example.test/x", false}, // inside TLS: domain fronting, not a relay
	}
	for _, tt := range tests {
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + tt.target + " HTTP/1.1\r\nHost: h\r\n\r\n")))
		if err != nil {
			t.Fatal(err)
		}
		if got := p.relays(tt.t, r); got != tt.want {
			t.Errorf("tunnel %q %s %s: relays(%s) = %v, want %v", tt.t.host, tt.t.dst, tt.t.scheme, tt.target, got, tt.want)
		}
	}
}

// Relays asked through relays are decided each in turn, up to
// maxRelayDepth deep; one more is refused.
func TestRelayDepth(t *testing.T) {
	w := newRelayWorld(t, envOptions{}, upstream.RelayOptions{})
	c := w.dial(t, w.relay.Addr, true)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for i := 1; i <= maxRelayDepth+1; i++ {
		io.WriteString(c, "CONNECT "+w.relay.Addr.String()+" HTTP/1.1\r\n\r\n")
		res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatal(err)
		}
		want := 200
		if i > maxRelayDepth {
			want = http.StatusForbidden
		}
		if res.StatusCode != want {
			t.Fatalf("CONNECT %d relays deep: %d, want %d", i, res.StatusCode, want)
		}
	}
	e := w.rec.wait(t, "refusal", func(e *event.Event) bool {
		return e.Kind == event.KindConnect && e.Verdict.Rule == ruleRelayDepth
	})
	if e.Connect.Via != "relay" || e.Connect.Dst != w.relay.Addr {
		t.Errorf("event %+v", *e.Connect)
	}
	if n := len(w.relay.Requests()); n != maxRelayDepth {
		t.Errorf("the relay was asked %d times, want %d", n, maxRelayDepth)
	}
}

// Through the explicit proxy too: a CONNECT tunnel to a relay carries
// requests decided on their targets.
func TestRelayExplicitMode(t *testing.T) {
	w := newRelayWorld(t, envOptions{}, upstream.RelayOptions{})
	c, br, resp := w.connect(w.relay.Addr.String(), basicAuth(proxyUser, testToken))
	if resp != nil {
		t.Fatalf("CONNECT to the relay: %d", resp.StatusCode)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "CONNECT "+w.canary.addr.String()+" HTTP/1.1\r\n\r\n")
	res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || res.StatusCode != http.StatusForbidden {
		t.Fatalf("CONNECT to the canary through the relay: %v %v, want 403", res, err)
	}
	e := w.relayEventFor(t, w.canary.addr.Addr().String(), w.canary.addr.Port(), w.relay.Addr)
	if e.Verdict.Allowed() || e.Session != testSession {
		t.Errorf("event %+v", e)
	}
	w.checkNothingRelayed(t, w.relay)
}
