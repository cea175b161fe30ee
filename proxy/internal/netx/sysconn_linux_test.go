package netx

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// TestSysConn holds sysConn to what net.TCPConn does, case by case: the
// same bytes, the same ends and the same errors as the caller tests them.
func TestSysConn(t *testing.T) {
	kinds := []struct {
		name string
		wrap func(net.Conn) net.Conn
	}{
		{"net.TCPConn", func(c net.Conn) net.Conn { return c }},
		{"sysConn", RawIO},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Run("large write to a slow reader", func(t *testing.T) {
				c, s := tcpPair(t)
				sc := k.wrap(s)
				want := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB: far past the socket buffers
				done := make(chan error, 1)
				go func() {
					n, err := sc.Write(want)
					if err == nil && n != len(want) {
						err = io.ErrShortWrite
					}
					done <- err
				}()
				time.Sleep(20 * time.Millisecond)                   // the writer fills the buffers and waits
				c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a writer that gave up fails the test, not hangs it
				got, err := io.ReadAll(io.LimitReader(bufio.NewReaderSize(c, 1000), int64(len(want))))
				if err != nil {
					t.Fatal(err)
				}
				if err := <-done; err != nil {
					t.Fatalf("write: %v", err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("read %d bytes, not the %d written", len(got), len(want))
				}
			})
			t.Run("reads what comes, then the end", func(t *testing.T) {
				c, s := tcpPair(t)
				sc := k.wrap(s)
				go func() {
					c.Write([]byte("hello"))
					time.Sleep(10 * time.Millisecond)
					c.Write([]byte(" world"))
					c.CloseWrite()
				}()
				got, err := io.ReadAll(sc)
				if err != nil || string(got) != "hello world" {
					t.Fatalf("ReadAll = %q, %v", got, err)
				}
				n, err := sc.Read(make([]byte, 8))
				if n != 0 || err != io.EOF {
					t.Fatalf("read past the end = %d, %v; want 0, io.EOF", n, err)
				}
				if n, err := sc.Read(nil); n != 0 || err != nil {
					t.Fatalf("empty read = %d, %v", n, err)
				}
			})
			t.Run("deadline", func(t *testing.T) {
				_, s := tcpPair(t)
				sc := k.wrap(s)
				sc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
				_, err := sc.Read(make([]byte, 8))
				var ne net.Error
				if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
					t.Fatalf("read past the deadline: %v; want a timeout", err)
				}
				checkOp(t, err, "read")
			})
			t.Run("closed while reading", func(t *testing.T) {
				_, s := tcpPair(t)
				sc := k.wrap(s)
				go func() {
					time.Sleep(20 * time.Millisecond)
					sc.Close()
				}()
				_, err := sc.Read(make([]byte, 8))
				if !errors.Is(err, net.ErrClosed) {
					t.Fatalf("read of a closed connection: %v; want net.ErrClosed", err)
				}
				checkOp(t, err, "read")
				_, err = sc.Write([]byte("x"))
				if !errors.Is(err, net.ErrClosed) {
					t.Fatalf("write to a closed connection: %v; want net.ErrClosed", err)
				}
				checkOp(t, err, "write")
			})
			t.Run("reset by the peer", func(t *testing.T) {
				c, s := tcpPair(t)
				sc := k.wrap(s)
				sc.Write([]byte("unread")) // closing with this unread makes the peer reset
				time.Sleep(10 * time.Millisecond)
				c.Close()
				_, err := sc.Read(make([]byte, 8))
				if !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("read after a reset: %v; want ECONNRESET", err)
				}
				checkOp(t, err, "read")
				var se *os.SyscallError
				if !errors.As(err, &se) || se.Syscall != "read" {
					t.Fatalf("read after a reset: %#v; want an os.SyscallError of read", err)
				}
				for i := 0; ; i++ { // the reset is spent: writes fail with a broken pipe
					_, err = sc.Write([]byte("more"))
					if err != nil {
						break
					}
					if i == 100 {
						t.Fatal("writes after a reset succeed")
					}
				}
				if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("write after a reset: %v; want EPIPE or ECONNRESET", err)
				}
				checkOp(t, err, "write")
			})
			t.Run("half close", func(t *testing.T) {
				c, s := tcpPair(t)
				sc := k.wrap(s)
				cw, ok := sc.(interface{ CloseWrite() error })
				if !ok {
					t.Fatal("no CloseWrite")
				}
				sc.Write([]byte("bye"))
				if err := cw.CloseWrite(); err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(c)
				if err != nil || string(got) != "bye" {
					t.Fatalf("peer read %q, %v", got, err)
				}
			})
			t.Run("reads and writes at once", func(t *testing.T) {
				c, s := tcpPair(t)
				sc := k.wrap(s)
				go io.Copy(c, c) // the peer echoes
				const n = 1 << 20
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					b := make([]byte, 1000)
					for sent := 0; sent < n; sent += len(b) {
						if _, err := sc.Write(b[:min(len(b), n-sent)]); err != nil {
							t.Error(err)
							return
						}
					}
				}()
				got, err := io.Copy(io.Discard, io.LimitReader(sc, n))
				wg.Wait()
				if err != nil || got != n {
					t.Fatalf("echoed %d bytes, %v; want %d", got, err, n)
				}
			})
		})
	}
}

