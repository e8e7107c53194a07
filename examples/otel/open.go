package main

import (
	"database/sql"

	"github.com/XSAM/otelsql"
	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/otelroute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// Open opens a *sql.DB through pgrouted, traced by otelroute alone: each
// statement gets a CLIENT span, a child of the span in its context, named
// by its db.query.summary ("SELECT greetings"), open from the statement's
// start until its rows are closed, that says which server ran it and why.
// otelroute's metrics report what the Connector counts; unregister them
// before closing the *sql.DB. onRoute, when not nil, is a hook of your
// own: it runs first.
func Open(dsn string, tp trace.TracerProvider, mp metric.MeterProvider, onRoute func(pgrouted.RouteEvent)) (*sql.DB, *pgrouted.Connector, metric.Registration, error) {
	connector, reg, err := instrumented(dsn, tp, mp, onRoute)
	if err != nil {
		return nil, nil, nil, err
	}
	return sql.OpenDB(connector), connector, reg, nil
}

// OpenWrapped is Open for an application that wraps its database with
// otelsql: otelsql starts the statements' spans, and otelroute adds to
// each the server that ran it and why (and starts none).
func OpenWrapped(dsn string, tp trace.TracerProvider, mp metric.MeterProvider, onRoute func(pgrouted.RouteEvent)) (*sql.DB, *pgrouted.Connector, metric.Registration, error) {
	connector, reg, err := instrumented(dsn, tp, mp, onRoute)
	if err != nil {
		return nil, nil, nil, err
	}
	db := otelsql.OpenDB(connector,
		otelsql.WithTracerProvider(tp), otelsql.WithMeterProvider(mp),
		otelsql.WithAttributes(semconv.DBSystemNamePostgreSQL))
	return db, connector, reg, nil
}

// instrumented builds the Connector with otelroute's hook on its Config,
// and registers otelroute's metrics over it.
func instrumented(dsn string, tp trace.TracerProvider, mp metric.MeterProvider, onRoute func(pgrouted.RouteEvent)) (*pgrouted.Connector, metric.Registration, error) {
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		return nil, nil, err
	}
	cfg.OnRoute = onRoute
	if err := otelroute.Instrument(cfg, otelroute.WithTracerProvider(tp), otelroute.WithMeterProvider(mp)); err != nil {
		return nil, nil, err
	}
	connector, err := pgrouted.NewConnector(cfg)
	if err != nil {
		return nil, nil, err
	}
	reg, err := otelroute.RegisterMetrics(connector, otelroute.WithMeterProvider(mp))
	if err != nil {
		connector.Close()
		return nil, nil, err
	}
	return connector, reg, nil
}
