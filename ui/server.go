package ui

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chaperone-dev/chaperone/internal/ask"
	"github.com/chaperone-dev/chaperone/telemetry"
)

//go:embed assets
var assets embed.FS

// Options configure a Server.
type Options struct {
	Logs   []string      // audit logs to read (each may not exist yet: it is waited for)
	AskDir string        // the sessions' ask control sockets (session.AskDir(cfg.StateDir))
	Listen string        // "127.0.0.1:0" when empty; must be a loopback address
	Poll   time.Duration // how often the logs are read for new records; 100 ms when zero
	Logger *slog.Logger
	// Rand is the source of the token and the cookie; crypto/rand when nil.
	Rand io.Reader
}

// Server is the live view. New, then Start; Close works after a partial
// start.
type Server struct {
	o       Options
	logs    []*telemetry.LogIndex
	handler http.Handler
	hub     *hub
	asks    *askBook

	token     string
	mu        sync.Mutex
	tokenUsed bool
	cookie    string // set when the token is used

	ln      net.Listener
	srv     *http.Server
	url     string
	cancel  context.CancelFunc
	done    chan struct{}
	started atomic.Bool
	once    sync.Once
	polling sync.WaitGroup
	pollMu  sync.Mutex // one poll at a time: records stream in log order
	// pollErr is the last error reading each log, said once.
	pollErr map[string]string
}

// CookieName is the cookie the token turns into.
const CookieName = "chaperone_ui"

// New checks o and returns a server; nothing listens before Start.
func New(o Options) (*Server, error) {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if err := CheckListen(o.Listen); err != nil {
		return nil, err
	}
	if o.Poll <= 0 {
		o.Poll = 100 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	tok, err := randomHex(o.Rand)
	if err != nil {
		return nil, err
	}
	s := &Server{o: o, token: tok, done: make(chan struct{}), pollErr: map[string]string{}}
	for _, p := range o.Logs {
		s.logs = append(s.logs, telemetry.NewLogIndex(p))
	}
	s.asks = newAskBook(o.AskDir)
	s.hub = newHub(o.Logger, s.asks.watch)
	s.asks.asked = func(q ask.Question) { s.hub.publish("question", "", mustJSON(q)) }
	s.asks.answered = func(q ask.Question) {
		s.hub.publish("answered", "", mustJSON(map[string]string{"id": q.ID, "session": q.Session}))
	}
	s.handler = s.routes()
	return s, nil
}

// CheckListen says whether addr (IP:port) is a loopback address the live
// view may listen on.
func CheckListen(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return fmt.Errorf("ui: listen address %q is not an IP:port", addr)
	}
	if !ap.Addr().Unmap().IsLoopback() {
		return fmt.Errorf("ui: listen address %q is not a loopback address (the live view is never exposed beyond this machine)", addr)
	}
	return nil
}

func randomHex(r io.Reader) (string, error) {
	var b [32]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", fmt.Errorf("ui: random: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Start reads the logs once, listens and serves until Close or ctx ends.
// It returns once the server is listening.
func (s *Server) Start(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("ui: already started")
	}
	ln, err := net.Listen("tcp", s.o.Listen)
	if err != nil {
		return fmt.Errorf("ui: listen: %w", err)
	}
	s.ln = ln
	s.url = "http://" + ln.Addr().String() + "/?token=" + s.token
	ctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	s.poll() // the first page shows what the logs hold already
	s.srv = &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:    slog.NewLogLogger(s.o.Logger.Handler(), slog.LevelDebug),
		BaseContext: func(net.Listener) context.Context { return ctx }}
	s.polling.Add(1)
	go func() {
		defer s.polling.Done()
		t := time.NewTicker(s.o.Poll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.poll()
			}
		}
	}()
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.o.Logger.Warn("ui: serve", "err", err)
		}
	}()
	context.AfterFunc(ctx, func() { s.Close() })
	return nil
}

// URL is the one-time link: "http://127.0.0.1:PORT/?token=…". Empty
// before Start.
func (s *Server) URL() string { return s.url }

// Close stops serving, ends every stream and closes the logs.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		if s.cancel != nil {
			s.cancel()
		}
		s.polling.Wait() // no Poll reopens a log closed below
		s.hub.close()
		if s.srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if e := s.srv.Shutdown(ctx); e != nil {
				s.srv.Close()
			}
			<-s.done
		}
		s.asks.stop()
		for _, l := range s.logs {
			if e := l.Close(); e != nil && err == nil {
				err = e
			}
		}
	})
	return err
}

// Handler serves the live view (what Start serves), for tests.
func (s *Server) Handler() http.Handler { return s.handler }

// Poll reads the logs for new records now, as Start does every Poll; for
// tests that serve Handler themselves.
func (s *Server) Poll() { s.poll() }

// poll reads every log's new records and sends them to the streams.
func (s *Server) poll() {
	s.pollMu.Lock()
	defer s.pollMu.Unlock()
	for _, l := range s.logs {
		streaming := s.hub.wantsRecords()
		res, err := l.Poll(streaming)
		if msg := errString(err); msg != s.pollErr[l.Path()] {
			if err != nil {
				s.o.Logger.Warn("ui: read audit log", "path", l.Path(), "err", err)
			}
			s.pollErr[l.Path()] = msg
		}
		if err != nil {
			continue
		}
		if res.Reset {
			s.hub.reset()
		}
		if !streaming || len(res.Records) == 0 {
			continue
		}
		changed := map[string]bool{}
		var order []string
		for _, ir := range res.Records {
			if id := ir.Record.Session; !changed[id] {
				changed[id] = true
				order = append(order, id)
			}
		}
		links := s.streamLinks(l, order, res.Records)
		for _, ir := range res.Records {
			x := extra{routine: ir.Routine}
			if tl, ok := links[linkKey{ir.Record.Session, ir.Seq}]; ok {
				x.tool = &tl
			}
			s.hub.publish("record", ir.Record.Session, eventJSON(ir.Record, ir.Seq, x))
		}
		for _, id := range order {
			if sum, ok := l.Session(id); ok {
				s.hub.publish("session", "", mustJSON(s.sessionJSON(sum)))
			}
		}
	}
}

