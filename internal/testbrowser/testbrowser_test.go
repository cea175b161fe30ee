package testbrowser

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The harness loads a page, reads its DOM, waits, clicks, and hears what
// the page reports as wrong: here, an inline script its CSP refuses.
func TestBrowser(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.40.250:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'self'")
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write([]byte(`<!doctype html><title>t</title><button id="b">b</button><p id="p"></p>` +
				`<script>window.__inline = 1</script><script src="/a.js"></script>`))
		case "/a.js":
			w.Header().Set("Content-Type", "text/javascript")
			w.Write([]byte(`document.getElementById('b').addEventListener('click', () => { document.getElementById('p').textContent = 'clicked'; });`))
		default:
			http.NotFound(w, r)
		}
	}))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()

	b := New(t, 800, 600)
	if code := b.Open(srv.URL + "/"); code != 200 {
		t.Fatalf("status %d", code)
	}
	if code := b.Open(srv.URL + "/nothing"); code != 404 {
		t.Errorf("status of a missing page %d, want 404", code)
	}
	b.Open(srv.URL + "/")
	b.Click("#b")
	b.WaitFor("the click's text", `document.getElementById('p').textContent === 'clicked'`, 5*time.Second)
	if Eval[bool](b, `window.__inline === undefined`) != true {
		t.Error("the inline script ran despite the CSP")
	}
	if errs := strings.Join(b.Errors(), "\n"); !strings.Contains(errs, "Content Security Policy") {
		t.Errorf("the refused inline script was not reported; errors: %q", errs)
	}
	png := b.Screenshot(t.TempDir(), "page")
	if png == "" {
		t.Error("no screenshot")
	}
}
