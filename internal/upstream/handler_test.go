package upstream

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// discardWriter is a ResponseWriter that stops the handler, as a departed
// client would, after a MiB, so fuzzing /bytes stays cheap.
type discardWriter struct {
	h       http.Header
	n       int
	status  int
	written bool
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(code int) {
	if !w.written {
		w.status, w.written = code, true
	}
}
func (w *discardWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if w.n += len(p); w.n > 1<<20 {
		return 0, errors.New("client went away")
	}
	return len(p), nil
}

// FuzzDefaultHandler feeds the default handler arbitrary paths, queries and
// bodies: it must answer each without panicking, with a valid status.
func FuzzDefaultHandler(f *testing.F) {
	for _, seed := range []struct{ path, body string }{
		{"/", ""},
		{"/bytes?n=10", ""},
		{"/bytes?n=99999999999999999999", ""},
		{"/bytes?n=-5&n=6", ""},
		{"/status/404", ""},
		{"/status/%00", ""},
		{"/status/1e3", ""},
		{"/echo", "hello"},
		{"/headers", ""},
		{"/ws", ""},
		{"/a/../../b?x=%zz", "b"},
	} {
		f.Add(seed.path, seed.body)
	}
	h := DefaultHandler("fuzz.example.test")
	f.Fuzz(func(t *testing.T, path, body string) {
		req, err := http.NewRequest(http.MethodPost, "http://fuzz.example.test"+path, strings.NewReader(body))
		if err != nil || !strings.HasPrefix(path, "/") {
			t.Skip()
		}
		w := &discardWriter{h: http.Header{}}
		h.ServeHTTP(w, req)
		if w.written && (w.status < 100 || w.status > 599) {
			t.Errorf("%s: status %d", path, w.status)
		}
	})
}

// BenchmarkBytes compares fetching /bytes over HTTP/1.1 and HTTP/2, over
// TLS, side by side.
func BenchmarkBytes(b *testing.B) {
	ca, err := NewCA("bench")
	if err != nil {
		b.Fatal(err)
	}
	const n = 1 << 20
	for _, bb := range []struct {
		name      string
		http1Only bool
	}{{"h1", true}, {"h2", false}} {
		b.Run(bb.name, func(b *testing.B) {
			s, err := Start(Options{Name: "bench.example.test", Addr: "127.0.0.30:0", CA: ca, HTTP1Only: bb.http1Only})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			c := s.Client()
			url := fmt.Sprintf("%s/bytes?n=%d", s.URL, n)
			b.SetBytes(n)
			for b.Loop() {
				resp, err := c.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
			}
		})
	}
}
