// Command relay runs bench/relay, a CONNECT proxy that only copies bytes,
// on a loopback address:
//
//	go run ./bench/cmd/relay -listen 127.0.0.1:8081
package main

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/chaperone-dev/chaperone/bench/relay"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "loopback IP:port to listen on")
	flag.Parse()
	if ap, err := netip.ParseAddrPort(*listen); err != nil || !ap.Addr().IsLoopback() {
		fmt.Fprintf(os.Stderr, "relay: -listen %q: want a loopback IP:port\n", *listen)
		os.Exit(2)
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
	fmt.Println(l.Addr())
	if err := relay.Serve(l); err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
}
