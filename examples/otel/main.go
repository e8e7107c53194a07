// Command otel shows pgrouted's routing in OpenTelemetry: the spans of a
// request's statements say which server ran each and why, with or without
// otelsql wrapping the database, and the metrics count what the Connector
// saw. It keeps them in memory and prints them (a real program exports
// them with the SDK's exporters).
//
//	go run ./otel -dsn 'postgres://app:secret@db1,db2,db3/app?pgrouted_names=db1,db2,db3' [-wrapped]
//
// The DSN may also come from $PGROUTED_DSN.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"slices"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/otelroute"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func main() {
	dsn := flag.String("dsn", os.Getenv("PGROUTED_DSN"), "pgrouted DSN: every host of the cluster (default $PGROUTED_DSN)")
	wrapped := flag.Bool("wrapped", false, "wrap the database with otelsql")
	flag.Parse()
	if *dsn == "" {
		fmt.Fprintln(os.Stderr, "usage: otel -dsn 'postgres://user:password@db1,db2,db3/app' [-wrapped] (or set PGROUTED_DSN)")
		os.Exit(2)
	}
	if err := run(context.Background(), *dsn, *wrapped, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// telemetry is an in-memory OpenTelemetry pipeline: a span recorder and a
// metric reader.
type telemetry struct {
	Spans  *tracetest.SpanRecorder
	Tracer *sdktrace.TracerProvider
	Reader *sdkmetric.ManualReader
	Meter  *sdkmetric.MeterProvider
}

func newTelemetry() *telemetry {
	t := &telemetry{Spans: tracetest.NewSpanRecorder(), Reader: sdkmetric.NewManualReader()}
	t.Tracer = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(t.Spans))
	t.Meter = sdkmetric.NewMeterProvider(sdkmetric.WithReader(t.Reader))
	return t
}

func (t *telemetry) shutdown() {
	t.Tracer.Shutdown(context.Background())
	t.Meter.Shutdown(context.Background())
}

// open is Open or OpenWrapped.
func open(dsn string, wrapped bool, tel *telemetry, onRoute func(pgrouted.RouteEvent)) (*sql.DB, *pgrouted.Connector, metric.Registration, error) {
	if wrapped {
		return OpenWrapped(dsn, tel.Tracer, tel.Meter, onRoute)
	}
	return Open(dsn, tel.Tracer, tel.Meter, onRoute)
}

// request is what the program does in one traced request: create a table,
// write a row and read it back.
func request(ctx context.Context, tracer trace.Tracer, db *sql.DB) (string, error) {
	ctx, span := tracer.Start(ctx, "request")
	defer span.End()
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS greetings (id bigserial PRIMARY KEY, text text NOT NULL)"); err != nil {
		return "", err
	}
	var id int64
	if err := db.QueryRowContext(ctx, "INSERT INTO greetings (text) VALUES ($1) RETURNING id", "hello").Scan(&id); err != nil {
		return "", err
	}
	var text string
	err := db.QueryRowContext(ctx, "SELECT text FROM greetings WHERE id = $1", id).Scan(&text)
	return text, err
}

// run runs one request and prints its spans, then the statements counted
// per endpoint and op.
func run(ctx context.Context, dsn string, wrapped bool, out io.Writer) error {
	tel := newTelemetry()
	defer tel.shutdown()
	db, _, reg, err := open(dsn, wrapped, tel, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	defer reg.Unregister()

	text, err := request(ctx, tel.Tracer.Tracer("example"), db)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "read back %q\n", text)
	for _, s := range tel.Spans.Ended() {
		a := attribute.NewSet(s.Attributes()...)
		ep, ok := a.Value(otelroute.AttrEndpoint)
		if !ok {
			fmt.Fprintf(out, "span %s\n", s.Name())
			continue
		}
		addr, _ := a.Value("server.address")
		port, _ := a.Value("server.port")
		role, _ := a.Value(otelroute.AttrRole)
		reason, _ := a.Value(otelroute.AttrReason)
		fmt.Fprintf(out, "span %s: %s (%s:%d) %s, %s\n", s.Name(), ep.AsString(), addr.AsString(), port.AsInt64(), role.AsString(), reason.AsString())
	}
	var rm metricdata.ResourceMetrics
	if err := tel.Reader.Collect(ctx, &rm); err != nil {
		return err
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "pgrouted.statements" {
				var lines []string
				for _, dp := range sum.DataPoints {
					if dp.Value > 0 {
						ep, _ := dp.Attributes.Value(otelroute.AttrEndpoint)
						op, _ := dp.Attributes.Value(otelroute.AttrOp)
						lines = append(lines, fmt.Sprintf("%s %s{%s,%s} = %d", "metric", m.Name, ep.AsString(), op.AsString(), dp.Value))
					}
				}
				slices.Sort(lines)
				for _, l := range lines {
					fmt.Fprintln(out, l)
				}
			}
		}
	}
	return nil
}
