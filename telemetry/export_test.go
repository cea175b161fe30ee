package telemetry

import (
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/chaperone-dev/chaperone/event"
)

// receiver collects what an in-process OTLP endpoint was sent.
type receiver struct {
	mu     sync.Mutex
	names  []string
	apiKey []string // the x-api-key header of each request
}

func (r *receiver) add(req *coltracepb.ExportTraceServiceRequest, apiKey []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.apiKey = append(r.apiKey, apiKey...)
	for _, rs := range req.GetResourceSpans() {
		svc := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				svc = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.names = append(r.names, svc+": "+s.GetName())
			}
		}
	}
}

func (r *receiver) got() ([]string, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := slices.Clone(r.names)
	slices.Sort(n)
	return n, slices.Clone(r.apiKey)
}

// wantExported is the scripted session's spans as a collector sees them.
var wantExported = []string{
	"chaperone: GET",
	"chaperone: POST",
	"chaperone: chat claude-sonnet-4",
	"chaperone: execute_tool Bash",
	"chaperone: invoke_agent claude",
	"chaperone: process bash",
	"chaperone: process curl",
	"chaperone: process ls",
	"chaperone: process node",
	"chaperone: process python3",
}

// exportSession runs the scripted session through a Tracer exporting
// with o and shuts it down.
func exportSession(t *testing.T, o ExportOptions) *Provider {
	t.Helper()
	exp, err := NewExporter(context.Background(), o)
	if err != nil {
		t.Fatalf("NewExporter: %v", err)
	}
	prov := NewProvider(exp, ProviderOptions{ServiceVersion: "test", BatchTimeout: 50 * time.Millisecond})
	tr, err := NewTracer(TracerOptions{Provider: prov})
	if err != nil {
		t.Fatal(err)
	}
	bus := event.NewBus()
	sub := bus.Subscribe("telemetry", event.SubscribeOptions{})
	done := make(chan error, 1)
	go func() { done <- tr.Run(sub) }()
	for _, e := range scriptedSession() {
		bus.Publish(e)
	}
	bus.Close()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	return prov
}

func TestExportHTTP(t *testing.T) {
	var rcv receiver
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "unexpected "+r.URL.Path+" "+r.Header.Get("Content-Type"), http.StatusNotFound)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		raw, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(raw, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rcv.add(&req, r.Header.Values("X-Api-Key"))
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	defer srv.Close()

	// The endpoint as OTEL_EXPORTER_OTLP_ENDPOINT would give it.
	o, ok := ExportOptionsFromEnv(mapEnv(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL,
		"OTEL_EXPORTER_OTLP_HEADERS":  "x-api-key=k%3D1",
	}))
	if !ok {
		t.Fatal("ExportOptionsFromEnv: not configured")
	}
	prov := exportSession(t, o)
	names, keys := rcv.got()
	if d := cmp.Diff(wantExported, names); d != "" {
		t.Errorf("spans received (-want +got):\n%s", d)
	}
	if len(keys) == 0 || keys[0] != "k=1" {
		t.Errorf("x-api-key received = %q, want k=1", keys)
	}
	if prov.Dropped() != 0 || prov.Exported() != uint64(len(wantExported)) {
		t.Errorf("Dropped() = %d, Exported() = %d; want 0, %d", prov.Dropped(), prov.Exported(), len(wantExported))
	}
}

type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	rcv *receiver
}

func (s *traceService) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.rcv.add(req, md.Get("x-api-key"))
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func TestExportGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var rcv receiver
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, &traceService{rcv: &rcv})
	go gs.Serve(ln)
	defer gs.Stop()

	prov := exportSession(t, ExportOptions{Protocol: ProtocolGRPC, Endpoint: ln.Addr().String(), Insecure: true,
		Headers: map[string]string{"x-api-key": "k2"}})
	names, keys := rcv.got()
	if d := cmp.Diff(wantExported, names); d != "" {
		t.Errorf("spans received (-want +got):\n%s", d)
	}
	if len(keys) == 0 || keys[0] != "k2" {
		t.Errorf("x-api-key received = %q, want k2", keys)
	}
	if prov.Dropped() != 0 {
		t.Errorf("Dropped() = %d, want 0", prov.Dropped())
	}
}

