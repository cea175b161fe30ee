package dns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	mdns "github.com/miekg/dns"

	"github.com/chaperone-dev/chaperone/event"
)

var allowed = event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByDefault}

func dnsEvent(name, typ, rcode string, v event.Verdict, answers ...netip.Addr) *event.Event {
	return &event.Event{
		Time:    testNow,
		Kind:    event.KindDNS,
		Session: "s1",
		Verdict: v,
		DNS:     &event.DNS{Name: name, Type: typ, Answers: answers, Rcode: rcode},
	}
}

var cmpAddrs = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

// replyAddrs is what a client sees: rcode, TC and A/AAAA answers.
type replyView struct {
	Rcode     string
	Truncated bool
	Answers   []netip.Addr
}

func view(m *mdns.Msg) replyView {
	return replyView{Rcode: rcodeString(m.Rcode), Truncated: m.Truncated, Answers: answerAddrs(m)}
}

func TestStatic(t *testing.T) {
	r := startServer(t, Options{Static: map[string][]netip.Addr{
		"Both.Test.":  addrs("10.1.2.3", "fd00::3"),
		"v4only.test": addrs("10.9.9.9"),
		"v6only.test": addrs("fd00::6"),
		"mapped.test": addrs("::ffff:10.7.7.7"),
	}})
	tests := []struct {
		name  string
		qname string
		qtype uint16
		want  replyView
	}{
		{"A", "both.test", mdns.TypeA, replyView{Rcode: "NOERROR", Answers: addrs("10.1.2.3")}},
		{"AAAA", "both.test", mdns.TypeAAAA, replyView{Rcode: "NOERROR", Answers: addrs("fd00::3")}},
		{"case and dot insensitive", "BOTH.test.", mdns.TypeA, replyView{Rcode: "NOERROR", Answers: addrs("10.1.2.3")}},
		{"AAAA of v4-only is empty", "v4only.test", mdns.TypeAAAA, replyView{Rcode: "NOERROR"}},
		{"A of v6-only is empty", "v6only.test", mdns.TypeA, replyView{Rcode: "NOERROR"}},
		{"other type is empty", "both.test", mdns.TypeMX, replyView{Rcode: "NOERROR"}},
		{"v4-mapped answers A", "mapped.test", mdns.TypeA, replyView{Rcode: "NOERROR", Answers: addrs("10.7.7.7")}},
	}
	for _, network := range []string{"udp", "tcp"} {
		for _, tt := range tests {
			t.Run(network+"/"+tt.name, func(t *testing.T) {
				resp := r.query(t, network, tt.qname, tt.qtype)
				if diff := cmp.Diff(tt.want, view(resp), cmpAddrs, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("reply (-want +got):\n%s", diff)
				}
				if !resp.Authoritative {
					t.Error("static answer is not authoritative")
				}
			})
		}
	}
	if name, ok := r.srv.NameFor(netip.MustParseAddr("fd00::3")); !ok || name != "both.test" {
		t.Errorf("NameFor(fd00::3) = %q, %v; want both.test", name, ok)
	}
}

