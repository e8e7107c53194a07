package pgrouted_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted"
)

// maxExtraAllocs is what an autocommit write through pgrouted may allocate
// beyond the same write through pgx (issue 26): the routing decision, the
// watermark, and the read of the WAL position pipelined with the commit.
const maxExtraAllocs = 10

// maxExtraReadAllocs is how many allocations a read pgrouted sends to a
// replica may cost beyond the same read through pgx straight to that
// replica (issue 26).
const maxExtraReadAllocs = 6

// TestReplicaReadAllocations checks the client cost of a read routed to a
// replica (no write of the caller before it, so no position check): a
// one-row SELECT by primary key through database/sql on the driver, and
// QueryRow through a Pool, allocates at most maxExtraReadAllocs more than
// the same read through pgx's database/sql driver, and through pgxpool,
// straight to a replica.
//
// testing.AllocsPerRun counts every goroutine's allocations, the
// probes' and the test cluster's proxies' included (every connection here
// goes through a proxy): each count is the least of a few runs, and the
// probes run at the default interval.
func TestReplicaReadAllocations(t *testing.T) {
	ctx := testCtx(t)
	mustExec(t, ctx, cluster.Primary(), `DROP TABLE IF EXISTS alloc_kv;
		CREATE TABLE alloc_kv (id int PRIMARY KEY, v text NOT NULL);
		INSERT INTO alloc_kv SELECT g, md5(g::text) FROM generate_series(1, 100) g`)
	replicated(t, ctx)
	const query = "SELECT v FROM alloc_kv WHERE id = $1"

	// pgrouted, with no OnRoute hook (a recorder allocates).
	cfg, err := pgrouted.ParseConfig(cluster.DSN() + "&pgrouted_names=" + names())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	routed := sql.OpenDB(conn)
	t.Cleanup(func() { routed.Close() })
	pool, err := pgrouted.NewPoolWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for _, c := range []*pgrouted.Connector{conn, pool.Connector()} {
		waitReplicaRoute(t, c)
		waitCatalogRead(t, c)
	}

	// pgx straight to one replica.
	replica := cluster.Replicas()[0].DSN()
	direct, err := sql.Open("pgx", replica)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	directPool, err := pgxpool.New(ctx, replica)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(directPool.Close)

	sqlRead := func(db *sql.DB) func(int) error {
		return func(i int) error {
			var v string
			return db.QueryRowContext(ctx, query, i%100+1).Scan(&v)
		}
	}
	poolRead := func(qr func(i int) interface{ Scan(...any) error }) func(int) error {
		return func(i int) error {
			var v string
			return qr(i).Scan(&v)
		}
	}
	for _, c := range []struct {
		name             string
		conn             *pgrouted.Connector
		routed, baseline func(int) error
	}{
		{"database/sql", conn, sqlRead(routed), sqlRead(direct)},
		{"Pool", pool.Connector(),
			poolRead(func(i int) interface{ Scan(...any) error } { return pool.QueryRow(ctx, query, i%100+1) }),
			poolRead(func(i int) interface{ Scan(...any) error } { return directPool.QueryRow(ctx, query, i%100+1) })},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := replicaReads(c.conn)
			got, runs := leastAllocs(t, c.routed)
			want, _ := leastAllocs(t, c.baseline)
			t.Logf("allocations per read: pgrouted %.0f, pgx straight to a replica %.0f", got, want)
			if got > want+maxExtraReadAllocs {
				t.Errorf("a read on a replica allocates %.0f times, pgx straight to a replica %.0f: more than %d over", got, want, maxExtraReadAllocs)
			}
			if n := replicaReads(c.conn) - before; n < uint64(runs) {
				t.Errorf("%d of the %d reads measured ran on a replica", n, runs)
			}
		})
	}
}

