// Command tlsfloor runs bench/tlsfloor, about the least a TLS-intercepting
// HTTP/1.1 proxy in Go does, on a loopback address. It writes its CA
// certificate to -ca-out for clients to trust and verifies origins with
// -upstream-ca:
//
//	go run ./bench/cmd/tlsfloor -listen 127.0.0.1:8083 -ca-out ca.pem -upstream-ca origin-ca.pem
package main

import (
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"net/netip"
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
	if ap, err := netip.ParseAddrPort(listen); err != nil || !ap.Addr().IsLoopback() {
		return fmt.Errorf("-listen %q: want a loopback IP:port", listen)
	}
	if caOut == "" {
		return fmt.Errorf("-ca-out is required: clients must trust the CA")
	}
	var roots *x509.CertPool
	if upstreamCA != "" {
		b, err := os.ReadFile(upstreamCA)
		if err != nil {
			return err
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(b) {
			return fmt.Errorf("-upstream-ca %s: no PEM certificate", upstreamCA)
		}
	}
	ca, caPEM, err := benchca.New("tlsfloor benchmark CA")
	if err != nil {
		return err
	}
	if err := os.WriteFile(caOut, caPEM, 0o644); err != nil {
		return err
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	fmt.Println(l.Addr())
	return tlsfloor.New(ca, roots).Serve(l)
}
