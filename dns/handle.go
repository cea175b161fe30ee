package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	mdns "github.com/miekg/dns"

	"github.com/chaperone-dev/chaperone/event"
)

// headerLen is the length of a DNS message header.
const headerLen = 12

// handlePacket answers one raw query from client; udp says whether the
// reply must fit the client's UDP size. It returns nil when nothing should be sent (the
// packet is not a query, or cannot be answered at all).
func (s *Server) handlePacket(ctx context.Context, pkt []byte, udp bool, client netip.AddrPort) []byte {
	req := new(mdns.Msg)
	if err := req.Unpack(pkt); err != nil {
		return formErr(pkt)
	}
	if req.Response {
		return nil // never answer answers: that is how loops start
	}
	resp := s.handle(ctx, req, client)
	if udp {
		size := mdns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil && int(opt.UDPSize()) > size {
			size = int(opt.UDPSize())
		}
		resp.Truncate(size)
	} else {
		resp.Truncate(mdns.MaxMsgSize)
	}
	out, err := resp.Pack()
	if err != nil {
		s.log.Debug("dns: pack reply", "session", s.session, "err", err)
		fail := new(mdns.Msg)
		fail.SetRcode(req, mdns.RcodeServerFailure)
		fail.Question = nil
		if out, err = fail.Pack(); err != nil {
			return nil
		}
	}
	return out
}

// formErr answers bytes that do not parse as a message with a bare FORMERR
// header when they at least look like a query, so the client stops
// waiting; anything shorter than a header, or a response, is dropped.
func formErr(pkt []byte) []byte {
	if len(pkt) < headerLen || pkt[2]&0x80 != 0 { // QR set: a response
		return nil
	}
	out := make([]byte, headerLen)
	copy(out, pkt[:2])                          // ID
	out[2] = 0x80 | pkt[2]&0x79                 // QR, the query's opcode and RD
	out[3] = 0x80 | byte(mdns.RcodeFormatError) // RA, rcode
	return out
}

// handle answers a parsed query from client.
func (s *Server) handle(ctx context.Context, req *mdns.Msg, client netip.AddrPort) *mdns.Msg {
	if req.Opcode != mdns.OpcodeQuery {
		return reply(req, mdns.RcodeNotImplemented)
	}
	if len(req.Question) != 1 {
		return reply(req, mdns.RcodeFormatError)
	}
	q := req.Question[0]
	name := canonical(q.Name)
	if name == "" {
		name = "."
	}
	e := &event.Event{
		Time:    s.now(),
		Kind:    event.KindDNS,
		Session: s.session,
		DNS:     &event.DNS{Name: name, Type: typeString(q.Qtype)},
	}
	if s.attribute != nil {
		session, p, mediated := s.attribute(client)
		if !mediated {
			if q.Qtype == mdns.TypeAXFR || q.Qtype == mdns.TypeIXFR {
				return reply(req, mdns.RcodeNotImplemented)
			}
			return s.forward(ctx, req)
		}
		e.Session, e.Process = session, p
	} else {
		e.Process = s.findProcess(client, name)
	}
	e.Verdict = s.decide(ctx, e)

	var resp *mdns.Msg
	switch addrs, static := s.static[name]; {
	case !e.Verdict.Allowed():
		resp = reply(req, s.denyRcode)
	case q.Qtype == mdns.TypeAXFR || q.Qtype == mdns.TypeIXFR:
		resp = reply(req, mdns.RcodeNotImplemented) // zone transfers span messages; not forwarded
	case static:
		resp = s.answerStatic(req, q, addrs)
	default:
		resp = s.forward(ctx, req)
	}
	e.DNS.Answers = answerAddrs(resp)
	e.DNS.Rcode = rcodeString(resp.Rcode)
	pid := 0
	if e.Process != nil {
		pid = e.Process.PID
	}
	s.remember(name, pid, resp)
	s.publish(e)
	return resp
}

// findProcess asks Options.Process who sent the query; one that panics
// leaves the process unknown rather than taking the server down.
func (s *Server) findProcess(client netip.AddrPort, name string) (p *event.Process) {
	if s.process == nil {
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("dns: process lookup panicked", "session", s.session, "name", name, "client", client, "panic", r)
			p = nil
		}
	}()
	return s.process(client)
}

// decide asks the Decider and returns the verdict applied: only allow and
// rewrite let a query through; ask cannot be put to anyone here, and a
// Decider that panics denies.
func (s *Server) decide(ctx context.Context, e *event.Event) (v event.Verdict) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("dns: decider panicked; denying", "session", e.Session, "name", e.DNS.Name, "panic", r)
			v = event.Verdict{Action: event.Deny, Reason: "the policy failed to decide", DecidedBy: event.DecidedByDefault}
		}
	}()
	return s.decider.Decide(ctx, e).Enforced()
}

// reply is an empty answer to req with rcode.
func reply(req *mdns.Msg, rcode int) *mdns.Msg {
	m := new(mdns.Msg)
	m.SetRcode(req, rcode)
	m.RecursionAvailable = true
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(mdns.DefaultMsgSize, false)
	}
	return m
}

