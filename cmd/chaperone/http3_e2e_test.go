package main

import (
	"crypto/tls"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/quic-go/quic-go/http3"
)

// startH3Origin serves name on addr:443 over HTTP/3 (UDP) and HTTPS (TCP),
// with a certificate of w's CA; each answer names the server and the
// protocol the request came over.
func startH3Origin(t *testing.T, w *world, name, addr string) {
	t.Helper()
	leaf, err := w.ca.Leaf(name)
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(rw, "hello from %s over %s\n", name, r.Proto)
	})
	pc, err := net.ListenPacket("udp4", addr+":443")
	if err != nil {
		t.Skipf("cannot listen on UDP %s:443: %v", addr, err)
	}
	ln, err := net.Listen("tcp4", addr+":443")
	if err != nil {
		pc.Close()
		t.Skipf("cannot listen on TCP %s:443: %v", addr, err)
	}
	h3 := &http3.Server{Handler: h, TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{leaf}})}
	h1 := &http.Server{Handler: h, TLSConfig: &tls.Config{Certificates: []tls.Certificate{leaf}}}
	done := make(chan struct{}, 2)
	go func() { h3.Serve(pc); done <- struct{}{} }()
	go func() { h1.ServeTLS(ln, "", ""); done <- struct{}{} }()
	t.Cleanup(func() {
		h3.Close()
		pc.Close()
		h1.Close()
		<-done
		<-done
	})
}

