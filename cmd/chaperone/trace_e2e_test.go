package main

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/session"
)

// otlpReceiver is an OTLP/HTTP collector on 127.0.0.1 that keeps the
// spans it is sent, decoded from the real protobuf.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r, err := startOTLPReceiver("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// startOTLPReceiver starts a receiver on addr (127.0.0.1, any port, when
// empty), opening its listener in the calling thread's namespace.
func startOTLPReceiver(addr string) (*otlpReceiver, error) {
	r := &otlpReceiver{}
	r.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		raw, _ := io.ReadAll(body)
		var msg coltracepb.ExportTraceServiceRequest
		if req.URL.Path != "/v1/traces" || proto.Unmarshal(raw, &msg) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range msg.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	if addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			r.Server.Listener.Close()
			return nil, err
		}
		r.Server.Listener.Close()
		r.Server.Listener = ln
	}
	r.Start()
	return r, nil
}

func attr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value
		}
	}
	return nil
}

// A session becomes one trace: the agent's root span, its processes
// nested by lineage, the LLM call with its usage and the tool it asked
// for, and the exec that followed linked to that tool call; nothing
// secret in any attribute.
func TestSessionTrace(t *testing.T) {
	need(t, "curl")
	w := newWorld(t)
	ant := startUpstream(t, upstream.Options{Name: "api.anthropic.com", Addr: "127.0.0.4:0", CA: w.ca, Handler: upstream.LLMHandler(5)})
	rcv := newOTLPReceiver(t)
	tok := upstream.FakeGitHubToken()
	r := w.chaperone([]string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "API=" + w.api.URL},
		"run", "--mode", "proxy", "--upstream-ca", w.caFile,
		"--resolve", "api.anthropic.com:"+ant.Addr.Addr().String(),
		"--resolve", "api.e2e.test:"+w.api.Addr.Addr().String(),
		"--log", w.log, "--",
		"sh", "-c", `"$1" anthropic "$2" "list the files; my token is $4" "ls >/dev/null" >/dev/null && ls -d . >/dev/null && curl -sS "$3/x?token=$4" >/dev/null &&
python3 -c 'import os, urllib.request; urllib.request.urlopen(os.environ["API"] + "/py").read()'`,
		"sh", sdkAgent, fmt.Sprintf("https://api.anthropic.com:%d/", ant.Addr.Port()), w.api.URL, tok)
	mustSucceed(t, r)

	rcv.mu.Lock()
	spans := rcv.spans
	rcv.mu.Unlock()
	byName := map[string]*tracepb.Span{}
	byID := map[string]*tracepb.Span{}
	traces := map[string]bool{}
	for _, s := range spans {
		byName[s.Name] = s
		byID[hex.EncodeToString(s.SpanId)] = s
		traces[hex.EncodeToString(s.TraceId)] = true
		b, _ := proto.Marshal(s)
		if strings.Contains(string(b), tok) {
			t.Errorf("span %q holds the secret", s.Name)
		}
	}
	if len(traces) != 1 {
		t.Errorf("%d traces, want one for the session", len(traces))
	}
	root, chat, tool := byName["invoke_agent sh"], byName["chat claude-e2e"], byName["execute_tool bash"]
	if root == nil || chat == nil || tool == nil {
		names := []string{}
		for n := range byName {
			names = append(names, n)
		}
		t.Fatalf("spans %q: want invoke_agent sh, chat claude-e2e and execute_tool bash", names)
	}
	if len(root.ParentSpanId) != 0 || attr(root, "gen_ai.operation.name").GetStringValue() != "invoke_agent" {
		t.Errorf("root span: parent %x, attributes %v", root.ParentSpanId, root.Attributes)
	}
	if attr(chat, "gen_ai.usage.output_tokens").GetIntValue() != 34 || attr(chat, "gen_ai.usage.input_tokens").GetIntValue() != 12+3+4 ||
		attr(chat, "gen_ai.provider.name").GetStringValue() != "anthropic" {
		t.Errorf("chat span attributes %v", chat.Attributes)
	}
	if hex.EncodeToString(tool.ParentSpanId) != hex.EncodeToString(chat.SpanId) || attr(tool, "gen_ai.tool.call.id").GetStringValue() != "toolu_01" {
		t.Errorf("execute_tool span: parent %x (chat %x), attributes %v", tool.ParentSpanId, chat.SpanId, tool.Attributes)
	}
	// The chat span descends from the agent's process, under the root,
	// through the session's processes only (not those that started
	// Chaperone).
	for s, hops := chat, 0; ; hops++ {
		parent := byID[hex.EncodeToString(s.ParentSpanId)]
		if parent == nil || hops > 4 {
			t.Fatalf("chat span is not under the root within the session's lineage (stopped at %q, %v)", s.Name, s.Attributes)
		}
		if parent == root {
			break
		}
		s = parent
	}
	// The span of the process that exec'd the agent's ls (named after its
	// program at first sight, which may be the shell it forked from) links
	// the call; the ls the session's shell ran after the agent had exited
	// is not the tool's. Process spans nest by lineage: the agent's ls is
	// under the agent's span.
	underAgent := func(s *tracepb.Span) bool {
		for hops := 0; s != nil && hops < 8; hops++ {
			if strings.HasPrefix(s.Name, "process sdkagent") {
				return true
			}
			s = byID[hex.EncodeToString(s.ParentSpanId)]
		}
		return false
	}
	var agentLs, shellLs, sawShellLs bool
	for _, s := range spans {
		execsLs := false
		for _, ev := range s.Events {
			for _, a := range ev.Attributes {
				execsLs = execsLs || ev.Name == "exec" && strings.HasSuffix(a.Value.GetStringValue(), "/ls")
			}
		}
		if !execsLs {
			continue
		}
		linked := false
		for _, l := range s.Links {
			linked = linked || hex.EncodeToString(l.SpanId) == hex.EncodeToString(tool.SpanId)
		}
		if underAgent(s) {
			agentLs = agentLs || linked
		} else {
			sawShellLs, shellLs = true, shellLs || linked
		}
	}
	if ok, _ := session.CanMediateFiles(); ok && (!agentLs || !sawShellLs || shellLs) {
		// Execs are events only where they are mediated.
		t.Errorf("ls linked to the bash call: the agent's %v, want true; the shell's %v (seen %v), want false", agentLs, shellLs, sawShellLs)
	}
	// Both GETs: curl's, with its query value redacted, and python3's, each
	// under its own process.
	var curlGet, pyGet bool
	for _, s := range spans {
		if s.Name != "GET" {
			continue
		}
		proc := byID[hex.EncodeToString(s.ParentSpanId)]
		switch u := attr(s, "url.full").GetStringValue(); {
		case strings.Contains(u, "/x?token=REDACTED"):
			curlGet = proc != nil && strings.HasPrefix(proc.Name, "process curl")
		case strings.HasSuffix(u, "/py"):
			pyGet = proc != nil && strings.HasPrefix(proc.Name, "process python3")
		}
	}
	if !curlGet || !pyGet {
		t.Errorf("GET spans under their processes: curl %v, python3 %v", curlGet, pyGet)
	}
}

// A collector that is down costs the trace, never the session: the agent
// runs as it would, and the lost spans are counted in the summary.
func TestSessionTraceCollectorDown(t *testing.T) {
	need(t, "curl")
	w := newWorld(t)
	down := newOTLPReceiver(t)
	down.Close() // the port is closed now
	r := w.chaperone([]string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + down.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"},
		"run", "--mode", "proxy", "--upstream-ca", w.caFile,
		"--resolve", "api.e2e.test:"+w.api.Addr.Addr().String(), "--log", w.log, "--",
		"curl", "-sS", w.api.URL+"/still-works")
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, "hello from api.e2e.test") {
		t.Errorf("agent printed %q", r.stdout)
	}
	if !strings.Contains(r.stderr, "trace events or spans dropped") {
		t.Errorf("the lost spans were not reported:\n%s", r.stderr)
	}
}
