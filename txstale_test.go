//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/pgrouted/pgrouted"
	"strings"
	"sync"
	"testing"
)

// migrations are schema changes of table mig_t made by another process
// (not through the driver, so nothing in it knows), each changing the
// result columns of SELECT *.
var migrations = []string{
	"ALTER TABLE mig_t ADD COLUMN b text DEFAULT 'b'",
	"ALTER TABLE mig_t ALTER COLUMN v TYPE bigint",
	`BEGIN; DROP TABLE mig_t; CREATE TABLE mig_t (id int PRIMARY KEY, v bigint, b text, c int DEFAULT 3);
		INSERT INTO mig_t (id, v, b) SELECT g, 0, 'b' FROM generate_series(1, 8) g; COMMIT`,
}

// migrationTx is the application's transaction of the migration tests: it
// reads a row with SELECT * and updates it.
func migrationTx(ctx context.Context, db interface {
	BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
}, id int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, "SELECT * FROM mig_t WHERE id = $1", id)
	if err != nil {
		return fmt.Errorf("select: %w", err)
	}
	if _, err := shapeOf(rows); err != nil {
		return fmt.Errorf("select rows: %w", err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE mig_t SET v = v + 1 WHERE id = $1", id); err != nil {
		return fmt.Errorf("update: %w", err)
	}
	return tx.Commit()
}

func createMigT(t *testing.T, ctx context.Context) {
	t.Helper()
	mustExec(t, ctx, cluster.Primary(), `DROP TABLE IF EXISTS mig_t; CREATE TABLE mig_t (id int PRIMARY KEY, v int);
		INSERT INTO mig_t SELECT g, 0 FROM generate_series(1, 8) g`)
}

// TestMigrationDuringTransactions: a migration made by another process
// while the application runs (a column added, a column retyped, the table
// dropped and created again) does not abort the application's
// transactions, whose statements come from the pooled session's statement
// cache: 4 transactions after each of the 3 changes, on one pooled
// session, and none fails.
func TestMigrationDuringTransactions(t *testing.T) {
	ctx := testCtx(t)
	db, _, _ := open(t)
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	createMigT(t, ctx)
	// The session caches both statements.
	if err := migrationTx(ctx, db, 1); err != nil {
		t.Fatal(err)
	}
	failed, total := 0, 0
	var errs []string
	for _, m := range migrations {
		mustExec(t, ctx, cluster.Primary(), m)
		for i := 0; i < 4; i++ {
			total++
			if err := migrationTx(ctx, db, 1+i); err != nil {
				failed++
				errs = append(errs, fmt.Sprintf("after %.30q: %v", m, err))
			}
		}
	}
	t.Logf("%d of %d transactions failed", failed, total)
	if failed != 0 {
		t.Errorf("%d of %d transactions failed after migrations made elsewhere:\n%s", failed, total, strings.Join(errs, "\n"))
	}
}

// TestMigrationDuringPooledTransactions: as TestMigrationDuringTransactions,
// with 8 pooled sessions that all cached the statements: 8 concurrent
// transactions, then 8 after each of the 3 changes (32), and none fails.
func TestMigrationDuringPooledTransactions(t *testing.T) {
	ctx := testCtx(t)
	db, _, _ := open(t)
	const sessions = 8
	db.SetMaxOpenConns(sessions)
	db.SetMaxIdleConns(sessions)
	createMigT(t, ctx)
	var (
		mu     sync.Mutex
		failed int
		total  int
		errs   []string
	)
	// batch runs one transaction on each session at once: each takes its
	// session and holds it until all have one.
	batch := func(after string) {
		var took, wg sync.WaitGroup
		took.Add(sessions)
		for i := 0; i < sessions; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := db.Conn(ctx)
				took.Done()
				if err == nil {
					took.Wait()
					err = migrationTx(ctx, c, 1+i)
					c.Close()
				}
				mu.Lock()
				defer mu.Unlock()
				total++
				if err != nil {
					failed++
					errs = append(errs, fmt.Sprintf("after %.30q: %v", after, err))
				}
			}()
		}
		wg.Wait()
	}
	batch("start")
	if db.Stats().OpenConnections != sessions {
		t.Fatalf("%d pooled sessions, want %d", db.Stats().OpenConnections, sessions)
	}
	for _, m := range migrations {
		mustExec(t, ctx, cluster.Primary(), m)
		batch(m)
	}
	t.Logf("%d of %d transactions failed", failed, total)
	if failed != 0 {
		t.Errorf("%d of %d transactions failed after migrations made elsewhere, first ones:\n%s", failed, total, strings.Join(errs[:min(len(errs), 5)], "\n"))
	}
}

