//go:build linux

package redirect

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

const (
	ipprotoTCP = 6
	ipprotoUDP = 17
)

// Redirector holds the loaded programs and maps. Attach it to one cgroup
// per session; Lookup serves all of them. Its methods are safe for
// concurrent use.
type Redirector struct {
	objs redirectObjects

	mu       sync.Mutex
	attached map[*attachment]struct{}
	refusals *ringbuf.Reader // once Refusals is called
	closing  chan struct{}   // closed by Close: the readers stop delivering
	closed   bool

	marker  *marker  // with Config.MarkedOnly
	machine *machine // once AttachMachine succeeded
}

// Load loads the programs and maps and writes cfg into them. Nothing is
// attached yet. With cfg.MarkedOnly it loads the marker too (see
// AttachMachine), and mounts tracefs at /sys/kernel/tracing when it is
// not mounted. The error wraps ErrNotPermitted (and os.ErrPermission)
// without the privileges to load, ErrNotSupported when the kernel lacks a
// needed feature.
func Load(cfg Config) (*Redirector, error) {
	kcfg, err := cfg.kernel()
	if err != nil {
		return nil, err
	}
	// A no-op on kernels that account BPF memory to the cgroup (5.11+).
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, loadError("remove memlock limit", err)
	}
	r := &Redirector{attached: make(map[*attachment]struct{}), closing: make(chan struct{})}
	spec, err := loadRedirect()
	if err != nil {
		return nil, fmt.Errorf("redirect: load programs: %w", err)
	}
	var opts *ebpf.CollectionOptions
	if cfg.MarkedOnly {
		if err := r.loadMarker(cfg); err != nil {
			return nil, err
		}
		opts = &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{pinMarks: r.marker.marks}}
	} else {
		// Unused: the smallest map, not 4 MiB of buckets per session.
		spec.Maps[pinMarks].MaxEntries = 1
	}
	if err := spec.LoadAndAssign(&r.objs, opts); err != nil {
		if r.marker != nil {
			r.marker.close()
		}
		return nil, loadError("load programs", err)
	}
	if err := r.objs.ConfigMap.Put(uint32(0), kcfg); err != nil {
		r.Close()
		return nil, fmt.Errorf("redirect: write config: %w", err)
	}
	return r, nil
}

// loadError classifies err. The verifier's refusals come back as EACCES,
// which os.ErrPermission matches too, so only EPERM counts as a missing
// privilege.
func loadError(what string, err error) error {
	var verr *ebpf.VerifierError
	switch {
	case errors.As(err, &verr):
		return fmt.Errorf("redirect: %s: %w", what, err)
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("redirect: %s: %w: %w", what, ErrNotPermitted, err)
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("redirect: %s: %w: %w", what, ErrNotSupported, err)
	}
	return fmt.Errorf("redirect: %s: %w", what, err)
}

