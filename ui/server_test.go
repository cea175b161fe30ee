package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/ask"
	"github.com/chaperone-dev/chaperone/telemetry"
)

func TestNewRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:80", "[::]:0", "localhost:0", "example.com:80", "127.0.0.1"} {
		if _, err := New(Options{Listen: addr}); err == nil {
			t.Errorf("New(Listen: %q) = nil error, want a refusal", addr)
		}
	}
	for _, addr := range []string{"", "127.0.39.1:0", "[::1]:0"} {
		if _, err := New(Options{Listen: addr}); err != nil {
			t.Errorf("New(Listen: %q): %v", addr, err)
		}
	}
}

func TestAuth(t *testing.T) {
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	writeLog(t, log, sessionStart("s1", t0, 10))
	srv := newTestServer(t, Options{Logs: []string{log}})
	base := srv.base
	port := base[strings.LastIndexByte(base, ':')+1:]
	token := srv.s.token // used by newTestServer: it is good once

	// Sign in by hand on a fresh server to see the redirect and the cookie.
	anon := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var cookie string
	fresh, err := New(Options{Logs: []string{log}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fresh.Close() })
	ftsURL := newUnsignedServer(t, fresh)
	resp := must(anon.Get(ftsURL + "/?token=" + strings.ToUpper(fresh.token)))
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong token: status %d, want 401", resp.StatusCode)
	}
	resp = must(anon.Get(ftsURL + "/?token=" + fresh.token))
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("token: status %d Location %q, want 303 to /", resp.StatusCode, resp.Header.Get("Location"))
	}
	sc := resp.Header.Get("Set-Cookie")
	for _, want := range []string{CookieName + "=", "Path=/", "HttpOnly", "SameSite=Strict"} {
		if !strings.Contains(sc, want) {
			t.Errorf("Set-Cookie %q lacks %q", sc, want)
		}
	}
	cookie = strings.SplitN(strings.TrimPrefix(sc, CookieName+"="), ";", 2)[0]
	if len(cookie) != 64 {
		t.Errorf("cookie value has %d characters, want 64 (32 random bytes, hex)", len(cookie))
	}
	resp = must(anon.Get(ftsURL + "/?token=" + fresh.token))
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("token used twice: status %d, want 401", resp.StatusCode)
	}
	if got := must(anonGet(t, ftsURL+"/api/sessions", map[string]string{"Cookie": CookieName + "=" + cookie})); got.status != 200 {
		t.Errorf("with the cookie from the token: status %d, want 200", got.status)
	}

	type req struct {
		name    string
		method  string
		path    string
		headers map[string]string
		want    int
		body    string // a piece of the answer
	}
	good := CookieName + "=" + srvCookie(srv)
	origin := "http://127.0.39.1:" + port
	tests := []req{
		{"page without cookie", "GET", "/", nil, 401, "Open the URL that chaperone printed"},
		{"script without cookie", "GET", "/app.js", nil, 401, "chaperone printed"},
		{"api without cookie", "GET", "/api/sessions", nil, 401, `"error":`},
		{"stream without cookie", "GET", "/api/stream", nil, 401, `"error":`},
		{"token again", "GET", "/?token=" + token, nil, 401, "chaperone printed"},
		{"wrong cookie", "GET", "/api/sessions", map[string]string{"Cookie": CookieName + "=" + strings.Repeat("0", 64)}, 401, `"error":`},
		{"page", "GET", "/", map[string]string{"Cookie": good}, 200, "<!doctype html>"},
		{"script", "GET", "/app.js", map[string]string{"Cookie": good}, 200, ""},
		{"style", "GET", "/app.css", map[string]string{"Cookie": good}, 200, ""},
		{"sessions", "GET", "/api/sessions", map[string]string{"Cookie": good}, 200, `"sessions":[`},
		{"unknown api", "GET", "/api/nope", map[string]string{"Cookie": good}, 404, `"error":`},
		{"localhost", "GET", "/api/sessions", map[string]string{"Cookie": good, "Host": "localhost:" + port}, 200, `"sessions":`},
		{"rebound name", "GET", "/api/sessions", map[string]string{"Cookie": good, "Host": "evil.example:" + port}, 421, ""},
		{"other port", "GET", "/api/sessions", map[string]string{"Cookie": good, "Host": "127.0.39.1:1"}, 421, ""},
		{"other loopback", "GET", "/api/sessions", map[string]string{"Cookie": good, "Host": "127.0.0.1:" + port}, 421, ""},
		{"no port", "GET", "/api/sessions", map[string]string{"Cookie": good, "Host": "localhost"}, 421, ""},
		{"rebound name without cookie", "GET", "/", map[string]string{"Host": "evil.example:" + port}, 421, ""},
		{"post cross-origin", "POST", "/api/questions/q1", map[string]string{"Cookie": good, "Origin": "http://evil.example", "Content-Type": "application/json"}, 403, `"error":`},
		{"post other port", "POST", "/api/questions/q1", map[string]string{"Cookie": good, "Origin": "http://127.0.39.1:1", "Content-Type": "application/json"}, 403, `"error":`},
		{"post null origin", "POST", "/api/questions/q1", map[string]string{"Cookie": good, "Origin": "null", "Content-Type": "application/json"}, 403, `"error":`},
		{"post no origin", "POST", "/api/questions/q1", map[string]string{"Cookie": good, "Content-Type": "application/json"}, 403, `"error":`},
		{"post cross-site fetch", "POST", "/api/questions/q1", map[string]string{"Cookie": good, "Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}, 403, `"error":`},
		{"post without cookie", "POST", "/api/questions/q1", map[string]string{"Origin": origin, "Content-Type": "application/json"}, 401, `"error":`},
		{"post same origin", "POST", "/api/questions/q1", map[string]string{"Cookie": good, "Origin": origin, "Content-Type": "application/json"}, 404, "no such question"},
		{"post same-origin fetch", "POST", "/api/questions/q1", map[string]string{"Cookie": good, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}, 404, "no such question"},
		{"post as a form", "POST", "/api/questions/q1", map[string]string{"Cookie": good, "Origin": origin, "Content-Type": "application/x-www-form-urlencoded"}, 415, `"error":`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader
			if tt.method == "POST" {
				body = strings.NewReader(`{"allow":true,"always":false}`)
			}
			r, _ := http.NewRequest(tt.method, base+tt.path, body)
			for k, v := range tt.headers {
				if k == "Host" {
					r.Host = v
				} else {
					r.Header.Set(k, v)
				}
			}
			resp, err := anon.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.want {
				t.Errorf("status %d, want %d: %s", resp.StatusCode, tt.want, b)
			}
			if !strings.Contains(string(b), tt.body) {
				t.Errorf("answer %q lacks %q", b, tt.body)
			}
			for k, v := range securityHeaders {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
			if strings.HasPrefix(tt.path, "/api/") && resp.Header.Get("Cache-Control") != "no-store" {
				t.Errorf("Cache-Control %q, want no-store", resp.Header.Get("Cache-Control"))
			}
		})
	}
}

// srvCookie is the cookie a test server's client holds.
func srvCookie(ts *testServer) string {
	ts.s.mu.Lock()
	defer ts.s.mu.Unlock()
	return ts.s.cookie
}

type answer struct {
	status int
	body   []byte
}

func anonGet(t *testing.T, url string, headers map[string]string) (answer, error) {
	r, _ := http.NewRequest("GET", url, nil)
	for k, v := range headers {
		r.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, b}, err
}

// newUnsignedServer serves s with httptest without signing in.
func newUnsignedServer(t *testing.T, s *Server) string {
	t.Helper()
	hs := httptestServer(t, s.Handler())
	s.Poll()
	return hs
}

// sessionLog writes a log of two sessions: s1, ended, with a root
// process, a child, a grandchild and records of no process; s2, later,
// running.
func sessionLog(t *testing.T) string {
	t.Helper()
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	root := proc(10, 1, "/usr/bin/claude")
	sh := proc(11, 10, "/bin/bash", "claude", "bash")
	curl := proc(12, 11, "/usr/bin/curl", "claude", "bash", "curl")
	writeLog(t, log,
		sessionStart("s1", t0, 10),
		httpEv("s1", t0.Add(1*time.Second), root, "https://api.anthropic.com/v1/messages", false),
		execEv("s1", t0.Add(2*time.Second), sh, "curl", "-s", "https://evil.example/<script>alert(1)</script>"),
		dnsEv("s1", t0.Add(3*time.Second), curl, "evil.example", true),
		httpEv("s1", t0.Add(4*time.Second), curl, "https://evil.example/<img src=x onerror=alert(1)>", true),
		&event.Event{Time: t0.Add(5 * time.Second), Kind: event.KindDNS, Session: "s1", Verdict: event.Verdict{Action: event.Allow}, DNS: &event.DNS{Name: "orphan.example"}},
		sessionEnd("s1", t0.Add(6*time.Second), 10),
		sessionStart("s2", t0.Add(time.Minute), 20),
		httpEv("s2", t0.Add(time.Minute+time.Second), proc(20, 1, "/usr/bin/codex"), "https://api.openai.com/v1/responses", false),
	)
	return log
}

func TestSessions(t *testing.T) {
	log := sessionLog(t)
	srv := newTestServer(t, Options{Logs: []string{log, filepath.Join(t.TempDir(), "not-yet.jsonl")}})
	var got struct {
		Sessions []sessionView `json:"sessions"`
	}
	srv.getJSON(t, "/api/sessions", 200, &got)
	f := must(os.Open(log))
	defer f.Close()
	want := must(telemetry.Sessions(f))
	slices.Reverse(want) // newest first
	var wantViews []sessionView
	for _, s := range want {
		wantViews = append(wantViews, sessionView{SessionSummary: s})
	}
	if diff := cmp.Diff(wantViews, got.Sessions); diff != "" {
		t.Errorf("sessions (-want +got):\n%s", diff)
	}
	// The JSON is the summary's plus questions.
	var raw struct {
		Sessions []map[string]any `json:"sessions"`
	}
	srv.getJSON(t, "/api/sessions", 200, &raw)
	for _, k := range []string{"id", "agent", "start", "running", "events", "requests", "denials", "llm_calls", "tokens", "questions"} {
		if _, ok := raw.Sessions[0][k]; !ok {
			t.Errorf("a session lacks %q: %v", k, raw.Sessions[0])
		}
	}
}

func TestSessionTree(t *testing.T) {
	log := sessionLog(t)
	srv := newTestServer(t, Options{Logs: []string{log}})
	var got struct {
		Session   sessionView       `json:"session"`
		Tree      []treeNode        `json:"tree"`
		Questions []json.RawMessage `json:"questions"`
	}
	srv.getJSON(t, "/api/sessions/s1", 200, &got)

	// The same tree as ProcessTree over every record of the session.
	var recs []telemetry.Record
	f := must(os.Open(log))
	defer f.Close()
	if err := telemetry.ReadRecords(f, telemetry.Filter{Session: "s1"}, func(r telemetry.Record) error {
		recs = append(recs, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sum, _ := srv.s.logs[0].Session("s1")
	var want []treeNode
	for _, n := range telemetry.ProcessTree(sum, recs) {
		want = append(want, fullNode(n))
	}
	if diff := cmp.Diff(want, got.Tree); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
	// Spelled out: claude > bash > curl, then the records of no process.
	if len(got.Tree) != 2 || got.Tree[0].PID != 10 || len(got.Tree[0].Children) != 1 || got.Tree[0].Children[0].PID != 11 ||
		got.Tree[0].Children[0].Children[0].PID != 12 || got.Tree[0].Children[0].Children[0].Actions != 2 ||
		got.Tree[0].Children[0].Children[0].Denials != 2 || got.Tree[1].PID != 0 || got.Tree[1].Actions != 1 {
		t.Errorf("tree %+v", got.Tree)
	}
	if got.Session.ID != "s1" || got.Session.Running || got.Questions == nil {
		t.Errorf("session %+v, questions %v", got.Session, got.Questions)
	}
	srv.getJSON(t, "/api/sessions/nope", 404, nil)
}

// fullNode is n as the API would serve it counting n's records.
func fullNode(n *telemetry.ProcNode) treeNode {
	t := treeNode{PID: n.PID, PPID: n.PPID, Names: n.Names, Argv: n.Argv, Actions: len(n.Records), Children: []treeNode{}}
	if t.Names == nil {
		t.Names = []string{}
	}
	if t.Argv == nil {
		t.Argv = []string{}
	}
	for _, r := range n.Records {
		if r.Verdict == event.Deny {
			t.Denials++
		}
	}
	for _, c := range n.Children {
		t.Children = append(t.Children, fullNode(c))
	}
	return t
}

// pagedLog writes session p of 1+n records: its start, then event i
// (seq i+1) is dns when i%3 == 1, exec when 2, http when 0; denied when
// i%4 == 0; by pid 100+i%2; its text holds "Item-<i>".
func pagedLog(t testing.TB, n int) string {
	t.Helper()
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	evs := []*event.Event{sessionStart("p", t0, 100)}
	for i := 1; i <= n; i++ {
		p := proc(100+i%2, 1, "/usr/bin/tool")
		at := t0.Add(time.Duration(i) * time.Second)
		switch i % 3 {
		case 1:
			evs = append(evs, dnsEv("p", at, p, fmt.Sprintf("item-%d.example", i), i%4 == 0))
		case 2:
			e := execEv("p", at, p, "echo", fmt.Sprintf("Item-%d", i))
			if i%4 == 0 {
				e.Verdict = event.Verdict{Action: event.Deny, DecidedBy: event.DecidedByRule, Rule: "r"}
			}
			evs = append(evs, e)
		default:
			evs = append(evs, httpEv("p", at, p, fmt.Sprintf("https://x.example/ITEM-%d", i), i%4 == 0))
		}
	}
	writeLog(t, log, evs...)
	return log
}

func TestEventsPages(t *testing.T) {
	const n = 50
	srv := newTestServer(t, Options{Logs: []string{pagedLog(t, n)}})
	// ref lists the seqs of the events that match, the way the test
	// log was written.
	ref := func(match func(i int) bool) []int {
		var out []int
		if match(0) {
			out = append(out, 1)
		}
		for i := 1; i <= n; i++ {
			if match(i) {
				out = append(out, i+1)
			}
		}
		return out
	}
	kindOf := func(i int) string {
		if i == 0 {
			return "session_start"
		}
		return []string{"http", "dns", "exec"}[i%3]
	}
	all := func(int) bool { return true }
	tail := func(l []int, k int) []int { return l[max(0, len(l)-k):] }
	tests := []struct {
		query     string
		want      []int
		total     int
		more      bool
		newer     bool
		wantError bool
	}{
		{"", ref(all), n + 1, false, false, false},
		{"limit=10", tail(ref(all), 10), n + 1, true, false, false},
		{"limit=10&before=42", ref(func(i int) bool { return i+1 >= 32 && i+1 < 42 }), n + 1, true, true, false},
		{"limit=10&before=5", ref(func(i int) bool { return i+1 < 5 }), n + 1, false, true, false},
		{"limit=5&after=40", ref(func(i int) bool { return i+1 > 40 && i+1 <= 45 }), n + 1, true, true, false},
		{"after=50", []int{51}, n + 1, true, false, false},
		{"after=51", []int{}, n + 1, true, false, false},
		{"kind=dns", ref(func(i int) bool { return kindOf(i) == "dns" }), 17, false, false, false},
		{"kind=dns,exec", ref(func(i int) bool { return kindOf(i) == "dns" || kindOf(i) == "exec" }), 34, false, false, false},
		{"kind=dns&kind=http&verdict=deny", ref(func(i int) bool { return i > 0 && i%4 == 0 && kindOf(i) != "exec" }), 8, false, false, false},
		{"verdict=deny", ref(func(i int) bool { return i > 0 && i%4 == 0 }), 12, false, false, false},
		{"pid=101", ref(func(i int) bool { return i%2 == 1 }), 25, false, false, false},
		{"pid=101&kind=exec&limit=3", tail(ref(func(i int) bool { return i%2 == 1 && kindOf(i) == "exec" }), 3), 8, true, false, false},
		{"q=item-17", ref(func(i int) bool { return i == 17 }), 1, false, false, false},
		{"q=ITEM-1", ref(func(i int) bool { return i == 1 || i >= 10 && i < 20 }), 11, false, false, false},
		{"q=no-such-text", []int{}, 0, false, false, false},
		{"q=claude", []int{1}, 1, false, false, false}, // the session's agent
		{"all=1", ref(all), n + 1, false, false, false},
		{"limit=0", nil, 0, false, false, true},
		{"limit=1001", nil, 0, false, false, true},
		{"before=x", nil, 0, false, false, true},
		{"kind=nope", nil, 0, false, false, true},
		{"verdict=maybe", nil, 0, false, false, true},
		{"pid=-1", nil, 0, false, false, true},
		{"all=yes", nil, 0, false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			if tt.wantError {
				var e struct{ Error string }
				srv.getJSON(t, "/api/sessions/p/events?"+tt.query, 400, &e)
				if e.Error == "" {
					t.Error("no error message")
				}
				return
			}
			var got struct {
				Events []map[string]any `json:"events"`
				Total  int              `json:"total"`
				More   bool             `json:"more"`
				Newer  bool             `json:"newer"`
			}
			srv.getJSON(t, "/api/sessions/p/events?"+tt.query, 200, &got)
			want := tt.want
			if want == nil {
				want = []int{}
			}
			if diff := cmp.Diff(want, seqs(got.Events)); diff != "" {
				t.Errorf("seqs (-want +got):\n%s", diff)
			}
			if got.Total != tt.total || got.More != tt.more || got.Newer != tt.newer {
				t.Errorf("total %d more %v newer %v, want %d %v %v", got.Total, got.More, got.Newer, tt.total, tt.more, tt.newer)
			}
			for _, e := range got.Events {
				seq := int(e["seq"].(float64))
				if k := e["kind"]; k != kindOf(seq-1) {
					t.Errorf("seq %d: kind %v, want %s", seq, k, kindOf(seq-1))
				}
				if seq > 1 && e["session"] != "p" {
					t.Errorf("seq %d: session %v", seq, e["session"])
				}
				if p, ok := e["process"].(map[string]any); seq > 1 && (!ok || p["exe"] != "/usr/bin/tool") {
					t.Errorf("seq %d: process %v, want the acting process put back", seq, e["process"])
				}
			}
		})
	}
	srv.getJSON(t, "/api/sessions/nope/events", 404, nil)
}

// Every event field is served as JSON: markup in a URL or argv is
// escaped (\u003c), never sent as HTML.
func TestEventsAreJSONNotHTML(t *testing.T) {
	srv := newTestServer(t, Options{Logs: []string{sessionLog(t)}})
	resp := must(srv.client.Get(srv.base + "/api/sessions/s1/events"))
	defer resp.Body.Close()
	b := must(io.ReadAll(resp.Body))
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Error("no nosniff")
	}
	if bytes.Contains(b, []byte("<script>")) || bytes.Contains(b, []byte("<img")) {
		t.Errorf("markup sent raw: %s", b)
	}
	var got struct{ Events []telemetry.Record }
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	var argv, url string
	for _, r := range got.Events {
		if r.Kind == event.KindExec {
			argv = strings.Join(r.Argv, " ")
		}
		if r.Kind == event.KindHTTP && r.Verdict == event.Deny {
			url = r.URL
		}
	}
	if !strings.Contains(argv, "<script>alert(1)</script>") || !strings.Contains(url, "<img src=x onerror=alert(1)>") {
		t.Errorf("the payloads did not come back as text: argv %q url %q", argv, url)
	}
}

func TestTimeline(t *testing.T) {
	const n = 50
	srv := newTestServer(t, Options{Logs: []string{pagedLog(t, n)}})
	var got timeline
	srv.getJSON(t, "/api/sessions/p/timeline?buckets=10", 200, &got)
	if got.Start != t0.UnixMilli() || got.End != t0.Add(n*time.Second).UnixMilli() || got.BucketMS*10 < got.End-got.Start {
		t.Errorf("start %d end %d bucket %d", got.Start, got.End, got.BucketMS)
	}
	sums := map[string]int{}
	for _, s := range got.Series {
		if len(s.Counts) != 10 {
			t.Errorf("%s/%s: %d buckets, want 10", s.Kind, s.Verdict, len(s.Counts))
		}
		for _, c := range s.Counts {
			sums[string(s.Kind)+"/"+s.Verdict.String()] += c
		}
	}
	want := map[string]int{}
	for i := 1; i <= n; i++ {
		v := "allow"
		if i%4 == 0 {
			v = "deny"
		}
		want[[]string{"http", "dns", "exec"}[i%3]+"/"+v]++
	}
	if diff := cmp.Diff(want, sums); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	// The first bucket holds the first seconds' events, the last the last.
	var first, last int
	for _, s := range got.Series {
		first += s.Counts[0]
		last += s.Counts[9]
	}
	if first == 0 || last == 0 {
		t.Errorf("first bucket %d, last %d: want events in both", first, last)
	}
	srv.getJSON(t, "/api/sessions/p/timeline", 200, &got)
	if len(got.Series) == 0 || len(got.Series[0].Counts) != 60 {
		t.Errorf("default buckets: %+v", got.Series)
	}
	for _, q := range []string{"buckets=0", "buckets=1001", "buckets=x"} {
		srv.getJSON(t, "/api/sessions/p/timeline?"+q, 400, nil)
	}
	srv.getJSON(t, "/api/sessions/nope/timeline", 404, nil)
}

// serveBroker serves a real broker for session id on a control socket in
// dir, as a session does.
func serveBroker(t *testing.T, dir, id string, unattended ask.Unattended) *ask.Broker {
	t.Helper()
	var n int
	var mu = make(chan struct{}, 1)
	mu <- struct{}{}
	b := ask.NewBroker(ask.Options{Session: id, Timeout: time.Minute, Unattended: unattended,
		NewID: func() string { <-mu; n++; s := fmt.Sprintf("%s-q%d", id, n); mu <- struct{}{}; return s }})
	ln, err := ask.Listen(filepath.Join(dir, id+".sock"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Serve(ln, nil) }()
	t.Cleanup(func() {
		ln.Close()
		b.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return b
}

var askVerdict = event.Verdict{Action: event.Ask, Rule: "ask-net", Reason: "a person decides", DecidedBy: event.DecidedByRule}

func askEvent(id, host string) *event.Event {
	return &event.Event{Kind: event.KindHTTP, Session: id, Process: proc(12, 11, "/usr/bin/curl"),
		HTTP: &event.HTTP{Method: "GET", URL: "https://" + host + "/", Host: host}}
}

// The stream delivers a record appended to the log, its session's new
// summary, a question asked while a page is connected and its answer; the
// page's POST reaches the session's broker and unblocks Decide.
func TestStreamAndAnswer(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "audit.jsonl")
	askDir := filepath.Join(dir, "ask")
	writeLog(t, log, sessionStart("s1", t0, 10))
	b := serveBroker(t, askDir, "s1", ask.UnattendedDeny)

	// No page connected: nobody attends, so the ask is denied at once.
	if v := b.Decide(context.Background(), askEvent("s1", "first.example"), askVerdict); v.Action != event.Deny {
		t.Fatalf("unattended ask: %v, want deny", v)
	}

	ts := startTestServer(t, Options{Logs: []string{log}, AskDir: askDir})
	if !strings.HasPrefix(ts.s.URL(), "http://127.0.39.1:") || !strings.Contains(ts.s.URL(), "/?token=") {
		t.Fatalf("URL %q", ts.s.URL())
	}
	base := ts.base
	events, _ := openStream(t, ts.client, base+"/api/stream")

	// A record appended to the log.
	writeLog(t, log, httpEv("s1", t0.Add(time.Second), proc(12, 11, "/usr/bin/curl"), "https://live.example/<b>", true))
	rec := waitEvent(t, events, "the appended record", func(e sseEvent) bool { return e.name == "record" })
	var r struct {
		telemetry.Record
		Seq int `json:"seq"`
	}
	if err := json.Unmarshal([]byte(rec.data), &r); err != nil {
		t.Fatal(err)
	}
	if r.Seq != 2 || r.Session != "s1" || r.URL != "https://live.example/<b>" || r.Process == nil || r.Process.PID != 12 {
		t.Errorf("record %s", rec.data)
	}
	if strings.Contains(rec.data, "<b>") {
		t.Errorf("markup sent raw on the stream: %s", rec.data)
	}
	sum := waitEvent(t, events, "the session's new summary", func(e sseEvent) bool { return e.name == "session" })
	var sv sessionView
	json.Unmarshal([]byte(sum.data), &sv)
	if sv.ID != "s1" || sv.Requests != 1 || sv.Denials != 1 {
		t.Errorf("session %s", sum.data)
	}

	// An ask while the page is connected waits, and shows up at once.
	verdict := make(chan event.Verdict, 1)
	go func() { verdict <- b.Decide(context.Background(), askEvent("s1", "second.example"), askVerdict) }()
	qe := waitEvent(t, events, "the question", func(e sseEvent) bool { return e.name == "question" })
	var q ask.Question
	json.Unmarshal([]byte(qe.data), &q)
	if q.ID == "" || q.Session != "s1" || !strings.Contains(q.Summary, "second.example") {
		t.Fatalf("question %s", qe.data)
	}
	var qs struct{ Questions []ask.Question }
	ts.getJSON(t, "/api/questions", 200, &qs)
	if len(qs.Questions) != 1 || qs.Questions[0].ID != q.ID {
		t.Errorf("questions %+v", qs.Questions)
	}
	var list struct{ Sessions []sessionView }
	ts.getJSON(t, "/api/sessions", 200, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].Questions != 1 {
		t.Errorf("sessions %+v, want s1 with 1 question", list.Sessions)
	}

	// Allow for the session: allow + always.
	post := func(id, body string) *http.Response {
		req, _ := http.NewRequest("POST", base+"/api/questions/"+id, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", base)
		resp, err := ts.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := post(q.ID, `{"allow":true,"always":true}`); resp.StatusCode != 200 {
		t.Fatalf("answer: status %d", resp.StatusCode)
	}
	select {
	case v := <-verdict:
		if v.Action != event.Allow || v.DecidedBy != event.DecidedByHuman || !strings.Contains(v.Reason, "for the session") {
			t.Errorf("verdict %v, want allowed for the session by a person", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Decide still waits after the answer")
	}
	ans := waitEvent(t, events, "answered", func(e sseEvent) bool { return e.name == "answered" })
	if !strings.Contains(ans.data, `"id":"`+q.ID+`"`) || !strings.Contains(ans.data, `"session":"s1"`) {
		t.Errorf("answered %s", ans.data)
	}
	// Always: the same question is settled without asking.
	if v := b.Decide(context.Background(), askEvent("s1", "second.example"), askVerdict); v.Action != event.Allow {
		t.Errorf("the same ask after allow-for-the-session: %v", v)
	}
	if resp := post(q.ID, `{"allow":false}`); resp.StatusCode != 404 {
		t.Errorf("answering twice: status %d, want 404", resp.StatusCode)
	}
	if resp := post(q.ID, `{"allow":"yes"}`); resp.StatusCode != 400 {
		t.Errorf("a bad answer: status %d, want 400", resp.StatusCode)
	}

	// Deny, and a question answered elsewhere (chaperone deny) is
	// reported answered too.
	go func() { verdict <- b.Decide(context.Background(), askEvent("s1", "third.example"), askVerdict) }()
	qe = waitEvent(t, events, "the third question", func(e sseEvent) bool { return e.name == "question" })
	json.Unmarshal([]byte(qe.data), &q)
	if err := ask.Send(askDir, q.ID, false, false, ""); err != nil {
		t.Fatal(err)
	}
	if v := <-verdict; v.Action != event.Deny {
		t.Errorf("verdict %v, want deny", v)
	}
	waitEvent(t, events, "the third answered", func(e sseEvent) bool {
		return e.name == "answered" && strings.Contains(e.data, q.ID)
	})
}

// With session=, a stream carries that session's records only, and every
// session's summary.
func TestStreamOfOneSession(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "audit.jsonl")
	writeLog(t, log, sessionStart("a", t0, 10), sessionStart("b", t0, 20))
	ts := startTestServer(t, Options{Logs: []string{log}})
	base := ts.base
	events, _ := openStream(t, ts.client, base+"/api/stream?session=b")
	writeLog(t, log, dnsEv("a", t0, nil, "a.example", false), dnsEv("b", t0, nil, "b.example", false))
	rec := waitEvent(t, events, "b's record", func(e sseEvent) bool { return e.name == "record" })
	if !strings.Contains(rec.data, "b.example") {
		t.Errorf("first record on b's stream: %s", rec.data)
	}
	// a's summary comes too, never a's record.
	waitEvent(t, events, "a's summary", func(e sseEvent) bool {
		if e.name == "record" {
			t.Errorf("another record on b's stream: %s", e.data)
		}
		return e.name == "session" && strings.Contains(e.data, `"id":"a"`)
	})
	writeLog(t, log, dnsEv("a", t0, nil, "a2.example", false), dnsEv("b", t0, nil, "b2.example", false))
	rec = waitEvent(t, events, "b's second record", func(e sseEvent) bool { return e.name == "record" })
	if !strings.Contains(rec.data, "b2.example") {
		t.Errorf("second record on b's stream: %s", rec.data)
	}
}

// A page that does not read is dropped and counted; publishing never
// waits for it.
func TestSlowPageDropped(t *testing.T) {
	attended, released := 0, 0
	h := newHub(nil, func() func() { attended++; return func() { released++ } })
	h.log = discardLogger()
	slow, _ := h.join("")
	fast, _ := h.join("")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < clientQueue+10; i++ {
			h.publish("record", "s", json.RawMessage(`{}`))
			<-fast.ch // the fast page keeps up
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("publish blocked on a page that does not read")
	}
	select {
	case <-slow.gone:
	default:
		t.Fatal("the slow page was not dropped")
	}
	select {
	case <-fast.gone:
		t.Fatal("the fast page was dropped")
	default:
	}
	if got := h.dropped.Load(); got != 1 {
		t.Errorf("dropped %d, want 1", got)
	}
	if attended != 1 || released != 0 {
		t.Errorf("attended %d released %d with a page connected", attended, released)
	}
	h.leave(fast)
	h.leave(slow) // dropped already: no second release
	if released != 1 {
		t.Errorf("released %d after the last page left, want 1", released)
	}
}

// Routine reads the log folded come as their file_reads record, which a
// kind=file filter includes; the timeline counts each read.
func TestFileReads(t *testing.T) {
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	p := proc(30, 1, "/usr/bin/python3")
	evs := []*event.Event{sessionStart("f", t0, 30)}
	for i, lib := range []string{"libc.so.6", "libm.so.6", "libz.so.1"} {
		evs = append(evs, &event.Event{Time: t0.Add(time.Duration(i+1) * time.Millisecond), Kind: event.KindFile, Session: "f", Process: p,
			Verdict: event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByDefault},
			File:    &event.File{Path: "/usr/lib/x86_64-linux-gnu/" + lib, Access: event.FileRead}})
	}
	evs = append(evs, &event.Event{Time: t0.Add(time.Second), Kind: event.KindFile, Session: "f", Process: p,
		Verdict: event.Verdict{Action: event.Deny, Rule: "creds", DecidedBy: event.DecidedByRule},
		File:    &event.File{Path: "/home/u/.aws/credentials", Access: event.FileRead}},
		dnsEv("f", t0.Add(2*time.Second), p, "x.example", false))
	writeLog(t, log, evs...)
	srv := newTestServer(t, Options{Logs: []string{log}})
	var got struct {
		Events []map[string]any `json:"events"`
		Total  int              `json:"total"`
	}
	srv.getJSON(t, "/api/sessions/f/events?kind=file", 200, &got)
	var kinds []string
	for _, e := range got.Events {
		kinds = append(kinds, e["kind"].(string)+"/"+e["verdict"].(string))
	}
	if diff := cmp.Diff([]string{"file/deny", "file_reads/allow"}, kinds); diff != "" && !cmp.Equal([]string{"file_reads/allow", "file/deny"}, kinds) {
		t.Errorf("kind=file (-want +got):\n%s", diff)
	}
	for _, e := range got.Events {
		if e["kind"] == "file_reads" && e["count"] != 3.0 {
			t.Errorf("file_reads count %v, want 3", e["count"])
		}
	}
	var tl timeline
	srv.getJSON(t, "/api/sessions/f/timeline?buckets=1", 200, &tl)
	n := map[string]int{}
	for _, s := range tl.Series {
		n[string(s.Kind)] += s.Counts[0]
	}
	if n["file_reads"] != 3 || n["file"] != 1 || n["dns"] != 1 {
		t.Errorf("timeline counts %v, want 3 folded reads, 1 file, 1 dns", n)
	}
}

// Pages asked while the log is truncated and written again fail at worst
// with ErrIndexReset (the handler asks again), never read a line that
// is not theirs, nor panic.
func TestEventsWhileTheLogStartsOver(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "audit.jsonl")
	big := pagedLog(t, 300)
	small := pagedLog(t, 5)
	copyFile := func(from string) {
		b := must(os.ReadFile(from))
		if err := os.WriteFile(log+".new", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(log+".new", log); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(big)
	x := telemetry.NewLogIndex(log)
	defer x.Close()
	x.Poll(false)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, q := range []eventQuery{{limit: 1000, pid: -1}, {limit: 10, pid: -1, text: "item-1"}, {limit: 50, pid: -1, before: 250}} {
				page, err := queryEvents(x, "p", q)
				if err != nil && !errors.Is(err, telemetry.ErrIndexReset) {
					t.Errorf("query: %v", err)
				}
				for _, e := range page.Events {
					var r struct {
						Session string `json:"session"`
					}
					json.Unmarshal(e, &r)
					if r.Session != "p" {
						t.Errorf("a line of another session: %s", e)
					}
				}
			}
		}
	}()
	for i := 0; i < 30; i++ {
		copyFile([]string{small, big}[i%2])
		if _, err := x.Poll(false); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	<-done
}

// The asks are attended only while a page is connected to the stream.
func TestWatchOnlyWhileAPageIsConnected(t *testing.T) {
	dir := t.TempDir()
	askDir := filepath.Join(dir, "ask")
	b := serveBroker(t, askDir, "s1", ask.UnattendedDeny)
	ts := startTestServer(t, Options{AskDir: askDir})
	base := ts.base

	n := 0
	// attended asks until the broker's answer to a new ask says whether
	// somebody attends: an unattended one is denied at once, an attended
	// one waits (and is abandoned after a short while).
	attended := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			n++
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			v := b.Decide(ctx, askEvent("s1", fmt.Sprintf("h%d.example", n)), askVerdict)
			cancel()
			got := !strings.Contains(v.Reason, "nobody could be asked")
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("attended = %v after 10 s, want %v (last verdict %v)", got, want, v)
			}
		}
	}
	attended(false)
	events, disconnect := openStream(t, ts.client, base+"/api/stream")
	attended(true)
	waitEvent(t, events, "a question", func(e sseEvent) bool { return e.name == "question" })
	disconnect()
	attended(false)
	_, disconnect = openStream(t, ts.client, base+"/api/stream")
	attended(true)
	disconnect()
	attended(false)
}

// The page's three answers reach the session's broker as such: Allow
// once, Allow for the session (always), Deny.
func TestAnswerButtons(t *testing.T) {
	askDir := filepath.Join(t.TempDir(), "ask")
	b := serveBroker(t, askDir, "s1", ask.UnattendedWait)
	srv := newTestServer(t, Options{AskDir: askDir})
	tests := []struct {
		name, body string
		want       event.Action
		reason     string
	}{
		{"once", `{"allow":true,"always":false}`, event.Allow, "approved by the live view"},
		{"session", `{"allow":true,"always":true}`, event.Allow, "approved for the session by the live view"},
		{"deny", `{"allow":false,"always":false}`, event.Deny, "denied by the live view"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verdict := make(chan event.Verdict, 1)
			go func() {
				verdict <- b.Decide(context.Background(), askEvent("s1", fmt.Sprintf("b%d.example", i)), askVerdict)
			}()
			var qs struct{ Questions []ask.Question }
			deadline := time.Now().Add(10 * time.Second)
			for len(qs.Questions) == 0 && time.Now().Before(deadline) {
				srv.getJSON(t, "/api/questions", 200, &qs)
			}
			if len(qs.Questions) != 1 {
				t.Fatalf("questions %+v", qs.Questions)
			}
			req, _ := http.NewRequest("POST", srv.base+"/api/questions/"+qs.Questions[0].ID, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Origin", srv.base)
			resp := must(srv.client.Do(req))
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			v := <-verdict
			if v.Action != tt.want || !strings.Contains(v.Reason, tt.reason) {
				t.Errorf("verdict %v, want %v %q", v, tt.want, tt.reason)
			}
			if tt.name == "once" && strings.Contains(v.Reason, "for the session") {
				t.Errorf("allow once answered for the session: %v", v)
			}
		})
	}
}
