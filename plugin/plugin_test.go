package plugin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/google/go-cmp/cmp"
)

// answers decodes Serve's output, sorted by id.
func answers(t testing.TB, out []byte) []Response {
	t.Helper()
	var rs []Response
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r Response
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("answer %q is not JSON: %v", sc.Text(), err)
		}
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b Response) int { return int(a.ID) - int(b.ID) })
	return rs
}

// byHost allows hosts starting with "ok", abstains on "pass", denies the
// rest, and passes back odd verdict words from the host "word-<w>".
func byHost(e Event) Verdict {
	switch {
	case strings.HasPrefix(e.Host, "ok"):
		return Verdict{Verdict: Allow, Reason: "ok host", Rule: "hosts"}
	case e.Host == "pass":
		return Verdict{Verdict: Abstain}
	case strings.HasPrefix(e.Host, "word-"):
		return Verdict{Verdict: strings.TrimPrefix(e.Host, "word-")}
	}
	return Verdict{Verdict: Deny, Reason: "not ok: " + e.Host}
}

func TestServe(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Response
	}{
		{"one", `{"id":1,"event":{"kind":"connect","host":"ok.test"}}` + "\n",
			[]Response{{1, Verdict{Allow, "ok host", "hosts"}}}},
		{"no final newline", `{"id":7,"event":{"kind":"http","host":"bad.test"}}`,
			[]Response{{7, Verdict{Deny, "not ok: bad.test", ""}}}},
		{"crlf and blank lines", "\r\n\n" + `{"id":2,"event":{"kind":"connect","host":"pass"}}` + "\r\n",
			[]Response{{2, Verdict{Verdict: Abstain}}}},
		{"several", `{"id":3,"event":{"host":"ok1"}}` + "\n" + `{"id":4,"event":{"host":"x"}}` + "\n",
			[]Response{{3, Verdict{Allow, "ok host", "hosts"}}, {4, Verdict{Deny, "not ok: x", ""}}}},
		{"empty verdict denies", `{"id":5,"event":{"host":"word-"}}`,
			[]Response{{5, Verdict{Deny, "plugin: empty verdict", ""}}}},
		{"unknown verdict denies", `{"id":6,"event":{"host":"word-maybe"}}`,
			[]Response{{6, Verdict{Deny, `plugin: unknown verdict "maybe"`, ""}}}},
		{"not json skipped", "hello\n{\n" + `{"id":8,"event":{"host":"ok"}}`,
			[]Response{{8, Verdict{Allow, "ok host", "hosts"}}}},
		{"no id skipped", `{"event":{"host":"ok"}}` + "\n" + `{"id":null,"event":{}}` + "\n" + `{"id":0,"event":{}}`, nil},
		{"string id skipped", `{"id":"9","event":{"host":"ok"}}`, nil},
		{"negative id skipped", `{"id":-1,"event":{"host":"ok"}}`, nil},
		{"bad event denied", `{"id":10,"event":{"port":"eighty"}}` + "\n",
			[]Response{{10, Verdict{Deny, "plugin: cannot decode event: …", ""}}}},
		{"missing event denied", `{"id":11}`,
			[]Response{{11, Verdict{Deny, "plugin: cannot decode event: no event", ""}}}},
		{"unknown fields ignored", `{"id":12,"v":2,"event":{"kind":"future","host":"ok","new":[1]}}`,
			[]Response{{12, Verdict{Allow, "ok host", "hosts"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := Serve(strings.NewReader(tt.in), &out, byHost); err != nil {
				t.Fatalf("Serve: %v", err)
			}
			got := answers(t, out.Bytes())
			for i := range got { // the decoder's own words are not part of the contract
				if p, _, ok := strings.Cut(got[i].Reason, "decode event: "); ok && !strings.HasSuffix(got[i].Reason, "no event") {
					got[i].Reason = p + "decode event: …"
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("answers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestServeLongLineSkipped(t *testing.T) {
	long := `{"id":1,"event":{"host":"` + strings.Repeat("a", MaxLine) + `"}}` + "\n"
	in := long + `{"id":2,"event":{"host":"ok"}}` + "\n"
	var out bytes.Buffer
	if err := Serve(strings.NewReader(in), &out, byHost); err != nil {
		t.Fatal(err)
	}
	want := []Response{{2, Verdict{Allow, "ok host", "hosts"}}}
	if diff := cmp.Diff(want, answers(t, out.Bytes())); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
}

// TestServeConcurrent checks that a slow decision does not hold up the
// answers to later requests.
func TestServeConcurrent(t *testing.T) {
	pr, pw := io.Pipe()
	out := &lineWriter{lines: make(chan string, 4)}
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Serve(pr, out, func(e Event) Verdict {
			if e.Host == "slow" {
				<-release
			}
			return Verdict{Verdict: Allow, Reason: e.Host}
		})
	}()
	io.WriteString(pw, `{"id":1,"event":{"host":"slow"}}`+"\n"+`{"id":2,"event":{"host":"fast"}}`+"\n")
	if got := <-out.lines; !strings.Contains(got, `"id":2`) {
		t.Fatalf("first answer %s, want the answer to id 2", got)
	}
	close(release)
	if got := <-out.lines; !strings.Contains(got, `"id":1`) {
		t.Fatalf("second answer %s, want the answer to id 1", got)
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type lineWriter struct {
	mu    sync.Mutex
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines <- string(p)
	return len(p), nil
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

type failReader struct{}

func (failReader) Read([]byte) (int, error) { return 0, errors.New("bad fd") }

func TestServeErrors(t *testing.T) {
	in := strings.Repeat(`{"id":1,"event":{"host":"ok"}}`+"\n", 3)
	if err := Serve(strings.NewReader(in), failWriter{}, byHost); err == nil || !strings.Contains(err.Error(), "broken pipe") {
		t.Errorf("Serve to a broken writer: err = %v, want the write error", err)
	}
	if err := Serve(failReader{}, io.Discard, byHost); err == nil || !strings.Contains(err.Error(), "bad fd") {
		t.Errorf("Serve from a broken reader: err = %v, want the read error", err)
	}
}

func TestEventFrom(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	proc := &event.Process{PID: 42, PPID: 1, UID: 1000, Exe: "/usr/bin/curl", Argv: []string{"curl", "x"}, Cwd: "/w",
		Lineage: []int{1}, LineageNames: []string{"bash", "curl"}, ExeDigest: "sha256:ab"}
	code, ms := 3, int64(1500)
	tests := []struct {
		name string
		e    event.Event
		want string
	}{
		{"connect", event.Event{Time: at, Kind: event.KindConnect, Session: "s1", Process: proc,
			Connect: &event.Connect{Dst: netip.MustParseAddrPort("10.0.0.1:443"), Host: "api.test", Port: 443, Transport: event.TCP, Via: "connect"},
			HTTP:    &event.HTTP{Method: "GET"}}, // payload of another kind is left out
			`{"kind":"connect","time":"2025-01-02T03:04:05Z","session":"s1","process":{"pid":42,"ppid":1,"uid":1000,"exe":"/usr/bin/curl","argv":["curl","x"],"cwd":"/w","lineage":["bash","curl"],"exe_digest":"sha256:ab"},"dst":"10.0.0.1:443","host":"api.test","port":443,"transport":"tcp","via":"connect"}`},
		{"http", event.Event{Kind: event.KindHTTP, HTTP: &event.HTTP{Method: "POST", URL: "https://a.test/x", Host: "a.test", Proto: "HTTP/2.0", Status: 201, Header: map[string][]string{"Accept": {"*/*"}}}},
			`{"kind":"http","host":"a.test","method":"POST","url":"https://a.test/x","status":201,"proto":"HTTP/2.0","header":{"Accept":["*/*"]}}`},
		{"tls", event.Event{Kind: event.KindTLS, TLS: &event.TLS{ServerName: "a.test", ALPN: []string{"h2"}, Version: "1.3", Intercepted: true}},
			`{"kind":"tls","sni":"a.test","alpn":["h2"],"tls_version":"1.3","intercepted":true}`},
		{"dns", event.Event{Kind: event.KindDNS, DNS: &event.DNS{Name: "a.test", Type: "A", Answers: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, Rcode: "NOERROR"}},
			`{"kind":"dns","name":"a.test","qtype":"A","answers":["192.0.2.1"],"rcode":"NOERROR"}`},
		{"llm", event.Event{Kind: event.KindLLM, LLM: &event.LLM{Provider: "openai", Model: "m", Path: "/v1/chat/completions"}},
			`{"kind":"llm","provider":"openai","model":"m","path":"/v1/chat/completions"}`},
		{"file", event.Event{Kind: event.KindFile, File: &event.File{Path: "/etc/passwd", Access: event.FileRead}},
			`{"kind":"file","path":"/etc/passwd","access":"read"}`},
		{"exec", event.Event{Kind: event.KindExec, Exec: &event.Exec{Path: "/bin/sh", Argv: []string{"sh", "-c", "x"}, Cwd: "/", Digest: "sha256:cd"}},
			`{"kind":"exec","path":"/bin/sh","argv":["sh","-c","x"],"cwd":"/","digest":"sha256:cd"}`},
		{"session_end", event.Event{Kind: event.KindSessionEnd, SessionInfo: &event.Session{ID: "s", Agent: "claude", Command: []string{"claude"}, RootPID: 9, Mode: "proxy", ExitCode: code, Duration: time.Duration(ms) * time.Millisecond}},
			`{"kind":"session_end","agent":"claude","command":["claude"],"root_pid":9,"mode":"proxy","exit_code":3,"duration_ms":1500}`},
		{"session_start", event.Event{Kind: event.KindSessionStart, SessionInfo: &event.Session{ID: "s", Agent: "codex"}},
			`{"kind":"session_start","agent":"codex"}`},
		{"session_start in a pod's container", event.Event{Kind: event.KindSessionStart, SessionInfo: &event.Session{ID: "s", Agent: "codex",
			ContainerID: "8c046cb0b72cd4c99f51b5591cd5b095967f58ee003710a45280c28ee1a9c7fa", ContainerRuntime: "cri-o", PodUID: "fd52ef25-a87d-11e9-9423-0800271a638e"}},
			`{"kind":"session_start","agent":"codex","container_id":"8c046cb0b72cd4c99f51b5591cd5b095967f58ee003710a45280c28ee1a9c7fa","container_runtime":"cri-o","pod_uid":"fd52ef25-a87d-11e9-9423-0800271a638e"}`},
		{"payload missing", event.Event{Kind: event.KindConnect}, `{"kind":"connect"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(EventFrom(&tt.e))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("JSON (-want +got):\n%s", diff)
			}
			var back Event
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(EventFrom(&tt.e), back); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzServe feeds arbitrary input to Serve: it never panics, never errors
// on a reader that ends cleanly, and answers only requests that carry an id,
// each at most once, with a valid verdict word.
func FuzzServe(f *testing.F) {
	f.Add([]byte(`{"id":1,"event":{"kind":"connect","host":"ok.test"}}` + "\n"))
	f.Add([]byte(`{"id":2,"event":{"kind":"http","host":"word-"}}` + "\n" + `{"id":3,"event":{"host":"word-zz"}}`))
	f.Add([]byte("garbage\n\x00\xff\n{\"id\":1e3,\"event\":{}}\n"))
	f.Add([]byte(`{"id":18446744073709551615,"event":{"process":{"pid":"x"}}}`))
	f.Add([]byte(`{"id":4,"event":null}` + "\n" + `[1,2]` + "\n" + `{"id":{},"event":{}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		if err := Serve(bytes.NewReader(in), &out, byHost); err != nil {
			t.Fatalf("Serve: %v", err)
		}
		got := answers(t, out.Bytes())
		for _, r := range got {
			if r.ID == 0 {
				t.Errorf("answer %+v has id 0", r)
			}
			if !ValidVerdict(r.Verdict.Verdict) {
				t.Errorf("answer %+v has an invalid verdict", r)
			}
		}
		if n := bytes.Count(in, []byte("\n")) + 1; len(got) > n {
			t.Errorf("%d answers to %d lines", len(got), n)
		}
	})
}
