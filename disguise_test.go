//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"os"
	"testing"

	"github.com/pgrouted/pgrouted"
)

// disguises are statements that change the session they run on while
// they look like reads (internal/sqlclass's lexerStateTests has them and
// their kin): check reads their effect back, effect is what it reads on
// the session that ran the statement, clean what it reads on any other.
var disguises = []struct {
	name          string
	sql           string
	check         string
	effect, clean string
}{
	{
		// A literal continued on the next line keeps the E'' mode of its
		// first part; the separate literal after it is a standard one.
		name:   "E'' continued",
		sql:    "SELECT E'x'\n'\\'' , '\\' , set_config('app.tenant', 'evil', false) -- '",
		check:  "SELECT coalesce(current_setting('app.tenant', true), '')",
		effect: "evil",
	},
	{
		name:   "U& EXPLAIN option",
		sql:    `EXPLAIN (U&"\0061nalyze") SELECT set_config('app.tenant', 'evil', false)`,
		check:  "SELECT coalesce(current_setting('app.tenant', true), '')",
		effect: "evil",
	},
	{
		name:   "U& function name with UESCAPE",
		sql:    `SELECT U&"!0073et_config" UESCAPE E'\041' ('app.tenant', 'evil', false)`,
		check:  "SELECT coalesce(current_setting('app.tenant', true), '')",
		effect: "evil",
	},
	{
		name:   "pg_trgm set_limit",
		sql:    "SELECT disguise.set_limit(0.9)",
		check:  "SELECT disguise.show_limit()::text",
		effect: "0.9", clean: "0.3",
	},
	{
		name:   "isn isn_weak (IMMUTABLE)",
		sql:    "SELECT disguise.isn_weak(true)",
		check:  "SELECT disguise.weak_mode()", // isn_weak() pins too, by its name
		effect: "true", clean: "false",
	},
	{
		// Custom settings whose prefix is a word of SET's grammar (SET
		// LOCAL, SET TRANSACTION, SET CONSTRAINTS): for the session.
		name:   "SET local.x",
		sql:    "SET local.tenant = 'evil'",
		check:  "SELECT coalesce(current_setting('local.tenant', true), '')",
		effect: "evil",
	},
	{
		name:   "SET transaction.x",
		sql:    "SET transaction.tenant TO 'evil'",
		check:  "SELECT coalesce(current_setting('transaction.tenant', true), '')",
		effect: "evil",
	},
	{
		name:   "SET constraints.x",
		sql:    "set Constraints.tenant = evil",
		check:  "SELECT coalesce(current_setting('constraints.tenant', true), '')",
		effect: "evil",
	},
	{
		// pg_settings' update rule calls set_config(…, false).
		name:   "UPDATE pg_settings",
		sql:    "UPDATE pg_catalog.pg_settings SET setting = '7777kB' WHERE name = 'work_mem'",
		check:  "SELECT current_setting('work_mem')",
		effect: "7777kB", clean: "4MB",
	},
	{
		name:   "SELECT INTO LOCAL TEMP",
		sql:    "SELECT 1 AS a INTO LOCAL TEMP disguise_local",
		check:  "SELECT (to_regclass('pg_temp.disguise_local') IS NOT NULL)::text",
		effect: "true", clean: "false",
	},
	{
		name:   "SELECT INTO GLOBAL TEMPORARY TABLE",
		sql:    "SELECT 1 AS a INTO GLOBAL TEMPORARY TABLE disguise_global",
		check:  "SELECT (to_regclass('pg_temp.disguise_global') IS NOT NULL)::text",
		effect: "true", clean: "false",
	},
}

// setupDisguises installs pg_trgm and isn in their own schema on the
// primary (dropped when the test ends) and waits for the replicas.
func setupDisguises(t *testing.T, ctx context.Context) {
	t.Helper()
	for _, ext := range []string{"pg_trgm", "isn"} {
		if _, err := os.Stat("/usr/share/postgresql/15/extension/" + ext + ".control"); err != nil {
			t.Fatalf("the %s extension is not installed (%v): apt-get install -y postgresql-15", ext, err)
		}
	}
	p := cluster.Primary()
	mustExec(t, ctx, p, `
DROP SCHEMA IF EXISTS disguise CASCADE;
CREATE SCHEMA disguise;
CREATE EXTENSION pg_trgm SCHEMA disguise;
CREATE EXTENSION isn SCHEMA disguise;
CREATE FUNCTION disguise.weak_mode() RETURNS text LANGUAGE sql STABLE
	AS $$ SELECT disguise.isn_weak()::text $$;
`)
	t.Cleanup(func() {
		if err := p.Exec(context.Background(), "DROP SCHEMA IF EXISTS disguise CASCADE"); err != nil {
			t.Errorf("drop the extensions: %v", err)
		}
	})
	replicated(t, ctx)
}

