package upstream

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/miekg/dns"
)

// ResolverOptions configure a Resolver.
type ResolverOptions struct {
	// Addr is the listen address for UDP and TCP, a loopback IP literal
	// and a port, e.g. "127.0.30.53:53".
	Addr string
	// Names maps host names (case and a trailing dot do not matter) to the
	// IPv4 address that answers their A queries.
	Names map[string]netip.Addr
	// Default, when valid, answers the A queries of every other name;
	// otherwise they get NXDOMAIN.
	Default netip.Addr
}

// Query is one question a Resolver was asked.
type Query struct {
	Name   string // lower case, without the trailing dot
	Type   string // "A", "AAAA", …
	Answer string // the address answered; "" for none
	Net    string // "udp" or "tcp"
}

// Resolver is the DNS server of a test's fake internet: it answers A
// queries from its names (or its default address), every other type with
// an empty NOERROR (so clients connect over IPv4), and records each
// question. Its methods are safe for concurrent use.
type Resolver struct {
	names map[string]netip.Addr
	def   netip.Addr
	udp   *dns.Server
	tcp   *dns.Server

	mu      sync.Mutex
	queries []Query
}

// StartResolver listens on o.Addr (UDP and TCP) and serves until Close. A
// non-loopback address is an error. The sockets are opened before it
// returns, in the caller's network namespace.
func StartResolver(o ResolverOptions) (*Resolver, error) {
	ap, err := netip.ParseAddrPort(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("upstream: resolver: address %q is not an IP literal and port: %w", o.Addr, err)
	}
	if !ap.Addr().Unmap().IsLoopback() {
		return nil, fmt.Errorf("upstream: resolver: address %s is not loopback", ap)
	}
	r := &Resolver{names: map[string]netip.Addr{}, def: o.Default}
	for name, a := range o.Names {
		r.names[strings.ToLower(strings.TrimSuffix(name, "."))] = a
	}
	pc, err := net.ListenPacket("udp", ap.String())
	if err != nil {
		return nil, fmt.Errorf("upstream: resolver: %w", err)
	}
	ln, err := net.Listen("tcp", pc.LocalAddr().String())
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("upstream: resolver: %w", err)
	}
	r.udp = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(r.answer("udp"))}
	r.tcp = &dns.Server{Listener: ln, Handler: dns.HandlerFunc(r.answer("tcp"))}
	started := make(chan struct{}, 2)
	r.udp.NotifyStartedFunc = func() { started <- struct{}{} }
	r.tcp.NotifyStartedFunc = func() { started <- struct{}{} }
	go r.udp.ActivateAndServe()
	go r.tcp.ActivateAndServe()
	<-started
	<-started
	return r, nil
}

// Addr is where the resolver listens.
func (r *Resolver) Addr() netip.AddrPort {
	return r.udp.PacketConn.LocalAddr().(*net.UDPAddr).AddrPort()
}

func (r *Resolver) answer(network string) func(w dns.ResponseWriter, m *dns.Msg) {
	return func(w dns.ResponseWriter, m *dns.Msg) {
		reply := new(dns.Msg)
		reply.SetReply(m)
		reply.Authoritative = true
		if len(m.Question) != 1 {
			reply.Rcode = dns.RcodeFormatError
			w.WriteMsg(reply)
			return
		}
		q := m.Question[0]
		name := strings.ToLower(strings.TrimSuffix(q.Name, "."))
		rec := Query{Name: name, Type: dns.TypeToString[q.Qtype], Net: network}
		a, known := r.names[name]
		if !known && r.def.IsValid() {
			a, known = r.def, true
		}
		switch {
		case !known:
			reply.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA && a.Is4():
			reply.Answer = append(reply.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A:   a.AsSlice(),
			})
			rec.Answer = a.String()
		}
		r.mu.Lock()
		r.queries = append(r.queries, rec)
		r.mu.Unlock()
		w.WriteMsg(reply)
	}
}

// Queries returns the questions asked so far, in arrival order.
func (r *Resolver) Queries() []Query {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.queries)
}

// Close stops both listeners. It is safe to call more than once.
func (r *Resolver) Close() error {
	return errors.Join(shutdown(r.udp), shutdown(r.tcp))
}

func shutdown(s *dns.Server) error {
	if err := s.Shutdown(); err != nil && !strings.Contains(err.Error(), "not started") {
		return fmt.Errorf("upstream: resolver: %w", err)
	}
	return nil
}
