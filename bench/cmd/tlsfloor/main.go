// Command tlsfloor runs bench/tlsfloor, about the least a TLS-intercepting
// HTTP/1.1 proxy in Go does, on a loopback address. It writes its CA
// certificate to -ca-out for clients to trust and verifies origins with
// -upstream-ca:
//
//	go run ./bench/cmd/tlsfloor -listen 127.0.0.1:8083 -ca-out ca.pem -upstream-ca origin-ca.pem
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/chaperone-dev/chaperone/bench/benchca"
	"github.com/chaperone-dev/chaperone/bench/tlsfloor"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "loopback IP:port to listen on")
	caOut := flag.String("ca-out", "", "file to write the CA certificate (PEM) to")
	upstreamCA := flag.String("upstream-ca", "", "PEM file of the CAs trusted upstream (default: the system's)")
	flag.Parse()
	if err := run(*listen, *caOut, *upstreamCA); err != nil {
		fmt.Fprintln(os.Stderr, "tlsfloor:", err)
		os.Exit(1)
	}
}

func run(listen, caOut, upstreamCA string) error {
	ca, roots, l, err := benchca.Listen("tlsfloor benchmark CA", listen, caOut, upstreamCA)
	if err != nil {
		return err
	}
	fmt.Println(l.Addr())
	return tlsfloor.New(ca, roots).Serve(l)
}
