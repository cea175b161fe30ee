package proxy

import (
	"bufio"
	"bytes"
	"context"
	stdtls "crypto/tls"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/internal/upstream"
)

// scriptConn is a connection whose reads return its chunks, one a read
// (less when the reader's buffer is smaller), then io.EOF.
type scriptConn struct {
	net.Conn
	chunks [][]byte
	reads  int // reads that returned bytes
}

func (c *scriptConn) Read(p []byte) (int, error) {
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	c.reads++
	n := copy(p, c.chunks[0])
	if c.chunks[0] = c.chunks[0][n:]; len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}

// record is a TLS application-data record with n bytes of body, all fill.
func record(n int, fill byte) []byte {
	return append([]byte{23, 3, 3, byte(n >> 8), byte(n)}, bytes.Repeat([]byte{fill}, n)...)
}

// TestBatchConn: what one socket read brings in is handed on a record at
// most at a time (its header, with what is here of its body); recordReady
// says when the next record is all here; the buffer goes back to its pool
// once drained.
func TestBatchConn(t *testing.T) {
	r1, r2, r3 := record(100, 'a'), record(maxPlaintext+16, 'b'), record(3000, 'c')
	first := append(append(append([]byte{}, r1...), r2...), r3[:1000]...)
	sc := &scriptConn{chunks: [][]byte{first, r3[1000:]}}
	bc := &batchConn{Conn: sc}
	if bc.recordReady() {
		t.Fatal("recordReady before any read")
	}
	steps := []struct {
		want      []byte
		ready     bool // recordReady after the read
		sockReads int  // reads of the connection so far
		holding   bool // the buffer is still held
	}{
		{r1, true, 1, true},
		{r2[:3], false, 1, true},     // a short read: part of r2's header
		{r2[3:5], false, 1, true},    // the rest of it
		{r2[5:], false, 1, true},     // its body; r3 is not all here
		{r3[:1000], false, 1, false}, // what is here of r3; drained
		{r3[1000:], false, 2, false},
	}
	p := make([]byte, 64<<10)
	for i, s := range steps {
		q := p
		if i == 1 {
			q = p[:3]
		}
		n, err := bc.Read(q)
		if err != nil || !bytes.Equal(p[:n], s.want) {
			t.Fatalf("read %d: %d bytes (%v), want %d", i, n, err, len(s.want))
		}
		if got := bc.recordReady(); got != s.ready {
			t.Errorf("read %d: recordReady %v, want %v", i, got, s.ready)
		}
		if sc.reads != s.sockReads {
			t.Errorf("read %d: %d socket reads, want %d", i, sc.reads, s.sockReads)
		}
		if got := bc.buf != nil; got != s.holding {
			t.Errorf("read %d: holding a buffer %v, want %v", i, got, s.holding)
		}
	}
	if n, err := bc.Read(p); n != 0 || err != io.EOF {
		t.Errorf("at the end: %d, %v; want 0, EOF", n, err)
	}
	if bc.buf != nil {
		t.Error("buffer held at the end")
	}
}

// FuzzBatchConn: whatever the bytes (records or not) and however the
// socket and the reader cut them, batchConn hands on the same bytes, never
// a read across two records, says recordReady exactly when the next record
// is all buffered, and holds no buffer once drained.
func FuzzBatchConn(f *testing.F) {
	f.Add(append(record(100, 'a'), record(2000, 'b')...), uint64(1))
	f.Add(append(record(maxPlaintext, 'a'), 23, 3, 3, 0xff), uint64(2))
	f.Add([]byte("HTTP/1.1 200 OK\r\n\r\n"), uint64(3))
	f.Add(bytes.Repeat(record(0, 'x'), 20), uint64(4))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, seed>>1))
		// Where each record starts, and the ends a read must not cross:
		// each record's, as far as the data goes.
		starts := map[int]bool{}
		var ends []int
		for at := 0; at < len(data); {
			starts[at] = true
			h := min(at+5, len(data))
			if h-at < 5 {
				break
			}
			n := int(data[at+3])<<8 | int(data[at+4])
			at = min(h+n, len(data))
			ends = append(ends, at)
		}
		var chunks [][]byte
		for rest := data; len(rest) > 0; {
			n := min(len(rest), randSize(rng, 3*maxRecord))
			chunks, rest = append(chunks, rest[:n]), rest[n:]
		}
		sc := &scriptConn{chunks: chunks}
		bc := &batchConn{Conn: sc}
		delivered := func() int {
			n := len(data)
			for _, c := range sc.chunks {
				n -= len(c)
			}
			return n
		}
		var got []byte
		for {
			p := make([]byte, randSize(rng, 2*maxRecord))
			n, err := bc.Read(p)
			if n == 0 {
				if err != io.EOF {
					t.Fatalf("read: %d, %v", n, err)
				}
				break
			}
			at := len(got)
			got = append(got, p[:n]...)
			for _, e := range ends {
				if at < e && e < len(got) {
					t.Fatalf("a read of [%d, %d) crosses %d", at, len(got), e)
				}
			}
			want := false
			if rest := data[len(got):delivered()]; starts[len(got)] && len(rest) >= 5 {
				want = len(rest) >= 5+(int(rest[3])<<8|int(rest[4]))
			}
			if bc.recordReady() != want {
				t.Fatalf("after %d bytes (%d delivered): recordReady %v, want %v", len(got), delivered(), !want, want)
			}
			if len(got) == delivered() && bc.buf != nil {
				t.Fatalf("after %d bytes, all delivered: buffer held", len(got))
			}
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("read %d bytes, not the %d sent", len(got), len(data))
		}
	})
}

