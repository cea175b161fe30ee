package telemetry

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// OTLP protocols, as OTEL_EXPORTER_OTLP_PROTOCOL spells them.
const (
	ProtocolGRPC         = "grpc"
	ProtocolHTTPProtobuf = "http/protobuf"
)

// ExportOptions says where traces go over OTLP.
type ExportOptions struct {
	// Protocol is ProtocolGRPC or ProtocolHTTPProtobuf; empty means
	// http/protobuf, the OpenTelemetry default.
	Protocol string
	// Endpoint is, for http/protobuf, the traces URL
	// (http://collector:4318/v1/traces), or a base URL without a path
	// (http://collector:4318) or a host:port, to which /v1/traces is
	// added; for grpc, a host:port or a URL (http:// means insecure).
	Endpoint string
	// Headers are sent with every export (e.g. a backend's API key). Their
	// values are never logged: String prints the names only.
	Headers map[string]string
	// Insecure sends without TLS.
	Insecure bool
	// Timeout bounds one export, retries included; 10 s when zero.
	Timeout time.Duration
}

// String describes o without header values.
func (o ExportOptions) String() string {
	names := make([]string, 0, len(o.Headers))
	for k := range o.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	return fmt.Sprintf("otlp %s %s insecure=%t headers=[%s]", o.protocol(), o.Endpoint, o.Insecure, strings.Join(names, ","))
}

func (o ExportOptions) protocol() string {
	if o.Protocol == "" {
		return ProtocolHTTPProtobuf
	}
	return o.Protocol
}

// ExportOptionsFromEnv reads the standard OTLP exporter variables
// (OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _PROTOCOL, _HEADERS, _INSECURE,
// _TIMEOUT) through getenv. It reports false when no endpoint is set: then
// there is no exporter and nothing fails.
func ExportOptionsFromEnv(getenv func(string) string) (ExportOptions, bool) {
	get := func(name string) string {
		if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_" + name)); v != "" {
			return v
		}
		return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_" + name))
	}
	var o ExportOptions
	o.Protocol = get("PROTOCOL")
	if o.Protocol == "" {
		o.Protocol = ProtocolHTTPProtobuf
	}
	if ep := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")); ep != "" {
		o.Endpoint = ep // the traces URL: used as is, unless it has no path (httpTracesURL)
	} else if ep := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); ep != "" {
		o.Endpoint = ep
		if o.Protocol == ProtocolHTTPProtobuf {
			// The base endpoint gets the signal's path appended.
			o.Endpoint = strings.TrimRight(ep, "/") + tracesPath
		}
	} else {
		return ExportOptions{}, false
	}
	o.Headers = ParseHeaders(getenv("OTEL_EXPORTER_OTLP_HEADERS"))
	for k, v := range ParseHeaders(getenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS")) {
		if o.Headers == nil {
			o.Headers = map[string]string{}
		}
		o.Headers[k] = v
	}
	o.Insecure = strings.EqualFold(get("INSECURE"), "true")
	if ms := get("TIMEOUT"); ms != "" {
		var n int64
		if _, err := fmt.Sscan(ms, &n); err == nil && n > 0 {
			o.Timeout = time.Duration(n) * time.Millisecond
		}
	}
	return o, true
}

// ParseHeaders parses the OTEL_EXPORTER_OTLP_HEADERS format: comma
// separated key=value pairs, values percent-encoded. Malformed pairs are
// skipped (and never echoed: values may be credentials). It returns nil
// when there is no valid pair.
func ParseHeaders(s string) map[string]string {
	var h map[string]string
	for pair := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.ContainsAny(k, " \t\r\n:") {
			continue
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil || strings.ContainsAny(dv, "\r\n") {
			continue
		}
		if h == nil {
			h = map[string]string{}
		}
		h[k] = dv
	}
	return h
}

// NewExporter returns an OTLP trace exporter for o. It does not connect:
// an unreachable collector shows as failed exports, counted by the
// Provider, never as an error here.
func NewExporter(ctx context.Context, o ExportOptions) (sdktrace.SpanExporter, error) {
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if o.Endpoint == "" {
		return nil, fmt.Errorf("telemetry: otlp exporter: no endpoint")
	}
	switch o.protocol() {
	case ProtocolHTTPProtobuf:
		u, err := httpTracesURL(o.Endpoint, o.Insecure)
		if err != nil {
			return nil, err
		}
		opts := []otlptracehttp.Option{
			otlptracehttp.WithEndpointURL(u),
			otlptracehttp.WithTimeout(timeout),
			otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: true, InitialInterval: time.Second, MaxInterval: 5 * time.Second, MaxElapsedTime: timeout}),
		}
		if o.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		if len(o.Headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(o.Headers))
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("telemetry: otlp http exporter: %w", err)
		}
		return exp, nil
	case ProtocolGRPC:
		opts := []otlptracegrpc.Option{
			otlptracegrpc.WithTimeout(timeout),
			otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: true, InitialInterval: time.Second, MaxInterval: 5 * time.Second, MaxElapsedTime: timeout}),
		}
		if strings.Contains(o.Endpoint, "://") {
			if _, err := url.Parse(o.Endpoint); err != nil {
				return nil, fmt.Errorf("telemetry: otlp endpoint: %w", err)
			}
			opts = append(opts, otlptracegrpc.WithEndpointURL(o.Endpoint))
		} else {
			opts = append(opts, otlptracegrpc.WithEndpoint(o.Endpoint))
		}
		if o.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		if len(o.Headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(o.Headers))
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("telemetry: otlp grpc exporter: %w", err)
		}
		return exp, nil
	default:
		return nil, fmt.Errorf("telemetry: otlp protocol %q not supported (want grpc or http/protobuf)", o.Protocol)
	}
}

// tracesPath is the OTLP/HTTP path of traces.
const tracesPath = "/v1/traces"

// httpTracesURL makes a full traces URL of endpoint, reading a base
// endpoint as the OpenTelemetry specification does: a host:port gets a
// scheme (http when insecure); a URL without a path, or with "/" alone,
// gets /v1/traces; a URL with any other path is the traces URL already and
// is used as given.
func httpTracesURL(endpoint string, insecure bool) (string, error) {
	if !strings.Contains(endpoint, "://") {
		scheme := "https://"
		if insecure {
			scheme = "http://"
		}
		endpoint = scheme + endpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("telemetry: otlp endpoint %q is not an http(s) URL", redactURL(endpoint))
	}
	if u.Path == "" || u.Path == "/" {
		u.Path, u.RawPath = tracesPath, ""
	}
	return u.String(), nil
}
