// Package testbrowser drives a headless Chromium (Debian's chromium) for
// the tests of the live view: load a page, wait for what it shows, click,
// read the DOM, take screenshots. A test without a chromium binary skips
// with the reason; CI installs one (.ci/run).
//
// The browser resolves no name (every host maps to NOTFOUND, so it never
// queries the machine's resolver), uses no proxy, and keeps its profile
// in the test's temporary directory. Scripts the tests evaluate run
// through the DevTools protocol, which the page's Content-Security-Policy
// does not restrict; what the page itself runs, it does.
package testbrowser

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Browser is one tab of a headless Chromium of its own.
type Browser struct {
	t   testing.TB
	ctx context.Context
	log *pageLog
}

// pageLog is what the page reported as wrong: uncaught exceptions,
// console errors, refused resources and CSP violations.
type pageLog struct {
	mu     sync.Mutex
	errors []string
}

// For returns the same tab, failing t (a subtest's) rather than the test
// that opened it.
func (b *Browser) For(t testing.TB) *Browser { return &Browser{t: t, ctx: b.ctx, log: b.log} }

// Binary returns the Chromium to run: $CHAPERONE_CHROMIUM, else the first
// of chromium, chromium-browser, google-chrome, headless-shell on PATH.
func Binary() (string, error) {
	if p := os.Getenv("CHAPERONE_CHROMIUM"); p != "" {
		return exec.LookPath(p)
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("testbrowser: no chromium on PATH (apt-get install chromium; or set CHAPERONE_CHROMIUM)")
}

// New starts a headless Chromium with a window of width×height and
// returns its tab; the browser ends with t. It skips t when no chromium
// binary is found.
func New(t testing.TB, width, height int) *Browser {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Skipf("no browser for the live view's tests: %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
		chromedp.Flag("no-proxy-server", true),
		// Every name but a loopback address resolves to nothing: the
		// tests use loopback addresses, and the browser must not ask the
		// machine's resolver anything.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.*"),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("font-render-hinting", "none"),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &Browser{t: t, log: &pageLog{}}
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithListener(b.log.listen))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("testbrowser: start %s: %v", bin, err)
	}
	b.ctx = ctx
	return b
}

// listen keeps what the page reports as wrong.
func (l *pageLog) listen(ev any) {
	var msg string
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		msg = "exception: " + ev.ExceptionDetails.Text
		if ev.ExceptionDetails.Exception != nil {
			msg += " " + ev.ExceptionDetails.Exception.Description
		}
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError {
			return
		}
		var parts []string
		for _, a := range ev.Args {
			parts = append(parts, string(a.Value)+a.Description)
		}
		msg = "console.error: " + strings.Join(parts, " ")
	case *log.EventEntryAdded:
		if ev.Entry.Level != log.EntryLevelError || strings.HasSuffix(ev.Entry.URL, "/favicon.ico") {
			return // the browser's own request for an icon is not the page's
		}
		msg = fmt.Sprintf("%s: %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
	default:
		return
	}
	l.mu.Lock()
	l.errors = append(l.errors, msg)
	l.mu.Unlock()
}

// Errors returns what the pages reported as wrong so far (uncaught
// exceptions, console errors, refused resources and CSP violations), and
// forgets it.
func (b *Browser) Errors() []string {
	b.log.mu.Lock()
	defer b.log.mu.Unlock()
	e := b.log.errors
	b.log.errors = nil
	return e
}

// Context is the tab's chromedp context, for actions this package does not
// wrap.
func (b *Browser) Context() context.Context { return b.ctx }

// Open loads url and returns the HTTP status of the document it ends at
// (after redirects).
func (b *Browser) Open(url string) int {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(url))
	if err != nil {
		b.t.Fatalf("testbrowser: open %s: %v", url, err)
	}
	return responseStatus(resp)
}

func responseStatus(r *network.Response) int {
	if r == nil {
		return 0
	}
	return int(r.Status)
}

// Eval evaluates a JavaScript expression in the page and returns its
// value as T.
func Eval[T any](b *Browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("testbrowser: evaluate %s: %v", expr, err)
	}
	return v
}

// WaitFor evaluates expr every 10 ms until it is true, and returns how
// long that took; it fails t, saying what was awaited, after within.
func (b *Browser) WaitFor(what, expr string, within time.Duration) time.Duration {
	b.t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, within)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		cancel()
		if err == nil && ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("testbrowser: waited %v for %s (%s): %v; page errors: %q", within, what, expr, err, b.Errors())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Click clicks the first element sel (a CSS selector) matches, once it is
// visible.
func (b *Browser) Click(sel string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
		b.t.Fatalf("testbrowser: click %s: %v; page errors: %q", sel, err, b.Errors())
	}
}

// Press presses the left button on the middle of the first element sel
// matches and holds it there; release lets it go, which clicks whatever
// the page then has under the pointer.
func (b *Browser) Press(sel string) (release func()) {
	b.t.Helper()
	at := Eval[[]float64](b, fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (!e) return [];
		const r = e.getBoundingClientRect(); return [r.left + r.width/2, r.top + r.height/2]; })()`, quote(sel)))
	if len(at) != 2 {
		b.t.Fatalf("testbrowser: press %s: no such element", sel)
	}
	mouse := func(typ input.DispatchMouseEventType) {
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		defer cancel()
		if _, err := chromedp.Run(ctx, chromedp.MouseEvent(typ, at[0], at[1], chromedp.ButtonLeft, chromedp.ClickCount(1))); err != nil {
			b.t.Fatalf("testbrowser: %s %s: %v", typ, sel, err)
		}
	}
	mouse(input.DispatchMouseEventTypeMousePressed)
	return func() { mouse(input.DispatchMouseEventTypeMouseReleased) }
}

// Type replaces the value of the input sel with text and tells the page
// (input and change events), as typing it would.
func (b *Browser) Type(sel, text string) {
	b.t.Helper()
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (!e) return false; e.focus(); e.value = %s;
		e.dispatchEvent(new Event('input', {bubbles: true})); e.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`,
		quote(sel), quote(text))
	if !Eval[bool](b, js) {
		b.t.Fatalf("testbrowser: type into %s: no such element", sel)
	}
}

// Select chooses value in the select element sel and tells the page.
func (b *Browser) Select(sel, value string) {
	b.t.Helper()
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (!e) return false; e.value = %s;
		e.dispatchEvent(new Event('change', {bubbles: true})); return e.value === %s; })()`, quote(sel), quote(value), quote(value))
	if !Eval[bool](b, js) {
		b.t.Fatalf("testbrowser: select %q in %s: no such element or option", value, sel)
	}
}

// quote is s as a JavaScript string literal.
func quote(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// Screenshot takes a PNG of the whole page, from its top, into
// dir/name.png, and checks that it is one.
func (b *Browser) Screenshot(dir, name string) string {
	b.t.Helper()
	Eval[bool](b, `(window.scrollTo(0, 0), true)`) // else a sticky header is drawn where the window was scrolled to
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("testbrowser: screenshot %s: %v", name, err)
	}
	if len(png) < 1000 || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		b.t.Fatalf("testbrowser: screenshot %s is not a PNG (%d bytes)", name, len(png))
	}
	file := filepath.Join(dir, name+".png")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(file, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	return file
}