// randSize is a read's or a chunk's size: up to max, a few bytes a quarter
// of the time.
func randSize(rng *rand.Rand, max int) int {
	if rng.IntN(4) == 0 {
		return 1 + rng.IntN(8)
	}
	return 1 + rng.IntN(max)
}

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

// TestTunnelConnGather: writes between gather(true) and gather(false) go
// out as one; one that would grow the buffer sends what it holds, then
// itself; a failed send is gather's error.
func TestTunnelConnGather(t *testing.T) {
	cc := &countConn{}
	tc := &tunnelConn{Conn: cc}
	tc.Write([]byte("plain"))
	tc.gather(true)
	for _, s := range []string{"one ", "two ", "three"} {
		if n, err := tc.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("gathered write: %d, %v", n, err)
		}
	}
	if w, _ := cc.counts(); w != 1 {
		t.Fatalf("%d writes while gathering, want the 1 before", w)
	}
	if err := tc.gather(false); err != nil {
		t.Fatal(err)
	}
	if err := tc.gather(false); err != nil { // nothing more to send
		t.Fatal(err)
	}
	tc.gather(true)
	tc.Write([]byte("small"))
	big := bytes.Repeat([]byte("b"), batchSize+4*maxRecord+1)
	if n, err := tc.Write(big); n != len(big) || err != nil {
		t.Fatalf("big write: %d, %v", n, err)
	}
	tc.Write([]byte("after"))
	tc.gather(false)
	want := []string{"plain", "one two three", "small", string(big), "after"}
	if len(cc.writes) != len(want) {
		t.Fatalf("%d writes, want %d", len(cc.writes), len(want))
	}
	for i, w := range want {
		if string(cc.writes[i]) != w {
			t.Errorf("write %d: %.20q (%d bytes), want %.20q (%d)", i, cc.writes[i], len(cc.writes[i]), w, len(w))
		}
	}
	if tc.gathered != nil {
		t.Error("buffer held after gather(false)")
	}
	cc.werr = errors.New("broken pipe")
	tc.gather(true)
	tc.Write([]byte("lost"))
	if err := tc.gather(false); err == nil {
		t.Error("gather(false) = nil; want the failed send's error")
	}
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
	ap := serveTCP(t, "127.0.0.2:0", func(c net.Conn) {
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
	h := newTestH1(5*time.Second, time.Minute)
	h.tls = &stdtls.Config{RootCAs: ca.Pool}
	var cc *countConn
	dial := h.dial
	h.dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		cc = &countConn{Conn: c}
		return cc, err
	}
	defer h.close()
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
		t.Errorf("%d socket reads for the %d records of a body that had all arrived; want at most 4 (%d KiB a read)", got, size/maxPlaintext, batchSize>>10)
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
			if got := after - before; got > size/maxPlaintext/2 {
				t.Errorf("%d writes to the client for a body of %d records; want at most %d", got, size/maxPlaintext, size/maxPlaintext/2)
			}
		})
	}
}

// TestByteQueue: bytes come out as they went in, whatever the sizes of
// the writes and reads; the queue holds only the chunks its bytes need,
// and none once empty or reset.
func TestByteQueue(t *testing.T) {
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 0))
		var q byteQueue
		var in, out []byte
		for range 200 {
			if rng.IntN(2) == 0 {
				p := make([]byte, randSize(rng, 3*batchSize))
				for i := range p {
					p[i] = byte((len(in) + i) % 251) // a byte out of place shows
				}
				q.write(p)
				in = append(in, p...)
			} else {
				p := make([]byte, randSize(rng, 3*batchSize))
				out = append(out, p[:q.read(p)]...)
			}
			if q.len() != len(in)-len(out) {
				t.Fatalf("seed %d: len %d, want %d", seed, q.len(), len(in)-len(out))
			}
			if need := (q.r + q.len() + batchSize - 1) / batchSize; len(q.chunks) != need {
				t.Fatalf("seed %d: %d chunks for %d bytes from offset %d, want %d", seed, len(q.chunks), q.len(), q.r, need)
			}
		}
		for q.len() > 0 {
			p := make([]byte, randSize(rng, batchSize))
			out = append(out, p[:q.read(p)]...)
		}
		if !bytes.Equal(in, out) {
			t.Fatalf("seed %d: %d bytes out differ from the %d in", seed, len(out), len(in))
		}
		if len(q.chunks) != 0 {
			t.Fatalf("seed %d: %d chunks held when empty", seed, len(q.chunks))
		}
		q.write(make([]byte, batchSize+1))
		q.reset()
		if q.len() != 0 || len(q.chunks) != 0 {
			t.Fatalf("seed %d: %d bytes in %d chunks after reset", seed, q.len(), len(q.chunks))
		}
	}
}
