// Command gomitm runs bench/gomitm, a bare goproxy intercepting proxy, on
// a loopback address. It writes its CA certificate to -ca-out for clients
// to trust and verifies upstreams with -upstream-ca:
//
//	go run ./bench/cmd/gomitm -listen 127.0.0.1:8082 -ca-out ca.pem -upstream-ca origin-ca.pem
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime/debug"

	"github.com/chaperone-dev/chaperone/bench/benchca"
	"github.com/chaperone-dev/chaperone/bench/gomitm"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "loopback IP:port to listen on")
	caOut := flag.String("ca-out", "", "file to write the CA certificate (PEM) to")
	upstreamCA := flag.String("upstream-ca", "", "PEM file of the CAs trusted upstream (default: the system's)")
	version := flag.Bool("version", false, "print the version of goproxy built in, and exit")
	flag.Parse()
	if *version {
		fmt.Println(goproxyVersion())
		return
	}
	if err := run(*listen, *caOut, *upstreamCA); err != nil {
		fmt.Fprintln(os.Stderr, "gomitm:", err)
		os.Exit(1)
	}
}

// goproxyVersion names the goproxy module this binary was built with.
func goproxyVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/elazarl/goproxy" {
				return "goproxy " + m.Version
			}
		}
	}
	return "goproxy (version unknown)"
}

func run(listen, caOut, upstreamCA string) error {
	ca, roots, l, err := benchca.Listen(gomitm.CAName, listen, caOut, upstreamCA)
	if err != nil {
		return err
	}
	fmt.Println(l.Addr())
	return http.Serve(l, gomitm.New(ca, roots))
}
