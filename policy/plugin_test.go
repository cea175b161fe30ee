package policy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/plugin"
	"github.com/google/go-cmp/cmp"
)

// The test binary doubles as the plugin: helperCommand runs it again as
// TestPluginHelperProcess, which serves in the given mode instead of testing.
func helperCommand(mode string, args ...string) []string {
	return append([]string{os.Args[0], "-test.run=^TestPluginHelperProcess$", "--", "plugin-helper", mode}, args...)
}

// TestPluginHelperProcess is not a test: it is the plugin process that
// helperCommand starts. Modes:
//
//	allow, deny, rewrite, ask, abstain   answer with that verdict
//	echo      allow, with the event's host as the reason, after a delay that
//	          depends on the host (answers come out of order)
//	env       allow, with the environment as the reason
//	crash N   answer N requests, then exit at the next one
//	hang      read requests, never answer
//	stubborn  never answer, ignore EOF on stdin
//	noread    never read stdin
//	garbage   answer each request with a line that is not JSON
//	badverdict, wrongid, noid   answer with an unknown verdict, the wrong id, no id
//	stderr    write a line to stderr for each request, then allow
func TestPluginHelperProcess(t *testing.T) {
	args := flag.Args()
	if len(args) < 2 || args[0] != "plugin-helper" {
		return // an ordinary run of the tests
	}
	os.Exit(pluginHelper(args[1], args[2:]))
}

func pluginHelper(mode string, args []string) int {
	serve := func(v plugin.Verdict) int {
		if err := plugin.Serve(os.Stdin, os.Stdout, func(plugin.Event) plugin.Verdict { return v }); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	// raw answers each request line with answer(id), without package plugin.
	raw := func(answer func(n int, id uint64) (string, bool)) int {
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(nil, 1<<20)
		for n := 0; sc.Scan(); n++ {
			var req struct{ ID uint64 }
			if json.Unmarshal(sc.Bytes(), &req) != nil {
				return 2
			}
			line, ok := answer(n, req.ID)
			if !ok {
				return 3
			}
			if line != "" {
				fmt.Println(line)
			}
		}
		return 0
	}
	switch mode {
	case plugin.Allow, plugin.Deny, plugin.Rewrite, plugin.Ask:
		return serve(plugin.Verdict{Verdict: mode, Reason: "helper says " + mode, Rule: "r-" + mode})
	case plugin.Abstain:
		return serve(plugin.Verdict{Verdict: plugin.Abstain, Reason: "ignored"})
	case "echo":
		err := plugin.Serve(os.Stdin, os.Stdout, func(e plugin.Event) plugin.Verdict {
			n, _ := strconv.Atoi(strings.TrimPrefix(e.Host, "h"))
			time.Sleep(time.Duration(n%5) * 3 * time.Millisecond)
			return plugin.Verdict{Verdict: plugin.Allow, Reason: e.Host}
		})
		if err != nil {
			return 1
		}
		return 0
	case "env":
		return serve(plugin.Verdict{Verdict: plugin.Allow, Reason: strings.Join(os.Environ(), " ")})
	case "crash":
		after, _ := strconv.Atoi(args[0])
		return raw(func(n int, id uint64) (string, bool) {
			return fmt.Sprintf(`{"id":%d,"verdict":"allow"}`, id), n < after
		})
	case "hang":
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	case "noread":
		select {}
	case "stubborn":
		_, _ = io.Copy(io.Discard, os.Stdin)
		select {}
	case "garbage":
		return raw(func(int, uint64) (string, bool) { return "this is not JSON", true })
	case "badverdict":
		return raw(func(_ int, id uint64) (string, bool) { return fmt.Sprintf(`{"id":%d,"verdict":"perhaps"}`, id), true })
	case "wrongid":
		return raw(func(_ int, id uint64) (string, bool) {
			return fmt.Sprintf(`{"id":%d,"verdict":"allow"}`, id+1000), true
		})
	case "noid":
		return raw(func(int, uint64) (string, bool) { return `{"verdict":"allow"}`, true })
	case "stderr":
		return raw(func(_ int, id uint64) (string, bool) {
			fmt.Fprintf(os.Stderr, "handling %d\x1b[31m\n", id)
			return fmt.Sprintf(`{"id":%d,"verdict":"allow"}`, id), true
		})
	}
	fmt.Fprintln(os.Stderr, "unknown mode", mode)
	return 4
}

var (
	connectEvent = &event.Event{Kind: event.KindConnect, Session: "s1", Connect: &event.Connect{Host: "api.test", Port: 443}}
	dnsEvent     = &event.Event{Kind: event.KindDNS, Session: "s1", DNS: &event.DNS{Name: "api.test", Type: "A"}}
)

// testOptions are the runner's timings in tests: quick restarts and a short
// grace.
func testOptions() runnerOptions {
	return runnerOptions{backoffMin: 20 * time.Millisecond, backoffMax: 200 * time.Millisecond, grace: 200 * time.Millisecond,
		// GORACE: a helper built with -race would otherwise linger a second at exit.
		env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "GORACE=atexit_sleep_ms=0"}}
}