// leastAllocs returns the least of a few testing.AllocsPerRun counts of
// read, after a warm-up, and how many reads were measured. Other
// goroutines only add allocations to a count.
func leastAllocs(t *testing.T, read func(int) error) (least float64, runs int) {
	t.Helper()
	const perCount, counts = 200, 5
	i := 0
	run := func() {
		if err := read(i); err != nil {
			t.Fatal(err)
		}
		i++
	}
	for range perCount {
		run() // statement caches, pools
	}
	least = -1
	for range counts {
		if n := testing.AllocsPerRun(perCount, run); least < 0 || n < least {
			least = n
		}
	}
	// AllocsPerRun runs the function once more to warm up.
	return least, counts * (perCount + 1)
}

// replicaReads counts the reads conn ran on hosts other than the primary.
func replicaReads(conn *pgrouted.Connector) uint64 {
	primary := conn.Topology().Primary
	var n uint64
	for host, ops := range conn.Stats().Statements {
		if host != primary {
			n += ops[pgrouted.OpRead]
		}
	}
	return n
}

// waitCatalogRead waits until conn read the function catalog once: a read
// of it (thousands of rows) would count in a measure.
func waitCatalogRead(t testing.TB, conn *pgrouted.Connector) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for conn.Stats().CatalogReads == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the function catalog was not read within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWriteAllocations: an autocommit INSERT (and INSERT … RETURNING)
// through the driver and through the Pool allocates at most
// maxExtraAllocs more than the same through pgx's database/sql driver and
// pgxpool, straight to the primary, in the same process.
func TestWriteAllocations(t *testing.T) {
	ctx := context.Background()
	p := cluster.Primary()
	if err := p.Exec(testCtx(t), "CREATE TABLE IF NOT EXISTS allocs_w (id bigserial PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}
	// Straight to the servers: the fault points run in this process, and
	// allocate per read. Probes far apart: their allocations are not the
	// statements'.
	dsn := cluster.DSN()
	for _, n := range cluster.Nodes() {
		dsn = strings.Replace(dsn, n.Addr(), n.DirectAddr(), 1)
	}
	dsn += "&pgrouted_probe_interval=3s"
	const insert = "INSERT INTO allocs_w (v) VALUES ($1)"
	const returning = "INSERT INTO allocs_w (v) VALUES ($1) RETURNING id"

	pgxDB, err := sql.Open("pgx", p.DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pgxDB.Close()
	routedDB, err := sql.Open("pgrouted", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer routedDB.Close()
	pgxPool, err := pgxpool.New(ctx, p.DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pgxPool.Close()
	routedPool, err := pgrouted.NewPool(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer routedPool.Close()

	sqlExec := func(db *sql.DB) func() error {
		return func() error {
			_, err := db.ExecContext(ctx, insert, "x")
			return err
		}
	}
	sqlReturning := func(db *sql.DB) func() error {
		return func() error {
			var id int64
			return db.QueryRowContext(ctx, returning, "x").Scan(&id)
		}
	}
	for _, c := range []struct {
		name        string
		pgx, routed func() error
	}{
		{"driver/insert", sqlExec(pgxDB), sqlExec(routedDB)},
		{"driver/insert-returning", sqlReturning(pgxDB), sqlReturning(routedDB)},
		{"pool/insert", func() error {
			_, err := pgxPool.Exec(ctx, insert, "x")
			return err
		}, func() error {
			_, err := routedPool.Exec(ctx, insert, "x")
			return err
		}},
		{"pool/insert-returning", func() error {
			var id int64
			return pgxPool.QueryRow(ctx, returning, "x").Scan(&id)
		}, func() error {
			var id int64
			return routedPool.QueryRow(ctx, returning, "x").Scan(&id)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			base, _ := leastAllocs(t, func(int) error { return c.pgx() })
			got, _ := leastAllocs(t, func(int) error { return c.routed() })
			t.Logf("allocations per statement: pgx %.1f, pgrouted %.1f", base, got)
			if got > base+maxExtraAllocs {
				t.Errorf("pgrouted allocates %.1f times per statement, pgx %.1f: more than %d above", got, base, maxExtraAllocs)
			}
		})
	}
}
