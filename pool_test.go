//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/pgrouted/pgrouted"
)

// client is what a test runs its statements through: a *sql.DB on the
// driver, or a pgrouted.Pool. The tests of routing under faults run
// through both (forEachClient): the Pool is the same machinery, and must
// behave as the driver does.
type client interface {
	QueryRowContext(ctx context.Context, query string, args ...any) scanner
	ExecContext(ctx context.Context, query string, args ...any) error
	QueryContext(ctx context.Context, query string, args ...any) (clientRows, error)
	SetMaxIdleConns(n int)
	// InUse is the number of the client's connections in use (a
	// statement running, rows open).
	InUse() int
	// Idle is the number of the client's idle connections.
	Idle() int
	// Conn returns one connection of the client, the caller's alone
	// until Close: a *sql.Conn, or a connection from Pool.Acquire.
	Conn(ctx context.Context) (clientConn, error)
}

// clientConn is one connection of a client (client.Conn).
type clientConn interface {
	QueryRowContext(ctx context.Context, query string, args ...any) scanner
	ExecContext(ctx context.Context, query string, args ...any) error
	Close() error
}

// clientRows are *sql.Rows or pgx.Rows.
type clientRows interface {
	Next() bool
	Err() error
	Close() error
}

// scanner is a row: *sql.Row's and pgx.Row's Scan.
type scanner interface{ Scan(dest ...any) error }

// scanFunc is a scanner.
type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }

type sqlClient struct{ *sql.DB }

func (c sqlClient) QueryRowContext(ctx context.Context, query string, args ...any) scanner {
	return c.DB.QueryRowContext(ctx, query, args...)
}

func (c sqlClient) QueryContext(ctx context.Context, query string, args ...any) (clientRows, error) {
	return c.DB.QueryContext(ctx, query, args...)
}

func (c sqlClient) InUse() int { return c.DB.Stats().InUse }

func (c sqlClient) Idle() int { return c.DB.Stats().Idle }

func (c sqlClient) ExecContext(ctx context.Context, query string, args ...any) error {
	_, err := c.DB.ExecContext(ctx, query, args...)
	return err
}

func (c sqlClient) Conn(ctx context.Context) (clientConn, error) {
	sc, err := c.DB.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return sqlConn{sc}, nil
}

type sqlConn struct{ *sql.Conn }

func (c sqlConn) QueryRowContext(ctx context.Context, query string, args ...any) scanner {
	return c.Conn.QueryRowContext(ctx, query, args...)
}

func (c sqlConn) ExecContext(ctx context.Context, query string, args ...any) error {
	_, err := c.Conn.ExecContext(ctx, query, args...)
	return err
}

type poolClient struct{ *pgrouted.Pool }

func (c poolClient) QueryRowContext(ctx context.Context, query string, args ...any) scanner {
	return c.Pool.QueryRow(ctx, query, args...)
}

func (c poolClient) QueryContext(ctx context.Context, query string, args ...any) (clientRows, error) {
	rows, err := c.Pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgxRows{rows}, nil
}

// pgxRows are pgx.Rows with database/sql's Close.
type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error {
	r.Rows.Close()
	return r.Rows.Err()
}

func (c poolClient) ExecContext(ctx context.Context, query string, args ...any) error {
	_, err := c.Pool.Exec(ctx, query, args...)
	return err
}

func (c poolClient) InUse() int { return pgrouted.PoolInUse(c.Pool) }

func (c poolClient) Idle() int { return pgrouted.PoolIdle(c.Pool) }

// SetMaxIdleConns does nothing: the Pool keeps a host pool's size idle.
func (c poolClient) SetMaxIdleConns(int) {}

func (c poolClient) Conn(ctx context.Context) (clientConn, error) {
	pc, err := c.Pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &poolConn{p: c.Pool, pc: pc}, nil
}

// poolConn is a connection from Pool.Acquire, pinned to its primary
// session. When that session is gone (its term ended, or it broke), its
// statements fail with driver.ErrBadConn (nothing was sent) until it is
// released: then it is released, another one acquired, and the statement
// runs on that one, as the error says to do. A *sql.Conn, whose driver
// connection has no session state, opens its new session by itself.
type poolConn struct {
	p  *pgrouted.Pool
	pc *pgrouted.PoolConn // nil once released
}