// kernel validates c and converts it to the programs' configuration.
func (c Config) kernel() (redirectConfig, error) {
	var k redirectConfig
	if err := c.validateMarking(); err != nil {
		return k, err
	}
	if c.MarkedOnly {
		k.MarkedOnly = 1
	}
	if c.SkipCgroup != "" {
		id, level, err := cgroupIDLevel(c.SkipCgroup)
		if err != nil {
			return k, fmt.Errorf("redirect: config: skip cgroup: %w", err)
		}
		k.SkipCgroup, k.SkipLevel = id, level
	}
	if !c.ProxyV4.IsValid() && !c.ProxyV6.IsValid() {
		return k, errors.New("redirect: config: no proxy address")
	}
	if c.ProxyV4.IsValid() {
		ip, err := kernel4("proxy v4", c.ProxyV4)
		if err != nil {
			return k, err
		}
		k.Proxy4Ip, k.Proxy4Port, k.Has4 = ip, c.ProxyV4.Port(), 1
	}
	if c.ProxyV6.IsValid() {
		ip, err := kernel6("proxy v6", c.ProxyV6)
		if err != nil {
			return k, err
		}
		k.Proxy6Ip, k.Proxy6Port, k.Has6 = ip, c.ProxyV6.Port(), 1
	}
	if c.DNSV4.IsValid() {
		ip, err := kernel4("dns v4", c.DNSV4)
		if err != nil {
			return k, err
		}
		k.Dns4Ip, k.Dns4Port, k.HasDns4 = ip, c.DNSV4.Port(), 1
	}
	if c.DNSV6.IsValid() {
		ip, err := kernel6("dns v6", c.DNSV6)
		if err != nil {
			return k, err
		}
		k.Dns6Ip, k.Dns6Port, k.HasDns6 = ip, c.DNSV6.Port(), 1
	}
	if c.AllowQUIC && (c.QUICV4.IsValid() || c.QUICV6.IsValid()) {
		return k, errors.New("redirect: config: QUIC both allowed and sent to a QUIC listener")
	}
	if c.QUICV4.IsValid() {
		ip, err := kernel4("quic v4", c.QUICV4)
		if err != nil {
			return k, err
		}
		k.Quic4Ip, k.Quic4Port, k.HasQuic4 = ip, c.QUICV4.Port(), 1
	}
	if c.QUICV6.IsValid() {
		ip, err := kernel6("quic v6", c.QUICV6)
		if err != nil {
			return k, err
		}
		k.Quic6Ip, k.Quic6Port, k.HasQuic6 = ip, c.QUICV6.Port(), 1
	}
	if c.AllowQUIC {
		k.AllowQuic = 1
	}
	if c.AllowUDP {
		k.AllowUdp = 1
	}
	return k, nil
}

// kernel4 converts an IPv4 (or v4-mapped) address with a port.
func kernel4(what string, ap netip.AddrPort) (uint32, error) {
	a := ap.Addr().Unmap()
	if !a.Is4() || ap.Port() == 0 {
		return 0, fmt.Errorf("redirect: config: %s %s: want an IPv4 address and a port", what, ap)
	}
	b := a.As4()
	return binary.NativeEndian.Uint32(b[:]), nil
}

// kernel6 converts an IPv6 address, neither mapped nor zoned, with a port.
func kernel6(what string, ap netip.AddrPort) ([4]uint32, error) {
	a := ap.Addr()
	if !a.Is6() || a.Is4In6() || a.Zone() != "" || ap.Port() == 0 {
		return [4]uint32{}, fmt.Errorf("redirect: config: %s %s: want an IPv6 address without zone and a port", what, ap)
	}
	return words(a.As16()), nil
}

// words turns 16 address bytes into the four network-order words the
// programs use.
func words(b [16]byte) [4]uint32 {
	var w [4]uint32
	for i := range w {
		w[i] = binary.NativeEndian.Uint32(b[4*i:])
	}
	return w
}

func unwords(w [4]uint32) [16]byte {
	var b [16]byte
	for i := range w {
		binary.NativeEndian.PutUint32(b[4*i:], w[i])
	}
	return b
}

// hooks in attach order: the programs that publish and disguise the record
// come first, so no connection or query is redirected before its record
// can be found; a connection redirected without a record would be refused
// by the proxy, never let through.
func (r *Redirector) hooks() []hook {
	return hooksOf(&r.objs.redirectPrograms)
}

// hooksOf lists p's hooks; with p empty, their names and types only.
func hooksOf(p *redirectPrograms) []hook {
	return []hook{
		{"sockops", p.PublishOrigin, ebpf.AttachCGroupSockOps},
		{"egress", p.PublishUdp, ebpf.AttachCGroupInetEgress},
		{"getpeername4", p.Getpeername4, ebpf.AttachCgroupInet4GetPeername},
		{"getpeername6", p.Getpeername6, ebpf.AttachCgroupInet6GetPeername},
		{"recvmsg4", p.Recvmsg4, ebpf.AttachCGroupUDP4Recvmsg},
		{"recvmsg6", p.Recvmsg6, ebpf.AttachCGroupUDP6Recvmsg},
		{"sendmsg4", p.Sendmsg4, ebpf.AttachCGroupUDP4Sendmsg},
		{"sendmsg6", p.Sendmsg6, ebpf.AttachCGroupUDP6Sendmsg},
		{"connect4", p.Connect4, ebpf.AttachCGroupInet4Connect},
		{"connect6", p.Connect6, ebpf.AttachCGroupInet6Connect},
		{"sock_create", p.SockCreate, ebpf.AttachCGroupInetSockCreate},
	}
}

