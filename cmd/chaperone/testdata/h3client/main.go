// Command h3client fetches URLs over HTTP/3 only (quic-go's
// http3.Transport, one transport and so one UDP socket for all of them)
// for the transparent-mode end-to-end tests. It trusts the system's roots
// and SSL_CERT_FILE, as the session sets it.
//
//	h3client URL...
//
// For each URL it prints "STATUS PROTO BODY" or "error: ..." on one line,
// and exits 3 when any failed.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/quic-go/quic-go/http3"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: h3client URL...")
		os.Exit(2)
	}
	tr := &http3.Transport{}
	defer tr.Close()
	c := &http.Client{Transport: tr}
	code := 0
	for _, u := range os.Args[1:] {
		if err := fetch(c, u); err != nil {
			fmt.Println("error:", strings.ReplaceAll(err.Error(), "\n", " "))
			code = 3
		}
	}
	os.Exit(code)
}

func fetch(c *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Println(resp.StatusCode, resp.Proto, strings.TrimSpace(string(body)))
	return nil
}