// do runs f on the connection: on another one when it fails with
// driver.ErrBadConn, once.
func (c *poolConn) do(ctx context.Context, f func(*pgrouted.PoolConn) error) error {
	for attempt := 0; ; attempt++ {
		if c.pc == nil {
			pc, err := c.p.Acquire(ctx)
			if err != nil {
				return err
			}
			c.pc = pc
		}
		err := f(c.pc)
		if !errors.Is(err, driver.ErrBadConn) || attempt > 0 {
			return err
		}
		c.pc.Release()
		c.pc = nil
	}
}

func (c *poolConn) QueryRowContext(ctx context.Context, query string, args ...any) scanner {
	return scanFunc(func(dest ...any) error {
		return c.do(ctx, func(pc *pgrouted.PoolConn) error { return pc.QueryRow(ctx, query, args...).Scan(dest...) })
	})
}

func (c *poolConn) ExecContext(ctx context.Context, query string, args ...any) error {
	return c.do(ctx, func(pc *pgrouted.PoolConn) error {
		_, err := pc.Exec(ctx, query, args...)
		return err
	})
}

func (c *poolConn) Close() error {
	if c.pc != nil {
		c.pc.Release()
		c.pc = nil
	}
	return nil
}

// opener opens a client on the test cluster as open does.
type opener func(t testing.TB, extra ...string) (client, *pgrouted.Connector, *routes)

// dsnOpener opens a client on dsn as openDSN does.
type dsnOpener func(t testing.TB, dsn string, tweak func(*pgrouted.Config)) (client, *pgrouted.Connector, *routes)

func openSQLClient(t testing.TB, extra ...string) (client, *pgrouted.Connector, *routes) {
	db, conn, rec := open(t, extra...)
	return sqlClient{db}, conn, rec
}

func openSQLClientDSN(t testing.TB, dsn string, tweak func(*pgrouted.Config)) (client, *pgrouted.Connector, *routes) {
	db, conn, rec := openDSN(t, dsn, tweak)
	return sqlClient{db}, conn, rec
}

func openPoolClient(t testing.TB, extra ...string) (client, *pgrouted.Connector, *routes) {
	p, rec := openPool(t, nil, extra...)
	return poolClient{p}, p.Connector(), rec
}

func openPoolClientDSN(t testing.TB, dsn string, tweak func(*pgrouted.Config)) (client, *pgrouted.Connector, *routes) {
	p, rec := openPoolDSN(t, dsn, tweak)
	return poolClient{p}, p.Connector(), rec
}

// forEachClient runs f as a subtest for the driver ("sql") and the Pool
// ("pool").
func forEachClient(t *testing.T, f func(t *testing.T, open opener)) {
	t.Run("sql", func(t *testing.T) { f(t, openSQLClient) })
	t.Run("pool", func(t *testing.T) { f(t, openPoolClient) })
}

// forEachClientDSN is forEachClient for tests that open their clients on
// a DSN of their own.
func forEachClientDSN(t *testing.T, f func(t *testing.T, open dsnOpener)) {
	t.Run("sql", func(t *testing.T) { f(t, openSQLClientDSN) })
	t.Run("pool", func(t *testing.T) { f(t, openPoolClientDSN) })
}

// openPool opens a Pool on the cluster with open's settings and an OnRoute
// recorder, after tweak (when not nil) changed the Config (see
// openPoolDSN).
func openPool(t testing.TB, tweak func(*pgrouted.Config), extra ...string) (*pgrouted.Pool, *routes) {
	t.Helper()
	dsn := cluster.DSN() + "&pgrouted_probe_interval=100ms&pgrouted_lease=5s&pgrouted_write_timeout=20s&pgrouted_names=" + names()
	for _, e := range extra {
		dsn += "&" + e
	}
	return openPoolDSN(t, dsn, tweak)
}

// openPoolDSN opens a Pool on dsn with an OnRoute recorder, after tweak
// (when not nil) changed the Config. It waits as openDSN does; the Pool
// is closed when the test ends.
func openPoolDSN(t testing.TB, dsn string, tweak func(*pgrouted.Config)) (*pgrouted.Pool, *routes) {
	t.Helper()
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	rec := &routes{}
	cfg.OnRoute = rec.record
	if tweak != nil {
		tweak(cfg)
	}
	p, err := pgrouted.NewPoolWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	waitReplicaRoute(t, p.Connector())
	deadline := time.Now().Add(30 * time.Second)
	for p.Stats().CatalogReads == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the function catalog was not read within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return p, rec
}

