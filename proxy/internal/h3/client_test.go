package h3

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"
)

// A server that never answers over QUIC is reported as ErrUnreachable
// (nothing sent: the caller may use TCP) once HandshakeTimeout passes, and the
// failed dial is not kept for the next request.
func TestClientUnreachable(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.42.20:0") // reads nothing: a black hole
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	c := &Client{TLS: &tls.Config{}, HandshakeTimeout: 200 * time.Millisecond}
	defer c.Close()
	dst := addrPortOf(pc.LocalAddr())
	for range 2 {
		req, _ := http.NewRequest("GET", "https://silent.example.test/", nil)
		_, err := c.RoundTrip(req, dst)
		if !errors.Is(err, ErrUnreachable) {
			t.Fatalf("err %v, want ErrUnreachable", err)
		}
	}
	c.mu.Lock()
	n := len(c.conns)
	c.mu.Unlock()
	if n != 0 {
		t.Errorf("%d failed connections kept in the pool", n)
	}
}
