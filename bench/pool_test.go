package bench

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgrouted/pgrouted"
)

// The pgx-native benchmarks run one statement through pgx pools, named by
// the driver= part of their name (benchstat -col /driver):
//
//   - pgxpool: pgxpool straight to the primary;
//   - pgxpool-replica: pgxpool straight to one replica (reads only);
//   - pgrouted-pool: a pgrouted.Pool on the whole cluster (reads on the
//     replicas);
//   - pgrouted-pool-primary: a pgrouted.Pool with every statement routed
//     to the primary, the same server as pgxpool: the difference is
//     pgrouted's own cost.
//
// mode=serial is one goroutine; mode=parallel32 is 32 goroutines.

// pgxDB is what the pgx-native benchmarks run statements through: a
// *pgxpool.Pool or a *pgrouted.Pool.
type pgxDB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type poolStack struct {
	name  string
	db    pgxDB
	ctx   context.Context
	close func()
}

// poolStacks opens the pools; withReplica adds pgxpool straight to a
// replica (for reads).
func poolStacks(b *testing.B, withReplica bool) []poolStack {
	b.Helper()
	setup(b)
	ctx := context.Background()
	open := func(dsn string) *pgxpool.Pool {
		p, err := pgxpool.New(ctx, dsn+"&pool_max_conns=64")
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	routed := func() *pgrouted.Pool {
		p, err := pgrouted.NewPool(ctx, cluster.DSN()+"&pgrouted_probe_interval=250ms&pgrouted_replica_max_conns=32")
		if err != nil {
			b.Fatal(err)
		}
		waitReplicaRoute(b, p.Connector())
		return p
	}
	primary := open(cluster.Primary().DSN())
	out := []poolStack{{"pgxpool", primary, ctx, primary.Close}}
	if withReplica {
		replica := open(cluster.Replicas()[0].DSN())
		out = append(out, poolStack{"pgxpool-replica", replica, ctx, replica.Close})
	}
	r, f := routed(), routed()
	return append(out,
		poolStack{"pgrouted-pool", r, ctx, r.Close},
		poolStack{"pgrouted-pool-primary", f, pgrouted.WithRoute(ctx, pgrouted.Primary), f.Close},
	)
}

// eachPool runs op through every pool, serial and with 32 goroutines.
func eachPool(b *testing.B, withReplica bool, op func(ctx context.Context, db pgxDB, i int) error) {
	for _, mode := range []string{"serial", "parallel32"} {
		ss := poolStacks(b, withReplica)
		for _, s := range ss {
			b.Run("mode="+mode+"/driver="+s.name, func(b *testing.B) {
				warmPool(b, s, op)
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
		// Their connections count against max_connections.
		for _, s := range ss {
			s.close()
		}
	}
}

// warmPool opens the connections the parallel runs use and fills the
// statement caches, outside the timed loop.
func warmPool(b *testing.B, s poolStack, op func(ctx context.Context, db pgxDB, i int) error) {
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

// BenchmarkPoolSelect is BenchmarkSelect through pgx pools: a one-row
// SELECT by primary key with QueryRow.
func BenchmarkPoolSelect(b *testing.B) {
	eachPool(b, true, func(ctx context.Context, db pgxDB, i int) error {
		var v string
		return db.QueryRow(ctx, "SELECT v FROM bench_kv WHERE id = $1", i%kvRows+1).Scan(&v)
	})
}

// BenchmarkPoolInsert is BenchmarkInsert through pgx pools: a one-row
// autocommit INSERT with Exec. The pgrouted Pool reads the WAL position
// after the commit (pipelined with it) for read-your-writes.
func BenchmarkPoolInsert(b *testing.B) {
	eachPool(b, false, func(ctx context.Context, db pgxDB, i int) error {
		_, err := db.Exec(ctx, "INSERT INTO bench_ins (v) VALUES ($1)", "x")
		return err
	})
}

// waitReplicaRoute returns once reads through conn go to a replica.
func waitReplicaRoute(tb testing.TB, conn *pgrouted.Connector) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := conn.Explain(context.Background(), "SELECT 1")
		if err == nil && !d.Primary {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("reads do not go to a replica after 30s: %+v, %v", d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
