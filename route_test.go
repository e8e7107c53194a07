//go:build unix

package pgrouted_test

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/pgrouted/pgrouted"
)

// where a statement must run.
const (
	onPrimary = "primary"
	onReplica = "replica"
	onBoth    = "replica, then primary" // SQLSTATE 25006 safety net
)

type routeCase struct {
	sql     string
	args    []any
	query   bool // through QueryContext (else ExecContext)
	want    string
	primary bool // force the primary with WithRoute
}

var routeCases = []routeCase{
	// Reads.
	{sql: "SELECT 1", query: true, want: onReplica},
	{sql: "select now()", query: true, want: onReplica},
	{sql: "(SELECT 1)", query: true, want: onReplica},
	{sql: "((SELECT 1)) UNION SELECT 2", query: true, want: onReplica},
	{sql: "WITH x AS (SELECT 1 AS a) SELECT a FROM x", query: true, want: onReplica},
	{sql: "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT n FROM r", query: true, want: onReplica},
	{sql: "VALUES (1), (2)", query: true, want: onReplica},
	{sql: "TABLE route_t", query: true, want: onReplica},
	{sql: "SHOW server_version", query: true, want: onReplica},
	{sql: "EXPLAIN SELECT * FROM route_t", query: true, want: onReplica},
	{sql: "EXPLAIN ANALYZE SELECT 1", query: true, want: onReplica},
	{sql: "EXPLAIN (COSTS OFF) SELECT id FROM route_t", query: true, want: onReplica},
	{sql: "SELECT 'insert into route_t values (1)' AS s", query: true, want: onReplica},
	{sql: `SELECT "update", "delete" FROM route_kw`, query: true, want: onReplica},
	{sql: "SELECT $$DELETE FROM route_t$$", query: true, want: onReplica},
	{sql: "SELECT $tag$ for update $tag$", query: true, want: onReplica},
	{sql: `SELECT E'it\'s an update; drop table route_t'`, query: true, want: onReplica},
	{sql: "/* delete from route_t */ SELECT 1", query: true, want: onReplica},
	{sql: "SELECT 1 /* for update */", query: true, want: onReplica},
	{sql: "SELECT count(*) FROM route_t WHERE v = 'for update'", query: true, want: onReplica},
	{sql: "SELECT 'nextval(''route_seq'')', 'pg_advisory_lock(1)'", query: true, want: onReplica},
	{sql: "SELECT id, v FROM route_t ORDER BY id LIMIT 5 OFFSET 0", query: true, want: onReplica},
	{sql: "SELECT id FROM route_t WHERE id = $1", args: []any{1}, query: true, want: onReplica},
	{sql: `SELECT "route_t"."id" FROM "route_t" WHERE "route_t"."v" = $1 ORDER BY "route_t"."id" LIMIT $2`, args: []any{"a", 1}, query: true, want: onReplica},
	{sql: "SELECT t.id FROM route_t t JOIN route_kw k ON true", query: true, want: onReplica},
	{sql: "SELECT pg_is_in_recovery(), current_setting('server_version')", query: true, want: onReplica},
	{sql: "SELECT 1; SELECT 2", want: onReplica},
	{sql: "/* pgrouted:replica */ SELECT 1", query: true, want: onReplica},
	{sql: "SELECT exists(SELECT 1 FROM route_t WHERE id = 1)", query: true, want: onReplica},

	// A function that writes looks like a read; the catalog knows it is
	// VOLATILE (the 25006 safety net: TestRefusedReadIsRemembered).
	{sql: "SELECT route_write_fn()", query: true, want: onPrimary},

	// Writes, locks, session state, transactions: the primary.
	{sql: "INSERT INTO route_t (v) VALUES ('a')", want: onPrimary},
	{sql: "INSERT INTO route_t (v) VALUES ($1) RETURNING id", args: []any{"b"}, query: true, want: onPrimary},
	{sql: "UPDATE route_t SET v = v WHERE id = -1", want: onPrimary},
	{sql: "DELETE FROM route_t WHERE id = -1", want: onPrimary},
	{sql: "INSERT INTO route_t (id, v) VALUES (-5, 'u') ON CONFLICT (id) DO UPDATE SET v = excluded.v RETURNING id", query: true, want: onPrimary},
	{sql: "MERGE INTO route_t t USING (VALUES (-6)) s(id) ON t.id = s.id WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, 'm')", want: onPrimary},
	{sql: "WITH d AS (DELETE FROM route_t WHERE id = -1 RETURNING id) SELECT id FROM d", query: true, want: onPrimary},
	{sql: "WITH u AS (UPDATE route_t SET v = v WHERE id = -1 RETURNING id) SELECT count(*) FROM u", query: true, want: onPrimary},
	{sql: "WITH x AS (SELECT 1) INSERT INTO route_t (v) SELECT 'w' FROM x", want: onPrimary},
	{sql: "SELECT id FROM route_t FOR UPDATE", query: true, want: onPrimary},
	{sql: "SELECT id FROM route_t ORDER BY id LIMIT 1 FOR SHARE", query: true, want: onPrimary},
	{sql: "SELECT id FROM route_t FOR NO KEY UPDATE SKIP LOCKED", query: true, want: onPrimary},
	{sql: "SELECT id FROM (SELECT id FROM route_t) s, route_kw FOR KEY SHARE OF route_kw", query: true, want: onPrimary},
	{sql: "SELECT pg_advisory_lock(42), pg_advisory_unlock(42)", query: true, want: onPrimary},
	{sql: "SELECT pg_try_advisory_xact_lock(43)", query: true, want: onPrimary},
	{sql: "SELECT set_config('application_name', 'routed', false)", query: true, want: onPrimary},
	{sql: "SELECT pg_catalog.set_config('search_path', 'public', true)", query: true, want: onPrimary},
	{sql: "SELECT * INTO TEMP route_into FROM route_t", want: onPrimary},
	{sql: "SELECT id INTO route_into_real FROM route_t", want: onPrimary},
	{sql: "SELECT nextval('route_seq')", query: true, want: onPrimary},
	{sql: "SELECT setval('route_seq', 10)", query: true, want: onPrimary},
	{sql: `SELECT "nextval"('route_seq')`, query: true, want: onPrimary},
	{sql: "SELECT pg_notify('route_chan', 'x')", query: true, want: onPrimary},
	{sql: "SELECT txid_current()", query: true, want: onPrimary},
	{sql: "SET statement_timeout = 0", want: onPrimary},
	{sql: "RESET statement_timeout", want: onPrimary},
	{sql: "SET LOCAL statement_timeout = 0", want: onPrimary},
	{sql: "SET TIME ZONE 'UTC'", want: onPrimary},
	{sql: "CREATE TEMP TABLE route_tmp (id int)", want: onPrimary},
	{sql: "CREATE TEMPORARY VIEW route_tmpv AS SELECT 1", want: onPrimary},
	{sql: "CREATE TABLE IF NOT EXISTS route_ddl (id int)", want: onPrimary},
	{sql: "DROP TABLE IF EXISTS route_ddl", want: onPrimary},
	{sql: "COPY (SELECT 1) TO STDOUT", want: onPrimary},
	{sql: "NOTIFY route_chan", want: onPrimary},
	{sql: "LISTEN route_chan", want: onPrimary},
	{sql: "DISCARD ALL", want: onPrimary},
	{sql: "PREPARE route_p AS SELECT 1", want: onPrimary},
	{sql: "DEALLOCATE ALL", want: onPrimary},
	{sql: "BEGIN; SELECT 1; COMMIT", want: onPrimary},
	{sql: "SELECT 1; INSERT INTO route_t (v) VALUES ('multi')", want: onPrimary},
	{sql: "SELECT 1; SET search_path = public", want: onPrimary},
	{sql: "EXPLAIN ANALYZE INSERT INTO route_t (v) VALUES ('e')", query: true, want: onPrimary},
	{sql: "EXPLAIN (ANALYZE, COSTS OFF) DELETE FROM route_t WHERE id = -1", query: true, want: onPrimary},
	{sql: "VACUUM route_kw", want: onPrimary},
	{sql: "ANALYZE route_kw", want: onPrimary},
	{sql: "DO $$ BEGIN PERFORM 1; END $$", want: onPrimary},
	{sql: "LOCK TABLE route_kw IN SHARE MODE", want: onPrimary},
	{sql: "CALL route_proc()", want: onPrimary},
	{sql: "/* pgrouted:primary */ SELECT 1", query: true, want: onPrimary},
	{sql: "SELECT 1", query: true, want: onPrimary, primary: true},
	{sql: "frobnicate the database", want: onPrimary},
}

