//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgrouted/pgrouted"
)

// BenchmarkPositionRead is what reading the primary's WAL position costs a
// read (the read index: a global read, a read after a write whose position
// was deferred), next to a plain round trip to the primary through
// pgxpool. Every connection goes straight to the servers (Node.DirectAddr),
// not through their fault points, which run in this process and would add
// their own goroutines' hand-offs to every round trip. The paths, on a DSN
// of the primary and one replica:
//
//   - pgxpool=select-1, pgxpool=insert-lsn: SELECT 1 and the position's
//     query through pgxpool on the primary (the round trip alone);
//   - fetch: Connector.fetchPosition alone;
//   - index: one read of the position through the read index, as a read
//     makes it (Connector.readPosition);
//   - read=session, read=global: SELECT 1 through database/sql on the
//     replica, without and with global consistency (the difference is
//     the position's read);
//   - read=deferred: SELECT 1 after a write without a Session (the write
//     and a pause of 2 ms, so that the replica's check mostly succeeds,
//     are not timed).
//
// position-reads is the share of reads that read the position, wait-µs/op
// the time they waited for it (Stats.GlobalWaitTime), on-primary the
// share of reads that ran on the primary.
func BenchmarkPositionRead(b *testing.B) {
	ctx := context.Background()
	p := cluster.Primary()
	if err := p.Exec(ctx, "CREATE TABLE IF NOT EXISTS bench_position (id int PRIMARY KEY, v bigint); INSERT INTO bench_position VALUES (1, 0) ON CONFLICT DO NOTHING"); err != nil {
		b.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, p.DirectDSN())
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	for _, q := range []struct{ name, sql string }{
		{"select-1", "SELECT 1::text"},
		{"insert-lsn", "SELECT pg_current_wal_insert_lsn()::text"},
	} {
		b.Run("pgxpool="+q.name, func(b *testing.B) {
			var s string
			b.ReportAllocs()
			for b.Loop() {
				if err := pool.QueryRow(ctx, q.sql).Scan(&s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}

	var reads, onPrimary int
	dsn := "postgres://postgres@" + p.DirectAddr() + "," + cluster.Replicas()[0].DirectAddr() + "/postgres?sslmode=disable&pgrouted_probe_interval=100ms"
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.OnRoute = func(e pgrouted.RouteEvent) {
		if e.Op != pgrouted.OpRead {
			return
		}
		reads++
		if e.Primary {
			onPrimary++
		}
	}
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		b.Fatal(err)
	}
	waitReplicaRoute(b, conn)
	defer conn.Close()
	b.Run("fetch", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := pgrouted.FetchPosition(ctx, conn); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("index", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := pgrouted.IndexPosition(ctx, conn); err != nil {
				b.Fatal(err)
			}
		}
	})

	db := sql.OpenDB(conn)
	defer db.Close()
	db.SetMaxIdleConns(4)
	read := func(b *testing.B, ctx context.Context, write bool) {
		var one int
		reads, onPrimary = 0, 0
		before := conn.Stats()
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if write {
				b.StopTimer()
				if _, err := db.ExecContext(ctx, "UPDATE bench_position SET v = v + 1 WHERE id = 1"); err != nil {
					b.Fatal(err)
				}
				time.Sleep(2 * time.Millisecond)
				b.StartTimer()
			}
			if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		after := conn.Stats()
		served := after.GlobalReads + after.DeferredPositionReads - before.GlobalReads - before.DeferredPositionReads
		if reads > 0 {
			b.ReportMetric(float64(served)/float64(reads), "position-reads")
			b.ReportMetric(float64(onPrimary)/float64(reads), "on-primary")
		}
		if served > 0 {
			b.ReportMetric(float64((after.GlobalWaitTime-before.GlobalWaitTime).Microseconds())/float64(served), "wait-µs/op")
		}
	}
	b.Run("read=session", func(b *testing.B) { read(b, ctx, false) })
	b.Run("read=global", func(b *testing.B) {
		read(b, pgrouted.WithConsistency(ctx, pgrouted.ConsistencyGlobal), false)
	})
	b.Run("read=deferred", func(b *testing.B) { read(b, ctx, true) })
}
