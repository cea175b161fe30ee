// Command h3client fetches URLs over HTTP/3 only (quic-go's
// http3.Transport, one transport and so one UDP socket for all of them)
// for the transparent-mode end-to-end tests. It trusts the system's roots
// and SSL_CERT_FILE, as the session sets it.
//
//	h3client [-parallel] [-post FILE] URL...
//
// For each URL, in order, it prints "STATUS PROTO BODY" or "error: ..." on
// one line, and exits 3 when any failed. With -parallel the requests are
// made at once (so are their connections' handshakes). With -post each
// request is a POST of FILE's contents as JSON (an LLM API call, say).
package main

import (
	"bytes"
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
	urls, parallel, body := os.Args[1:], false, []byte(nil)
	if len(urls) > 0 && urls[0] == "-parallel" {
		urls, parallel = urls[1:], true
	}
	if len(urls) > 1 && urls[0] == "-post" {
		b, err := os.ReadFile(urls[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		urls, body = urls[2:], b
	}
	out := make([]string, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		get := func() {
			line, err := fetch(c, u, body)
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

// fetch GETs url, or POSTs body to it when there is one.
func fetch(c *http.Client, url string, body []byte) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	method, rd := http.MethodGet, io.Reader(nil)
	if body != nil {
		method, rd = http.MethodPost, bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return "", err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d %s %s", resp.StatusCode, resp.Proto, strings.TrimSpace(string(got))), nil
}
