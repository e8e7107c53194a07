//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted"
)

// BenchmarkSelectOne compares a one-row SELECT through pgrouted with the
// same SELECT through pgx's own database/sql driver on the same server (a
// DSN of the primary and one replica, so every read lands on that replica).
// Compare the two with benchstat; the difference is the routing overhead.
func BenchmarkSelectOne(b *testing.B) {
	replica := cluster.Replicas()[0]
	run := func(b *testing.B, db *sql.DB) {
		ctx := context.Background()
		db.SetMaxIdleConns(4)
		var one int
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("driver=pgx-stdlib", func(b *testing.B) {
		db, err := sql.Open("pgx", replica.DSN())
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		run(b, db)
	})
	b.Run("driver=pgrouted", func(b *testing.B) {
		var onReplica, total int
		conn := primaryAndReplica(b, func(e pgrouted.RouteEvent) {
			total++
			if !e.Primary {
				onReplica++
			}
		})
		db := sql.OpenDB(conn)
		defer db.Close()
		run(b, db)
		if onReplica != total {
			b.Fatalf("%d of %d reads ran on the primary", total-onReplica, total)
		}
	})
}

// primaryAndReplica returns a Connector on a DSN of the primary and the
// first replica, with onRoute as its hook, once reads go to the replica.
func primaryAndReplica(tb testing.TB, onRoute func(pgrouted.RouteEvent)) *pgrouted.Connector {
	tb.Helper()
	p, replica := cluster.Primary(), cluster.Replicas()[0]
	dsn := "postgres://postgres@" + p.Addr() + "," + replica.Addr() + "/postgres?sslmode=disable&pgrouted_probe_interval=100ms"
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.OnRoute = onRoute
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	waitReplicaRoute(tb, conn)
	return conn
}

// TestSelectOneRunsOnTheReplica is BenchmarkSelectOne's premise, checked
// where CI runs it: with a DSN of the primary and one replica, every
// one-row SELECT runs on that replica, as the route events and the
// servers' own statement logs say.
func TestSelectOneRunsOnTheReplica(t *testing.T) {
	ctx := testCtx(t)
	rec := &routes{}
	conn := primaryAndReplica(t, rec.record)
	db := sql.OpenDB(conn)
	defer db.Close()
	db.SetMaxIdleConns(4)
	replica := cluster.Replicas()[0]
	marker := fmt.Sprintf("bench-premise-%d", time.Now().UnixNano())
	const n = 200
	for i := 0; i < n; i++ {
		var one int
		if err := db.QueryRowContext(ctx, "SELECT 1 /* "+marker+" */").Scan(&one); err != nil {
			t.Fatal(err)
		}
	}
	evs := rec.snapshot()
	if len(evs) != n {
		t.Fatalf("%d route events for %d reads", len(evs), n)
	}
	for _, e := range evs {
		if e.Op != pgrouted.OpRead || e.Primary || e.Endpoint != replica.Addr() || e.Err != nil {
			t.Fatalf("a read did not run on the replica %s: %+v", replica.Addr(), e)
		}
	}
	if on := ranOn(t, marker); len(on) != 1 || on[0] != replica.Name() {
		t.Fatalf("the reads ran on %v, want only %s", on, replica.Name())
	}
}

// BenchmarkDecision is the routing decision alone: classify the statement
// and choose the endpoint from the topology snapshot.
func BenchmarkDecision(b *testing.B) {
	ctx := context.Background()
	// User objects that run code of their own (safe ones, so that the
	// read stays a replica's): a view, a domain, an operator, an aggregate.
	mustExec(b, ctx, cluster.Primary(), `
DROP SCHEMA IF EXISTS benchobj CASCADE;
CREATE SCHEMA benchobj;
CREATE TABLE benchobj.t (x int);
CREATE FUNCTION benchobj.plus(s int, x int) RETURNS int LANGUAGE sql IMMUTABLE AS $$ SELECT coalesce(s, 0) + x $$;
CREATE AGGREGATE benchobj.total(int) (sfunc = benchobj.plus, stype = int);
CREATE OPERATOR benchobj.##+ (leftarg = int, rightarg = int, function = benchobj.plus);
CREATE DOMAIN benchobj.pos AS int CHECK (VALUE > 0);
CREATE VIEW benchobj.v AS SELECT x FROM benchobj.t;
`)
	b.Cleanup(func() { _ = cluster.Primary().Exec(context.Background(), "DROP SCHEMA IF EXISTS benchobj CASCADE") })
	replicated(b, ctx)
	_, conn, _ := open(b)
	for _, q := range []struct{ name, sql string }{
		{"read", `SELECT "users"."id", "users"."name" FROM "users" WHERE "users"."id" = $1 LIMIT $2`},
		{"write", `INSERT INTO "users" ("name","email") VALUES ($1,$2) RETURNING "id"`},
		{"read-user-objects", `SELECT benchobj.total(x OPERATOR(benchobj.##+) 1), $1::benchobj.pos FROM benchobj.v WHERE x > $2`},
	} {
		b.Run("stmt="+q.name, func(b *testing.B) {
			if d, err := conn.Explain(ctx, q.sql); err != nil || (d.Primary != (q.name == "write")) {
				b.Fatalf("%s: %+v, %v", q.sql, d, err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := conn.Explain(ctx, q.sql); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWrite is an autocommit INSERT (with and without RETURNING) and a
// transaction (BEGIN, INSERT, COMMIT) through pgrouted, which reads the
// position after each commit pipelined with it, next to the same through
// pgx's own database/sql driver, which reads nothing. Both go through the
// primary's fault point with 2 ms of latency, so that round trips show:
// compare the two with benchstat.
func BenchmarkWrite(b *testing.B) {
	ctx := context.Background()
	p := cluster.Primary()
	if err := p.Exec(ctx, "CREATE TABLE IF NOT EXISTS bench_write (id bigserial PRIMARY KEY, v text)"); err != nil {
		b.Fatal(err)
	}
	if err := p.Fault().Latency(2 * time.Millisecond); err != nil {
		b.Fatal(err)
	}
	defer p.Fault().Heal()
	work := map[string]func(*sql.DB) error{
		"insert": func(db *sql.DB) error {
			_, err := db.ExecContext(ctx, "INSERT INTO bench_write (v) VALUES ($1)", "x")
			return err
		},
		"insert-returning": func(db *sql.DB) error {
			var id int64
			return db.QueryRowContext(ctx, "INSERT INTO bench_write (v) VALUES ($1) RETURNING id", "x").Scan(&id)
		},
		"tx": func(db *sql.DB) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO bench_write (v) VALUES ($1)", "x"); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		},
	}
	for _, name := range []string{"insert", "insert-returning", "tx"} {
		for _, driverName := range []string{"pgx-stdlib", "pgrouted"} {
			b.Run("op="+name+"/driver="+driverName, func(b *testing.B) {
				dsn := p.DSN()
				if driverName == "pgrouted" {
					dsn = cluster.DSN() + "&pgrouted_probe_interval=100ms"
				} else {
					driverName = "pgx"
				}
				db, err := sql.Open(driverName, dsn)
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				db.SetMaxIdleConns(1)
				db.SetMaxOpenConns(1)
				if err := work[name](db); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for b.Loop() {
					if err := work[name](db); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
