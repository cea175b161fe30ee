package origin

import (
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
)

func TestServesSizesOverH1H2AndH3(t *testing.T) {
	s, err := Start("127.0.0.1:0", t.TempDir(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.ServeHTTP3(0); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		path      string
		proto     string
		wantProto string
		wantLen   int64
	}{
		{"1k over h1", Path1K, "h1", "HTTP/1.1", Size1K},
		{"1k over h2", Path1K, "h2", "HTTP/2.0", Size1K},
		{"100 MB over h2", Path100MB, "h2", "HTTP/2.0", Size100MB},
		{"chosen size", "/bytes/70000", "h1", "HTTP/1.1", 70000},
		{"1k over h3", Path1K, "h3", "HTTP/3.0", Size1K},
		{"chosen size over h3", "/bytes/70000", "h3", "HTTP/3.0", 70000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rt http.RoundTripper
			url := s.URL(tt.path)
			if tt.proto == "h3" {
				tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: s.Roots}}
				defer tr.Close()
				rt, url = tr, s.H3URL(tt.path)
			} else {
				tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.Roots}}
				var p http.Protocols
				p.SetHTTP1(tt.proto == "h1")
				p.SetHTTP2(tt.proto == "h2")
				tr.Protocols = &p
				defer tr.CloseIdleConnections()
				rt = tr
			}
			resp, err := (&http.Client{Transport: rt}).Get(url)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			n, err := io.Copy(io.Discard, resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Proto != tt.wantProto || n != tt.wantLen || resp.ContentLength != tt.wantLen {
				t.Errorf("%s, %d bytes (Content-Length %d); want %s, %d", resp.Proto, n, resp.ContentLength, tt.wantProto, tt.wantLen)
			}
		})
	}
}

func TestStartRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:443", "localhost:0"} {
		t.Run(addr, func(t *testing.T) {
			if s, err := Start(addr, t.TempDir(), time.Now); err == nil {
				s.Close()
				t.Errorf("Start(%q) listened", addr)
			}
		})
	}
}