// closedPort returns a 127.0.0.1 address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestExporterDown(t *testing.T) {
	for _, proto := range []string{ProtocolGRPC, ProtocolHTTPProtobuf} {
		t.Run(proto, func(t *testing.T) {
			exp, err := NewExporter(context.Background(), ExportOptions{Protocol: proto, Endpoint: closedPort(t), Insecure: true, Timeout: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			// A queue smaller than a session: the rest must be dropped,
			// and counted, while the first batch waits on the dead
			// collector.
			prov := NewProvider(exp, ProviderOptions{Queue: 2, BatchSize: 1, BatchTimeout: time.Millisecond})
			tr, err := NewTracer(TracerOptions{Provider: prov})
			if err != nil {
				t.Fatal(err)
			}
			bus := event.NewBus()
			sub := bus.Subscribe("telemetry", event.SubscribeOptions{})
			done := make(chan error, 1)
			go func() { done <- tr.Run(sub) }()
			for range 5 {
				for _, e := range scriptedSession() {
					bus.Publish(e)
				}
			}
			bus.Close()
			// Run and Shutdown must return although the collector never
			// answers; the guard only keeps a broken build from hanging.
			guard := time.After(time.Minute)
			select {
			case <-done:
			case <-guard:
				t.Fatal("Run did not return after the bus closed")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			shut := make(chan error, 1)
			go func() { shut <- tr.Shutdown(ctx) }()
			select {
			case err := <-shut:
				// nil when every export failed fast, the deadline's
				// error when one was still retrying.
				t.Logf("Shutdown: %v", err)
			case <-guard:
				t.Fatal("Shutdown did not return after its context ended")
			}
			// Every span of the five sessions is lost, and counted.
			if got, want := tr.Dropped(), uint64(5*len(wantExported)); got != want {
				t.Errorf("Dropped() = %d, want %d", got, want)
			}
		})
	}
}

func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestExportOptionsFromEnv(t *testing.T) {
	tests := []struct {
		name   string
		env    map[string]string
		want   ExportOptions
		wantOK bool
	}{
		{"none", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=b"}, ExportOptions{}, false},
		{"base endpoint, default protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/"},
			ExportOptions{Protocol: "http/protobuf", Endpoint: "http://127.0.0.1:4318/v1/traces"}, true},
		{"traces endpoint as is", map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT":        "http://127.0.0.1:4318",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9999/custom",
		}, ExportOptions{Protocol: "http/protobuf", Endpoint: "http://127.0.0.1:9999/custom"}, true},
		{"grpc", map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_INSECURE": "TRUE", "OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
		}, ExportOptions{Protocol: "grpc", Endpoint: "127.0.0.1:4317", Insecure: true, Timeout: 2500 * time.Millisecond}, true},
		{"headers merged, traces win", map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT":       "https://127.0.0.1:4318",
			"OTEL_EXPORTER_OTLP_HEADERS":        "a=1, b = two%20words,bad",
			"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "a=3",
		}, ExportOptions{Protocol: "http/protobuf", Endpoint: "https://127.0.0.1:4318/v1/traces",
			Headers: map[string]string{"a": "3", "b": "two words"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ExportOptionsFromEnv(mapEnv(tt.env))
			if ok != tt.wantOK {
				t.Errorf("ok = %v, want %v", ok, tt.wantOK)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("options (-want +got):\n%s", d)
			}
		})
	}
}

func TestExportOptionsStringHidesHeaderValues(t *testing.T) {
	o := ExportOptions{Endpoint: "127.0.0.1:4317", Headers: map[string]string{"authorization": "Bearer " + secret, "x-team": "t1"}}
	s := o.String()
	if strings.Contains(s, secret) || strings.Contains(s, "t1") {
		t.Errorf("String() = %q shows a header value", s)
	}
	if !strings.Contains(s, "authorization,x-team") {
		t.Errorf("String() = %q, want the header names", s)
	}
}

