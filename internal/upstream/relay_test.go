package upstream

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/proxy"
)

// The relay acts on every spelling a permissive proxy takes, so that a
// test whose client bytes reached it would see the target reached.
func TestRelayReachesTargets(t *testing.T) {
	target, err := Start(Options{Name: "target.test", Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	r, err := StartRelay(RelayOptions{Names: map[string]netip.Addr{"target.test": target.Addr.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	hp := target.Addr.String()
	get := "GET /x HTTP/1.1\r\nHost: target.test\r\nConnection: close\r\n\r\n"
	for name, send := range map[string]string{
		"connect":            "CONNECT " + hp + " HTTP/1.1\r\n\r\n" + get,
		"connect-lowercase":  "connect " + hp + " HTTP/1.1\r\n\r\n" + get,
		"connect-blank-line": "\r\n\nCONNECT  " + hp + "\tHTTP/1.1\r\n\r\n" + get,
		"absolute":           "GET http://" + hp + "/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
		"absolute-odd":       "\r\nget\thttp://target.test:" + itoa(target.Addr.Port()) + "/x  HTTP/1.1\r\nConnection: close\r\n\r\n",
		"absolute-0.9":       "GET http://" + hp + "/x\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", r.Addr.String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, send)
			b, _ := io.ReadAll(c)
			if !strings.Contains(string(b), "hello from target.test") {
				t.Errorf("got %q", b)
			}
		})
	}
	for _, v := range []string{"socks5", "socks4a"} {
		t.Run(v, func(t *testing.T) {
			var c net.Conn
			var err error
			if v == "socks5" {
				d, _ := proxy.SOCKS5("tcp", r.Addr.String(), nil, proxy.Direct)
				c, err = d.Dial("tcp", "target.test:"+itoa(target.Addr.Port()))
			} else {
				c, err = net.Dial("tcp", r.Addr.String())
				if err == nil {
					p := target.Addr.Port()
					io.WriteString(c, "\x04\x01"+string([]byte{byte(p >> 8), byte(p)})+"\x00\x00\x00\x01u\x00target.test\x00")
					var reply [8]byte
					io.ReadFull(c, reply[:])
					if reply[1] != 0x5a {
						t.Fatalf("reply %x", reply)
					}
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, get)
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || res.StatusCode != 200 {
				t.Fatalf("%v %v", res, err)
			}
		})
	}
	if n := len(target.Requests()); n != 8 {
		t.Errorf("target received %d requests, want 8", n)
	}
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }
