package attribution

import (
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// SockDiag is a SocketLookup that asks the kernel through NETLINK_SOCK_DIAG
// (inet_diag) for the one TCP socket (local, remote), in the network
// namespace of the calling process. It needs no privileges. A socket bound
// to a device (SO_BINDTODEVICE, a VRF) is not found this way; /proc/net
// lists it. The error wraps errors.ErrUnsupported when the kernel has no
// sock_diag or this process may not open it, and ErrNotFound when there is no
// such socket.
func SockDiag(local, remote netip.AddrPort) (uint64, error) {
	local, remote = normalize(local), normalize(remote)
	return sockDiag(local, remote, diagFamilies(local, remote))
}

// sockDiag asks for the socket (local, remote), normalized, as each of
// families in turn until one finds it.
func sockDiag(local, remote netip.AddrPort, families []uint8) (uint64, error) {
	if len(families) == 0 {
		return 0, fmt.Errorf("%w: no tcp socket %v -> %v", ErrNotFound, local, remote)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		if errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			// No sock_diag in this kernel, or not for this process.
			return 0, fmt.Errorf("attribution: sock_diag: open netlink socket: %w: %w", errors.ErrUnsupported, err)
		}
		return 0, fmt.Errorf("attribution: sock_diag: open netlink socket: %w", err)
	}
	defer unix.Close(fd)
	// Connected to the kernel (port id 0), the socket takes no message
	// from another process.
	if err := unix.Connect(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("attribution: sock_diag: connect: %w", err)
	}
	// The kernel answers within the write; the timeout only bounds a kernel
	// that does not.
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1}); err != nil {
		return 0, fmt.Errorf("attribution: sock_diag: set receive timeout: %w", err)
	}
	var buf [8192]byte
	var firstErr error
	for i, family := range families {
		ino, err := sockDiagOnce(fd, buf[:], uint32(i+1), family, local, remote)
		if err == nil {
			return ino, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if !errors.Is(err, ErrNotFound) {
			return 0, err
		}
	}
	return 0, firstErr
}

func sockDiagOnce(fd int, buf []byte, seq uint32, family uint8, local, remote netip.AddrPort) (uint64, error) {
	if _, err := unix.Write(fd, inetDiagRequest(seq, family, local, remote)); err != nil {
		return 0, fmt.Errorf("attribution: sock_diag: send: %w", err)
	}
	n, err := unix.Read(fd, buf)
	if err != nil {
		return 0, fmt.Errorf("attribution: sock_diag: receive: %w", err)
	}
	s, err := parseInetDiag(buf[:n], seq)
	if err != nil {
		return 0, err
	}
	return matchDiag(s, local, remote)
}