type hook struct {
	name string
	prog *ebpf.Program
	typ  ebpf.AttachType
}

// Attach attaches every program to the cgroup v2 directory cgroupPath
// (normally a session's leaf; descendants are covered too). Attach before
// any process enters the cgroup: the programs are attached one after the
// other, not atomically.
//
// The programs are attached to the cgroup itself (BPF_PROG_ATTACH with
// BPF_F_ALLOW_MULTI), not through a link owned by this process: if
// Chaperone dies, they stay and keep sending the session's connections to
// the dead proxy, which fails closed. They go when the returned Closer (or
// Close) detaches them, or when the cgroup is removed.
func (r *Redirector) Attach(cgroupPath string) (io.Closer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errors.New("redirect: attach: redirector closed")
	}
	cg, err := os.Open(cgroupPath)
	if err != nil {
		return nil, fmt.Errorf("redirect: attach: open cgroup: %w", err)
	}
	a := &attachment{r: r, cgroup: cg}
	for _, h := range r.hooks() {
		err := link.RawAttachProgram(link.RawAttachProgramOptions{
			Target:  int(cg.Fd()),
			Program: h.prog,
			Attach:  h.typ,
			Flags:   unix.BPF_F_ALLOW_MULTI,
		})
		if err != nil {
			err = loadError("attach "+h.name, err)
			return nil, errors.Join(err, a.detachLocked())
		}
		a.hooks = append(a.hooks, h)
	}
	r.attached[a] = struct{}{}
	return a, nil
}

// attachment is one cgroup's set of attached programs.
type attachment struct {
	r      *Redirector
	cgroup *os.File
	hooks  []hook // attached, in attach order
}

// Close detaches the programs from the cgroup. Calling it again does
// nothing.
func (a *attachment) Close() error {
	a.r.mu.Lock()
	defer a.r.mu.Unlock()
	return a.detachLocked()
}

func (a *attachment) detachLocked() error {
	if a.cgroup == nil {
		return nil
	}
	var errs []error
	// Reverse order: stop redirecting before the records stop being
	// published.
	for i := len(a.hooks) - 1; i >= 0; i-- {
		h := a.hooks[i]
		err := link.RawDetachProgram(link.RawDetachProgramOptions{
			Target:  int(a.cgroup.Fd()),
			Program: h.prog,
			Attach:  h.typ,
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("redirect: detach %s: %w", h.name, err))
		}
	}
	errs = append(errs, a.cgroup.Close())
	a.cgroup, a.hooks = nil, nil
	delete(a.r.attached, a)
	return errors.Join(errs...)
}

// Lookup returns the origin of the redirected connection whose client end
// is client: the remote address of the connection the proxy accepted,
// IPv4, IPv6 or v4-mapped. The record is deleted, so a second Lookup of the
// same address wraps ErrNotFound, as does a connection that was not
// redirected.
//
// The record is published before the client's SYN is sent, so it is there
// by the time the proxy accepts.
func (r *Redirector) Lookup(client netip.AddrPort) (Origin, error) {
	key := localKey(client, ipprotoTCP)
	var v redirectOrigin
	err := r.objs.OriginByLocal.LookupAndDelete(&key, &v)
	if errors.Is(err, ebpf.ErrNotSupported) {
		// Kernels before 5.14 cannot do both in one call.
		if err = r.objs.OriginByLocal.Lookup(&key, &v); err == nil {
			err = r.objs.OriginByLocal.Delete(&key)
		}
	}
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return Origin{}, fmt.Errorf("redirect: lookup %s: %w", client, ErrNotFound)
	}
	if err != nil {
		return Origin{}, fmt.Errorf("redirect: lookup %s: %w", client, err)
	}
	return v.origin(), nil
}

