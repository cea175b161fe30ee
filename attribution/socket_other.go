//go:build !linux

package attribution

import (
	"errors"
	"fmt"
	"net/netip"
)

// SockDiag is a SocketLookup that asks the kernel through NETLINK_SOCK_DIAG.
// There is none on this system: it returns an error wrapping
// errors.ErrUnsupported.
func SockDiag(local, remote netip.AddrPort) (uint64, error) {
	return 0, fmt.Errorf("attribution: sock_diag: %w", errors.ErrUnsupported)
}
