// Command h3client fetches URLs over HTTP/3 only (quic-go's
// http3.Transport, one transport and so one UDP socket for all of them)
// for the transparent-mode end-to-end tests. It trusts the system's roots
// and SSL_CERT_FILE, as the session sets it.
//
//	h3client [-parallel] URL...
//
// For each URL, in order, it prints "STATUS PROTO BODY" or "error: ..." on
// one line, and exits 3 when any failed. With -parallel the requests are
// made at once (so are their connections' handshakes).
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
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
	urls, parallel := os.Args[1:], false
	if urls[0] == "-parallel" {
		urls, parallel = urls[1:], true
	}
	out := make([]string, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		get := func() {
			line, err := fetch(c, u)
			if err != nil {
				line = "error: " + strings.ReplaceAll(err.Error(), "\n", " ")
			}
			out[i] = line
		}
		if parallel {
			wg.Go(get)
		} else {
			get()
		}
	}
	wg.Wait()
	code := 0
	for _, line := range out {
		fmt.Println(line)
		if strings.HasPrefix(line, "error: ") {
			code = 3
		}
	}
	os.Exit(code)
}

func fetch(c *http.Client, url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d %s %s", resp.StatusCode, resp.Proto, strings.TrimSpace(string(body))), nil
}
