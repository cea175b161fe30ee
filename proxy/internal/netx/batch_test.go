package netx

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
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
	r1, r2, r3 := record(100, 'a'), record(MaxPlaintext+16, 'b'), record(3000, 'c')
	first := append(append(append([]byte{}, r1...), r2...), r3[:1000]...)
	sc := &scriptConn{chunks: [][]byte{first, r3[1000:]}}
	bc := &BatchConn{Conn: sc}
	if bc.RecordReady() {
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
		if got := bc.RecordReady(); got != s.ready {
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
	f.Add(append(record(MaxPlaintext, 'a'), 23, 3, 3, 0xff), uint64(2))
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
			n := min(len(rest), randSize(rng, 3*MaxRecord))
			chunks, rest = append(chunks, rest[:n]), rest[n:]
		}
		sc := &scriptConn{chunks: chunks}
		bc := &BatchConn{Conn: sc}
		delivered := func() int {
			n := len(data)
			for _, c := range sc.chunks {
				n -= len(c)
			}
			return n
		}
		var got []byte
		for {
			p := make([]byte, randSize(rng, 2*MaxRecord))
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
			if bc.RecordReady() != want {
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

// TestByteQueue: bytes come out as they went in, whatever the sizes of
// the writes and reads; the queue holds only the chunks its bytes need,
// and none once empty or reset.
func TestByteQueue(t *testing.T) {
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 0))
		var q ByteQueue
		var in, out []byte
		for range 200 {
			if rng.IntN(2) == 0 {
				p := make([]byte, randSize(rng, 3*BatchSize))
				for i := range p {
					p[i] = byte((len(in) + i) % 251) // a byte out of place shows
				}
				q.Write(p)
				in = append(in, p...)
			} else {
				p := make([]byte, randSize(rng, 3*BatchSize))
				out = append(out, p[:q.Read(p)]...)
			}
			if q.Len() != len(in)-len(out) {
				t.Fatalf("seed %d: len %d, want %d", seed, q.Len(), len(in)-len(out))
			}
			if need := (q.r + q.Len() + BatchSize - 1) / BatchSize; len(q.chunks) != need {
				t.Fatalf("seed %d: %d chunks for %d bytes from offset %d, want %d", seed, len(q.chunks), q.Len(), q.r, need)
			}
		}
		for q.Len() > 0 {
			p := make([]byte, randSize(rng, BatchSize))
			out = append(out, p[:q.Read(p)]...)
		}
		if !bytes.Equal(in, out) {
			t.Fatalf("seed %d: %d bytes out differ from the %d in", seed, len(out), len(in))
		}
		if len(q.chunks) != 0 {
			t.Fatalf("seed %d: %d chunks held when empty", seed, len(q.chunks))
		}
		q.Write(make([]byte, BatchSize+1))
		q.Reset()
		if q.Len() != 0 || len(q.chunks) != 0 {
			t.Fatalf("seed %d: %d bytes in %d chunks after reset", seed, q.Len(), len(q.chunks))
		}
	}
}

// TestGathering: writes between Gather(true) and Gather(false) go
// out as one; one that would grow the buffer sends what it holds, then
// itself; a failed send is Gather's error.
func TestGathering(t *testing.T) {
	cc := &recordWriter{}
	var g Gathering
	g.Write(cc, []byte("plain"))
	g.Gather(cc, true)
	for _, s := range []string{"one ", "two ", "three"} {
		if n, err := g.Write(cc, []byte(s)); n != len(s) || err != nil {
			t.Fatalf("gathered write: %d, %v", n, err)
		}
	}
	if w := len(cc.writes); w != 1 {
		t.Fatalf("%d writes while gathering, want the 1 before", w)
	}
	if err := g.Gather(cc, false); err != nil {
		t.Fatal(err)
	}
	if err := g.Gather(cc, false); err != nil { // nothing more to send
		t.Fatal(err)
	}
	g.Gather(cc, true)
	g.Write(cc, []byte("small"))
	big := bytes.Repeat([]byte("b"), BatchSize+4*MaxRecord+1)
	if n, err := g.Write(cc, big); n != len(big) || err != nil {
		t.Fatalf("big write: %d, %v", n, err)
	}
	g.Write(cc, []byte("after"))
	g.Gather(cc, false)
	want := []string{"plain", "one two three", "small", string(big), "after"}
	if len(cc.writes) != len(want) {
		t.Fatalf("%d writes, want %d", len(cc.writes), len(want))
	}
	for i, w := range want {
		if string(cc.writes[i]) != w {
			t.Errorf("write %d: %.20q (%d bytes), want %.20q (%d)", i, cc.writes[i], len(cc.writes[i]), w, len(w))
		}
	}
	if g.gathered != nil {
		t.Error("buffer held after Gather(false)")
	}
	cc.werr = errors.New("broken pipe")
	g.Gather(cc, true)
	g.Write(cc, []byte("lost"))
	if err := g.Gather(cc, false); err == nil {
		t.Error("Gather(false) = nil; want the failed send's error")
	}
}

// recordWriter keeps each write; werr fails every write.
type recordWriter struct {
	writes [][]byte
	werr   error
}

func (w *recordWriter) Write(b []byte) (int, error) {
	if w.werr != nil {
		return 0, w.werr
	}
	w.writes = append(w.writes, append([]byte(nil), b...))
	return len(b), nil
}