func TestStaticEvents(t *testing.T) {
	r := startServer(t, Options{Static: map[string][]netip.Addr{"both.test": addrs("10.1.2.3", "fd00::3")}})
	r.query(t, "udp", "both.test", mdns.TypeA)
	r.query(t, "tcp", "Both.Test", mdns.TypeAAAA)
	r.query(t, "udp", "both.test", mdns.TypeTXT)
	want := []*event.Event{
		dnsEvent("both.test", "A", "NOERROR", allowed, addrs("10.1.2.3")...),
		dnsEvent("both.test", "AAAA", "NOERROR", allowed, addrs("fd00::3")...),
		dnsEvent("both.test", "TXT", "NOERROR", allowed),
	}
	if diff := cmp.Diff(want, r.events.all(), cmpAddrs, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestForward(t *testing.T) {
	up := startUpstream(t, answering(map[string][]netip.Addr{
		"example.test": addrs("192.0.2.7", "2001:db8::7"),
	}))
	r := startServer(t, Options{
		Upstreams: []netip.AddrPort{up.addr},
		Static:    map[string][]netip.Addr{"static.test": addrs("10.0.0.1")},
	})
	tests := []struct {
		network   string
		qname     string
		qtype     uint16
		want      replyView
		wantEvent *event.Event
	}{
		{"udp", "example.test", mdns.TypeA, replyView{Rcode: "NOERROR", Answers: addrs("192.0.2.7")},
			dnsEvent("example.test", "A", "NOERROR", allowed, addrs("192.0.2.7")...)},
		{"tcp", "Example.Test", mdns.TypeAAAA, replyView{Rcode: "NOERROR", Answers: addrs("2001:db8::7")},
			dnsEvent("example.test", "AAAA", "NOERROR", allowed, addrs("2001:db8::7")...)},
		{"udp", "example.test", mdns.TypeTXT, replyView{Rcode: "NOERROR"},
			dnsEvent("example.test", "TXT", "NOERROR", allowed)},
		{"udp", "missing.test", mdns.TypeA, replyView{Rcode: "NXDOMAIN"},
			dnsEvent("missing.test", "A", "NXDOMAIN", allowed)},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s/%s", tt.network, tt.qname, typeString(tt.qtype)), func(t *testing.T) {
			before := len(r.events.all())
			resp := r.query(t, tt.network, tt.qname, tt.qtype)
			if diff := cmp.Diff(tt.want, view(resp), cmpAddrs, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
			evs := r.events.all()[before:]
			if diff := cmp.Diff([]*event.Event{tt.wantEvent}, evs, cmpAddrs, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
	if got := up.seen(); got != int64(len(tests)) {
		t.Errorf("upstream saw %d queries, want %d", got, len(tests))
	}
	t.Run("TXT forwarded untouched", func(t *testing.T) {
		resp := r.query(t, "udp", "example.test", mdns.TypeTXT)
		if len(resp.Answer) != 1 || resp.Answer[0].(*mdns.TXT).Txt[0] != "hello" {
			t.Errorf("TXT answer = %v", resp.Answer)
		}
	})
	t.Run("NameFor", func(t *testing.T) {
		for _, tt := range []struct {
			addr   string
			want   string
			wantOK bool
		}{
			{"192.0.2.7", "example.test", true},
			{"2001:db8::7", "example.test", true},
			{"::ffff:192.0.2.7", "example.test", true},
			{"192.0.2.8", "", false},
		} {
			name, ok := r.srv.NameFor(netip.MustParseAddr(tt.addr))
			if name != tt.want || ok != tt.wantOK {
				t.Errorf("NameFor(%s) = %q, %v; want %q, %v", tt.addr, name, ok, tt.want, tt.wantOK)
			}
		}
	})
}

func TestNameForMostRecentName(t *testing.T) {
	up := startUpstream(t, answering(map[string][]netip.Addr{
		"first.test":  addrs("192.0.2.1"),
		"second.test": addrs("192.0.2.1"),
	}))
	r := startServer(t, Options{Upstreams: []netip.AddrPort{up.addr}})
	a := netip.MustParseAddr("192.0.2.1")
	for _, name := range []string{"first.test", "second.test", "first.test"} {
		r.query(t, "udp", name, mdns.TypeA)
		if got, _ := r.srv.NameFor(a); got != name {
			t.Errorf("after resolving %s, NameFor = %q", name, got)
		}
	}
}

func TestDeny(t *testing.T) {
	deny := event.Verdict{Action: event.Deny, Rule: "deny_hosts", Reason: "listed", DecidedBy: event.DecidedByRule}
	decider := event.DeciderFunc(func(_ context.Context, e *event.Event) event.Verdict {
		if strings.HasSuffix(e.DNS.Name, "evil.test") {
			return deny
		}
		return allowed
	})
	for _, tt := range []struct {
		name      string
		rcode     int
		wantRcode string
	}{
		{"default NXDOMAIN", 0, "NXDOMAIN"},
		{"NXDOMAIN", mdns.RcodeNameError, "NXDOMAIN"},
		{"REFUSED", mdns.RcodeRefused, "REFUSED"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := startUpstream(t, answering(map[string][]netip.Addr{"x.evil.test": addrs("192.0.2.66")}))
			r := startServer(t, Options{
				Decider:   decider,
				DenyRcode: tt.rcode,
				Upstreams: []netip.AddrPort{up.addr},
				Static:    map[string][]netip.Addr{"static.evil.test": addrs("10.6.6.6")},
			})
			for _, network := range []string{"udp", "tcp"} {
				for _, q := range []string{"x.evil.test", "static.evil.test"} {
					resp := r.query(t, network, q, mdns.TypeA)
					if diff := cmp.Diff(replyView{Rcode: tt.wantRcode}, view(resp), cmpAddrs, cmpopts.EquateEmpty()); diff != "" {
						t.Errorf("%s %s reply (-want +got):\n%s", network, q, diff)
					}
				}
			}
			if n := up.seen(); n != 0 {
				t.Errorf("upstream received %d queries for denied names, want 0", n)
			}
			want := []*event.Event{
				dnsEvent("x.evil.test", "A", tt.wantRcode, deny),
				dnsEvent("static.evil.test", "A", tt.wantRcode, deny),
				dnsEvent("x.evil.test", "A", tt.wantRcode, deny),
				dnsEvent("static.evil.test", "A", tt.wantRcode, deny),
			}
			if diff := cmp.Diff(want, r.events.all(), cmpAddrs, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if _, ok := r.srv.NameFor(netip.MustParseAddr("10.6.6.6")); ok {
				t.Error("a denied static name was remembered")
			}
		})
	}
}

func TestUnreachableVerdictsDeny(t *testing.T) {
	for _, tt := range []struct {
		name    string
		decider event.DeciderFunc
		want    event.Action
	}{
		{"ask", func(context.Context, *event.Event) event.Verdict { return event.Verdict{Action: event.Ask} }, event.Deny},
		{"unknown", func(context.Context, *event.Event) event.Verdict { return event.Verdict{Action: 42} }, event.Deny},
		{"panic", func(context.Context, *event.Event) event.Verdict { panic("boom") }, event.Deny},
		{"zero", func(context.Context, *event.Event) event.Verdict { return event.Verdict{} }, event.Deny},
		{"rewrite lets through", func(context.Context, *event.Event) event.Verdict { return event.Verdict{Action: event.Rewrite} }, event.Rewrite},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := startServer(t, Options{Decider: tt.decider, Static: map[string][]netip.Addr{"a.test": addrs("10.0.0.1")}})
			resp := r.query(t, "udp", "a.test", mdns.TypeA)
			wantRcode := "NXDOMAIN"
			if tt.want == event.Rewrite {
				wantRcode = "NOERROR"
			}
			if got := rcodeString(resp.Rcode); got != wantRcode {
				t.Errorf("rcode = %s, want %s", got, wantRcode)
			}
			evs := r.events.all()
			if len(evs) != 1 || evs[0].Verdict.Action != tt.want {
				t.Fatalf("events = %+v, want one with action %v", evs, tt.want)
			}
		})
	}
}

func TestServfail(t *testing.T) {
	// A UDP port that was bound and released: nothing answers there.
	closed, err := net.ListenPacket("udp", "127.0.0.5:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.LocalAddr().(*net.UDPAddr).AddrPort()
	closed.Close()
	// A socket that reads queries and never answers.
	silent, err := net.ListenPacket("udp", "127.0.0.6:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			if _, _, err := silent.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	silentAddr := silent.LocalAddr().(*net.UDPAddr).AddrPort()

	failing := startUpstream(t, func(w mdns.ResponseWriter, r *mdns.Msg, _ bool) {
		m := new(mdns.Msg)
		m.SetRcode(r, mdns.RcodeServerFailure)
		w.WriteMsg(m)
	})
	good := startUpstream(t, answering(map[string][]netip.Addr{"ok.test": addrs("192.0.2.9")}))

	for _, tt := range []struct {
		name      string
		upstreams []netip.AddrPort
		want      replyView
	}{
		{"no upstreams", nil, replyView{Rcode: "SERVFAIL"}},
		{"upstream down", []netip.AddrPort{closedAddr}, replyView{Rcode: "SERVFAIL"}},
		{"upstream silent", []netip.AddrPort{silentAddr}, replyView{Rcode: "SERVFAIL"}},
		{"next upstream after a dead one", []netip.AddrPort{closedAddr, good.addr}, replyView{Rcode: "NOERROR", Answers: addrs("192.0.2.9")}},
		{"next upstream after SERVFAIL", []netip.AddrPort{failing.addr, good.addr}, replyView{Rcode: "NOERROR", Answers: addrs("192.0.2.9")}},
		{"only SERVFAIL", []netip.AddrPort{failing.addr}, replyView{Rcode: "SERVFAIL"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := startServer(t, Options{Upstreams: tt.upstreams, Timeout: 200 * time.Millisecond})
			resp := r.query(t, "udp", "ok.test", mdns.TypeA)
			if diff := cmp.Diff(tt.want, view(resp), cmpAddrs, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
			want := []*event.Event{dnsEvent("ok.test", "A", tt.want.Rcode, allowed, tt.want.Answers...)}
			if diff := cmp.Diff(want, r.events.all(), cmpAddrs, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUpstreamTruncatedFallsBackToTCP(t *testing.T) {
	up := startUpstream(t, func(w mdns.ResponseWriter, r *mdns.Msg, tcp bool) {
		m := new(mdns.Msg)
		m.SetReply(r)
		if !tcp {
			m.Truncated = true // too big for UDP: ask again over TCP
			w.WriteMsg(m)
			return
		}
		for i := range 40 {
			m.Answer = append(m.Answer, &mdns.A{
				Hdr: mdns.RR_Header{Name: r.Question[0].Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 60},
				A:   net.IPv4(192, 0, 2, byte(i+1)),
			})
		}
		w.WriteMsg(m)
	})
	r := startServer(t, Options{Upstreams: []netip.AddrPort{up.addr}})
	resp := r.query(t, "tcp", "big.test", mdns.TypeA)
	if len(resp.Answer) != 40 || resp.Truncated {
		t.Errorf("got %d answers (truncated %v), want 40 untruncated", len(resp.Answer), resp.Truncated)
	}
	if up.udpSeen.Load() != 1 || up.tcpSeen.Load() != 1 {
		t.Errorf("upstream saw %d udp and %d tcp queries, want 1 and 1", up.udpSeen.Load(), up.tcpSeen.Load())
	}
	if evs := r.events.all(); len(evs) != 1 || len(evs[0].DNS.Answers) != 40 {
		t.Errorf("events = %v, want one with 40 answers", evs)
	}
}

func TestReplyTruncatedToClientSize(t *testing.T) {
	var many []netip.Addr
	for i := range 60 {
		many = append(many, netip.AddrFrom4([4]byte{10, 0, 1, byte(i)}))
	}
	r := startServer(t, Options{Static: map[string][]netip.Addr{"many.test": many}})

	udp := r.query(t, "udp", "many.test", mdns.TypeA)
	if !udp.Truncated || len(udp.Answer) >= 60 {
		t.Errorf("udp without EDNS0: truncated %v with %d answers, want TC and fewer than 60", udp.Truncated, len(udp.Answer))
	}
	m := new(mdns.Msg)
	m.SetQuestion("many.test.", mdns.TypeA)
	m.SetEdns0(4096, false)
	if edns := r.exchange(t, "udp", m); edns.Truncated || len(edns.Answer) != 60 {
		t.Errorf("udp with EDNS0 4096: truncated %v with %d answers, want all 60", edns.Truncated, len(edns.Answer))
	}
	if tcp := r.query(t, "tcp", "many.test", mdns.TypeA); tcp.Truncated || len(tcp.Answer) != 60 {
		t.Errorf("tcp: truncated %v with %d answers, want all 60", tcp.Truncated, len(tcp.Answer))
	}
}

func TestMalformedQueries(t *testing.T) {
	r := startServer(t, Options{Static: map[string][]netip.Addr{"a.test": addrs("10.0.0.1")}})

	two := new(mdns.Msg)
	two.SetQuestion("a.test.", mdns.TypeA)
	two.Question = append(two.Question, mdns.Question{Name: "b.test.", Qtype: mdns.TypeA, Qclass: mdns.ClassINET})
	none := new(mdns.Msg)
	none.Id = mdns.Id()
	update := new(mdns.Msg)
	update.SetUpdate("a.test.")
	for _, tt := range []struct {
		name string
		msg  *mdns.Msg
		want string
	}{
		{"two questions", two, "FORMERR"},
		{"no question", none, "FORMERR"},
		{"update", update, "NOTIMP"},
	} {
		for _, network := range []string{"udp", "tcp"} {
			t.Run(network+"/"+tt.name, func(t *testing.T) {
				if got := rcodeString(r.exchange(t, network, tt.msg).Rcode); got != tt.want {
					t.Errorf("rcode = %s, want %s", got, tt.want)
				}
			})
		}
	}
	if evs := r.events.all(); len(evs) != 0 {
		t.Errorf("malformed queries published %d events, want none", len(evs))
	}

	t.Run("garbage", func(t *testing.T) {
		conn, err := net.Dial("udp", r.udp)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// Header claims one question, then the bytes end.
		if _, err := conn.Write([]byte{0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 7, 'x'}); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 512)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		m := new(mdns.Msg)
		if err := m.Unpack(buf[:n]); err != nil {
			t.Fatalf("reply does not parse: %v", err)
		}
		if m.Id != 0xabcd || !m.Response || m.Rcode != mdns.RcodeFormatError || !m.RecursionDesired {
			t.Errorf("reply = id %#x response %v rcode %s rd %v; want 0xabcd, true, FORMERR, true",
				m.Id, m.Response, rcodeString(m.Rcode), m.RecursionDesired)
		}
		// The server still answers afterwards.
		if resp := r.query(t, "udp", "a.test", mdns.TypeA); len(resp.Answer) != 1 {
			t.Errorf("after garbage: %v", resp)
		}
	})
}

func TestHandlePacketDropsNonQueries(t *testing.T) {
	s, err := New(Options{Decider: allowAll()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp := new(mdns.Msg)
	resp.SetQuestion("a.test.", mdns.TypeA)
	resp.Response = true
	packedResp, err := resp.Pack()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		pkt  []byte
	}{
		{"empty", nil},
		{"short", []byte{1, 2, 3}},
		{"a response", packedResp},
		{"garbage response", append([]byte{1, 2, 0x80}, make([]byte, 20)...)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := s.handlePacket(context.Background(), tt.pkt, true, netip.AddrPort{}); got != nil {
				t.Errorf("handlePacket answered %x, want nothing", got)
			}
		})
	}
}

func TestConcurrentQueries(t *testing.T) {
	up := startUpstream(t, answering(map[string][]netip.Addr{"fwd.test": addrs("192.0.2.50")}))
	deny := event.DeciderFunc(func(_ context.Context, e *event.Event) event.Verdict {
		if e.DNS.Name == "bad.test" {
			return event.Verdict{Action: event.Deny}
		}
		return allowed
	})
	r := startServer(t, Options{
		Decider:   deny,
		Upstreams: []netip.AddrPort{up.addr},
		Static:    map[string][]netip.Addr{"static.test": addrs("10.0.0.1")},
	})
	const workers, each = 16, 20
	want := map[string]string{"fwd.test": "192.0.2.50", "static.test": "10.0.0.1", "bad.test": ""}
	names := []string{"fwd.test", "static.test", "bad.test"}
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			network := []string{"udp", "tcp"}[w%2]
			for i := range each {
				name := names[(w+i)%len(names)]
				m := new(mdns.Msg)
				m.SetQuestion(name+".", mdns.TypeA)
				resp, err := r.tryExchange(network, m)
				if err != nil {
					errs <- fmt.Errorf("%s %s: %w", network, name, err)
					continue
				}
				got := ""
				if a := answerAddrs(resp); len(a) == 1 {
					got = a[0].String()
				}
				if got != want[name] {
					errs <- fmt.Errorf("%s %s: answer %q, want %q", network, name, got, want[name])
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(r.events.all()); n != workers*each {
		t.Errorf("%d events, want %d", n, workers*each)
	}
}

// TestCloseLeavesNothing closes a Server with an idle TCP client and a query
// waiting on a silent upstream, and checks every goroutine it started ends.
func TestCloseLeavesNothing(t *testing.T) {
	silent, err := net.ListenPacket("udp", "127.0.0.6:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	received := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 512)
		for {
			if _, _, err := silent.ReadFrom(buf); err != nil {
				return
			}
			select {
			case received <- struct{}{}:
			default:
			}
		}
	}()
	before := runtime.NumGoroutine()

	srv, err := New(Options{
		Decider:   allowAll(),
		Upstreams: []netip.AddrPort{silent.LocalAddr().(*net.UDPAddr).AddrPort()},
		Timeout:   time.Hour, // only Close can end the exchange
	})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveErr := make(chan error, 2)
	go func() { serveErr <- srv.ServeUDP(pc) }()
	go func() { serveErr <- srv.ServeTCP(l) }()

	idle, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	client, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	q := new(mdns.Msg)
	q.SetQuestion("slow.test.", mdns.TypeA)
	b, _ := q.Pack()
	if _, err := client.Write(b); err != nil {
		t.Fatal(err)
	}
	<-received // the query is in flight upstream

	if err := srv.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	for range 2 {
		if err := <-serveErr; err != nil {
			t.Errorf("Serve returned %v, want nil", err)
		}
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// Goroutines of the runtime and net poller may take a moment to go.
	var now int
	for range 100 {
		if now = runtime.NumGoroutine(); now <= before {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if now > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after Close, %d before:\n%s", now, before, buf[:runtime.Stack(buf, true)])
	}
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Error("idle TCP client still connected after Close")
	}
}

func TestCloseBeforeServe(t *testing.T) {
	srv, err := New(Options{Decider: allowAll()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.ServeUDP(pc); err != nil {
		t.Errorf("ServeUDP after Close = %v, want nil", err)
	}
	if err := srv.ServeTCP(l); err != nil {
		t.Errorf("ServeTCP after Close = %v, want nil", err)
	}
	if _, _, err := pc.ReadFrom(make([]byte, 1)); err == nil {
		t.Error("ServeUDP after Close left the socket open")
	}
	if _, err := l.Accept(); err == nil {
		t.Error("ServeTCP after Close left the listener open")
	}
}

func TestNewValidates(t *testing.T) {
	for _, tt := range []struct {
		name string
		o    Options
	}{
		{"no decider", Options{}},
		{"bad deny rcode", Options{Decider: allowAll(), DenyRcode: mdns.RcodeServerFailure}},
		{"negative timeout", Options{Decider: allowAll(), Timeout: -time.Second}},
		{"upstream without port", Options{Decider: allowAll(), Upstreams: []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 0)}}},
		{"zero upstream", Options{Decider: allowAll(), Upstreams: []netip.AddrPort{{}}}},
		{"empty static name", Options{Decider: allowAll(), Static: map[string][]netip.Addr{".": addrs("10.0.0.1")}}},
		{"bad static name", Options{Decider: allowAll(), Static: map[string][]netip.Addr{"a..b": addrs("10.0.0.1")}}},
		{"invalid static addr", Options{Decider: allowAll(), Static: map[string][]netip.Addr{"a.test": {{}}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.o)
			if err == nil {
				s.Close()
				t.Fatal("New succeeded")
			}
			if !strings.HasPrefix(err.Error(), "dns: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}