func TestNewExporterErrors(t *testing.T) {
	tests := []struct {
		name string
		o    ExportOptions
		want string
	}{
		{"no endpoint", ExportOptions{}, "no endpoint"},
		{"protocol", ExportOptions{Protocol: "http/json", Endpoint: "127.0.0.1:1"}, "not supported"},
		{"scheme", ExportOptions{Endpoint: "ftp://u:" + secret + "@127.0.0.1/x?k=" + secret}, "not an http(s) URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewExporter(context.Background(), tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error shows the secret")
			}
		})
	}
}

func TestParseHeaders(t *testing.T) {
	tests := []struct {
		in   string
		want map[string]string
	}{
		{"", nil},
		{"a=b", map[string]string{"a": "b"}},
		{"a=b=c,d=%2C", map[string]string{"a": "b=c", "d": ","}},
		{"=x,novalue, k v=1,ok=%zz,n=%0A", nil},
		{" api-key = v ", map[string]string{"api-key": "v"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if d := cmp.Diff(tt.want, ParseHeaders(tt.in)); d != "" {
				t.Errorf("ParseHeaders (-want +got):\n%s", d)
			}
		})
	}
}

func FuzzParseHeaders(f *testing.F) {
	for _, s := range []string{"", "a=b", "a=b=c,d=%2C", "=x,,k v=1", "n=%0A", "x=%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for k, v := range ParseHeaders(s) {
			if k == "" || strings.ContainsAny(k, " \t\r\n:") || strings.ContainsAny(v, "\r\n") {
				t.Errorf("ParseHeaders(%q) gave a header unsafe to send: %q", s, k)
			}
		}
	})
}

// pathRecorder is an OTLP/HTTP receiver on 127.0.28.1 that accepts an
// export on any path and records the paths it was sent to.
func pathRecorder(t *testing.T) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	ln, err := net.Listen("tcp", "127.0.28.1:0")
	if err != nil {
		t.Skipf("127.0.28.1 is not available: %v", err)
	}
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Compact(slices.Sorted(slices.Values(paths)))
	}
}

// Every form of the endpoint reaches the collector's traces path: a base
// URL (with no path, or "/") gets /v1/traces, a URL with a path is the
// traces URL, as the OpenTelemetry specification reads them; the same for
// --otlp-endpoint (ExportOptions.Endpoint) and the variables.
func TestExportEndpointPath(t *testing.T) {
	tests := []struct {
		name     string
		endpoint string            // as --otlp-endpoint gives it; "%s" is the receiver's host:port
		env      map[string]string // else, as the variables give it
		want     string
	}{
		{name: "flag, base URL", endpoint: "http://%s", want: "/v1/traces"},
		{name: "flag, base URL with /", endpoint: "http://%s/", want: "/v1/traces"},
		{name: "flag, traces URL", endpoint: "http://%s/v1/traces", want: "/v1/traces"},
		{name: "flag, URL with another path", endpoint: "http://%s/otlp/traces", want: "/otlp/traces"},
		{name: "flag, host:port", endpoint: "%s", want: "/v1/traces"},
		{name: "base variable", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://%s"}, want: "/v1/traces"},
		{name: "base variable with a path", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://%s/prefix/"}, want: "/prefix/v1/traces"},
		{name: "traces variable, base URL", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://%s"}, want: "/v1/traces"},
		{name: "traces variable, full URL", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://%s/custom"}, want: "/custom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, paths := pathRecorder(t)
			host := strings.TrimPrefix(srv.URL, "http://")
			env := map[string]string{}
			for k, v := range tt.env {
				env[k] = strings.ReplaceAll(v, "%s", host)
			}
			o, _ := ExportOptionsFromEnv(mapEnv(env))
			if tt.endpoint != "" {
				o.Endpoint = strings.ReplaceAll(tt.endpoint, "%s", host)
				o.Insecure = true // what a host:port needs to be sent without TLS
			}
			o.Timeout = 5 * time.Second
			exportSession(t, o)
			if d := cmp.Diff([]string{tt.want}, paths()); d != "" {
				t.Errorf("paths the collector was sent to (-want +got):\n%s", d)
			}
		})
	}
}
