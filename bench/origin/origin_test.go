package origin

import (
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"
)

func TestServesSizesOverH1AndH2(t *testing.T) {
	s, err := Start("127.0.0.1:0", t.TempDir(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tests := []struct {
		name      string
		path      string
		h2        bool
		wantProto string
		wantLen   int64
	}{
		{"1k over h1", Path1K, false, "HTTP/1.1", Size1K},
		{"1k over h2", Path1K, true, "HTTP/2.0", Size1K},
		{"100 MB over h2", Path100MB, true, "HTTP/2.0", Size100MB},
		{"chosen size", "/bytes/70000", false, "HTTP/1.1", 70000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.Roots}}
			var p http.Protocols
			p.SetHTTP1(!tt.h2)
			p.SetHTTP2(tt.h2)
			tr.Protocols = &p
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Get(s.URL(tt.path))
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
