//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"log/slog"
	"os"

	"github.com/pgrouted/pgrouted"
)

// Open a *sql.DB on a primary and its replicas. Reads in autocommit mode go
// to a replica that holds this process's writes; everything else goes to the
// primary.
func Example() {
	db, err := sql.Open("pgrouted",
		"postgres://app:secret@db1:5432,db2:5432,db3:5432/app?sslmode=verify-full&pgrouted_max_lag=16MB")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "INSERT INTO users (name) VALUES ($1)", "ada"); err != nil {
		log.Fatal(err) // ran on the primary
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM users").Scan(&n); err != nil {
		log.Fatal(err) // ran on a replica that already holds the insert, or on the primary
	}
}

// Hooks a DSN cannot carry: build the Connector yourself.
func ExampleNewConnector() {
	cfg, err := pgrouted.ParseConfig("postgres://app:secret@db1,db2,db3/app?pgrouted_names=east,west,south")
	if err != nil {
		log.Fatal(err) // names the bad key; never shows the password
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg.OnRoute = func(e pgrouted.RouteEvent) {
		if e.Reason == pgrouted.ReasonRetry25006 {
			log.Printf("%q was not a read: it ran on the primary", e.Query)
		}
	}
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		log.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close() // stops the probers and closes every pool
}

// Force the route of one request.
func ExampleWithRoute() {
	var db *sql.DB // opened with sql.Open("pgrouted", ...)

	// Read from the primary: never stale.
	ctx := pgrouted.WithRoute(context.Background(), pgrouted.Primary)
	_ = db.QueryRowContext(ctx, "SELECT balance FROM accounts WHERE id = $1", 42)

	// Only a replica may serve this report; fail rather than load the primary.
	ctx = pgrouted.WithRoute(context.Background(), pgrouted.Replica)
	_, err := db.QueryContext(ctx, "SELECT * FROM big_report")
	if errors.Is(err, pgrouted.ErrNoReplica) {
		var re *pgrouted.RouteError
		errors.As(err, &re)
		log.Printf("no replica for the report: %s", re.Reason)
	}

	// The same with a comment, for one statement.
	_, _ = db.QueryContext(context.Background(), "/* pgrouted:primary */ SELECT * FROM jobs WHERE id = $1", 7)
}
