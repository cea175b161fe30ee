package proxy

import (
	"bufio"
	stdtls "crypto/tls"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
)

// addrHostIP is where the servers reached by address listen (this
// package's tests alone use it).
const addrHostIP = "127.0.0.44"

func TestHostMatches(t *testing.T) {
	dst := netip.MustParseAddrPort("127.0.0.9:80")
	p := &Proxy{
		names: ResolverMemoryFunc(func(session, host string, addr netip.Addr) bool {
			return session == testSession && host == "looked-up.example.test" && addr == dst.Addr()
		}),
		resolve: func(host string, _ uint16) (netip.Addr, bool) {
			return dst.Addr(), host == "overridden.example.test"
		},
	}
	tun := &tunnel{host: "api.example.test", port: 443}
	v6 := &tunnel{host: "::1", port: 8443}
	v4 := &tunnel{host: "127.0.0.1", port: 443}
	byAddr := &tunnel{session: testSession, dst: dst, port: 80}     // transparent, no name known
	otherSession := &tunnel{session: "s-other", dst: dst, port: 80} // the name was another session's
	mapped := &tunnel{session: testSession, dst: netip.MustParseAddrPort("[::ffff:127.0.0.9]:80"), port: 80}
	tests := []struct {
		t    *tunnel
		host string
		want bool
	}{
		{tun, "api.example.test", true},
		{tun, "API.Example.Test", true},
		{tun, "api.example.test.", true},
		{tun, "api.example.test:443", true},
		{tun, "", true},
		{tun, "api.example.test:444", false},
		{tun, "api.example.test:x", false},
		{tun, "other.example.test", false},
		{tun, "api.example.test.evil", false},
		{tun, "api.example.test:443:443", false},
		{tun, "looked-up.example.test", false}, // a name tunnel keeps its name
		{v6, "[::1]:8443", true},
		{v6, "[0:0::1]", true},
		{v6, "[::2]:8443", false},
		{v6, "[::1%lo]:8443", false},
		{v4, "127.0.0.1:443", true},
		{v4, "[::ffff:127.0.0.1]:443", true},
		{v4, "127.0.0.2", false},
		{v4, "127.0.0.1:80", false},
		// A tunnel to an address with no name: the address, or a name the
		// session's resolver (or a Resolve override) answered with it.
		{byAddr, "", true},
		{byAddr, "127.0.0.9", true},
		{byAddr, "127.0.0.9:80", true},
		{byAddr, "[::ffff:127.0.0.9]:80", true},
		{byAddr, "looked-up.example.test", true},
		{byAddr, "Looked-Up.Example.Test.:80", true},
		{byAddr, "overridden.example.test", true},
		{byAddr, "127.0.0.9:81", false},
		{byAddr, "looked-up.example.test:81", false},
		{byAddr, "127.0.0.10", false},
		{byAddr, "api.example.test", false},
		{byAddr, "2130706441", false}, // 127.0.0.9 as a resolver might read it: not what the request says
		{otherSession, "looked-up.example.test", false},
		{mapped, "looked-up.example.test", true},
		{&tunnel{port: 80}, "anything", false}, // neither name nor address: nothing agrees
	}
	for _, tt := range tests {
		if got := p.hostMatches(tt.t, tt.host); got != tt.want {
			t.Errorf("tunnel %q %s port %d: hostMatches(%q) = %v, want %v", tt.t.host, tt.t.dst, tt.t.port, tt.host, got, tt.want)
		}
	}
}

// On a transparent tunnel to an address with no name, a request whose
// Host is another host is refused with 421 and an event, and the server at
// the address sees nothing of it; the address itself, and a name the
// session's resolver answered with it, are served.
func TestTransparentHostAgreesWithAddress(t *testing.T) {
	var srv *upstream.Server
	e := newTransparentEnv(t, envOptions{tune: func(o *Options) {
		o.Names = ResolverMemoryFunc(func(session, host string, addr netip.Addr) bool {
			return session == testSession && host == "resolved.example.test" && srv != nil && addr == srv.Addr.Addr()
		})
	}})
	srv = e.upstream(upstream.Options{Name: "ip.example.test", Addr: addrHostIP + ":0"})
	c := e.dial(t, srv.Addr, true)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	port := itoa(srv.Addr.Port())
	for _, tt := range []struct {
		path, host string
		status     int
	}{
		{"/by-address", addrHostIP + ":" + port, 200},
		{"/by-resolved-name", "resolved.example.test:" + port, 200},
		{"/fronted", "api.example.test", http.StatusMisdirectedRequest},
	} {
		io.WriteString(c, "GET "+tt.path+" HTTP/1.1\r\nHost: "+tt.host+"\r\n\r\n")
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		if res.StatusCode != tt.status {
			t.Errorf("%s with Host %s: %d, want %d", tt.path, tt.host, res.StatusCode, tt.status)
		}
		if res.Close {
			c = e.dial(t, srv.Addr, true)
			br = bufio.NewReader(c)
		}
	}
	var paths []string
	for _, r := range srv.Requests() {
		paths = append(paths, r.Path+" "+r.Host)
	}
	if got, want := strings.Join(paths, ", "), "/by-address "+addrHostIP+":"+port+", /by-resolved-name resolved.example.test:"+port; got != want {
		t.Errorf("server received %q, want %q", got, want)
	}
	ev := e.rec.wait(t, "refusal", func(ev *event.Event) bool {
		return ev.Kind == event.KindHTTP && ev.HTTP.Status == http.StatusMisdirectedRequest
	})
	if ev.Verdict.Allowed() || ev.Verdict.Rule != ruleDomainFronting || ev.HTTP.Host != "api.example.test" || ev.Process.PID != 4242 {
		t.Errorf("event %+v %+v, want denied by %s", ev, *ev.HTTP, ruleDomainFronting)
	}
}

// HTTPS to an address without a name (no SNI) gets a certificate for the
// address the client connected to, not the proxy's own.
func TestTransparentCertificateForAddress(t *testing.T) {
	e := newTransparentEnv(t, envOptions{})
	srv := e.upstream(upstream.Options{Addr: addrHostIP + ":0", CA: e.upCA})
	c := e.dial(t, srv.Addr, true)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// Go sends no SNI for an address, and verifies the address.
	tc := stdtls.Client(c, &stdtls.Config{RootCAs: e.caPool, ServerName: addrHostIP, NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if ips := tc.ConnectionState().PeerCertificates[0].IPAddresses; len(ips) != 1 || ips[0].String() != addrHostIP {
		t.Errorf("certificate for %v, want %s", ips, addrHostIP)
	}
	io.WriteString(tc, "GET /cert HTTP/1.1\r\nHost: "+srv.Addr.String()+"\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("GET: %v %v", res, err)
	}
	if reqs := srv.Requests(); len(reqs) != 1 || reqs[0].Path != "/cert" {
		t.Errorf("server received %+v", reqs)
	}
}