type linkKey struct {
	session string
	seq     int
}

// streamLinks links the new records recs of the sessions ids to the tool
// calls before them, for the sessions that made one.
func (s *Server) streamLinks(l *telemetry.LogIndex, ids []string, recs []telemetry.IndexedRecord) map[linkKey]telemetry.ToolLink {
	var out map[linkKey]telemetry.ToolLink
	for _, id := range ids {
		last := l.LastToolCall(id)
		if last.IsZero() {
			continue
		}
		var acts []posRecord
		for _, ir := range recs {
			if ir.Record.Session == id {
				acts = append(acts, posRecord{int32(ir.Seq - 1), ir.Record})
			}
		}
		gen, _ := l.Entries(id, func([]telemetry.IndexEntry) {})
		links, err := linkToolCalls(l, id, gen, acts, 0)
		if err != nil {
			continue // the log started over: its records come again
		}
		for p, tl := range links {
			if out == nil {
				out = map[linkKey]telemetry.ToolLink{}
			}
			out[linkKey{id, p + 1}] = tl
		}
	}
	return out
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// securityHeaders are set on every response.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"X-Content-Type-Options":  "nosniff",
	"Referrer-Policy":         "no-referrer",
}

// routes builds the handler: headers, the Host check and the cookie
// around every route.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		r2 := *r
		u := *r.URL
		u.Path = "/"
		r2.URL = &u
		files.ServeHTTP(w, &r2)
	})
	mux.Handle("GET /app.js", files)
	mux.Handle("GET /app.css", files)
	mux.HandleFunc("GET /api/sessions", s.handleSessions)
	mux.HandleFunc("GET /api/sessions/{id}", s.handleSession)
	mux.HandleFunc("GET /api/sessions/{id}/events", s.handleEvents)
	mux.HandleFunc("GET /api/sessions/{id}/timeline", s.handleTimeline)
	mux.HandleFunc("GET /api/questions", s.handleQuestions)
	mux.HandleFunc("POST /api/questions/{id}", s.handleAnswer)
	mux.HandleFunc("GET /api/stream", s.handleStream)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		apiError(w, http.StatusNotFound, "no such API")
	})

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		for k, v := range securityHeaders {
			h.Set(k, v)
		}
		api := strings.HasPrefix(r.URL.Path, "/api/")
		if api {
			h.Set("Cache-Control", "no-store")
		}
		if !ownHost(r) {
			http.Error(w, "ui: this is not the address chaperone serves the live view on", http.StatusMisdirectedRequest)
			return
		}
		if r.URL.Path == "/" && r.URL.Query().Has("token") && r.Method == http.MethodGet {
			if s.useToken(w, r.URL.Query().Get("token")) {
				h.Set("Cache-Control", "no-store")
				http.Redirect(w, r, "/", http.StatusSeeOther)
				return
			}
		}
		if !s.hasCookie(r) {
			unauthorized(w, api)
			return
		}
		if r.Method == http.MethodPost && !sameOrigin(r) {
			apiError(w, http.StatusForbidden, "ui: a cross-origin request is refused")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// ownHost reports whether r's Host names the address r came in on: its
// local IP, localhost or a loopback IP with its port. Anything else is a
// name rebound to loopback by someone else's DNS.
func ownHost(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	lap, err := netip.ParseAddrPort(local.String())
	if err != nil {
		return false
	}
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil || port != fmt.Sprint(lap.Port()) {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap() == lap.Addr().Unmap()
}

// sameOrigin reports whether a state-changing request comes from the
// page itself: its Origin is the server's own, or, without Origin, the
// browser says the request is same-origin.
func sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" {
		return o == "http://"+r.Host
	}
	return r.Header.Get("Sec-Fetch-Site") == "same-origin"
}

// useToken turns the one-time token into the cookie when tok is right
// and unused, and says whether it did.
func (s *Server) useToken(w http.ResponseWriter, tok string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tokenUsed || subtle.ConstantTimeCompare([]byte(tok), []byte(s.token)) != 1 {
		return false
	}
	c, err := randomHex(s.o.Rand)
	if err != nil {
		s.o.Logger.Warn("ui: cookie", "err", err)
		return false
	}
	s.tokenUsed, s.cookie = true, c
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: c, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	return true
}

func (s *Server) hasCookie(r *http.Request) bool {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return false
	}
	s.mu.Lock()
	want := s.cookie
	s.mu.Unlock()
	return want != "" && subtle.ConstantTimeCompare([]byte(c.Value), []byte(want)) == 1
}

const unauthorizedPage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>chaperone live view</title></head>
<body><p>This is chaperone's live view. Open the URL that chaperone printed (with its token) to see it.</p></body></html>
`

func unauthorized(w http.ResponseWriter, api bool) {
	if api {
		apiError(w, http.StatusUnauthorized, "ui: not signed in: open the URL that chaperone printed")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusUnauthorized)
	io.WriteString(w, unauthorizedPage)
}
