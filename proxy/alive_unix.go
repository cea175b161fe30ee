//go:build unix && !linux

package proxy

import "net"

// alive reports whether an idle connection is still open: nothing to read
// and no end of stream. One non-blocking peek, no deadline changes.
func alive(c net.Conn) bool { return aliveSyscall(c) }
