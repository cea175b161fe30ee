// Command origin runs the benchmarks' HTTPS upstream on its own, for
// measuring by hand with loadgen or another client:
//
//	origin -listen 127.0.0.1:8443 -dir /tmp/origin
//	loadgen -target https://127.0.0.1:8443/1k -ca /tmp/origin/origin-ca.pem
//
// It serves /1k, /100m and /bytes/N over h2 and http/1.1 until interrupted.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/chaperone-dev/chaperone/bench/origin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		stop()
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("origin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "loopback IP:port to listen on")
	dir := fs.String("dir", ".", "directory for origin-ca.pem")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := origin.Start(*listen, *dir, time.Now)
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Fprintf(stdout, "%s\n%s\n", s.URL(origin.Path1K), s.CAFile)
	<-ctx.Done()
	return nil
}