func startTest(t testing.TB, opts runnerOptions, cfgs ...PluginConfig) *PluginRunner {
	t.Helper()
	r, err := startPlugins(context.Background(), cfgs, slog.New(slog.DiscardHandler), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestPluginVerdicts(t *testing.T) {
	tests := []struct {
		mode string
		want event.Verdict
	}{
		{"allow", event.Verdict{Action: event.Allow, Rule: "plugin:p/r-allow", Reason: "helper says allow", DecidedBy: event.DecidedByPlugin}},
		{"deny", event.Verdict{Action: event.Deny, Rule: "plugin:p/r-deny", Reason: "helper says deny", DecidedBy: event.DecidedByPlugin}},
		{"rewrite", event.Verdict{Action: event.Rewrite, Rule: "plugin:p/r-rewrite", Reason: "helper says rewrite", DecidedBy: event.DecidedByPlugin}},
		{"ask", event.Verdict{Action: event.Ask, Rule: "plugin:p/r-ask", Reason: "helper says ask", DecidedBy: event.DecidedByPlugin}},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			r := startTest(t, testOptions(), PluginConfig{Name: "p", Command: helperCommand(tt.mode)})
			for range 3 { // the same process answers again
				v, ok := r.Ask(context.Background(), connectEvent)
				if !ok {
					t.Fatal("not answered")
				}
				if diff := cmp.Diff(tt.want, v); diff != "" {
					t.Errorf("verdict (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestPluginOrder(t *testing.T) {
	p := func(name, mode string, on ...event.Kind) PluginConfig {
		return PluginConfig{Name: name, Command: helperCommand(mode), On: on}
	}
	tests := []struct {
		name     string
		cfgs     []PluginConfig
		e        *event.Event
		wantRule string // "" when nobody decides
	}{
		{"abstain falls through", []PluginConfig{p("a", "abstain"), p("b", "deny")}, connectEvent, "plugin:b/r-deny"},
		{"first decides", []PluginConfig{p("a", "allow"), p("b", "deny")}, connectEvent, "plugin:a/r-allow"},
		{"all abstain", []PluginConfig{p("a", "abstain"), p("b", "abstain")}, connectEvent, ""},
		{"on skips other kinds", []PluginConfig{p("a", "deny", event.KindDNS), p("b", "allow", event.KindConnect, event.KindHTTP)}, connectEvent, "plugin:b/r-allow"},
		{"on matches", []PluginConfig{p("a", "deny", event.KindDNS), p("b", "allow")}, dnsEvent, "plugin:a/r-deny"},
		{"none matches", []PluginConfig{p("a", "deny", event.KindHTTP)}, connectEvent, ""},
		{"no plugins", nil, connectEvent, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := startTest(t, testOptions(), tt.cfgs...)
			v, ok := r.Ask(context.Background(), tt.e)
			if ok != (tt.wantRule != "") || v.Rule != tt.wantRule {
				t.Errorf("Ask = %v, %v; want rule %q (answered %v)", v, ok, tt.wantRule, tt.wantRule != "")
			}
			if !ok && v != (event.Verdict{}) {
				t.Errorf("unanswered Ask returned %v, want the zero verdict", v)
			}
		})
	}
}

// TestPluginFailures covers a plugin that misbehaves: the request gets the
// on_error verdict, decided by the plugin, saying what failed.
func TestPluginFailures(t *testing.T) {
	tests := []struct {
		mode    string
		onError Action
		want    event.Action
		reason  string
	}{
		{"hang", "", event.Deny, "gave no answer within 300ms"},
		{"garbage", ActionDeny, event.Deny, "wrote a line that is not a JSON answer"},
		{"badverdict", ActionAsk, event.Ask, `unknown verdict "perhaps"`},
		{"wrongid", ActionAllow, event.Allow, "which is not waiting"},
		{"noid", "", event.Deny, "answered request 0, which is not waiting"},
		{"crash", ActionAsk, event.Ask, "exited (exit status 3)"},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			opts := testOptions()
			opts.backoffMin, opts.backoffMax = time.Hour, time.Hour // no restart during the test
			// Only "hang" waits out its timeout; the others fail at once,
			// so theirs leaves room for a slow start on a loaded machine.
			timeout := 10 * time.Second
			if tt.mode == "hang" {
				timeout = 300 * time.Millisecond
			}
			r := startTest(t, opts, PluginConfig{Name: "bad", Command: helperCommand(tt.mode, "0"), Timeout: timeout, OnError: tt.onError})
			v, ok := r.Ask(context.Background(), connectEvent)
			if !ok || v.Action != tt.want || v.DecidedBy != event.DecidedByPlugin || v.Rule != "plugin:bad" || !strings.Contains(v.Reason, tt.reason) {
				t.Errorf("Ask = %+v, %v; want %v by plugin (plugin:bad) saying %q", v, ok, tt.want, tt.reason)
			}
			// Until the restart, requests get on_error at once.
			v, ok = r.Ask(context.Background(), connectEvent)
			if !ok || v.Action != tt.want || !strings.Contains(v.Reason, "is restarting after it") || !strings.Contains(v.Reason, tt.reason) {
				t.Errorf("Ask during backoff = %+v, %v; want %v saying it is restarting", v, ok, tt.want)
			}
		})
	}
}

// TestPluginNotReading checks that a request the plugin does not read
// fails within the timeout too.
func TestPluginNotReading(t *testing.T) {
	r := startTest(t, testOptions(), PluginConfig{Name: "nr", Command: helperCommand("noread"), Timeout: 300 * time.Millisecond})
	big := &event.Event{Kind: event.KindHTTP, HTTP: &event.HTTP{Header: map[string][]string{"X-Big": {strings.Repeat("x", 1<<20)}}}}
	v, ok := r.Ask(context.Background(), big) // more than a pipe holds
	if !ok || v.Action != event.Deny || !strings.Contains(v.Reason, "did not read its request") {
		t.Errorf("Ask = %v, %v; want the on_error deny saying the plugin did not read", v, ok)
	}
}

// TestPluginRestart checks that a plugin that crashed is started again and
// answers the requests after that.
func TestPluginRestart(t *testing.T) {
	r := startTest(t, testOptions(), PluginConfig{Name: "c", Command: helperCommand("crash", "2")})
	ask := func() event.Verdict {
		v, ok := r.Ask(context.Background(), connectEvent)
		if !ok {
			t.Fatal("not answered")
		}
		return v
	}
	for round := range 3 {
		for i := range 2 {
			if v := ask(); v.Action != event.Allow {
				t.Fatalf("round %d request %d: %v, want allow", round, i, v)
			}
		}
		if v := ask(); v.Action != event.Deny || !strings.Contains(v.Reason, "exited") {
			t.Fatalf("round %d: request to a crashing plugin: %v, want the on_error deny saying it exited", round, v)
		}
		// Wait for the restart: requests meanwhile are denied at once.
		deadline := time.Now().Add(10 * time.Second)
		for {
			r.procs[0].mu.Lock()
			up := r.procs[0].cur != nil
			r.procs[0].mu.Unlock()
			if up {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: not restarted", round)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func TestPluginBackoff(t *testing.T) {
	r := &PluginRunner{opts: runnerOptions{backoffMin: 100 * time.Millisecond, backoffMax: 10 * time.Second}}
	p := &pluginProc{r: r}
	var got []time.Duration
	for p.failures = 1; p.failures <= 10; p.failures++ {
		got = append(got, p.backoff())
	}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	want := []time.Duration{ms(100), ms(200), ms(400), ms(800), ms(1600), ms(3200), ms(6400), ms(10000), ms(10000), ms(10000)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("backoff (-want +got):\n%s", diff)
	}
}

// TestPluginConcurrent asks from many goroutines at once; the plugin answers
// out of order and every answer must reach the request it belongs to.
func TestPluginConcurrent(t *testing.T) {
	r := startTest(t, testOptions(), PluginConfig{Name: "echo", Command: helperCommand("echo")})
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			for j := range 4 {
				host := fmt.Sprintf("h%d", i*4+j)
				e := &event.Event{Kind: event.KindConnect, Connect: &event.Connect{Host: host}}
				v, ok := r.Ask(context.Background(), e)
				if !ok || v.Action != event.Allow || v.Reason != host {
					t.Errorf("Ask(%s) = %v, %v; want allow with reason %s", host, v, ok, host)
				}
			}
		})
	}
	wg.Wait()
	r.procs[0].mu.Lock()
	defer r.procs[0].mu.Unlock()
	if r.procs[0].failures != 0 || r.procs[0].lastErr != "" {
		t.Errorf("plugin failed during the test: %s", r.procs[0].lastErr)
	}
}

func TestPluginCanceled(t *testing.T) {
	r := startTest(t, testOptions(), PluginConfig{Name: "h", Command: helperCommand("hang"), Timeout: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	v, ok := r.Ask(ctx, connectEvent)
	if !ok || v.Action != event.Deny || !strings.Contains(v.Reason, "canceled") {
		t.Errorf("canceled Ask = %v, %v; want a deny saying it was canceled", v, ok)
	}
	// A cancellation is the caller's, not the plugin's failure.
	r.procs[0].mu.Lock()
	defer r.procs[0].mu.Unlock()
	if r.procs[0].cur == nil {
		t.Error("the plugin was stopped because a request was canceled")
	}
}

// TestPluginEnvironment checks that a plugin sees PATH and HOME and nothing
// else of Chaperone's environment.
func TestPluginEnvironment(t *testing.T) {
	t.Setenv("CHAPERONE_TEST_SECRET", "do-not-pass")
	r, err := StartPlugins(context.Background(), []PluginConfig{{Name: "env", Command: helperCommand("env")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	v, ok := r.Ask(context.Background(), connectEvent)
	if !ok {
		t.Fatal("not answered")
	}
	var names []string
	for kv := range strings.FieldsSeq(v.Reason) {
		if k, _, ok := strings.Cut(kv, "="); ok {
			names = append(names, k)
		}
	}
	if diff := cmp.Diff([]string{"PATH", "HOME"}, names); diff != "" {
		t.Errorf("plugin's environment (-want +got):\n%s", diff)
	}
}

// TestPluginStderr checks that stderr is logged as one safe line each, and
// that nothing of it is parsed as an answer.
func TestPluginStderr(t *testing.T) {
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, err := startPlugins(context.Background(), []PluginConfig{{Name: "noisy", Command: helperCommand("stderr")}}, logger, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if v, ok := r.Ask(context.Background(), connectEvent); !ok || v.Action != event.Allow {
			t.Fatalf("Ask = %v, %v; want allow", v, ok)
		}
	}
	r.Close()
	out := buf.String()
	if n := strings.Count(out, `msg="plugin stderr" plugin=noisy`); n != 3 {
		t.Errorf("logged %d stderr lines, want 3:\n%s", n, out)
	}
	if !strings.Contains(out, `line="handling 1 [31m"`) {
		t.Errorf("stderr line not logged as one line without control characters:\n%s", out)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestStartPluginsErrors(t *testing.T) {
	tests := []struct {
		name string
		cfgs []PluginConfig
		want string
	}{
		{"no command", []PluginConfig{{Name: "a"}}, `plugin 1 (a): no command`},
		{"missing program", []PluginConfig{{Name: "a", Command: helperCommand("allow")}, {Name: "b", Command: []string{"/nonexistent/plugin"}}}, "plugin 2 (b): start:"},
		{"bad on_error", []PluginConfig{{Name: "a", Command: helperCommand("allow"), OnError: ActionRewrite}}, `on_error "rewrite"`},
		{"judge on_error", []PluginConfig{{Name: "a", Command: helperCommand("allow"), OnError: ActionJudge}}, `on_error "judge"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := StartPlugins(context.Background(), tt.cfgs, nil)
			if err == nil {
				r.Close()
				t.Fatal("StartPlugins succeeded")
			}
			if !strings.HasPrefix(err.Error(), "policy: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to say %q", err, tt.want)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := StartPlugins(ctx, []PluginConfig{{Name: "a", Command: helperCommand("allow")}}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("StartPlugins with a canceled context: err = %v, want context.Canceled", err)
	}
}

// TestPluginClose checks that Close stops every process, including one that
// ignores EOF and one that crashed, and leaves no goroutine behind.
func TestPluginClose(t *testing.T) {
	before := runtime.NumGoroutine()
	opts := testOptions()
	r, err := startPlugins(context.Background(), []PluginConfig{
		{Name: "a", Command: helperCommand("allow")},
		{Name: "s", Command: helperCommand("stubborn"), On: []event.Kind{event.KindDNS}, Timeout: 50 * time.Millisecond},
		{Name: "c", Command: helperCommand("crash", "0"), On: []event.Kind{event.KindHTTP}},
	}, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range r.procs {
		pids = append(pids, p.cur.cmd.Process.Pid)
	}
	r.Ask(context.Background(), dnsEvent)                                                // times out: s is killed and restarts
	r.Ask(context.Background(), &event.Event{Kind: event.KindHTTP, HTTP: &event.HTTP{}}) // c crashes and restarts
	time.Sleep(2 * opts.backoffMin)
	for _, p := range r.procs {
		p.mu.Lock()
		if p.cur != nil {
			pids = append(pids, p.cur.cmd.Process.Pid)
		}
		p.mu.Unlock()
	}

	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after Close (kill 0: %v)", pid, err)
		}
	}
	if v, ok := r.Ask(context.Background(), connectEvent); !ok || v.Action != event.Deny || !strings.Contains(v.Reason, "stopped") {
		t.Errorf("Ask after Close = %v, %v; want the on_error deny saying it is stopped", v, ok)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// TestPluginExample builds examples/denyhost-plugin and asks it.
func TestPluginExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the example with")
	}
	bin := filepath.Join(t.TempDir(), "denyhost-plugin")
	if out, err := exec.Command(goBin, "build", "-o", bin, "../examples/denyhost-plugin").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	r := startTest(t, testOptions(), PluginConfig{Name: "denyhost", Command: []string{bin, "evil.test", "*.paste.test"}, On: []event.Kind{event.KindConnect, event.KindHTTP}})
	tests := []struct {
		name string
		e    *event.Event
		want event.Verdict
		ok   bool
	}{
		{"connect denied", &event.Event{Kind: event.KindConnect, Connect: &event.Connect{Host: "evil.test", Port: 443}},
			event.Verdict{Action: event.Deny, Rule: "plugin:denyhost/denyhost", Reason: "evil.test is on the deny list", DecidedBy: event.DecidedByPlugin}, true},
		{"http subdomain denied", &event.Event{Kind: event.KindHTTP, HTTP: &event.HTTP{Host: "x.paste.test:8080"}},
			event.Verdict{Action: event.Deny, Rule: "plugin:denyhost/denyhost", Reason: "x.paste.test is on the deny list", DecidedBy: event.DecidedByPlugin}, true},
		{"other host abstains", &event.Event{Kind: event.KindConnect, Connect: &event.Connect{Host: "api.test"}}, event.Verdict{}, false},
		{"other kind not asked", &event.Event{Kind: event.KindDNS, DNS: &event.DNS{Name: "evil.test"}}, event.Verdict{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, ok := r.Ask(context.Background(), tt.e)
			if ok != tt.ok {
				t.Errorf("answered = %v, want %v", ok, tt.ok)
			}
			if diff := cmp.Diff(tt.want, v); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOneLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{" two\nlines\r\n", "two lines"},
		{"esc\x1b[31m", "esc [31m"},
		{"bad\xffut", "bad\uFFFDut"},
		{strings.Repeat("é", 10), strings.Repeat("é", 4) + "…"}, // cut at 9 bytes, on a rune boundary
	}
	for _, tt := range tests {
		if got := oneLine(tt.in, 9); got != tt.want {
			t.Errorf("oneLine(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzPluginAnswer feeds arbitrary plugin output to the answer decoder and
// to the text that reaches verdicts and logs.
func FuzzPluginAnswer(f *testing.F) {
	f.Add([]byte(`{"id":1,"verdict":"allow","reason":"ok","rule":"r"}`))
	f.Add([]byte(`{"id":2,"verdict":"perhaps"}`))
	f.Add([]byte(`{"id":-1,"verdict":"deny"}`))
	f.Add([]byte(`{"id":3,"verdict":"deny","reason":"a\nb\u001b[31m\ufffd"}`))
	f.Add([]byte("\xff\xfe not json"))
	f.Fuzz(func(t *testing.T, line []byte) {
		a, err := decodeAnswer(line)
		if err != nil {
			return
		}
		if !plugin.ValidVerdict(a.Verdict.Verdict) {
			t.Fatalf("decoded an answer with verdict %q", a.Verdict.Verdict)
		}
		for _, s := range []string{a.Reason, a.Rule, string(line)} {
			got := oneLine(s, 64)
			if len(got) > 64+len("…") || !utf8.ValidString(got) || strings.ContainsFunc(got, unicode.IsControl) {
				t.Fatalf("oneLine(%q) = %q: too long, invalid or with control characters", s, got)
			}
		}
	})
}

// BenchmarkPluginRoundTrip measures one Ask against a plugin process that
// allows everything, from one goroutine and from many.
func BenchmarkPluginRoundTrip(b *testing.B) {
	r := startTest(b, testOptions(), PluginConfig{Name: "a", Command: helperCommand("allow")})
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if v, ok := r.Ask(context.Background(), connectEvent); !ok || v.Action != event.Allow {
				b.Fatal(v)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if v, ok := r.Ask(context.Background(), connectEvent); !ok || v.Action != event.Allow {
					b.Error(v)
					return
				}
			}
		})
	})
}