// LookupUDP returns the origin of the DNS query the resolver received from
// client, the datagram's source address (IPv4, IPv6 or v4-mapped). The
// record belongs to the client's socket and is kept, since one socket sends
// many queries: it describes the socket's latest redirected datagram (or
// its connect()), and is evicted from the bounded LRU map when no longer
// used. An address with no redirected query wraps ErrNotFound.
//
// The record is published as the datagram leaves, so it is there by the
// time the resolver reads the query.
func (r *Redirector) LookupUDP(client netip.AddrPort) (Origin, error) {
	key := localKey(client, ipprotoUDP)
	var v redirectOrigin
	err := r.objs.OriginByLocal.Lookup(&key, &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return Origin{}, fmt.Errorf("redirect: lookup udp %s: %w", client, ErrNotFound)
	}
	if err != nil {
		return Origin{}, fmt.Errorf("redirect: lookup udp %s: %w", client, err)
	}
	return v.origin(), nil
}

// LookupQUIC returns the origin of the QUIC connection that client (the
// datagram's source address) started with an Initial whose destination
// connection ID is dcid: the record the egress program published for that
// Initial, so that handshakes started at once from one socket to several
// servers each find their own destination. When there is no such record
// (a dcid of no Initial the hooks parsed, or one evicted), it falls back
// to LookupUDP, the socket's latest redirected datagram.
func (r *Redirector) LookupQUIC(client netip.AddrPort, dcid []byte) (Origin, error) {
	if n := len(dcid); n > 0 && n <= 20 {
		key := redirectQuicKey{Local: localKey(client, ipprotoUDP), DcidLen: uint8(n)}
		copy(key.Dcid[:], dcid)
		var v redirectOrigin
		if err := r.objs.OriginByDcid.Lookup(&key, &v); err == nil {
			return v.origin(), nil
		} else if !errors.Is(err, ebpf.ErrKeyNotExist) {
			return Origin{}, fmt.Errorf("redirect: lookup quic %s: %w", client, err)
		}
	}
	return r.LookupUDP(client)
}

// QUICRefused counts the UDP sends and connects to port 443 refused since
// Load, over every cgroup the Redirector is attached to.
func (r *Redirector) QUICRefused() (uint64, error) {
	n, err := sumPerCPU(r.objs.QuicRefused)
	if err != nil {
		return 0, fmt.Errorf("redirect: read quic refusals: %w", err)
	}
	return n, nil
}

// sumPerCPU reads a one-entry per-CPU counter.
func sumPerCPU(m *ebpf.Map) (uint64, error) {
	var perCPU []uint64
	if err := m.Lookup(uint32(0), &perCPU); err != nil {
		return 0, err
	}
	var n uint64
	for _, c := range perCPU {
		n += c
	}
	return n, nil
}

// RefusalsDropped counts the refusals that were not reported because the
// ring buffer was full (the reader fell behind), since Load. The calls were
// refused all the same.
func (r *Redirector) RefusalsDropped() (uint64, error) {
	n, err := sumPerCPU(r.objs.RefusalsDropped)
	if err != nil {
		return 0, fmt.Errorf("redirect: read dropped refusals: %w", err)
	}
	return n, nil
}

// Refusals reports every call the programs refuse, in every cgroup r is
// attached to, in the order they were made. When ctx is done, the reports
// already made are still delivered, then the channel is closed: read it
// until then. Close closes it at once, dropping what was not delivered.
// Reports wait in a bounded kernel ring buffer (256 KiB, some 3,600
// reports) until read: when the reader falls that far behind, new ones are
// dropped and counted (RefusalsDropped), and the refused calls still fail.
// Only one reader may exist: a second call fails.
func (r *Redirector) Refusals(ctx context.Context) (<-chan Refusal, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errors.New("redirect: refusals: redirector closed")
	}
	if r.refusals != nil {
		return nil, errors.New("redirect: refusals: already being read")
	}
	rd, err := ringbuf.NewReader(r.objs.Refusals)
	if err != nil {
		return nil, fmt.Errorf("redirect: refusals: %w", err)
	}
	r.refusals = rd
	return deliver(r, ctx, rd, (*redirectRefusal).refusal), nil
}

