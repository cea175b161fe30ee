package attribution

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
)

// The parsers below read bytes the kernel wrote, but a process controls part
// of them (its comm, its argv), so they never trust lengths or layout and
// never panic.

// procStat is what Table needs from /proc/PID/stat.
type procStat struct {
	pid        int
	comm       string
	state      byte
	ppid       int
	startTicks uint64 // field 22: clock ticks since boot
}

var errStat = errors.New("malformed stat")

// parseStat parses /proc/PID/stat. The comm field is in parentheses and may
// itself hold spaces and parentheses (a process names itself with prctl), so
// it ends at the last ')' of the line.
func parseStat(data []byte) (procStat, error) {
	var st procStat
	open := bytes.IndexByte(data, '(')
	end := bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return st, errStat
	}
	pid, ok := parseDec(bytes.TrimSpace(data[:open]))
	if !ok || pid == 0 || pid > 1<<31-1 {
		return st, errStat
	}
	st.pid = int(pid)
	st.comm = string(data[open+1 : end])

	// Fields after comm, numbered from 3 (state) as in proc(5).
	rest := data[end+1:]
	for n := 3; n <= 22; n++ {
		var f []byte
		f, rest = nextField(rest)
		if len(f) == 0 {
			return st, errStat
		}
		switch n {
		case 3:
			if len(f) != 1 {
				return st, errStat
			}
			st.state = f[0]
		case 4:
			v, ok := parseDec(f)
			if !ok || v > 1<<31-1 {
				return st, errStat
			}
			st.ppid = int(v)
		case 22:
			v, ok := parseDec(f)
			if !ok {
				return st, errStat
			}
			st.startTicks = v
		}
	}
	return st, nil
}

// parseBtime returns the boot time, in seconds since the epoch, from
// /proc/stat's "btime" line.
func parseBtime(data []byte) (int64, bool) {
	for len(data) > 0 {
		var line []byte
		line, data = nextLine(data)
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			n, ok := parseDec(bytes.TrimSpace(v))
			if !ok || n > 1<<62 {
				return 0, false
			}
			return int64(n), true
		}
	}
	return 0, false
}

// parseStatusUID returns the real uid, the first value of the "Uid:" line of
// /proc/PID/status.
func parseStatusUID(data []byte) (int, bool) {
	for len(data) > 0 {
		var line []byte
		line, data = nextLine(data)
		if v, ok := bytes.CutPrefix(line, []byte("Uid:")); ok {
			f, _ := nextField(v)
			n, ok := parseDec(f)
			if !ok || n > 1<<32-1 {
				return 0, false
			}
			return int(n), true
		}
	}
	return 0, false
}

// parseNetTCP calls fn for each socket line of /proc/net/tcp or
// /proc/net/tcp6 until fn returns false. Lines that do not parse (the header,
// garbage) are skipped. Addresses are as the kernel wrote them: an IPv4
// socket listed in tcp6 comes out as ::ffff:a.b.c.d.
func parseNetTCP(data []byte, fn func(local, remote netip.AddrPort, inode uint64) bool) {
	for len(data) > 0 {
		var line []byte
		line, data = nextLine(data)
		local, remote, inode, ok := parseNetTCPLine(line)
		if !ok {
			continue
		}
		if !fn(local, remote, inode) {
			return
		}
	}
}

// parseNetTCPLine parses one line:
//
//	sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
func parseNetTCPLine(line []byte) (local, remote netip.AddrPort, inode uint64, ok bool) {
	var f [10][]byte
	rest := line
	for i := range f {
		f[i], rest = nextField(rest)
		if len(f[i]) == 0 {
			return local, remote, 0, false
		}
	}
	if f[0][len(f[0])-1] != ':' {
		return local, remote, 0, false
	}
	if local, ok = parseHexAddrPort(f[1]); !ok {
		return local, remote, 0, false
	}
	if remote, ok = parseHexAddrPort(f[2]); !ok {
		return local, remote, 0, false
	}
	if inode, ok = parseDec(f[9]); !ok {
		return local, remote, 0, false
	}
	return local, remote, inode, true
}

// parseHexAddrPort parses "0100007F:1F90". The kernel prints each 32-bit word
// of the address as a host-order integer (%08X of the network-order bytes),
// so the bytes come back in host order; the port is an ordinary number.
func parseHexAddrPort(b []byte) (netip.AddrPort, bool) {
	i := bytes.IndexByte(b, ':')
	if i < 0 {
		return netip.AddrPort{}, false
	}
	hexAddr, hexPort := b[:i], b[i+1:]
	if len(hexPort) == 0 || len(hexPort) > 4 {
		return netip.AddrPort{}, false
	}
	port, ok := parseHex(hexPort)
	if !ok {
		return netip.AddrPort{}, false
	}
	var addr netip.Addr
	switch len(hexAddr) {
	case 8:
		w, ok := parseHex(hexAddr)
		if !ok {
			return netip.AddrPort{}, false
		}
		var a [4]byte
		binary.NativeEndian.PutUint32(a[:], uint32(w))
		addr = netip.AddrFrom4(a)
	case 32:
		var a [16]byte
		for k := range 4 {
			w, ok := parseHex(hexAddr[8*k : 8*k+8])
			if !ok {
				return netip.AddrPort{}, false
			}
			binary.NativeEndian.PutUint32(a[4*k:], uint32(w))
		}
		addr = netip.AddrFrom16(a)
	default:
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(addr, uint16(port)), true
}

// parseDec parses a non-empty unsigned decimal number that fits in 63 bits.
func parseDec[T []byte | string](b T) (uint64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

// parseHex parses a non-empty unsigned hexadecimal number of at most 8
// digits.
func parseHex(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 8 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		default:
			return 0, false
		}
		n = n<<4 | uint64(d)
	}
	return n, true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// nextField returns the first space-separated field of b and what follows
// it; field is empty when b holds only spaces.
func nextField(b []byte) (field, rest []byte) {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !isSpace(b[j]) {
		j++
	}
	return b[i:j], b[j:]
}

func nextLine(b []byte) (line, rest []byte) {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}
