//go:build unix

package pgpipe_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"sort"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgrouted/pgrouted/internal/pgpipe"
)

// ourStatements lists the named statements pgpipe prepared on pc's session.
func ourStatements(t *testing.T, ctx context.Context, pc *pgx.Conn) []string {
	t.Helper()
	rows, err := pc.Query(ctx, "SELECT name FROM pg_prepared_statements WHERE name LIKE 'pgrouted\\_%'", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	return names
}

func args(vs ...any) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(vs))
	for i, v := range vs {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return nv
}

// TestStmtsBoundedAndInvalidated: the named statements of a connection are
// bounded (the least recently used one is deallocated on the server by the
// next pipeline), a statement deallocated behind pgpipe's back fails once
// (prepared statement does not exist) and is prepared afresh at its next
// use, and after Forget (a DEALLOCATE ALL) everything is prepared again.
func TestStmtsBoundedAndInvalidated(t *testing.T) {
	ctx := testCtx(t)
	pc, err := pgx.Connect(ctx, cluster.Primary().DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(context.Background())
	if _, err := pc.Exec(ctx, "CREATE TEMP TABLE stmts_t (id int PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}
	const capacity = 3
	st := pgpipe.StmtsOf(pc.PgConn(), capacity)
	if st == nil || pgpipe.StmtsOf(pc.PgConn(), capacity) != st {
		t.Fatal("StmtsOf: not one Stmts per connection")
	}
	if pgpipe.StmtsOf(pc.PgConn(), 0) != nil {
		t.Error("StmtsOf with capacity 0: named statements (pgx's cache_statement needs a statement cache)")
	}
	var descs pgpipe.Descs
	exec := func(i int) error {
		q := fmt.Sprintf("INSERT INTO stmts_t (id, v) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = %d::text", i%4)
		_, pos, err := pgpipe.Exec(ctx, pc, &descs, st, q, args(i, "x"))
		if err == nil && pos == 0 {
			t.Errorf("statement %d: no position read", i)
		}
		return err
	}
	// Four statements and the position query through a capacity of 3.
	for i := 0; i < 8; i++ {
		if err := exec(i); err != nil {
			t.Fatalf("statement %d: %v", i, err)
		}
		got := ourStatements(t, ctx, pc)
		// Evicted ones are deallocated by the next pipeline: one more
		// at most in between.
		if len(got) > capacity+1 || st.Len() > capacity {
			t.Errorf("after statement %d: %d statements prepared on the server (%v), %d known; want at most %d", i, len(got), got, st.Len(), capacity)
		}
	}
	if err := exec(8); err != nil {
		t.Fatal(err)
	}

	// Deallocated behind its back (a user's DEALLOCATE ALL on a pinned
	// session): one failure, then prepared again.
	if _, err := pc.Exec(ctx, "DEALLOCATE ALL"); err != nil {
		t.Fatal(err)
	}
	err = exec(8)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "26000" {
		t.Fatalf("a statement deallocated on the server: %v; want SQLSTATE 26000", err)
	}
	if err := exec(8); err != nil {
		t.Fatalf("the same statement again: %v; want it prepared afresh", err)
	}

	// InvalidateAll, after a statement that may have deallocated them:
	// prepared again without an error, the old ones deallocated.
	if _, err := pc.Exec(ctx, "DEALLOCATE ALL"); err != nil {
		t.Fatal(err)
	}
	pgpipe.InvalidateAll(pc.PgConn())
	if st.Len() != 0 {
		t.Errorf("after InvalidateAll: %d statements known", st.Len())
	}
	for i := 5; i < 9; i++ {
		if err := exec(i); err != nil {
			t.Fatalf("after InvalidateAll, statement %d: %v", i, err)
		}
	}

	// Forget, after a DEALLOCATE ALL: nothing is known, everything is
	// prepared again, without an error.
	if _, err := pc.Exec(ctx, "DEALLOCATE ALL"); err != nil {
		t.Fatal(err)
	}
	pgpipe.Forget(pc.PgConn())
	st = pgpipe.StmtsOf(pc.PgConn(), capacity)
	for i := 0; i < 4; i++ {
		if err := exec(i); err != nil {
			t.Fatalf("after Forget, statement %d: %v", i, err)
		}
	}
	if got := ourStatements(t, ctx, pc); len(got) > capacity+1 {
		t.Errorf("after Forget: %d statements on the server: %v", len(got), got)
	}
}
