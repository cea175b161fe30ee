package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ProviderOptions configures NewProvider. The zero value is usable.
type ProviderOptions struct {
	// ServiceVersion is the resource's service.version, when known.
	ServiceVersion string
	// Queue bounds the spans waiting for export; 4096 when zero. A span
	// ended while the queue is full is dropped and counted.
	Queue int
	// BatchSize is the most spans sent in one export; 512 when zero.
	BatchSize int
	// BatchTimeout is the longest a span waits for its batch to fill; 2 s
	// when zero.
	BatchTimeout time.Duration
	// Logger receives export failures (never header values); discarded
	// when nil.
	Logger *slog.Logger
}

// Provider is an sdktrace.TracerProvider whose spans reach the exporter
// through a bounded queue that never blocks the code ending a span.
type Provider struct {
	*sdktrace.TracerProvider
	proc *queueProcessor
}

// NewProvider returns a Provider exporting to exp, with the resource
// service.name=chaperone. Shutdown flushes what it can within its context
// and shuts exp down.
func NewProvider(exp sdktrace.SpanExporter, o ProviderOptions) *Provider {
	attrs := []attribute.KeyValue{attribute.String("service.name", "chaperone")}
	if o.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", o.ServiceVersion))
	}
	p := newQueueProcessor(exp, o)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(p),
	)
	return &Provider{TracerProvider: tp, proc: p}
}

// Dropped returns how many spans were lost: the queue was full, an export
// failed, or Shutdown's context ended before they were sent.
func (p *Provider) Dropped() uint64 { return p.proc.dropped.Load() }

// Exported returns how many spans the exporter accepted.
func (p *Provider) Exported() uint64 { return p.proc.exported.Load() }

// queueProcessor is a batch span processor that counts what it drops.
// sdktrace's BatchSpanProcessor drops silently when its queue is full.
type queueProcessor struct {
	exp     sdktrace.SpanExporter
	log     *slog.Logger
	queue   chan sdktrace.ReadOnlySpan
	flushes chan chan struct{}
	stop    chan struct{}
	done    chan struct{}
	batch   int
	every   time.Duration

	// exportCtx is cancelled when Shutdown's context ends, so that an
	// export stuck on a dead collector gives up.
	exportCtx context.Context
	cancel    context.CancelFunc

	stopped  atomic.Bool
	stopOnce sync.Once
	dropped  atomic.Uint64
	exported atomic.Uint64
	failures atomic.Uint64 // failed exports, for logging only the first few
}

func newQueueProcessor(exp sdktrace.SpanExporter, o ProviderOptions) *queueProcessor {
	if o.Queue <= 0 {
		o.Queue = 4096
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 512
	}
	if o.BatchTimeout <= 0 {
		o.BatchTimeout = 2 * time.Second
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &queueProcessor{
		exp: exp, log: log,
		queue:   make(chan sdktrace.ReadOnlySpan, o.Queue),
		flushes: make(chan chan struct{}),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		batch:   o.BatchSize, every: o.BatchTimeout,
		exportCtx: ctx, cancel: cancel,
	}
	go p.run()
	return p
}

func (p *queueProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues s, or drops and counts it when the queue is full or the
// processor is shut down. It never waits.
func (p *queueProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	if p.stopped.Load() {
		p.dropped.Add(1)
		return
	}
	select {
	case p.queue <- s:
	default:
		p.dropped.Add(1)
	}
}

func (p *queueProcessor) run() {
	defer close(p.done)
	t := time.NewTicker(p.every)
	defer t.Stop()
	buf := make([]sdktrace.ReadOnlySpan, 0, p.batch)
	drain := func() {
		for {
			select {
			case s := <-p.queue:
				if buf = append(buf, s); len(buf) >= p.batch {
					buf = p.export(buf)
				}
			default:
				buf = p.export(buf)
				return
			}
		}
	}
	for {
		select {
		case s := <-p.queue:
			if buf = append(buf, s); len(buf) >= p.batch {
				buf = p.export(buf)
			}
		case <-t.C:
			buf = p.export(buf)
		case ch := <-p.flushes:
			drain()
			close(ch)
		case <-p.stop:
			drain()
			return
		}
	}
}

// export sends buf and returns it emptied.
func (p *queueProcessor) export(buf []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	if len(buf) == 0 {
		return buf
	}
	if p.exportCtx.Err() != nil {
		p.dropped.Add(uint64(len(buf)))
		return buf[:0]
	}
	if err := p.exp.ExportSpans(p.exportCtx, buf); err != nil {
		p.dropped.Add(uint64(len(buf)))
		// One line per failure would flood the log while a collector
		// is down: the first few, then every 100th.
		if n := p.failures.Add(1); n <= 3 || n%100 == 0 {
			p.log.Warn("telemetry: span export failed", "spans", len(buf), "failures", n, "err", err)
		}
	} else {
		p.exported.Add(uint64(len(buf)))
	}
	clear(buf)
	return buf[:0]
}

// ForceFlush exports what is queued, waiting at most until ctx ends.
func (p *queueProcessor) ForceFlush(ctx context.Context) error {
	if p.stopped.Load() {
		return nil
	}
	ch := make(chan struct{})
	select {
	case p.flushes <- ch:
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("telemetry: flush spans: %w", ctx.Err())
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("telemetry: flush spans: %w", ctx.Err())
	}
}

// Shutdown exports what is queued until ctx ends, then abandons the rest
// (counted as dropped) and shuts the exporter down.
func (p *queueProcessor) Shutdown(ctx context.Context) error {
	var err error
	p.stopOnce.Do(func() {
		p.stopped.Store(true)
		close(p.stop)
		select {
		case <-p.done:
		case <-ctx.Done():
			p.cancel() // the running export returns; the rest is dropped
			<-p.done
			err = fmt.Errorf("telemetry: shut down span export: %w", ctx.Err())
		}
		p.cancel()
		// Spans ended during the shutdown may remain in the queue.
		for {
			select {
			case <-p.queue:
				p.dropped.Add(1)
				continue
			default:
			}
			break
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		if serr := p.exp.Shutdown(sctx); serr != nil && !errors.Is(serr, context.DeadlineExceeded) {
			err = errors.Join(err, fmt.Errorf("telemetry: shut down span exporter: %w", serr))
		}
	})
	return err
}
