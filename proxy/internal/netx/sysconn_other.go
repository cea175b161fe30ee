//go:build !linux

package netx

import "net"

// rawIO returns c: sysConn is Linux's only.
func RawIO(c net.Conn) net.Conn { return c }
