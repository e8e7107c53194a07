//go:build unix

package pgrouted_test

import (
	"testing"

	"github.com/pgrouted/pgrouted"
)

// TestCommitErrorOfReturningRows: a write that fails at its commit (a
// deferred constraint's violation, reported after its rows and command
// tag) fails for the caller, whichever path ran it: pgrouted's pipeline
// with the position read after it (with a Session), or pgx's own rows
// (without one); read to their end (rows.Err), closed after the first
// (QueryRow's Scan), or an Exec. Through both faces. The pipeline's reader
// once took the error for the end of the statement's segment: the insert
// was rolled back and the caller told it succeeded.
func TestCommitErrorOfReturningRows(t *testing.T) {
	forEachClient(t, testCommitErrorOfReturningRows)
}

func testCommitErrorOfReturningRows(t *testing.T, open opener) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), `DROP TABLE IF EXISTS dret;
CREATE TABLE dret (k int, CONSTRAINT dret_k UNIQUE (k) DEFERRABLE INITIALLY DEFERRED);
INSERT INTO dret VALUES (1)`)
	db, _, _ := open(t)
	for _, withSession := range []bool{true, false} {
		c := ctx
		if withSession {
			c = pgrouted.WithSession(ctx, pgrouted.NewSession())
		}
		for _, how := range []string{"rows", "scan", "exec"} {
			var err error
			switch how {
			case "exec":
				err = db.ExecContext(c, "INSERT INTO dret VALUES (1)")
			case "scan":
				var k int
				err = db.QueryRowContext(c, "INSERT INTO dret VALUES (1) RETURNING k").Scan(&k)
			default:
				rows, qerr := db.QueryContext(c, "INSERT INTO dret VALUES (1) RETURNING k")
				if qerr != nil {
					err = qerr
				} else {
					for rows.Next() {
					}
					err = rows.Err()
					if cerr := rows.Close(); err == nil {
						err = cerr
					}
				}
			}
			if err == nil {
				t.Errorf("session %v, %s: an insert that violated a deferred constraint at its commit returned no error", withSession, how)
			}
		}
	}
	var n int
	if err := cluster.Primary().QueryRow(ctx, "SELECT count(*) FROM dret", nil, &n); err != nil || n != 1 {
		t.Fatalf("%d rows, %v; want 1", n, err)
	}
}