// deliver reads rd's records, as V, until ctx is done (then it delivers
// what is pending and closes the channel) or r is closed, and sends them
// converted.
func deliver[V, E any](r *Redirector, ctx context.Context, rd *ringbuf.Reader, conv func(*V) E) <-chan E {
	ch := make(chan E, 64)
	// Flush makes the reads return what is pending, then ErrFlushed.
	stop := context.AfterFunc(ctx, func() { rd.Flush() })
	go func() {
		defer close(ch)
		defer stop()
		var rec ringbuf.Record
		for {
			if err := rd.ReadInto(&rec); err != nil {
				// Flushed (ctx) or closed (Close); nothing else fails a
				// blocking read.
				return
			}
			var v V
			if err := binary.Read(bytes.NewReader(rec.RawSample), binary.NativeEndian, &v); err != nil {
				continue // shorter than a report: not one of ours
			}
			select {
			case ch <- conv(&v):
			case <-r.closing:
				return
			}
		}
	}()
	return ch
}

func (v *redirectRefusal) refusal() Refusal {
	ref := Refusal{
		Kind:     RefusalKind(v.Kind),
		Call:     Call(v.Call),
		Family:   int(v.Family),
		Type:     int(v.Type),
		Protocol: int(v.Protocol),
		PID:      v.Pid,
		TID:      v.Tid,
		UID:      v.Uid,
		GID:      v.Gid,
		CgroupID: v.CgroupId,
		Comm:     commString(v.Comm),
	}
	if ref.Call != CallSocket {
		addr := netip.AddrFrom16(unwords(v.DstIp6))
		if v.Family == afInet {
			addr = addr.Unmap()
		}
		ref.Dst = netip.AddrPortFrom(addr, v.DstPort)
	}
	return ref
}

func commString(c [16]int8) string {
	b := make([]byte, 0, len(c))
	for _, ch := range c {
		if ch == 0 {
			break
		}
		b = append(b, byte(ch))
	}
	return string(b)
}

func localKey(client netip.AddrPort, proto uint8) redirectLocalKey {
	// As16 maps an IPv4 address, which is how the programs store it.
	return redirectLocalKey{
		Ip6:   words(client.Addr().Unmap().As16()),
		Port:  client.Port(),
		Proto: proto,
	}
}

const (
	afInet = 2
)

func (v *redirectOrigin) origin() Origin {
	addr := netip.AddrFrom16(unwords(v.DstIp6))
	if v.Family == afInet {
		addr = addr.Unmap()
	}
	return Origin{
		Dst:      netip.AddrPortFrom(addr, v.DstPort),
		PID:      v.Pid,
		TID:      v.Tid,
		UID:      v.Uid,
		GID:      v.Gid,
		CgroupID: v.CgroupId,
		Cookie:   v.Cookie,
		Comm:     commString(v.Comm),
		Mark:     v.Mark,
	}
}

// MapLen counts the records waiting for a Lookup, and the UDP ones. It walks the map, so it
// is meant for tests and diagnostics, not the data path.
func (r *Redirector) MapLen() (int, error) {
	var (
		key  redirectLocalKey
		next redirectLocalKey
		n    int
	)
	var prev any // nil: start from the first key
	for {
		err := r.objs.OriginByLocal.NextKey(prev, &next)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("redirect: count records: %w", err)
		}
		n++
		key = next
		prev = &key
	}
}

// Close detaches the programs from every cgroup they are still attached to
// with Attach and releases the maps. What AttachMachine attached stays,
// pinned (see there): only RemoveMachine removes it. It is safe to call
// more than once.
func (r *Redirector) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	close(r.closing)
	var errs []error
	for a := range r.attached {
		errs = append(errs, a.detachLocked())
	}
	if r.machine != nil {
		errs = append(errs, r.machine.releaseLocked())
	}
	if r.refusals != nil {
		// Ends the reading goroutine; Close waits for a Read in progress.
		errs = append(errs, r.refusals.Close())
	}
	if r.marker != nil {
		errs = append(errs, r.marker.close())
	}
	errs = append(errs, r.objs.Close())
	return errors.Join(errs...)
}
