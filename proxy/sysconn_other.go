//go:build !linux

package proxy

import "net"

// rawIO returns c: sysConn is Linux's only.
func rawIO(c net.Conn) net.Conn { return c }
