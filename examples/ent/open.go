package main

import (
	"context"
	"database/sql"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/examples/ent/entdb"
)

// Open opens an ent client on a primary and its replicas: pgrouted's
// *sql.DB under ent's PostgreSQL dialect. (entdb.Open("pgrouted", dsn)
// does not work: ent's generated Open takes only the dialect names as
// driver names.) Importing github.com/pgrouted/pgrouted registers the
// driver.
func Open(dsn string) (*entdb.Client, error) {
	db, err := sql.Open("pgrouted", dsn)
	if err != nil {
		return nil, err
	}
	return entdb.NewClient(entdb.Driver(entsql.OpenDB(dialect.Postgres, db))), nil
}

// OpenWithHooks opens an ent client on a pgrouted Connector, for what a
// DSN cannot carry: an OnRoute hook that sees where every statement ran.
// Keep the Connector: Explain, Topology and Stats describe the routing.
func OpenWithHooks(dsn string, onRoute func(pgrouted.RouteEvent)) (*entdb.Client, *pgrouted.Connector, error) {
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		return nil, nil, err
	}
	cfg.OnRoute = onRoute
	connector, err := pgrouted.NewConnector(cfg)
	if err != nil {
		return nil, nil, err
	}
	drv := entsql.OpenDB(dialect.Postgres, sql.OpenDB(connector))
	return entdb.NewClient(entdb.Driver(drv)), connector, nil
}

// ReadFromPrimary reads a user from the primary, whatever the replicas
// hold: ent passes the context down to the driver.
func ReadFromPrimary(ctx context.Context, client *entdb.Client, id int) (*entdb.User, error) {
	return client.User.Get(pgrouted.WithRoute(ctx, pgrouted.Primary), id)
}
