package proxy

import (
	"bufio"
	"bytes"
	"context"
	stdtls "crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/proxy/internal/h1"
	"github.com/chaperone-dev/chaperone/proxy/internal/netx"

	"github.com/chaperone-dev/chaperone/internal/upstream"
)

// countConn records a connection's writes and counts its reads; werr
// fails every write.
type countConn struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
	reads  int
	werr   error
}

func (c *countConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.werr != nil {
		return 0, c.werr
	}
	c.writes = append(c.writes, append([]byte(nil), b...))
	if c.Conn == nil {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *countConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	if n > 0 {
		c.reads++
	}
	c.mu.Unlock()
	return n, err
}

func (c *countConn) counts() (writes, reads int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.writes), c.reads
}

// holdConn is an upstream server's connection that can hold its writes
// and send them at once: a response in one socket write.
type holdConn struct {
	net.Conn
	held []byte
	hold bool
}

func (c *holdConn) Write(b []byte) (int, error) {
	if c.hold {
		c.held = append(c.held, b...)
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *holdConn) send() error {
	c.hold = false
	_, err := c.Conn.Write(c.held)
	c.held = nil
	return err
}

// bodyServer is an HTTPS upstream on 127.0.0.2 that answers each request
// with size bytes, its header and body sent in one socket write; sent
// gets each write's result.
func bodyServer(t *testing.T, ca *upstream.CA, name string, size int) (addr string, sent chan error) {
	t.Helper()
	cert, err := ca.Leaf(name)
	if err != nil {
		t.Fatal(err)
	}
	conf := &stdtls.Config{Certificates: []stdtls.Certificate{cert}, NextProtos: []string{"http/1.1"},
		DynamicRecordSizingDisabled: true} // records of 16 KiB from the start
	body := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	sent = make(chan error, 16)
	ap := upstream.ServeTCP(t, "127.0.0.2:0", func(c net.Conn) {
		hc := &holdConn{Conn: c}
		tc := stdtls.Server(hc, conf)
		br := bufio.NewReader(tc)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			hc.hold = true
			io.WriteString(tc, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n")
			tc.Write(body)
			sent <- hc.send()
		}
	})
	return ap.String(), sent
}

// TestH1UpstreamBatchedReads: a body that has arrived is read in socket
// reads of up to batchSize, not one a record, and the body says it is
// ready while its next record is here.
func TestH1UpstreamBatchedReads(t *testing.T) {
	ca, err := upstream.NewCA("upstream")
	if err != nil {
		t.Fatal(err)
	}
	const size = 160 << 10 // ten records
	addr, sent := bodyServer(t, ca, "batch.example.test", size)
	var cc *countConn
	var d net.Dialer
	h := &h1.Transport{
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			cc = &countConn{Conn: c}
			return cc, err
		},
		TLS:           &stdtls.Config{RootCAs: ca.Pool},
		HeaderTimeout: 5 * time.Second,
		MaxHeader:     4096,
		IdleTimeout:   time.Minute,
		MaxIdlePerKey: 4,
		MaxIdle:       16,
		Watch:         netx.NewWatch(5 * time.Second),
	}
	defer h.Close()
	req, _ := http.NewRequest(http.MethodGet, "https://batch.example.test/big", nil)
	res, err := h.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	_, before := cc.counts()
	p := make([]byte, 64<<10)
	n, err := res.Body.Read(p)
	if err != nil {
		t.Fatalf("first read: %d, %v", n, err)
	}
	// Let what is in flight on loopback land: the records still
	// to come are all in the socket's buffer.
	time.Sleep(50 * time.Millisecond)
	readyAfter := 0
	total := n
	for total < size {
		if ready(res.Body) {
			readyAfter++
		}
		n, err := res.Body.Read(p)
		total += n
		if err != nil && err != io.EOF {
			t.Fatalf("after %d bytes: %v", total, err)
		}
	}
	_, after := cc.counts()
	if got := after - before; got > 4 {
		t.Errorf("%d socket reads for the %d records of a body that had all arrived; want at most 4 (%d KiB a read)", got, size/netx.MaxPlaintext, netx.BatchSize>>10)
	}
	if readyAfter < 5 {
		t.Errorf("ready before %d of 9 reads, want most", readyAfter)
	}
}

// countListener wraps each accepted connection in a countConn.
type countListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*countConn
}

func (l *countListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &countConn{Conn: c}
	l.mu.Lock()
	l.conns = append(l.conns, cc)
	l.mu.Unlock()
	return cc, nil
}

// TestDownloadGathered: a large body is sent to the client in writes of
// several TLS records each, and arrives whole, over HTTP/1.1 and HTTP/2.
func TestDownloadGathered(t *testing.T) {
	for _, cp := range clientProtos {
		t.Run(cp.name, func(t *testing.T) {
			var cl *countListener
			e := newEnv(t, envOptions{listener: func(ln net.Listener) net.Listener {
				cl = &countListener{Listener: ln}
				return cl
			}})
			const size = 256 << 10 // sixteen records
			addr, sent := bodyServer(t, e.upCA, "gather.example.test", size)
			ap := netip.MustParseAddrPort(addr)
			e.namesMu.Lock()
			e.names["gather.example.test"] = ap.Addr()
			e.namesMu.Unlock()
			c, _ := e.client(cp.h2)
			url := "https://gather.example.test:" + strconv.Itoa(int(ap.Port())) + "/big"
			get := func() {
				t.Helper()
				res, err := c.Get(url)
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil || len(b) != size || !bytes.Equal(b[:16], []byte("0123456789abcdef")) {
					t.Fatalf("body: %d bytes, %v", len(b), err)
				}
				if err := <-sent; err != nil {
					t.Fatal(err)
				}
			}
			get() // the connections, both sides
			cl.mu.Lock()
			if len(cl.conns) != 1 {
				t.Fatalf("%d client connections, want 1", len(cl.conns))
			}
			cc := cl.conns[0]
			cl.mu.Unlock()
			before, _ := cc.counts()
			get()
			after, _ := cc.counts()
			if got := after - before; got > size/netx.MaxPlaintext/2 {
				t.Errorf("%d writes to the client for a body of %d records; want at most %d", got, size/netx.MaxPlaintext, size/netx.MaxPlaintext/2)
			}
		})
	}
}