// eventWith returns the last route event whose query contains marker.
func eventWith(t testing.TB, rec *routes, marker string) pgrouted.RouteEvent {
	t.Helper()
	ev := rec.snapshot()
	for i := len(ev) - 1; i >= 0; i-- {
		if strings.Contains(ev[i].Query, marker) {
			return ev[i]
		}
	}
	t.Fatalf("no route event for %q", marker)
	return pgrouted.RouteEvent{}
}

// TestPoolReadsOnReplicas: plain reads through the Pool run on replicas
// (at least 90% of them, counted where they ran: inet_server_port()), and
// their rows are pgx's: CollectRows with RowToStructByName, field
// descriptions, pgtype values.
func TestPoolReadsOnReplicas(t *testing.T) {
	ctx := testCtx(t)
	p, rec := openPool(t, nil)
	primaryPort := 0
	if err := cluster.Primary().QueryRow(ctx, "SELECT inet_server_port()", nil, &primaryPort); err != nil {
		t.Fatal(err)
	}
	const n = 200
	onReplica := 0
	for i := 0; i < n; i++ {
		var port int
		if err := p.QueryRow(ctx, "SELECT inet_server_port()").Scan(&port); err != nil {
			t.Fatal(err)
		}
		if port != primaryPort {
			onReplica++
		}
	}
	t.Logf("%d of %d plain reads on replicas", onReplica, n)
	if onReplica < n*9/10 {
		t.Fatalf("%d of %d plain reads ran on replicas, want at least 90%%", onReplica, n)
	}

	type item struct {
		ID    int64
		Name  string
		Price pgtype.Numeric
		At    pgtype.Timestamptz
	}
	rows, err := p.Query(ctx, "SELECT g::int8 AS id, 'n' || g AS name, (g * 1.5)::numeric AS price, now() AS at /* collect */ FROM generate_series(1, 3) g")
	if err != nil {
		t.Fatal(err)
	}
	if fds := rows.FieldDescriptions(); len(fds) != 4 || fds[2].Name != "price" {
		t.Fatalf("field descriptions: %+v", fds)
	}
	items, err := pgx.CollectRows(rows, pgx.RowToStructByName[item])
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 3 || items[2].ID != 3 || items[2].Name != "n3" || !items[2].Price.Valid || !items[2].At.Valid {
		t.Fatalf("collected %+v", items)
	}
	if f, _ := items[1].Price.Float64Value(); f.Float64 != 3 {
		t.Fatalf("numeric scanned as %+v", f)
	}
	if e := eventWith(t, rec, "/* collect */"); e.Primary || e.Op != pgrouted.OpRead {
		t.Fatalf("the collected read: %+v, want a replica", e.Decision)
	}
	// No row: pgx.ErrNoRows.
	var x int
	if err := p.QueryRow(ctx, "SELECT 1 WHERE false").Scan(&x); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("QueryRow of no row: %v, want pgx.ErrNoRows", err)
	}
	// A server error is pgx's *pgconn.PgError, from Query itself.
	_, err = p.Query(ctx, "SELECT * FROM no_such_table_here")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42P01" {
		t.Fatalf("a read of a missing table: %v, want a PgError 42P01", err)
	}
	// Every replica connection went back: none in flight.
	for _, h := range p.Topology().Hosts {
		if h.InflightReads != 0 {
			t.Fatalf("%s: %d reads in flight after every rows closed", h.Name, h.InflightReads)
		}
	}
}

