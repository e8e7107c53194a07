// Command databasesql shows pgrouted under plain database/sql: writes go to
// the primary, reads to a replica that already holds them.
//
//	go run ./databasesql -dsn 'postgres://app:secret@db1,db2,db3/app?pgrouted_names=db1,db2,db3'
//
// The DSN may also come from $PGROUTED_DSN.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/pgrouted/pgrouted"
)

func main() {
	dsn := flag.String("dsn", os.Getenv("PGROUTED_DSN"), "pgrouted DSN: every host of the cluster (default $PGROUTED_DSN)")
	flag.Parse()
	if *dsn == "" {
		fmt.Fprintln(os.Stderr, "usage: databasesql -dsn 'postgres://user:password@db1,db2,db3/app' (or set PGROUTED_DSN)")
		os.Exit(2)
	}
	if err := run(context.Background(), *dsn, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run creates a table, writes a row and reads it back, printing where each
// statement ran.
func run(ctx context.Context, dsn string, out io.Writer) error {
	db, _, err := OpenWithHooks(dsn, func(e pgrouted.RouteEvent) {
		fmt.Fprintf(out, "%-5s on %s (%s): %s\n", e.Op, e.Endpoint, e.Reason, e.Query)
	})
	if err != nil {
		return err
	}
	defer db.Close()

	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS greetings (id bigserial PRIMARY KEY, text text NOT NULL)"); err != nil {
		return err
	}
	var id int64
	if err := db.QueryRowContext(ctx, "INSERT INTO greetings (text) VALUES ($1) RETURNING id", "hello").Scan(&id); err != nil {
		return err
	}
	var text string
	if err := db.QueryRowContext(ctx, "SELECT text FROM greetings WHERE id = $1", id).Scan(&text); err != nil {
		return err
	}
	var n int64
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM greetings").Scan(&n); err != nil {
		return err
	}
	// Force the primary for one request.
	var inRecovery bool
	if err := db.QueryRowContext(pgrouted.WithRoute(ctx, pgrouted.Primary), "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
		return err
	}
	fmt.Fprintf(out, "read back %q; %d greetings\n", text, n)
	return nil
}