// TestTransparentHTTP3 runs an HTTP/3-only client (quic-go, a process of
// its own) in transparent sessions: with QUIC intercepted (the default)
// the proxy serves its requests, denies a denied host with the reason,
// and records them with the client's process; --quic refuse fails it at
// once; --quic allow lets it reach the origin unseen.
func TestTransparentHTTP3(t *testing.T) {
	needTransparent(t)
	w := newWorld(t)
	const a, b = "127.0.43.1", "127.0.43.2"
	startH3Origin(t, w, "h3a.e2e.test", a)
	startH3Origin(t, w, "h3b.e2e.test", b)
	resolve := []string{"--resolve", "h3a.e2e.test:" + a, "--resolve", "h3b.e2e.test:" + b}

	t.Run("intercepted", func(t *testing.T) {
		// One transport, so one UDP socket, to two servers in turn.
		w.log = filepath.Join(t.TempDir(), "audit.jsonl")
		r := w.transparent(resolve, h3Client, "https://h3a.e2e.test/one", "https://h3b.e2e.test/two", "https://h3a.e2e.test/three")
		mustSucceed(t, r)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		hosts := []string{"h3a.e2e.test", "h3b.e2e.test", "h3a.e2e.test"}
		// The proxy may reach the origin over any protocol.
		if len(lines) != len(hosts) {
			t.Fatalf("client printed:\n%s\nwant one line per URL", r.stdout)
		}
		for i, host := range hosts {
			if want := "200 HTTP/3.0 hello from " + host + " over HTTP/"; !strings.HasPrefix(lines[i], want) {
				t.Errorf("line %d: %q, want %q...", i, lines[i], want)
			}
		}
		if strings.Contains(r.stderr, "QUIC datagrams") {
			t.Errorf("QUIC refused, want intercepted:\n%s", r.stderr)
		}
		for _, tc := range []struct{ host, path string }{{"h3a.e2e.test", "/one"}, {"h3b.e2e.test", "/two"}, {"h3a.e2e.test", "/three"}} {
			rec := w.checkSessionLogFor(t, tc.host, tc.path, "h3client")
			if rec.Proto != "HTTP/3.0" {
				t.Errorf("http record of %s%s: proto %q, want HTTP/3.0", tc.host, tc.path, rec.Proto)
			}
		}
		// Each QUIC connection's origin is the server it was sent to, even
		// though one socket sent to both.
		tlsSeen, udpDst := map[string]bool{}, map[string]string{}
		for _, rec := range w.records() {
			switch {
			case rec.Kind == event.KindTLS:
				tlsSeen[rec.SNI] = true
				if rec.Process == nil || filepath.Base(rec.Process.Exe) != "h3client" {
					t.Errorf("tls record's process %+v, want h3client", rec.Process)
				}
			case rec.Kind == event.KindConnect && rec.Transport == "udp":
				// quic-go's socket is dual-stack: its IPv4 destinations are v4-mapped.
				dst, err := netip.ParseAddrPort(rec.Dst)
				if err != nil {
					t.Errorf("udp connect record's dst %q: %v", rec.Dst, err)
				}
				udpDst[rec.Host] = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port()).String()
				if rec.Via != "transparent" || rec.Verdict != event.Allow {
					t.Errorf("udp connect record %+v: want allowed, via transparent", rec)
				}
			}
		}
		if !tlsSeen["h3a.e2e.test"] || !tlsSeen["h3b.e2e.test"] {
			t.Errorf("tls records for %v, want h3a.e2e.test and h3b.e2e.test", tlsSeen)
		}
		if want := map[string]string{"h3a.e2e.test": a + ":443", "h3b.e2e.test": b + ":443"}; !maps.Equal(udpDst, want) {
			t.Errorf("udp connect records' destinations %v, want %v", udpDst, want)
		}
	})

	// Two handshakes at once from one socket: each connection's origin is
	// the record of its own first Initial (by its destination connection
	// ID), not the socket's latest datagram, so both requests reach their
	// own server.
	t.Run("two origins at once", func(t *testing.T) {
		w.log = filepath.Join(t.TempDir(), "audit.jsonl")
		r := w.transparent(resolve, h3Client, "-parallel", "https://h3a.e2e.test/pa", "https://h3b.e2e.test/pb")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		hosts := []string{"h3a.e2e.test", "h3b.e2e.test"}
		if len(lines) != len(hosts) {
			t.Fatalf("client printed:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		}
		for i, host := range hosts {
			if want := "200 HTTP/3.0 hello from " + host + " over HTTP/"; !strings.HasPrefix(lines[i], want) {
				t.Errorf("request to %s: %q, want %q...", host, lines[i], want)
			}
		}
	})

	t.Run("denied host", func(t *testing.T) {
		w.log = filepath.Join(t.TempDir(), "audit.jsonl")
		// By address: a denied name would get NXDOMAIN from the resolver first.
		args := append([]string{"--deny-host", b}, resolve...)
		r := w.transparent(args, h3Client, "https://h3b.e2e.test/no")
		if r.code == 0 || !strings.Contains(r.stdout, "error:") || !strings.Contains(r.stdout, "denied") {
			t.Errorf("exit %d, client printed %q; want an error carrying the denial", r.code, r.stdout)
		}
		denied := false
		for _, rec := range w.records() {
			if rec.Kind == event.KindHTTP && rec.Host == "h3b.e2e.test" {
				t.Errorf("a denied host's request was recorded as made: %+v", rec)
			}
			if rec.Kind == event.KindConnect && rec.Transport == "udp" && rec.Verdict == event.Deny {
				denied = true
			}
		}
		if !denied {
			t.Error("no denied udp connect record")
		}
	})

	t.Run("refuse", func(t *testing.T) {
		r := w.transparent(append([]string{"--quic", "refuse"}, resolve...), h3Client, "https://h3a.e2e.test/refused")
		if r.code == 0 || !strings.Contains(r.stdout, "operation not permitted") {
			t.Errorf("exit %d, client printed %q; want EPERM", r.code, r.stdout)
		}
		if !strings.Contains(r.stderr, "QUIC datagrams") {
			t.Errorf("the refusals are not reported:\n%s", r.stderr)
		}
	})

	t.Run("allow", func(t *testing.T) {
		// The origin's CA, for the client that now reaches it directly.
		caDir := t.TempDir()
		pem, err := os.ReadFile(w.caFile)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(caDir, "origin-ca.pem"), pem, 0o644); err != nil {
			t.Fatal(err)
		}
		w.log = filepath.Join(t.TempDir(), "audit.jsonl")
		r := w.transparent(append([]string{"--quic", "allow"}, resolve...), "env", "SSL_CERT_DIR="+caDir, h3Client, "https://h3a.e2e.test/direct")
		mustSucceed(t, r)
		if got := strings.TrimSpace(r.stdout); got != "200 HTTP/3.0 hello from h3a.e2e.test over HTTP/3.0" {
			t.Errorf("client printed %q", got)
		}
		for _, rec := range w.records() {
			if rec.Kind == event.KindHTTP && strings.HasSuffix(rec.URL, "/direct") {
				t.Errorf("an unmediated request was recorded: %+v", rec)
			}
		}
	})
}