func checkOp(t *testing.T, err error, op string) {
	t.Helper()
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != op || oe.Net != "tcp" || oe.Addr == nil || oe.Source == nil {
		t.Fatalf("%v: want a net.OpError of %s with both addresses", err, op)
	}
}

func TestSysConnIdle(t *testing.T) {
	c, s := tcpPair(t)
	sc, ok := RawIO(s).(*sysConn)
	if !ok {
		t.Fatalf("rawIO of a TCP connection is a %T", RawIO(s))
	}
	if !Alive(sc) {
		t.Fatal("a quiet connection is not alive")
	}
	c.Write([]byte("x"))
	time.Sleep(10 * time.Millisecond)
	if Alive(sc) {
		t.Fatal("a connection with a byte to read is alive")
	}
	sc.Read(make([]byte, 1))
	if !Alive(sc) {
		t.Fatal("a connection whose byte was read is not alive")
	}
	c.Close()
	time.Sleep(10 * time.Millisecond)
	if Alive(sc) {
		t.Fatal("a connection the peer closed is alive")
	}
	if p := (&net.UnixConn{}); RawIO(p) != net.Conn(p) {
		t.Fatal("rawIO wrapped a connection other than TCP")
	}
}

// TestSysConnQuietRuntime: request and answer, one at a time, with a
// peer in another process that takes a moment to answer, so that every
// one of this process's processors goes idle while it waits, as the
// proxy's do serving one request at a time. Through net.TCPConn each exchange wakes the
// runtime's monitor thread (counted as the process's voluntary context
// switches); through sysConn it does not.
func TestSysConnQuietRuntime(t *testing.T) {
	if raceBuild {
		t.Skip("with the race detector sysConn's calls go through the runtime's entry (sysconn_race.go); `make test` runs this test without it")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: it plays the peer")
	}
	const echo = `
import socket, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
print(l.getsockname()[1], flush=True)
while True:
    c, _ = l.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        b = c.recv(64)
        if not b: break
        time.sleep(0.0002)  # a moment's work: the caller's processors all go idle
        c.sendall(b)
    c.close()
`
	cmd := exec.Command(py, "-c", echo)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	port, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + port[:len(port)-1]

	const exchanges = 500
	perExchange := func(wrap func(net.Conn) net.Conn) float64 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conn := wrap(c)
		msg, got := []byte("ping"), make([]byte, 4)
		exchange := func() {
			if _, err := conn.Write(msg); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(conn, got); err != nil {
				t.Fatal(err)
			}
		}
		for range 100 { // warm up
			exchange()
		}
		before := voluntarySwitches(t)
		for range exchanges {
			exchange()
		}
		return float64(voluntarySwitches(t)-before) / exchanges
	}
	var plain, raw float64
	for range 3 { // alternated: what else the machine does weighs on both
		plain += perExchange(func(c net.Conn) net.Conn { return c })
		raw += perExchange(RawIO)
	}
	plain, raw = plain/3, raw/3
	t.Logf("voluntary context switches per exchange: net.TCPConn %.2f, sysConn %.2f", plain, raw)
	if raw > 0.75*plain {
		t.Fatalf("sysConn's exchanges cost %.2f context switches each, net.TCPConn's %.2f: want at most three quarters", raw, plain)
	}
}

// voluntarySwitches is how many times the process's threads have slept.
func voluntarySwitches(t *testing.T) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Nvcsw
}
