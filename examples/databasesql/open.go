package main

import (
	"database/sql"

	"github.com/pgrouted/pgrouted"
)

// Open opens a *sql.DB on a primary and its replicas: the one line is the
// driver name. Importing github.com/pgrouted/pgrouted (for its side effect
// alone: import _ "github.com/pgrouted/pgrouted") registers it.
func Open(dsn string) (*sql.DB, error) {
	return sql.Open("pgrouted", dsn)
}

// OpenWithHooks opens a *sql.DB through a Connector, for what a DSN cannot
// carry: an OnRoute hook that sees where every statement ran. Keep the
// Connector: Explain, Topology and Stats describe the routing. Closing the
// *sql.DB closes it.
func OpenWithHooks(dsn string, onRoute func(pgrouted.RouteEvent)) (*sql.DB, *pgrouted.Connector, error) {
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		return nil, nil, err
	}
	cfg.OnRoute = onRoute
	connector, err := pgrouted.NewConnector(cfg)
	if err != nil {
		return nil, nil, err
	}
	return sql.OpenDB(connector), connector, nil
}
