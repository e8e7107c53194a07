//go:build unix

package pgrouted_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestPrepareChecksTheStatement: Prepare parses and describes the
// statement on the server: invalid SQL fails with the server's error, on a
// replica when the connection has no primary session (Prepare does not
// open one), on its primary session when it has one; a valid prepared
// statement knows its number of parameters, and its reads still run on a
// replica.
func TestPrepareChecksTheStatement(t *testing.T) {
	ctx := testCtx(t)
	db, _, _ := open(t)
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	invalid := func(marker string) {
		t.Helper()
		_, err := c.PrepareContext(ctx, "SELEC '"+marker+"'")
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42601" {
			t.Fatalf("Prepare of invalid SQL: %v, want the server's syntax error (42601)", err)
		}
	}
	invalid("prepare-marker-replica")
	if on := ranOn(t, "prepare-marker-replica"); len(on) != 1 || on[0] == cluster.Primary().Name() {
		t.Errorf("invalid SQL was parsed on %v, want one replica", on)
	}

	st, err := c.PrepareContext(ctx, "SELECT pg_is_in_recovery() WHERE $1::int > 0")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.QueryContext(ctx, 1, 2); err == nil || !strings.Contains(err.Error(), "expected 1 arguments, got 2") {
		t.Errorf("two arguments to a statement of one parameter: %v, want database/sql's count error (NumInput)", err)
	}
	for i := 0; i < 4; i++ {
		var rec bool
		if err := st.QueryRowContext(ctx, 1).Scan(&rec); err != nil {
			t.Fatal(err)
		}
		if !rec {
			t.Fatalf("prepared read %d ran on the primary", i)
		}
	}

	// A connection with a primary session checks there.
	if _, err := c.ExecContext(ctx, "CREATE TEMP TABLE prepare_pin (id int)"); err != nil {
		t.Fatal(err)
	}
	invalid("prepare-marker-primary")
	if on := ranOn(t, "prepare-marker-primary"); len(on) != 1 || on[0] != cluster.Primary().Name() {
		t.Errorf("invalid SQL was parsed on %v, want the primary", on)
	}
	// The temp table exists only in that session: the statement is valid
	// there.
	ins, err := c.PrepareContext(ctx, "INSERT INTO prepare_pin VALUES ($1)")
	if err != nil {
		t.Fatalf("prepare on the pinned session: %v", err)
	}
	defer ins.Close()
	if _, err := ins.ExecContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
}