// TestPoolRouting: writes, hints and forced routes through the Pool are
// decided as the driver decides them, with the same errors.
func TestPoolRouting(t *testing.T) {
	ctx := testCtx(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS pr; CREATE TABLE pr (id int PRIMARY KEY)")
	replicated(t, ctx)
	p, rec := openPool(t, nil)
	c := p.Connector()
	for _, q := range []string{
		"SELECT 1 /* plain */",
		"/* pgrouted:primary */ SELECT 1 /* hinted */",
		"SELECT * FROM pr FOR UPDATE /* lock */",
		"INSERT INTO pr VALUES (1) /* w */", // last: a read after it may be checked
	} {
		want, err := c.Explain(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		got := eventWith(t, rec, q)
		if got.Primary != want.Primary || got.Op != want.Op || got.Reason != want.Reason {
			t.Errorf("%s: ran as %+v, Explain says %+v", q, got.Decision, want)
		}
	}
	// A unique violation is pgx's PgError.
	_, err := p.Exec(ctx, "INSERT INTO pr VALUES (1)")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23505" {
		t.Fatalf("a duplicate key: %v, want PgError 23505", err)
	}
	// A write forced to a replica: nothing sent, the sentinel.
	if _, err := p.Exec(pgrouted.WithRoute(ctx, pgrouted.Replica), "INSERT INTO pr VALUES (2)"); !errors.Is(err, pgrouted.ErrWriteOnReplica) || !pgconn.SafeToRetry(err) {
		t.Fatalf("a write forced to a replica: %v (SafeToRetry %v), want ErrWriteOnReplica, safe to retry", err, pgconn.SafeToRetry(err))
	}
	// A read forced to the primary.
	var inRecovery bool
	if err := p.QueryRow(pgrouted.WithRoute(ctx, pgrouted.Primary), "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || inRecovery {
		t.Fatalf("a read forced to the primary ran in recovery: %v, %v", inRecovery, err)
	}
	// A read with WithMaxLag(0) accepts no replica.
	if err := p.QueryRow(pgrouted.WithMaxLag(ctx, 0), "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || inRecovery {
		t.Fatalf("a read with no staleness budget ran in recovery: %v, %v", inRecovery, err)
	}
}

// TestPoolSessionState: a Pool refuses a session-state statement before
// sending it; an acquired connection runs it on its primary session, and
// the state does not reach the Pool's later calls.
func TestPoolSessionState(t *testing.T) {
	ctx := testCtx(t)
	p, _ := openPool(t, nil)
	for _, q := range []string{"SET application_name = 'x'", "SELECT set_config('application_name', 'x', false)", "LISTEN ch", "SELECT pg_advisory_lock(1)", "CREATE TEMP TABLE tt (a int)"} {
		if _, err := p.Exec(ctx, q); !errors.Is(err, pgrouted.ErrSessionState) {
			t.Errorf("Pool.Exec(%q): %v, want ErrSessionState", q, err)
		}
	}
	b := &pgx.Batch{}
	b.Queue("SELECT 1")
	b.Queue("SET application_name = 'x'")
	if err := p.SendBatch(ctx, b).Close(); !errors.Is(err, pgrouted.ErrSessionState) {
		t.Errorf("a batch with a SET: %v, want ErrSessionState", err)
	}
	primary := pgrouted.WithRoute(ctx, pgrouted.Primary)
	for i := 0; i < 3; i++ {
		c, err := p.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var before, after string
		if err := c.QueryRow(ctx, "SHOW application_name").Scan(&before); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, "SET application_name = 'acquired'"); err != nil {
			t.Fatal(err)
		}
		var inRecovery bool
		if err := c.QueryRow(ctx, "SELECT current_setting('application_name'), pg_is_in_recovery()").Scan(&after, &inRecovery); err != nil {
			t.Fatal(err)
		}
		if after != "acquired" || inRecovery || before == "acquired" {
			t.Fatalf("acquired connection: %q before, %q after the SET (in recovery %v)", before, after, inRecovery)
		}
		c.Release()
	}
	// Whichever primary session the Pool's calls get, none has the state.
	for i := 0; i < 20; i++ {
		var s string
		if err := p.QueryRow(primary, "SHOW application_name").Scan(&s); err != nil {
			t.Fatal(err)
		}
		if s == "acquired" {
			t.Fatal("a Pool call ran on a session an acquired connection had changed")
		}
	}
}

