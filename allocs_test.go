//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	conn, routed, pool := openRouted(t, ctx, cfg)

	// pgx straight to one replica.
	direct, directPool := replicaBaselines(t, ctx)

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

// TestCheckedReadAllocations reports the client cost of a read-back: a
// read right after the caller's write, which the last probe cannot prove
// a replica holds, so that the replica's position is checked before it
// in the same round trip (a one-row SELECT by primary key through
// database/sql on the driver, and QueryRow through a Pool), beside pgx
// reading the same row straight on a replica (database/sql and pgxpool).
// Only the read is measured, each after its write was replayed on every
// replica (the check finds it there), and only the reads checked on a
// replica count. The check is one more statement in the read's round
// trip: the counts are logged, not held to maxExtraReadAllocs, whose
// baseline is a read without one. The writes are a Session's, so that
// each read checks at once (a position left to be read would be read for
// one read only, which pgrouted learns not to do: ReasonDeferred).
func TestCheckedReadAllocations(t *testing.T) {
	ctx := pgrouted.WithSession(testCtx(t), pgrouted.NewSession())
	mustExec(t, ctx, cluster.Primary(), `DROP TABLE IF EXISTS alloc_checked;
		CREATE TABLE alloc_checked (id int PRIMARY KEY, v text NOT NULL);
		INSERT INTO alloc_checked SELECT g, md5(g::text) FROM generate_series(1, 100) g`)
	replicated(t, ctx)
	const query = "SELECT v FROM alloc_checked WHERE id = $1"
	const write = "UPDATE alloc_checked SET v = v WHERE id = $1"

	// pgrouted, with a hook that counts the reads checked on a replica
	// (it allocates nothing).
	var checks atomic.Uint64
	cfg, err := pgrouted.ParseConfig(cluster.DSN() + "&pgrouted_names=" + names())
	if err != nil {
		t.Fatal(err)
	}
	cfg.OnRoute = func(e pgrouted.RouteEvent) {
		if e.Op == pgrouted.OpRead && !e.Primary && e.Reason == pgrouted.ReasonCheck {
			checks.Add(1)
		}
	}
	_, routed, pool := openRouted(t, ctx, cfg)

	// pgx straight to the primary (the baseline's writes) and to one
	// replica.
	primary, err := pgxpool.New(ctx, cluster.Primary().DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(primary.Close)
	direct, directPool := replicaBaselines(t, ctx)

	sqlRead := func(db *sql.DB) func(int) error {
		return func(i int) error {
			var v string
			return db.QueryRowContext(ctx, query, i%100+1).Scan(&v)
		}
	}
	type rowQuerier interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}
	poolRead := func(p rowQuerier) func(int) error {
		return func(i int) error {
			var v string
			return p.QueryRow(ctx, query, i%100+1).Scan(&v)
		}
	}
	sqlWrite := func(i int) error {
		_, err := routed.ExecContext(ctx, write, i%100+1)
		return err
	}
	poolWrite := func(i int) error {
		_, err := pool.Exec(ctx, write, i%100+1)
		return err
	}
	pgxWrite := func(i int) error {
		_, err := primary.Exec(ctx, write, i%100+1)
		return err
	}
	for _, c := range []struct {
		name                    string
		write, routed, baseline func(int) error
	}{
		{"database/sql", sqlWrite, sqlRead(routed), sqlRead(direct)},
		{"Pool", poolWrite, poolRead(pool), poolRead(directPool)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, n := readBackAllocs(t, ctx, c.write, c.routed, checks.Load)
			want, _ := readBackAllocs(t, ctx, pgxWrite, c.baseline, nil)
			t.Logf("allocations per read-back: pgrouted %.1f (%d reads checked on a replica), pgx straight to a replica %.1f", got, n, want)
			if n < 50 {
				t.Fatalf("only %d read-backs were checked on a replica: the test did not measure the check", n)
			}
		})
	}
}

// readBackAllocs returns the least, over a few rounds, of the mean number
// of allocations of read, each run after write once every replica replayed
// it, and how many reads were measured: only those after which checked
// (when not nil) counted one more. Only the read is measured (runtime.MemStats
// around it, with GOMAXPROCS 1 as testing.AllocsPerRun sets it); other
// goroutines only add allocations to a count.
func readBackAllocs(t *testing.T, ctx context.Context, write, read func(int) error, checked func() uint64) (least float64, measured int) {
	t.Helper()
	const perRound, rounds = 40, 4
	i := 0
	one := func() (uint64, bool) {
		if err := write(i); err != nil {
			t.Fatal(err)
		}
		replicated(t, ctx)
		var before, after runtime.MemStats
		var c uint64
		if checked != nil {
			c = checked()
		}
		runtime.ReadMemStats(&before)
		err := read(i)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		i++
		return after.Mallocs - before.Mallocs, checked == nil || checked() > c
	}
	for range 20 {
		one() // statement caches, pools
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	least = -1
	for range rounds {
		var sum uint64
		n := 0
		for range perRound {
			if allocs, ok := one(); ok {
				sum += allocs
				n++
			}
		}
		measured += n
		if n > 0 {
			if mean := float64(sum) / float64(n); least < 0 || mean < least {
				least = mean
			}
		}
	}
	return least, measured
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

// replicaBaselines opens pgx's database/sql driver and a pgxpool straight
// to the cluster's first replica, closed when the test ends.
func replicaBaselines(t *testing.T, ctx context.Context) (*sql.DB, *pgxpool.Pool) {
	t.Helper()
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
	return direct, directPool
}

// openRouted opens a *sql.DB and a Pool on cfg, each on its own
// Connector, once both route reads to replicas and have read the function
// catalog (whose read would count in a measure); closed when the test ends.
func openRouted(t *testing.T, ctx context.Context, cfg *pgrouted.Config) (*pgrouted.Connector, *sql.DB, *pgrouted.Pool) {
	t.Helper()
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
	return conn, routed, pool
}
