package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"
)

const (
	defaultLeafCacheSize = 1024
	defaultLeafValidity  = 7 * 24 * time.Hour

	// maxCommonNameLen is the X.520 upper bound on a common name; longer
	// hosts are carried in the SAN only, which is what clients check anyway.
	maxCommonNameLen = 64
)

// LeafOptions tunes Leaves. Zero values select the defaults.
type LeafOptions struct {
	Size     int              // cached leaves, least recently used evicted first; default 1024
	Validity time.Duration    // leaf lifetime, capped at the CA's; default 7 days
	Now      func() time.Time // default time.Now
	Rand     io.Reader        // serial numbers; default crypto/rand.Reader
}

// Leaves mints leaf certificates signed by a CA and caches them by host. It is
// safe for concurrent use.
type Leaves struct {
	ca       *CA
	validity time.Duration
	now      func() time.Time

	randMu sync.Mutex // an injected reader need not be safe for concurrent use
	rand   io.Reader

	// One key serves every leaf, as in mitmproxy: minting is then a single
	// signature instead of a key generation plus a signature, and a per-leaf
	// key would protect nothing, since the CA key that could mint any leaf
	// lives in the same process memory.
	key    *ecdsa.PrivateKey
	keyErr error

	cache  *lru.Cache[string, cachedLeaf]
	flight singleflight.Group
	hits   atomic.Uint64
	misses atomic.Uint64
}

type cachedLeaf struct {
	cert      *tls.Certificate
	refreshAt time.Time // when less than a quarter of the leaf's validity remains
}

// NewLeaves returns a leaf minter for ca, which must not be nil.
func NewLeaves(ca *CA, opts LeafOptions) *Leaves {
	if opts.Size <= 0 {
		opts.Size = defaultLeafCacheSize
	}
	if opts.Validity <= 0 {
		opts.Validity = defaultLeafValidity
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Rand == nil {
		opts.Rand = rand.Reader
	}
	cache, err := lru.New[string, cachedLeaf](opts.Size)
	if err != nil {
		panic("certs: lru.New with positive size failed: " + err.Error()) // unreachable: Size > 0
	}
	l := &Leaves{ca: ca, validity: opts.Validity, now: opts.Now, rand: opts.Rand, cache: cache}
	// Key generation cannot fail with the crypto packages' own random source;
	// should it, every Certificate call reports it.
	l.key, l.keyErr = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if l.keyErr != nil {
		l.keyErr = fmt.Errorf("certs: generate leaf key: %w", l.keyErr)
	}
	return l
}

// Certificate returns a leaf for host, a DNS name or an IP literal (IPv6 may
// be in brackets), minting it on first use and again when less than a quarter
// of its validity remains. Hosts are cached by their normalised form
// (lowercase, no trailing dot). An invalid host yields an error wrapping
// ErrInvalidHost.
//
// The chain holds the leaf only: clients trust the CA directly (it is in
// their bundle as a root), and a root sent in the handshake is ignored by
// them, so omitting it saves its bytes on every handshake.
func (l *Leaves) Certificate(host string) (*tls.Certificate, error) {
	h, err := parseHost(host)
	if err != nil {
		return nil, err
	}
	if l.keyErr != nil {
		return nil, l.keyErr
	}
	if c, ok := l.cache.Get(h.name); ok && l.now().Before(c.refreshAt) {
		l.hits.Add(1)
		return c.cert, nil
	}
	minted := false // set only by the goroutine that runs the function
	v, err, _ := l.flight.Do(h.name, func() (any, error) {
		// Another caller may have minted between our lookup and Do.
		now := l.now()
		if c, ok := l.cache.Get(h.name); ok && now.Before(c.refreshAt) {
			return c.cert, nil
		}
		c, err := l.mint(h, now)
		if err != nil {
			return nil, err
		}
		l.cache.Add(h.name, c)
		minted = true
		return c.cert, nil
	})
	if err != nil {
		return nil, err
	}
	if minted {
		l.misses.Add(1)
	} else {
		l.hits.Add(1)
	}
	return v.(*tls.Certificate), nil
}

// GetCertificate serves tls.Config.GetCertificate: the leaf for the client's
// SNI or, when the client sent none (it dialled an IP address), for the IP
// address of the connection's local end. A transparent proxy passes a Conn
// whose LocalAddr is the original destination.
func (l *Leaves) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if hello == nil {
		return nil, errors.New("certs: no client hello")
	}
	if hello.ServerName != "" {
		return l.Certificate(hello.ServerName)
	}
	if hello.Conn != nil {
		if ip, ok := addrIP(hello.Conn.LocalAddr()); ok {
			return l.Certificate(ip.String())
		}
	}
	return nil, errors.New("certs: client hello has no server name and its connection no local IP address")
}

// Stats reports calls answered without minting (from the cache or by sharing
// a concurrent mint) and leaves minted.
func (l *Leaves) Stats() (hits, misses uint64) {
	return l.hits.Load(), l.misses.Load()
}

func addrIP(a net.Addr) (netip.Addr, bool) {
	switch a := a.(type) {
	case nil:
		return netip.Addr{}, false
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		return ip, ok
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr(), true
}

func (l *Leaves) mint(h leafHost, now time.Time) (cachedLeaf, error) {
	caCert := l.ca.cert
	if !now.Before(caCert.NotAfter) {
		return cachedLeaf{}, fmt.Errorf("certs: mint leaf for %s: ca expired at %s", h.name, caCert.NotAfter.UTC().Format(time.RFC3339))
	}
	notAfter := now.Add(l.validity)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter
	}
	l.randMu.Lock()
	serial, err := randomSerial(l.rand)
	l.randMu.Unlock()
	if err != nil {
		return cachedLeaf{}, fmt.Errorf("certs: mint leaf for %s: %w", h.name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if len(h.name) <= maxCommonNameLen {
		tmpl.Subject = pkix.Name{CommonName: h.name}
	}
	if h.ip.IsValid() {
		tmpl.IPAddresses = []net.IP{h.ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{h.name}
	}
	// Signing draws from crypto/rand, which is safe for concurrent mints (the
	// crypto packages ignore a custom reader for signatures since Go 1.26).
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &l.key.PublicKey, l.ca.key)
	if err != nil {
		return cachedLeaf{}, fmt.Errorf("certs: mint leaf for %s: %w", h.name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return cachedLeaf{}, fmt.Errorf("certs: mint leaf for %s: parse: %w", h.name, err)
	}
	span := leaf.NotAfter.Sub(leaf.NotBefore)
	return cachedLeaf{
		cert: &tls.Certificate{
			Certificate: [][]byte{der},
			PrivateKey:  l.key,
			Leaf:        leaf,
		},
		refreshAt: leaf.NotAfter.Add(-span / 4),
	}, nil
}