// TestPoolReadYourWrites: with the replicas' replication 5ms behind, 8
// writers write through the Pool and read back at once, 240 pairs in all
// (Exec then QueryRow, INSERT … RETURNING then QueryRow, CopyFrom then
// Query): no read misses its write, and once the replicas caught up the
// reads run there.
func TestPoolReadYourWrites(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS pryw; CREATE TABLE pryw (w int, n int)")
	replicated(t, ctx)
	for _, r := range cluster.Replicas() {
		if err := r.ReplicationFault().Latency(5 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	p, rec := openPool(t, nil)
	const writers, rounds = 8, 30
	var misses, pairs atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				var err error
				switch i % 3 {
				case 0:
					_, err = p.Exec(ctx, "INSERT INTO pryw (w, n) VALUES ($1, $2)", w, i)
				case 1:
					var got int
					err = p.QueryRow(ctx, "INSERT INTO pryw (w, n) VALUES ($1, $2) RETURNING n", w, i).Scan(&got)
				default:
					_, err = p.CopyFrom(ctx, pgx.Identifier{"pryw"}, []string{"w", "n"}, pgx.CopyFromRows([][]any{{w, i}, {w, i}}))
				}
				if err != nil {
					t.Error(err)
					return
				}
				var n int
				if err := p.QueryRow(ctx, "SELECT count(*) FROM pryw WHERE w = $1 AND n = $2 /* read back */", w, i).Scan(&n); err != nil {
					t.Error(err)
					return
				}
				pairs.Add(1)
				if n == 0 {
					misses.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if misses.Load() != 0 {
		t.Fatalf("%d of %d reads missed the write just made", misses.Load(), pairs.Load())
	}
	replicaReads := 0
	for _, e := range rec.snapshot() {
		if strings.Contains(e.Query, "/* read back */") && !e.Primary {
			replicaReads++
		}
	}
	t.Logf("%d write-then-read pairs, 0 missed; %d of the read-backs ran on a replica", pairs.Load(), replicaReads)
	// Later reads, once replicated, run on replicas.
	replicated(t, ctx)
	waitReplicaRoute(t, p.Connector())
	var n int
	if err := p.QueryRow(ctx, "SELECT count(*) FROM pryw /* later */").Scan(&n); err != nil || n != writers*(rounds+rounds/3) {
		t.Fatalf("%d rows, %v; want %d", n, err, writers*(rounds+rounds/3))
	}
	if e := eventWith(t, rec, "/* later */"); e.Primary {
		t.Fatalf("a later read ran on the primary: %+v", e.Decision)
	}
}

// TestPoolTransactions: a transaction on the primary, whose commit the
// next read sees at once; a read-only one on a replica; savepoints; pgx's
// ErrTxClosed after the end.
func TestPoolTransactions(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS ptx; CREATE TABLE ptx (id int)")
	replicated(t, ctx)
	for _, r := range cluster.Replicas() {
		if err := r.ReplicationFault().Latency(5 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	p, rec := openPool(t, nil)
	for i := 0; i < 20; i++ {
		tx, err := p.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var inRecovery bool
		if err := tx.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || inRecovery {
			t.Fatalf("a transaction ran in recovery: %v, %v", inRecovery, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO ptx VALUES ($1)", i); err != nil {
			t.Fatal(err)
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sp.Exec(ctx, "INSERT INTO ptx VALUES (-1)"); err != nil {
			t.Fatal(err)
		}
		if err := sp.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("Rollback after Commit: %v, want pgx.ErrTxClosed", err)
		}
		var n int
		if err := p.QueryRow(ctx, "SELECT count(*) FROM ptx WHERE id = $1", i).Scan(&n); err != nil || n != 1 {
			t.Fatalf("the committed row read back at once: %d, %v", n, err)
		}
	}
	if e := eventWith(t, rec, "COMMIT"); !e.Primary {
		t.Fatalf("the commit: %+v", e.Decision)
	}
	replicated(t, ctx)
	waitReplicaRoute(t, p.Connector())
	tx, err := p.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var inRecovery bool
	var n int
	if err := tx.QueryRow(ctx, "SELECT pg_is_in_recovery(), (SELECT count(*) FROM ptx)").Scan(&inRecovery, &n); err != nil {
		t.Fatal(err)
	}
	if !inRecovery || n != 20 {
		t.Fatalf("a read-only transaction: in recovery %v, %d rows; want a replica with 20", inRecovery, n)
	}
	if e := eventWith(t, rec, "BEGIN"); e.Primary || e.Reason != pgrouted.ReasonReadOnlyTx {
		t.Fatalf("the read-only BEGIN: %+v", e.Decision)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO ptx VALUES (99)"); err == nil {
		t.Fatal("a write in a read-only transaction succeeded")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Serializable read-only: the primary, as in the driver.
	tx, err = p.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.Serializable})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || inRecovery {
		t.Fatalf("a serializable read-only transaction ran in recovery: %v, %v", inRecovery, err)
	}
	tx.Rollback(ctx)
}

// TestPoolBatch: a batch with a write runs on the primary, its reads see
// the write, and a read right after it sees it too; a batch of reads runs
// on a replica.
func TestPoolBatch(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS pb; CREATE TABLE pb (id int)")
	replicated(t, ctx)
	for _, r := range cluster.Replicas() {
		if err := r.ReplicationFault().Latency(5 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	p, rec := openPool(t, nil)
	for i := 0; i < 20; i++ {
		b := &pgx.Batch{}
		b.Queue("INSERT INTO pb VALUES ($1) /* batch write */", i)
		var n int
		b.Queue("SELECT count(*) FROM pb WHERE id = $1", i).QueryRow(func(r pgx.Row) error { return r.Scan(&n) })
		if err := p.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("the batch's read saw %d rows of its write", n)
		}
		if e := eventWith(t, rec, "/* batch write */"); !e.Primary || e.Op != pgrouted.OpWrite {
			t.Fatalf("the batch with a write: %+v", e.Decision)
		}
		if err := p.QueryRow(ctx, "SELECT count(*) FROM pb WHERE id = $1", i).Scan(&n); err != nil || n != 1 {
			t.Fatalf("the batch's write read back at once: %d, %v", n, err)
		}
	}
	replicated(t, ctx)
	waitReplicaRoute(t, p.Connector())
	b := &pgx.Batch{}
	var r1, r2 bool
	b.Queue("SELECT pg_is_in_recovery() /* batch read */").QueryRow(func(r pgx.Row) error { return r.Scan(&r1) })
	b.Queue("SELECT pg_is_in_recovery()").QueryRow(func(r pgx.Row) error { return r.Scan(&r2) })
	if err := p.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	if !r1 || !r2 {
		t.Fatalf("a batch of reads: in recovery %v, %v; want a replica", r1, r2)
	}
	if e := eventWith(t, rec, "/* batch read */"); e.Primary {
		t.Fatalf("a batch of reads: %+v", e.Decision)
	}
}

// TestPoolRefusedReadRunsOnPrimary: a writing function listed as a read
// goes to a replica, which refuses it (25006): it runs again on the
// primary, as in the driver.
func TestPoolRefusedReadRunsOnPrimary(t *testing.T) {
	ctx := testCtx(t)
	setupFunctions(t, ctx)
	p, rec := openPool(t, nil, "pgrouted_read_functions=app.add_item")
	v := fmt.Sprintf("pool-refused-%d", time.Now().UnixNano())
	addItemRefused(t, ctx, p, rec, "SELECT app.add_item($1)", v)
}

// addItemRefused runs query, a call of app.add_item(v) (a writing function
// listed as a read), through p: a replica refuses it, the primary runs it
// (the event says so), and the row is read back at once.
func addItemRefused(t *testing.T, ctx context.Context, p *pgrouted.Pool, rec *routes, query, v string) {
	t.Helper()
	var id int64
	if err := p.QueryRow(ctx, query, v).Scan(&id); err != nil {
		t.Fatal(err)
	}
	e := eventWith(t, rec, "app.add_item")
	if !e.Primary || !e.Retried || e.Reason != pgrouted.ReasonRetry25006 {
		t.Fatalf("%+v (retried %v), want the replica's refusal, then the primary", e.Decision, e.Retried)
	}
	var n int
	if err := p.QueryRow(ctx, "SELECT count(*) FROM app.items WHERE v = $1", v).Scan(&n); err != nil || n != 1 {
		t.Fatalf("read back at once: %d rows, %v; want 1", n, err)
	}
}

// TestPoolRefusedBatchRunsOnPrimary: a batch of reads goes to a replica,
// which refuses one of them (a writing function listed as a read): that
// statement and the ones after it run again on the primary, as the driver
// reruns a refused statement, and the batch's results are whole: the
// statement before it from the replica, it and the one after it (which
// sees its write) from the primary. Read through the queued queries'
// callbacks (Close) and through the results' methods.
func TestPoolRefusedBatchRunsOnPrimary(t *testing.T) {
	ctx := testCtx(t)
	setupFunctions(t, ctx)
	p, rec := openPool(t, nil, "pgrouted_read_functions=app.add_item")
	for _, callbacks := range []bool{true, false} {
		// The last round's write must be on the replicas, and the
		// connector must know it, for the batch to be planned there.
		waitReplicaRoute(t, p.Connector())
		v := fmt.Sprintf("pool-batch-refused-%d", time.Now().UnixNano())
		marker := fmt.Sprintf("/* refused batch %v */", callbacks)
		b := &pgx.Batch{}
		var before, after bool
		var id int64
		var n int
		q0 := b.Queue("SELECT pg_is_in_recovery() " + marker)
		q1 := b.Queue("SELECT app.add_item($1) "+marker, v)
		q2 := b.Queue("SELECT count(*), pg_is_in_recovery() FROM app.items WHERE v = $1", v)
		var err error
		if callbacks {
			q0.QueryRow(func(r pgx.Row) error { return r.Scan(&before) })
			q1.QueryRow(func(r pgx.Row) error { return r.Scan(&id) })
			q2.QueryRow(func(r pgx.Row) error { return r.Scan(&n, &after) })
			err = p.SendBatch(ctx, b).Close()
		} else {
			br := p.SendBatch(ctx, b)
			if err = br.QueryRow().Scan(&before); err == nil {
				if err = br.QueryRow().Scan(&id); err == nil {
					err = br.QueryRow().Scan(&n, &after)
				}
			}
			if cerr := br.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			t.Fatalf("callbacks %v: %v", callbacks, err)
		}
		if !before || after || n != 1 || id == 0 {
			var routed []string
			for _, e := range rec.snapshot() {
				if strings.Contains(e.Query, marker) {
					routed = append(routed, fmt.Sprintf("%q: %+v", e.Query, e.Decision))
				}
			}
			t.Fatalf("callbacks %v: first statement in recovery %v; the refused one's id %d; the last one saw %d rows, in recovery %v; want the replica, then the primary, one row; routes: %s", callbacks, before, id, n, after, strings.Join(routed, "; "))
		}
		e := eventWith(t, rec, "app.add_item($1) "+marker)
		if !e.Primary || !e.Retried || e.Reason != pgrouted.ReasonRetry25006 {
			t.Fatalf("callbacks %v: %+v (retried %v), want the replica's refusal, then the primary", callbacks, e.Decision, e.Retried)
		}
		if err := p.QueryRow(ctx, "SELECT count(*) FROM app.items WHERE v = $1", v).Scan(&n); err != nil || n != 1 {
			t.Fatalf("callbacks %v: read back at once: %d rows, %v; want 1", callbacks, n, err)
		}
	}
	if n := pgrouted.PoolInUse(p); n != 0 {
		t.Fatalf("%d connections in use after the batches", n)
	}
}

// tracer counts the statements pgx traces.
type tracer struct{ n atomic.Int64 }

func (tr *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	tr.n.Add(1)
	return ctx
}

func (tr *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestPoolQueryTracer: a pgx QueryTracer in the hosts' pgx configurations
// sees the Pool's writes and reads.
func TestPoolQueryTracer(t *testing.T) {
	ctx := testCtx(t)
	mustExec(t, ctx, cluster.Primary(), "CREATE TABLE IF NOT EXISTS ptr (id int)")
	replicated(t, ctx)
	tr := &tracer{}
	p, _ := openPool(t, func(cfg *pgrouted.Config) {
		for i := range cfg.Hosts {
			cfg.Hosts[i].ConnConfig.Tracer = tr
		}
	})
	before := tr.n.Load()
	if _, err := p.Exec(ctx, "INSERT INTO ptr VALUES ($1)", 1); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := p.QueryRow(ctx, "SELECT count(*) FROM ptr").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if got := tr.n.Load() - before; got < 2 {
		t.Fatalf("the tracer saw %d statements of a write and a read, want both", got)
	}
}

// TestPoolTermEndsDuringBatch: a batch's write whose commit waits (a
// deferred trigger sleeps at commit) when the primary's term ends (the
// provider clears the primary): as for a statement's rows
// (TestTermEndsDuringReturningRows), the batch's results end with
// ErrOutcomeUnknown (the write may have committed, and here it did), not
// a bare network error: the rows of an INSERT … RETURNING that reached the
// caller before, and an INSERT's Exec, whose command tag waits with the
// commit's answer.
func TestPoolTermEndsDuringBatch(t *testing.T) {
	ctx := testCtx(t)
	slowCommitTable(t, ctx)
	for _, returning := range []bool{true, false} {
		t.Run(map[bool]string{true: "query", false: "exec"}[returning], func(t *testing.T) {
			c, conn, _, m := openManualClient(t, openPoolClientDSN, "pgrouted_write_timeout=1s")
			p := c.(poolClient).Pool
			run := fmt.Sprintf("batch-%v-%d", returning, time.Now().UnixNano())
			q := `INSERT INTO term_ret (v, run) SELECT repeat('x', 200), $1 FROM generate_series(1, 1000)`
			if returning {
				// The rows (200 KB) fill the server's output buffer:
				// they reach the caller before the commit.
				q += " RETURNING v"
			}
			b := &pgx.Batch{}
			b.Queue(q, run)
			br := p.SendBatch(ctx, b)
			defer br.Close()
			var rows pgx.Rows
			if returning {
				var err error
				if rows, err = br.Query(); err != nil {
					t.Fatal(err)
				}
				defer rows.Close()
				if !rows.Next() {
					t.Fatalf("no first row: %v", rows.Err())
				}
			}
			waitSleeping(t, ctx, "term_ret")
			m.ClearPrimary()
			waitTopology(t, conn, 10*time.Second, "no primary once cleared", func(s pgrouted.Snapshot) bool { return s.Primary == "" })
			var err error
			if returning {
				for rows.Next() {
				}
				err = rows.Err()
			} else {
				_, err = br.Exec()
			}
			if err == nil {
				err = br.Close()
			}
			if !errors.Is(err, pgrouted.ErrOutcomeUnknown) {
				t.Fatalf("the results of a batch's write whose primary's term ended before its commit answered: %v; want ErrOutcomeUnknown", err)
			}
			if err := br.Close(); !errors.Is(err, pgrouted.ErrOutcomeUnknown) {
				t.Errorf("the batch's Close: %v; want ErrOutcomeUnknown", err)
			}
			waitCommitted(t, ctx, run, 1000)
		})
	}
}

// TestPoolConnections: the Pool keeps up to as many idle connections as a
// host's pool holds (pgrouted_replica_max_conns), closes one whose session
// state was changed instead of keeping it, and after Close closes the ones
// still in use when they are released, and refuses new calls.
func TestPoolConnections(t *testing.T) {
	ctx := testCtx(t)
	p, _ := openPool(t, nil, "pgrouted_replica_max_conns=2")
	primary := pgrouted.WithRoute(ctx, pgrouted.Primary)
	counts := func(wantInUse, wantIdle int, when string) {
		t.Helper()
		if in, idle := pgrouted.PoolInUse(p), pgrouted.PoolIdle(p); in != wantInUse || idle != wantIdle {
			t.Fatalf("%s: %d connections in use and %d idle, want %d and %d", when, in, idle, wantInUse, wantIdle)
		}
	}
	var open []pgx.Rows
	for range 3 {
		rows, err := p.Query(primary, "SELECT pg_backend_pid()")
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, rows)
	}
	counts(3, 0, "three rows open")
	pids := map[int32]bool{}
	for _, rows := range open {
		var pid int32
		for rows.Next() {
			if err := rows.Scan(&pid); err != nil {
				t.Fatal(err)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		pids[pid] = true
	}
	if len(pids) != 3 {
		t.Fatalf("three open rows ran on %d primary sessions, want 3", len(pids))
	}
	counts(0, 2, "their rows closed")

	// A reused connection keeps its primary session.
	var pid int32
	if err := p.QueryRow(primary, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if !pids[pid] {
		t.Fatalf("a call after them ran on a new primary session (%d), not on one of theirs %v", pid, pids)
	}
	counts(0, 2, "a call after them")

	// One whose session state changed is closed when released.
	c, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	counts(1, 1, "a connection acquired")
	if _, err := c.Exec(ctx, "SET application_name = 'pool-connections'"); err != nil {
		t.Fatal(err)
	}
	c.Release()
	counts(0, 1, "the acquired connection, its session state changed, released")

	rows, err := p.Query(primary, "SELECT 1")
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	counts(1, 0, "the Pool closed with rows open")
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatalf("rows open when the Pool closed: %v", err)
	}
	counts(0, 0, "those rows closed")
	if _, err := p.Exec(ctx, "SELECT 1"); err == nil || !strings.Contains(err.Error(), "Pool is closed") {
		t.Fatalf("a call after Close: %v, want the Pool's closed error", err)
	}
	p.Close() // again: nothing
}