func setupRouteTables(t *testing.T) {
	ctx := testCtx(t)
	p := cluster.Primary()
	mustExec(t, ctx, p, `
		DROP TABLE IF EXISTS route_t, route_kw, route_into_real;
		CREATE TABLE route_t (id serial PRIMARY KEY, v text);
		CREATE TABLE route_kw ("update" int, "delete" int);
		INSERT INTO route_t (v) VALUES ('a'), ('for update');
		INSERT INTO route_kw VALUES (1, 2);
		CREATE SEQUENCE IF NOT EXISTS route_seq;
		CREATE OR REPLACE FUNCTION route_write_fn() RETURNS int LANGUAGE sql AS $$ INSERT INTO route_t (v) VALUES ('fn') RETURNING id $$;
		CREATE OR REPLACE PROCEDURE route_proc() LANGUAGE sql AS $$ SELECT 1 $$;`)
	replicated(t, ctx)
}

// TestRoutingTable runs each statement through database/sql and checks, in
// the servers' own statement logs, where it ran.
func TestRoutingTable(t *testing.T) {
	if len(routeCases) < 60 {
		t.Fatalf("only %d cases", len(routeCases))
	}
	setupRouteTables(t)
	db, conn, rec := open(t)
	db.SetMaxIdleConns(0) // a fresh connection per case: no pin carries over
	for i, tc := range routeCases {
		marker := fmt.Sprintf("routecase%03d", i)
		t.Run(marker, func(t *testing.T) {
			// A context per case: the table's 80 cases together take
			// longer than one test's context on a loaded machine.
			ctx := testCtx(t)
			// Reads right after the previous case's write wait for the
			// replicas to hold it (read-your-writes): let them catch up.
			waitReplicaRoute(t, conn)
			sqlText := tc.sql + " -- " + marker
			c := ctx
			if tc.primary {
				c = pgrouted.WithRoute(ctx, pgrouted.Primary)
			}
			var err error
			if tc.query {
				var rows *sql.Rows
				rows, err = db.QueryContext(c, sqlText, tc.args...)
				if err == nil {
					for rows.Next() {
					}
					err = rows.Err()
					rows.Close()
				}
			} else {
				_, err = db.ExecContext(c, sqlText, tc.args...)
			}
			if err != nil {
				t.Logf("%s: %v (where it ran is what is checked)", tc.sql, err)
			}
			on := ranOn(t, marker)
			var want []string
			switch tc.want {
			case onPrimary:
				want = []string{"node0"}
			case onReplica:
				if len(on) == 1 && on[0] != "node0" {
					want = on
				} else {
					want = []string{"node1 or node2"}
				}
			case onBoth:
				if len(on) == 2 && on[0] == "node0" && on[1] != "node0" {
					want = on
				} else {
					want = []string{"node0", "node1 or node2"}
				}
			}
			if !slices.Equal(on, want) {
				t.Errorf("%q ran on %v, want %v (%s)", tc.sql, on, want, tc.want)
			}
		})
	}
	// The driver's own account agrees with the servers'.
	for _, e := range rec.snapshot() {
		if e.Endpoint == "" && e.Err == nil {
			t.Errorf("event without endpoint: %+v", e)
		}
	}
}