// TestSchemaChangeThroughTheDriver: DDL run through the driver makes every
// pooled session and replica connection of the connector drop its cached
// statements: the next statement on each prepares afresh instead of being
// refused as stale first (no event says it ran again), on the primary
// sessions and on the replicas, outside and inside transactions.
func TestSchemaChangeThroughTheDriver(t *testing.T) {
	ctx := testCtx(t)
	db, _, rec := open(t, "pgrouted_replica_max_conns=2")
	const sessions = 4
	db.SetMaxOpenConns(sessions)
	db.SetMaxIdleConns(sessions)
	mustExec(t, ctx, cluster.Primary(), `DROP TABLE IF EXISTS ddl_t; CREATE TABLE ddl_t (id int PRIMARY KEY, v int);
		INSERT INTO ddl_t SELECT g, 0 FROM generate_series(1, 8) g`)
	replicated(t, ctx)
	const q = "SELECT * FROM ddl_t WHERE id >= $1"
	// Replica reads that need none of the connector's writes run through
	// pgx's statement cache on the replica connections.
	noWrites := pgrouted.NewSession()
	onReplica := pgrouted.WithSession(pgrouted.WithRoute(ctx, pgrouted.Replica), noWrites)
	onPrimary := pgrouted.WithRoute(ctx, pgrouted.Primary)
	conns := make([]*sql.Conn, sessions)
	for i := range conns {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	// use runs q on every session: on the primary and on the replicas,
	// outside and inside a transaction; shape is what every read must see.
	use := func(step, shape string) {
		t.Helper()
		for i, c := range conns {
			for j, rctx := range []context.Context{onPrimary, onReplica, onReplica, onReplica} {
				rows, err := c.QueryContext(rctx, q, 0)
				if err != nil {
					t.Fatalf("%s: session %d read %d: %v", step, i, j, err)
				}
				if got, err := shapeOf(rows); err != nil || got != shape {
					t.Fatalf("%s: session %d read %d: %q, %v; want %s", step, i, j, got, err, shape)
				}
			}
			if err := migrationLikeTx(ctx, c, q); err != nil {
				t.Fatalf("%s: session %d transaction: %v", step, i, err)
			}
		}
	}
	use("cached", "id:int4,v:int4")
	before := len(rec.snapshot())
	if _, err := conns[0].ExecContext(ctx, "ALTER TABLE ddl_t ADD COLUMN b text"); err != nil {
		t.Fatal(err)
	}
	replicated(t, ctx)
	use("after ADD COLUMN", "id:int4,v:int4,b:text")
	tx, err := conns[1].BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "ALTER TABLE ddl_t ALTER COLUMN v TYPE bigint"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	replicated(t, ctx)
	use("after ALTER COLUMN TYPE in a transaction", "id:int4,v:int8,b:text")
	for _, e := range rec.snapshot()[before:] {
		if e.Query == q && (e.Retried || e.Err != nil) {
			t.Errorf("after DDL through the driver, %s on %s: retried %v, error %v; want it prepared afresh", e.Query, e.Endpoint, e.Retried, e.Err)
		}
	}
}

// migrationLikeTx runs q in a transaction on c, twice.
func migrationLikeTx(ctx context.Context, c *sql.Conn, q string) error {
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for range 2 {
		rows, err := tx.QueryContext(ctx, q, 0)
		if err != nil {
			return err
		}
		if _, err := shapeOf(rows); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// TestRetypedParameterOfAPipelinedWrite: an autocommit write sent through
// the pipelined write path with the parameter types of a cached
// description, after another process retyped the column (text to integer:
// 42804 from the server), is described again and sent once more: it
// succeeds, and its event says it ran again. A read comparing a retyped
// column with a parameter (42883) does the same on every route.
func TestRetypedParameterOfAPipelinedWrite(t *testing.T) {
	ctx := testCtx(t)
	db, _, rec := open(t)
	p := cluster.Primary()
	mustExec(t, ctx, p, `DROP TABLE IF EXISTS retype_t; CREATE TABLE retype_t (id int PRIMARY KEY, v text, code text);
		INSERT INTO retype_t VALUES (1, '0', '7')`)
	replicated(t, ctx)
	const upd = "UPDATE retype_t SET v = $2 WHERE id = $1"
	const sel = "SELECT id FROM retype_t WHERE code = $1"
	noWrites := pgrouted.NewSession()
	reads := map[string]context.Context{
		"primary": pgrouted.WithRoute(ctx, pgrouted.Primary),
		"replica": pgrouted.WithSession(pgrouted.WithRoute(ctx, pgrouted.Replica), noWrites),
		"checked": ctx, // on a replica, checked in the pipeline with the read
	}
	run := func(step string) []pgrouted.RouteEvent {
		t.Helper()
		before := len(rec.snapshot())
		if _, err := db.ExecContext(ctx, upd, 1, "5"); err != nil {
			t.Fatalf("%s: the write: %v", step, err)
		}
		for name, rctx := range reads {
			var id int
			if err := db.QueryRowContext(rctx, sel, "7").Scan(&id); err != nil {
				t.Fatalf("%s: the %s read: %v", step, name, err)
			}
		}
		return rec.snapshot()[before:]
	}
	run("described")
	mustExec(t, ctx, p, "ALTER TABLE retype_t ALTER COLUMN v TYPE int USING v::int, ALTER COLUMN code TYPE int USING code::int")
	replicated(t, ctx)
	evs := run("after the retype")
	var v int
	if err := p.QueryRow(ctx, "SELECT v FROM retype_t WHERE id = 1", nil, &v); err != nil || v != 5 {
		t.Fatalf("after the retype, v = %d, %v; want 5", v, err)
	}
	for _, e := range evs {
		if e.Query == upd && (!e.Retried || !e.Primary) {
			t.Errorf("the write after the retype: retried %v on the primary %v; want it sent again on the primary", e.Retried, e.Primary)
		}
	}
}
