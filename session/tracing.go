package session

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/chaperone-dev/chaperone/config"
	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// sessionTracer sends the session's trace to an OTLP collector. Its zero
// value (nothing configured) does nothing.
type sessionTracer struct {
	t    *telemetry.Tracer
	done chan error
}

// startTracer subscribes a tracer to bus when a collector is configured
// (otlp_endpoint, else OTEL_EXPORTER_OTLP_*). The data path never waits
// for it: its subscription is lossy, and what it drops is counted.
func startTracer(ctx context.Context, cfg config.Config, getenv func(string) string, bus *event.Bus, log *slog.Logger) (*sessionTracer, error) {
	o, ok := telemetry.ExportOptionsFromEnv(getenv)
	if cfg.OTLPEndpoint != "" {
		o.Endpoint, ok = cfg.OTLPEndpoint, true
	}
	if cfg.OTLPProtocol != "" {
		o.Protocol = cfg.OTLPProtocol
	}
	if !ok {
		return &sessionTracer{}, nil
	}
	exp, err := telemetry.NewExporter(ctx, o)
	if err != nil {
		return &sessionTracer{}, fmt.Errorf("otlp %s: %w", o, err)
	}
	t, err := telemetry.NewTracer(telemetry.TracerOptions{
		Provider:       telemetry.NewProvider(exp, telemetry.ProviderOptions{Logger: log}),
		Logger:         log,
		CaptureContent: cfg.CaptureContent,
	})
	if err != nil {
		return &sessionTracer{}, err
	}
	st := &sessionTracer{t: t, done: make(chan error, 1)}
	// A file-heavy session bursts thousands of events: room for them.
	sub := bus.Subscribe("telemetry", event.SubscribeOptions{Queue: 1 << 16})
	go func() { st.done <- t.Run(sub) }()
	return st, nil
}

// stop waits for the tracer to see the bus close, then flushes the trace
// (bounded: a collector that is down does not hold the session's end).
func (st *sessionTracer) stop() {
	if st == nil || st.t == nil {
		return
	}
	<-st.done
	st.t.Close()
}

// dropped counts what the trace lost.
func (st *sessionTracer) dropped() uint64 {
	if st == nil || st.t == nil {
		return 0
	}
	return st.t.Dropped()
}