func TestForcedRoutes(t *testing.T) {
	setupRouteTables(t)
	db, _, _ := open(t)
	ctx := testCtx(t)
	rctx := pgrouted.WithRoute(ctx, pgrouted.Replica)
	for _, q := range []string{
		"INSERT INTO route_t (v) VALUES ('forced') -- forcedwrite1",
		"SELECT id FROM route_t FOR UPDATE -- forcedwrite2",
		"SET search_path = public -- forcedwrite3",
		"/* pgrouted:replica */ DELETE FROM route_t -- forcedwrite4",
	} {
		_, err := db.ExecContext(rctx, q)
		var re *pgrouted.RouteError
		if !errors.Is(err, pgrouted.ErrWriteOnReplica) || !errors.As(err, &re) {
			t.Errorf("%s forced to a replica: %v, want ErrWriteOnReplica", q, err)
		}
		if on := ranOn(t, q[len(q)-12:]); len(on) != 0 {
			t.Errorf("%s was sent to %v", q, on)
		}
	}
	if _, err := db.BeginTx(rctx, nil); !errors.Is(err, pgrouted.ErrWriteOnReplica) {
		t.Errorf("read-write transaction forced to a replica: %v", err)
	}
	// A forced replica read never falls back: with every replica behind,
	// it fails with ErrNoReplica.
	for _, r := range cluster.Replicas() {
		if err := r.PauseReplay(ctx); err != nil {
			t.Fatal(err)
		}
	}
	restore(t)
	if _, err := db.ExecContext(ctx, "INSERT INTO route_t (v) VALUES ('behind')"); err != nil {
		t.Fatal(err)
	}
	var n int
	err := db.QueryRowContext(rctx, "SELECT count(*) FROM route_t -- forcedread1").Scan(&n)
	var re *pgrouted.RouteError
	if !errors.Is(err, pgrouted.ErrNoReplica) || !errors.As(err, &re) || re.Reason != pgrouted.ReasonBehind {
		t.Fatalf("forced replica read with every replica behind: %v, want ErrNoReplica (behind)", err)
	}
	// Not forced, it runs on the primary and sees the write.
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM route_t WHERE v = 'behind' -- fallbackread1").Scan(&n); err != nil || n != 1 {
		t.Fatalf("fallback read: %d, %v", n, err)
	}
	if on := ranOn(t, "fallbackread1"); !slices.Equal(on, []string{"node0"}) {
		t.Fatalf("fallback read ran on %v", on)
	}
}

