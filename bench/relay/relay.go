package relay

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// Serve accepts connections on l until l is closed, and relays each one
// that opens with a CONNECT request to a loopback IP:port. Out of file
// descriptors, it waits for some to close rather than stop.
func Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			time.Sleep(10 * time.Millisecond) // out of descriptors: wait for some to close
			continue
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go relay(c)
	}
}

func relay(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.Method != http.MethodConnect {
		io.WriteString(c, "HTTP/1.1 405 Method Not Allowed\r\nAllow: CONNECT\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	ap, err := netip.ParseAddrPort(req.Host)
	if err != nil || !ap.Addr().Unmap().IsLoopback() {
		io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	up, err := net.Dial("tcp", ap.String())
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	defer up.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyThrough(up, br) // what the client sent after its request, then the rest
		closeWrite(up)
	}()
	copyThrough(c, up)
	closeWrite(c)
	<-done
}

// copyThrough copies src to dst through a buffer in this process, as any
// proxy that looks at the bytes must: not with splice(2) from socket to
// socket, which io.Copy would use.
func copyThrough(dst io.Writer, src io.Reader) {
	io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, make([]byte, 32<<10))
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}
