package main

import (
	"database/sql"

	"github.com/jmoiron/sqlx"
	"github.com/pgrouted/pgrouted"
)

// sqlx rewrites ? and :name placeholders into the style of the driver it
// is given, which it knows by name; for a name it does not know (such as
// "pgrouted") it keeps ?, which PostgreSQL rejects. Tell it once that
// pgrouted takes PostgreSQL's $1, $2, ...
func init() {
	sqlx.BindDriver("pgrouted", sqlx.DOLLAR)
}

// Open opens sqlx on a primary and its replicas: the one line is the
// driver name (with the BindDriver call above, once per program).
func Open(dsn string) (*sqlx.DB, error) {
	return sqlx.Open("pgrouted", dsn)
}

// OpenWithHooks opens sqlx on a pgrouted Connector, for what a DSN cannot
// carry: an OnRoute hook that sees where every statement ran. The name
// given to sqlx.NewDb only chooses the placeholder style: "postgres" needs
// no BindDriver call. Keep the Connector: Explain, Topology and Stats
// describe the routing.
func OpenWithHooks(dsn string, onRoute func(pgrouted.RouteEvent)) (*sqlx.DB, *pgrouted.Connector, error) {
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		return nil, nil, err
	}
	cfg.OnRoute = onRoute
	connector, err := pgrouted.NewConnector(cfg)
	if err != nil {
		return nil, nil, err
	}
	return sqlx.NewDb(sql.OpenDB(connector), "postgres"), connector, nil
}