func TestFallbackError(t *testing.T) {
	db, _, _ := open(t, "pgrouted_fallback=error")
	ctx := testCtx(t)
	setupRouteTables(t)
	for _, r := range cluster.Replicas() {
		if err := r.PauseReplay(ctx); err != nil {
			t.Fatal(err)
		}
	}
	restore(t)
	if _, err := db.ExecContext(ctx, "INSERT INTO route_t (v) VALUES ('x')"); err != nil {
		t.Fatal(err)
	}
	// A read of the written table: it needs the write.
	_, err := db.QueryContext(ctx, "SELECT count(*) FROM route_t")
	if !errors.Is(err, pgrouted.ErrNoReplica) {
		t.Fatalf("read with fallback=error and every replica behind: %v", err)
	}
}

// TestWriteReturningOnAWarmSession: an autocommit write read through
// QueryContext on a primary session that already wrote (its statements are
// cached) returns its rows, and its watermark is raised when they close.
func TestWriteReturningOnAWarmSession(t *testing.T) {
	setupRouteTables(t)
	db, _, _ := open(t)
	db.SetMaxOpenConns(1) // one primary session for every statement
	ctx := testCtx(t)
	for i := 0; i < 5; i++ {
		if _, err := db.ExecContext(ctx, "INSERT INTO route_t (v) VALUES ('warm')"); err != nil {
			t.Fatal(err)
		}
		var id int
		if err := db.QueryRowContext(ctx, "INSERT INTO route_t (v) VALUES ('warm') RETURNING id").Scan(&id); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM route_t WHERE id = $1", id).Scan(&n); err != nil || n != 1 {
			t.Fatalf("read after INSERT … RETURNING: %d, %v", n, err)
		}
	}
}
