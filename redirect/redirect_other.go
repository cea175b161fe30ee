//go:build !linux

package redirect

import (
	"context"
	"fmt"
	"io"
	"net/netip"
)

// Redirector is a stand-in: transparent redirection needs Linux here.
type Redirector struct{}

// Load fails with an error wrapping ErrNotSupported.
func Load(Config) (*Redirector, error) {
	return nil, fmt.Errorf("redirect: load: transparent redirection needs linux: %w", ErrNotSupported)
}

// Attach fails with an error wrapping ErrNotSupported.
func (*Redirector) Attach(string) (io.Closer, error) {
	return nil, fmt.Errorf("redirect: attach: %w", ErrNotSupported)
}

// Lookup fails with an error wrapping ErrNotSupported.
func (*Redirector) Lookup(netip.AddrPort) (Origin, error) {
	return Origin{}, fmt.Errorf("redirect: lookup: %w", ErrNotSupported)
}

// LookupUDP fails with an error wrapping ErrNotSupported.
func (*Redirector) LookupUDP(netip.AddrPort) (Origin, error) {
	return Origin{}, fmt.Errorf("redirect: lookup udp: %w", ErrNotSupported)
}

// LookupQUIC fails with an error wrapping ErrNotSupported.
func (*Redirector) LookupQUIC(netip.AddrPort, []byte) (Origin, error) {
	return Origin{}, fmt.Errorf("redirect: lookup quic: %w", ErrNotSupported)
}

// QUICRefused fails with an error wrapping ErrNotSupported.
func (*Redirector) QUICRefused() (uint64, error) {
	return 0, fmt.Errorf("redirect: read quic refusals: %w", ErrNotSupported)
}

// Refusals fails with an error wrapping ErrNotSupported.
func (*Redirector) Refusals(context.Context) (<-chan Refusal, error) {
	return nil, fmt.Errorf("redirect: refusals: %w", ErrNotSupported)
}

// RefusalsDropped fails with an error wrapping ErrNotSupported.
func (*Redirector) RefusalsDropped() (uint64, error) {
	return 0, fmt.Errorf("redirect: read dropped refusals: %w", ErrNotSupported)
}

// MapLen fails with an error wrapping ErrNotSupported.
func (*Redirector) MapLen() (int, error) {
	return 0, fmt.Errorf("redirect: count records: %w", ErrNotSupported)
}

// Close does nothing.
func (*Redirector) Close() error { return nil }
