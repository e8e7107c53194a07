package otelroute_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/otelroute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkHook is the per-statement cost of Instrument's hook: each
// iteration starts and ends a caller's span (as an application or a
// database/sql wrapper does for every statement) and reports one replica
// read as pgrouted does: Config.OnStart as it starts, Config.OnRoute, and
// OnStart's end function. "baseline" reports it to an empty hook: subtract
// it from the others to get what otelroute adds to a statement. The SDK
// providers record (always sampled) and export nothing: what an exporter
// costs is the application's.
func BenchmarkHook(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer tp.Shutdown(context.Background())
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	tracer := tp.Tracer("bench")

	hook := func(b *testing.B, opts ...otelroute.Option) *pgrouted.Config {
		cfg, err := pgrouted.ParseConfig("postgres://app:secret@db1:5432,db2:5432,db3:5432/app?pgrouted_names=a,b,c")
		if err != nil {
			b.Fatal(err)
		}
		if opts == nil {
			cfg.OnRoute = func(pgrouted.RouteEvent) {}
		} else if err := otelroute.Instrument(cfg, opts...); err != nil {
			b.Fatal(err)
		}
		return cfg
	}
	ev := pgrouted.RouteEvent{
		Decision: pgrouted.Decision{Op: pgrouted.OpRead, Endpoint: "b", Reason: pgrouted.ReasonReplica},
		Query:    `SELECT "users"."id" FROM "users" WHERE "users"."id" = $1`,
		Duration: 300 * time.Microsecond,
	}
	run := func(b *testing.B, kind trace.SpanKind, cfg *pgrouted.Config) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			sctx, span := tracer.Start(ctx, "caller", trace.WithSpanKind(kind))
			var end func(pgrouted.RouteEvent)
			if cfg.OnStart != nil {
				end = cfg.OnStart(sctx, ev.Query)
			}
			e := ev
			e.Context = sctx
			cfg.OnRoute(e)
			if end != nil {
				end(e)
			}
			span.End()
		}
	}
	b.Run("baseline", func(b *testing.B) {
		run(b, trace.SpanKindClient, hook(b))
	})
	b.Run("annotate", func(b *testing.B) {
		// A wrapper's CLIENT span gets the attributes; no metric.
		run(b, trace.SpanKindClient, hook(b, otelroute.WithTracerProvider(tp), otelroute.WithMeterProvider(mp), otelroute.WithoutDurationMetric()))
	})
	b.Run("annotate+duration", func(b *testing.B) {
		run(b, trace.SpanKindClient, hook(b, otelroute.WithTracerProvider(tp), otelroute.WithMeterProvider(mp)))
	})
	b.Run("span+duration", func(b *testing.B) {
		// No wrapper: the hook starts and ends a span per statement.
		run(b, trace.SpanKindInternal, hook(b, otelroute.WithTracerProvider(tp), otelroute.WithMeterProvider(mp)))
	})
}
