package bench

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted"
)

// The overhead benchmarks run one statement through three stacks, named by
// the driver= part of their name, so that `benchstat -col /driver` puts
// them side by side:
//
//   - pgx: pgx's own database/sql driver (github.com/jackc/pgx/v5/stdlib)
//     straight to the primary;
//   - pgx-replica: the same straight to one replica (reads only): the
//     baseline of a read pgrouted sends to a replica;
//   - pgrouted: pgrouted on the whole cluster (reads on the replicas);
//   - pgrouted-primary: pgrouted with every statement routed to the
//     primary (pgrouted.WithRoute(ctx, pgrouted.Primary)), the same server
//     as pgx: the difference is pgrouted's own cost.
//
// mode=serial is one goroutine; mode=parallel32 is 32 goroutines
// (b.SetParallelism on GOMAXPROCS).

const kvRows = 1000

var setupOnce sync.Once

// setup creates the tables the benchmarks use, and the user objects of
// BenchmarkDecision's read-user-objects (each one's code leaves the session
// as it found it, so the read stays on replicas), once, and waits until
// the replicas have them.
func setup(b *testing.B) {
	b.Helper()
	var err error
	setupOnce.Do(func() {
		ctx := context.Background()
		err = cluster.Primary().Exec(ctx, fmt.Sprintf(`
			DROP VIEW IF EXISTS bench_kv_view;
			DROP TABLE IF EXISTS bench_kv, bench_ins;
			CREATE TABLE bench_kv (id int PRIMARY KEY, v text NOT NULL);
			INSERT INTO bench_kv SELECT g, md5(g::text) FROM generate_series(1, %d) g;
			CREATE TABLE bench_ins (id bigserial PRIMARY KEY, v text NOT NULL);
			ANALYZE bench_kv;
			DROP OPERATOR IF EXISTS ##+ (int, int);
			DROP FUNCTION IF EXISTS bench_plus(int), bench_add(int, int);
			DROP DOMAIN IF EXISTS bench_positive;
			CREATE FUNCTION bench_plus(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1 + 1';
			CREATE FUNCTION bench_add(int, int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1 + $2';
			CREATE OPERATOR ##+ (LEFTARG = int, RIGHTARG = int, FUNCTION = bench_add);
			CREATE DOMAIN bench_positive AS int CHECK (VALUE > 0);
			CREATE VIEW bench_kv_view AS SELECT id, v FROM bench_kv`, kvRows))
		if err == nil {
			err = cluster.WaitReplicated(ctx)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
}

type stack struct {
	name string
	db   *sql.DB
	ctx  context.Context
}

// stacks opens the stacks; withReplica adds pgx straight to a replica
// (for reads).
func stacks(b *testing.B, withReplica bool) []stack {
	b.Helper()
	setup(b)
	open := func(dsn string) *sql.DB {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		return db
	}
	routed, _ := openRouted(b, "&pgrouted_replica_max_conns=32")
	forced, _ := openRouted(b, "&pgrouted_replica_max_conns=32")
	ctx := context.Background()
	out := []stack{{"pgx", open(cluster.Primary().DSN()), ctx}}
	if withReplica {
		out = append(out, stack{"pgx-replica", open(cluster.Replicas()[0].DSN()), ctx})
	}
	out = append(out,
		stack{"pgrouted", routed, ctx},
		stack{"pgrouted-primary", forced, pgrouted.WithRoute(ctx, pgrouted.Primary)},
	)
	for _, s := range out {
		s.db.SetMaxOpenConns(64)
		s.db.SetMaxIdleConns(64)
	}
	return out
}

// each runs op for every stack, serial and with 32 goroutines; withReplica
// adds pgx straight to a replica (for reads).
func each(b *testing.B, withReplica bool, op func(ctx context.Context, db *sql.DB, i int) error) {
	for _, mode := range []string{"serial", "parallel32"} {
		ss := stacks(b, withReplica)
		for _, s := range ss {
			b.Run("mode="+mode+"/driver="+s.name, func(b *testing.B) {
				warm(b, s, op)
				b.ReportAllocs()
				b.ResetTimer()
				if mode == "serial" {
					i := 0
					for b.Loop() {
						if err := op(s.ctx, s.db, i); err != nil {
							b.Fatal(err)
						}
						i++
					}
					return
				}
				b.SetParallelism(32 / max(1, runtimeProcs()))
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						if err := op(s.ctx, s.db, i); err != nil {
							b.Error(err)
							return
						}
						i++
					}
				})
			})
		}
		// Their connections count against max_connections: close them
		// before the next mode opens its own.
		for _, s := range ss {
			s.db.Close()
		}
	}
}

// warm opens the connections the parallel runs use (and the replicas'
// pools behind pgrouted) and fills the statement caches, outside the timed
// loop.
func warm(b *testing.B, s stack, op func(ctx context.Context, db *sql.DB, i int) error) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 4 {
				if err := op(s.ctx, s.db, i*4+j); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSelect is a one-row SELECT by primary key; pgx-replica is the
// baseline of pgrouted's read on a replica.
func BenchmarkSelect(b *testing.B) {
	each(b, true, func(ctx context.Context, db *sql.DB, i int) error {
		var v string
		return db.QueryRowContext(ctx, "SELECT v FROM bench_kv WHERE id = $1", i%kvRows+1).Scan(&v)
	})
}

// BenchmarkInsert is a one-row autocommit INSERT. pgrouted reads the WAL
// position after the commit (pipelined with it) for read-your-writes.
func BenchmarkInsert(b *testing.B) {
	each(b, false, func(ctx context.Context, db *sql.DB, i int) error {
		_, err := db.ExecContext(ctx, "INSERT INTO bench_ins (v) VALUES ($1)", "x")
		return err
	})
}

// BenchmarkDecision is pgrouted's routing decision alone (Explain: classify
// the statement and choose the endpoint from the topology snapshot): a read
// that names no user code, a read that names user objects whose code the
// decision resolves from the catalog cache (a view, a function, an
// operator, a cast to a domain with a CHECK), and a write.
func BenchmarkDecision(b *testing.B) {
	setup(b)
	_, conn := openRouted(b, "")
	ctx := context.Background()
	for _, q := range []struct {
		name, sql string
		replica   bool // the decision must be a replica's
	}{
		{"read", `SELECT "users"."id", "users"."name" FROM "users" WHERE "users"."id" = $1 LIMIT $2`, true},
		{"read-user-objects", `SELECT bench_plus(id), v FROM bench_kv_view WHERE id ##+ 1 = $1::bench_positive`, true},
		{"write", `INSERT INTO "users" ("name","email") VALUES ($1,$2) RETURNING "id"`, false},
	} {
		b.Run("stmt="+q.name+"/driver=pgrouted", func(b *testing.B) {
			// The catalog cache learns the objects' code on the first
			// decision that names them, and a probe refreshes it: wait
			// until the decision is the one measured.
			deadline := time.Now().Add(30 * time.Second)
			for {
				d, err := conn.Explain(ctx, q.sql)
				if err != nil {
					b.Fatal(err)
				}
				if !d.Primary == q.replica {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("%s: decision %+v after 30s", q.name, d)
				}
				time.Sleep(10 * time.Millisecond)
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