// answerStatic answers a configured name: the addresses of the asked family,
// and NOERROR with nothing for any other type.
func (s *Server) answerStatic(req *mdns.Msg, q mdns.Question, addrs []netip.Addr) *mdns.Msg {
	m := reply(req, mdns.RcodeSuccess)
	m.Authoritative = true
	if q.Qclass != mdns.ClassINET {
		return m
	}
	hdr := mdns.RR_Header{Name: q.Name, Class: mdns.ClassINET, Ttl: staticTTL}
	for _, a := range addrs {
		switch {
		case q.Qtype == mdns.TypeA && a.Is4():
			h := hdr
			h.Rrtype = mdns.TypeA
			m.Answer = append(m.Answer, &mdns.A{Hdr: h, A: net.IP(a.AsSlice())})
		case q.Qtype == mdns.TypeAAAA && a.Is6():
			h := hdr
			h.Rrtype = mdns.TypeAAAA
			m.Answer = append(m.Answer, &mdns.AAAA{Hdr: h, AAAA: net.IP(a.AsSlice())})
		}
	}
	return m
}

// forward asks the upstreams in order and returns the first answer, with
// the client's ID; SERVFAIL when none answers.
func (s *Server) forward(ctx context.Context, req *mdns.Msg) *mdns.Msg {
	if len(s.upstreams) == 0 {
		return reply(req, mdns.RcodeServerFailure)
	}
	q := req.Copy()
	q.Id = mdns.Id() // the upstream sees our ID, not the client's
	var last *mdns.Msg
	for _, up := range s.upstreams {
		resp, err := s.exchange(ctx, q, up)
		if err != nil {
			s.log.Debug("dns: upstream failed", "session", s.session, "upstream", up, "err", err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		resp.Id = req.Id
		if resp.Rcode == mdns.RcodeServerFailure || resp.Rcode == mdns.RcodeRefused {
			last = resp // as stub resolvers do: the next upstream may know better
			continue
		}
		return resp
	}
	if last != nil {
		return last
	}
	return reply(req, mdns.RcodeServerFailure)
}

// exchange asks one upstream over UDP and, when the answer is truncated,
// again over TCP.
func (s *Server) exchange(ctx context.Context, q *mdns.Msg, up netip.AddrPort) (*mdns.Msg, error) {
	resp, err := s.exchangeOver(ctx, "udp", q, up)
	if err != nil {
		return nil, err
	}
	if !resp.Truncated {
		return resp, nil
	}
	return s.exchangeOver(ctx, "tcp", q, up)
}

// exchangeOver is one exchange; the connection is closed as soon as ctx is
// cancelled, so Close never waits for an upstream's timeout.
func (s *Server) exchangeOver(ctx context.Context, network string, q *mdns.Msg, up netip.AddrPort) (*mdns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, up.String())
	if err != nil {
		return nil, fmt.Errorf("dns: dial upstream %s: %w", up, err)
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	// Without EDNS0 an upstream sends at most 512 bytes; the slack
	// tolerates ones that send more.
	c := &mdns.Client{Net: network, Timeout: s.timeout, UDPSize: mdns.DefaultMsgSize}
	resp, _, err := c.ExchangeWithConnContext(ctx, q, &mdns.Conn{Conn: nc})
	if err != nil {
		return nil, fmt.Errorf("dns: exchange with upstream %s over %s: %w", up, network, err)
	}
	if !resp.Response || len(resp.Question) != 1 || !strings.EqualFold(resp.Question[0].Name, q.Question[0].Name) ||
		resp.Question[0].Qtype != q.Question[0].Qtype {
		return nil, errors.New("dns: upstream " + up.String() + " answered another question")
	}
	return resp, nil
}

// answerAddrs lists the A and AAAA addresses of m's answer section.
func answerAddrs(m *mdns.Msg) []netip.Addr {
	var out []netip.Addr
	for _, rr := range m.Answer {
		var ip net.IP
		switch r := rr.(type) {
		case *mdns.A:
			ip = r.A
		case *mdns.AAAA:
			ip = r.AAAA
		default:
			continue
		}
		if a, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// remember records each answered address as looked up under name by
// process pid (0 when unknown).
func (s *Server) remember(name string, pid int, m *mdns.Msg) {
	if m.Rcode != mdns.RcodeSuccess {
		return
	}
	now := s.now()
	for _, rr := range m.Answer {
		var ip net.IP
		switch r := rr.(type) {
		case *mdns.A:
			ip = r.A
		case *mdns.AAAA:
			ip = r.AAAA
		default:
			continue
		}
		if a, ok := netip.AddrFromSlice(ip); ok {
			s.names.put(a.Unmap(), name, pid, now, rr.Header().Ttl)
		}
	}
}

func typeString(t uint16) string {
	if s, ok := mdns.TypeToString[t]; ok {
		return s
	}
	return "TYPE" + strconv.Itoa(int(t))
}

func rcodeString(r int) string {
	if s, ok := mdns.RcodeToString[r]; ok {
		return s
	}
	return "RCODE" + strconv.Itoa(r)
}