// readAll runs query on q and returns its first row's first column as
// text, every row read.
func readAll(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, query string) (string, error) {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return "", err
	}
	var first string
	for n := 0; rows.Next(); n++ {
		vs := make([]sql.NullString, len(cols))
		dest := make([]any, len(cols))
		for i := range vs {
			dest[i] = &vs[i]
		}
		if err := rows.Scan(dest...); err != nil {
			return "", err
		}
		if n == 0 {
			first = vs[0].String
		}
	}
	return first, rows.Err()
}

// TestDisguisedSessionState: each statement of disguises runs on the
// primary and pins the *sql.Conn that ran it, whose session then has its
// effect; other callers' reads, on the replicas' pooled connections and
// the primary's, do not see it. A Pool refuses each (ErrSessionState),
// and its later reads, on replicas and forced to the primary, see none.
func TestDisguisedSessionState(t *testing.T) {
	ctx := testCtx(t)
	setupDisguises(t, ctx)
	db, conn, rec := open(t)
	for _, d := range disguises {
		t.Run(d.name, func(t *testing.T) {
			dec, err := conn.Explain(ctx, d.sql)
			if err != nil || !dec.Primary || dec.Reason != pgrouted.ReasonSessionState {
				t.Errorf("Explain: %+v, %v; want the primary for %s", dec, err, pgrouted.ReasonSessionState)
			}
			cn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				// The session keeps what the statement did: it must not go
				// back to database/sql's pool for another test.
				_ = cn.Raw(func(any) error { return driver.ErrBadConn })
				cn.Close()
			}()
			if _, err := readAll(ctx, cn, d.sql); err != nil {
				t.Fatal(err)
			}
			ev := rec.snapshot()
			if last := ev[len(ev)-1]; last.Query != d.sql || !last.Primary || last.Reason != pgrouted.ReasonSessionState {
				t.Errorf("the statement ran %+v, want the primary for %s", last.Decision, pgrouted.ReasonSessionState)
			}
			got, err := readAll(ctx, cn, d.check)
			if err != nil {
				t.Fatal(err)
			}
			ev = rec.snapshot()
			if last := ev[len(ev)-1]; got != d.effect || !last.Primary || last.Reason != pgrouted.ReasonPinned {
				t.Errorf("its session read %q %+v, want %q pinned to the primary", got, last.Decision, d.effect)
			}
			// Other callers, while the session keeps its state.
			replicated(t, ctx)
			waitReplicaRoute(t, conn)
			checkOthers(t, "other reads", rec, d.clean, func(ctx context.Context) (string, error) {
				return readAll(ctx, db, d.check)
			})
		})
	}

	p, prec := openPool(t, nil)
	for _, d := range disguises {
		if _, err := p.Exec(ctx, d.sql); !errors.Is(err, pgrouted.ErrSessionState) {
			t.Errorf("Pool.Exec(%q): %v, want ErrSessionState", d.sql, err)
		}
		replicated(t, ctx)
		waitReplicaRoute(t, p.Connector())
		checkOthers(t, d.name+": Pool reads", prec, d.clean, func(ctx context.Context) (string, error) {
			var got string
			err := p.QueryRow(ctx, d.check).Scan(&got)
			return got, err
		})
	}
}

// checkOthers reads 40 times by read, every other time forced to the
// primary, and fails t when a read returns other than clean, or when none
// ran on a replica (rec records where they ran).
func checkOthers(t *testing.T, what string, rec *routes, clean string, read func(context.Context) (string, error)) {
	t.Helper()
	const others = 40
	ctx := testCtx(t)
	before := len(rec.snapshot())
	seen := 0
	for i := 0; i < others; i++ {
		rctx := ctx
		if i%2 == 1 {
			rctx = pgrouted.WithRoute(ctx, pgrouted.Primary)
		}
		got, err := read(rctx)
		if err != nil {
			t.Fatal(err)
		}
		if got != clean {
			seen++
		}
	}
	onReplica := 0
	for _, e := range rec.snapshot()[before:] {
		if !e.Primary {
			onReplica++
		}
	}
	if seen > 0 || onReplica == 0 {
		t.Errorf("%s: %d of %d saw the effect (%d ran on a replica), want none (and some on a replica)", what, seen, others, onReplica)
	}
}
