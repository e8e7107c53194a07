package main

import (
	"fmt"
	"testing"

	"github.com/pgrouted/pgrouted/examples/internal/clustertest"
)

// TestAutocommitWriteReturningRows is a driver regression test: an
// autocommit write run with QueryContext (INSERT ... RETURNING, what every
// ORM runs to create a row) on a connection whose primary session already
// ran a write. After the write, pgrouted reads the primary's WAL position
// (SELECT pg_current_wal_insert_lsn()) on the same pgx connection while the
// statement's rows are still open; once that statement is in pgx's cache,
// pgconn resets its one shared ResultReader before it finds the connection
// busy, and the open rows are destroyed: stdlib.Rows.Next panics (index out
// of range).
func TestAutocommitWriteReturningRows(t *testing.T) {
	db, _, _ := open(t)
	db.SetMaxOpenConns(1) // the same primary session for both statements
	ctx := clustertest.Ctx(t)
	if _, err := db.ExecContext(ctx, "INSERT INTO users (name) VALUES ('first')"); err != nil {
		t.Fatal(err)
	}
	var id int64
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		return db.QueryRowContext(ctx, "INSERT INTO users (name) VALUES ('second') RETURNING id").Scan(&id)
	}()
	if err != nil || id == 0 {
		t.Fatalf("INSERT ... RETURNING in autocommit after an earlier write on the same connection: id %d, %v", id, err)
	}
}
