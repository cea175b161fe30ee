package telemetry

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/chaperone-dev/chaperone/event"
)

// discardExporter accepts spans and forgets them.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// stuckExporter is a collector that never answers.
type stuckExporter struct{}

func (stuckExporter) ExportSpans(ctx context.Context, _ []sdktrace.ReadOnlySpan) error {
	<-ctx.Done()
	return ctx.Err()
}
func (stuckExporter) Shutdown(context.Context) error { return nil }

// benchEvents is the scripted session repeated under 64 session ids.
func benchEvents() []*event.Event {
	var out []*event.Event
	for i := range 64 {
		id := fmt.Sprintf("s%02d", i)
		for _, e := range scriptedSession() {
			c := *e
			c.Session = id
			out = append(out, &c)
		}
	}
	return out
}

// BenchmarkSinks publishes events through a Bus with each set of sinks,
// side by side: the tracer must not slow publishing, whatever its
// exporter does.
func BenchmarkSinks(b *testing.B) {
	events := benchEvents()
	cases := []struct {
		name   string
		audit  bool
		export sdktrace.SpanExporter // nil: no tracer
	}{
		{"none", false, nil},
		{"audit", true, nil},
		{"tracer", false, discardExporter{}},
		{"tracer-collector-down", false, stuckExporter{}},
		{"audit+tracer", true, discardExporter{}},
		{"audit+tracer-collector-down", true, stuckExporter{}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			bus := event.NewBus()
			var wg sync.WaitGroup
			if c.audit {
				a := newAuditLog(io.Discard)
				sub := bus.Subscribe("audit", event.SubscribeOptions{Lossless: true})
				wg.Go(func() { a.Run(sub) })
			}
			var tr *Tracer
			var prov *Provider
			var tsub *event.Subscription
			if c.export != nil {
				var err error
				prov = NewProvider(c.export, ProviderOptions{})
				tr, err = NewTracer(TracerOptions{Provider: prov})
				if err != nil {
					b.Fatal(err)
				}
				tsub = bus.Subscribe("telemetry", event.SubscribeOptions{})
				wg.Go(func() { tr.Run(tsub) })
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				bus.Publish(events[i%len(events)])
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			bus.Close()
			wg.Wait()
			if tr != nil {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				tr.Shutdown(ctx)
				cancel()
				// Events the tracer fell behind on, and spans that
				// never reached the exporter.
				b.ReportMetric(float64(tsub.Dropped())/float64(b.N), "missed/event")
				b.ReportMetric(float64(prov.Dropped()), "spans-dropped")
			}
		})
	}
}
