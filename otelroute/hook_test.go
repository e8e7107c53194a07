package otelroute_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/otelroute"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// TestHookEvents feeds the hook events built by hand: one with no
// context, one from a host the Config does not name (a discovered member),
// and a caller's span annotated in place with SpanAnnotate. The OnRoute set
// before Instrument still runs, first.
func TestHookEvents(t *testing.T) {
	tel := newTelemetry(t)
	cfg, err := pgrouted.ParseConfig("postgres://app:" + marker + "@db1:5432,db2:5433/shop?pgrouted_names=a,b")
	if err != nil {
		t.Fatal(err)
	}
	var before []string
	cfg.OnRoute = func(e pgrouted.RouteEvent) { before = append(before, e.Query) }
	if err := otelroute.Instrument(cfg, otelroute.WithTracerProvider(tel.tp), otelroute.WithMeterProvider(tel.mp)); err != nil {
		t.Fatal(err)
	}
	// What pgrouted does for a statement: OnStart as it starts, OnRoute
	// once it ran, the end function when it ends.
	run := func(ev pgrouted.RouteEvent) {
		var end func(pgrouted.RouteEvent)
		if cfg.OnStart != nil {
			end = cfg.OnStart(ev.Context, ev.Query)
		}
		cfg.OnRoute(ev)
		if end != nil {
			end(ev)
		}
	}
	read := pgrouted.Decision{Op: pgrouted.OpRead, Endpoint: "b", Reason: pgrouted.ReasonReplica}
	// No context: a root span of its own.
	// It waited 5 ms on its replica for the caller's position.
	// And 2 ms for the primary's position (global consistency).
	run(pgrouted.RouteEvent{Decision: read, Query: "SELECT 1", Duration: time.Millisecond, Waited: 5 * time.Millisecond,
		Global: true, GlobalWait: 2 * time.Millisecond, Causal: true})
	// A discovered host, named host:port.
	run(pgrouted.RouteEvent{Decision: pgrouted.Decision{Op: pgrouted.OpWrite, Endpoint: "10.1.2.3:6432", Primary: true, Reason: pgrouted.ReasonWrite},
		Context: context.Background(), Query: "INSERT"})
	spans := tel.spans.Ended()
	if len(spans) != 2 || len(before) != 2 {
		t.Fatalf("%d spans, %d events seen by the earlier hook; want 2 and 2", len(spans), len(before))
	}
	attrs := func(kvs []attribute.KeyValue) map[string]any {
		m := map[string]any{}
		for _, kv := range kvs {
			m[string(kv.Key)] = kv.Value.AsInterface()
		}
		return m
	}
	if m := attrs(spans[0].Attributes()); spans[0].Parent().IsValid() || m["server.address"] != "db2" || m["server.port"] != int64(5433) ||
		m["db.namespace"] != "shop" || m["pgrouted.endpoint"] != "b" || m["pgrouted.role"] != "replica" || m["pgrouted.op"] != "read" {
		t.Errorf("event without context: span (parent %v) %v", spans[0].Parent().SpanID(), m)
	}
	if m := attrs(spans[0].Attributes()); m["pgrouted.replica_wait"] != 0.005 {
		t.Errorf("read that waited 5ms on its replica: pgrouted.replica_wait = %v, want 0.005", m["pgrouted.replica_wait"])
	}
	if m := attrs(spans[0].Attributes()); m["pgrouted.global"] != true || m["pgrouted.global_wait"] != 0.002 {
		t.Errorf("global read that waited 2ms for its position: pgrouted.global = %v, pgrouted.global_wait = %v", m["pgrouted.global"], m["pgrouted.global_wait"])
	}
	if _, ok := attrs(spans[1].Attributes())["pgrouted.replica_wait"]; ok {
		t.Errorf("a write that did not wait has pgrouted.replica_wait")
	}
	if m := attrs(spans[0].Attributes()); m["pgrouted.causal"] != true {
		t.Errorf("causal read: pgrouted.causal = %v, want true", m["pgrouted.causal"])
	}
	if _, ok := attrs(spans[1].Attributes())["pgrouted.causal"]; ok {
		t.Errorf("a write has pgrouted.causal")
	}
	if _, ok := attrs(spans[1].Attributes())["pgrouted.global"]; ok {
		t.Errorf("a write has pgrouted.global")
	}
	if m := attrs(spans[1].Attributes()); m["server.address"] != "10.1.2.3" || m["server.port"] != int64(6432) || m["pgrouted.endpoint"] != "10.1.2.3:6432" || m["pgrouted.role"] != "primary" {
		t.Errorf("discovered host: %v", m)
	}

	// SpanAnnotate: the caller's own (server) span gets the route.
	cfg.OnRoute, cfg.OnStart = nil, nil
	if err := otelroute.Instrument(cfg, otelroute.WithTracerProvider(tel.tp), otelroute.WithMeterProvider(tel.mp), otelroute.WithSpans(otelroute.SpanAnnotate)); err != nil {
		t.Fatal(err)
	}
	ctx, span := tel.tp.Tracer("test").Start(context.Background(), "handler", trace.WithSpanKind(trace.SpanKindServer))
	run(pgrouted.RouteEvent{Decision: read, Context: ctx, Query: "SELECT 1"})
	span.End()
	spans = tel.spans.Ended()
	if len(spans) != 3 || spans[2].Name() != "handler" || attrs(spans[2].Attributes())["pgrouted.endpoint"] != "b" {
		t.Errorf("SpanAnnotate: %d spans, the last %q with %v; want the handler's span annotated and no other", len(spans), spans[len(spans)-1].Name(), spans[len(spans)-1].Attributes())
	}
	noMarker(t, tel)
}
