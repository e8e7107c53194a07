//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// shapeOf reads every row of rows and returns its columns as
// "name:type" pairs.
func shapeOf(rows *sql.Rows) (string, error) {
	defer rows.Close()
	cts, err := rows.ColumnTypes()
	if err != nil {
		return "", err
	}
	var s []string
	for _, ct := range cts {
		s = append(s, ct.Name()+":"+strings.ToLower(ct.DatabaseTypeName()))
	}
	vals := make([]any, len(cts))
	ptrs := make([]any, len(cts))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return "", err
		}
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	return strings.Join(s, ","), rows.Close()
}

// TestSchemaChangesUnderReaders: readers on the replicas and on the
// primary run SELECT * and prepared statements, and a writer runs
// INSERT … RETURNING * through the driver, while another connection adds,
// retypes and drops columns and drops and recreates the table. No
// statement outside a transaction fails (a stale cached statement or
// description is dropped and the statement runs once more), and once the
// replicas have replayed a change, reads on every route see the new shape.
func TestSchemaChangesUnderReaders(t *testing.T) {
	ctx := testCtx(t)
	db, _, _ := open(t)
	p := cluster.Primary()
	mustExec(t, ctx, p, `DROP TABLE IF EXISTS schema_t; CREATE TABLE schema_t (id int PRIMARY KEY, a int, b text);
		INSERT INTO schema_t SELECT g, g, 'x' FROM generate_series(1, 3) g`)
	replicated(t, ctx)

	stmt, err := db.PrepareContext(ctx, "SELECT * FROM schema_t WHERE id >= $1")
	if err != nil {
		t.Fatal(err)
	}
	defer stmt.Close()

	routes := []pgrouted.Route{pgrouted.Auto, pgrouted.Primary, pgrouted.Replica}
	// read runs form i of the reads on route.
	// Reads forced to a replica need none of the writer's writes (a
	// Session without writes): they would otherwise fail while the
	// replicas replay them. The others need all of them, so that they
	// check their replica's position in the pipeline with the read.
	noWrites := pgrouted.NewSession()
	read := func(ctx context.Context, i int, route pgrouted.Route) (string, error) {
		ctx = pgrouted.WithRoute(ctx, route)
		if route == pgrouted.Replica {
			ctx = pgrouted.WithSession(ctx, noWrites)
		}
		var rows *sql.Rows
		var err error
		switch i % 3 {
		case 0:
			rows, err = db.QueryContext(ctx, "SELECT * FROM schema_t WHERE id >= $1", 0)
		case 1:
			rows, err = db.QueryContext(ctx, "SELECT * FROM schema_t")
		default:
			rows, err = stmt.QueryContext(ctx, 0)
		}
		if err != nil {
			return "", err
		}
		return shapeOf(rows)
	}

	var (
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		errMu    sync.Mutex
		errs     []string
		nerrs    atomic.Int64
		progress = make([]atomic.Int64, 5)
	)
	fail := func(who string, err error) {
		nerrs.Add(1)
		errMu.Lock()
		if len(errs) < 10 {
			errs = append(errs, who+": "+err.Error())
		}
		errMu.Unlock()
	}
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				route := routes[(i/3+r)%len(routes)]
				if _, err := read(ctx, i, route); err != nil {
					fail(fmt.Sprintf("reader %d (%v, form %d)", r, route, i%3), err)
				}
				progress[r].Add(1)
			}
		}()
	}
	// The writer's statements go through the pipelined paths, with the
	// connector's cached descriptions, and make reads check their replica.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1000; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			rows, err := db.QueryContext(ctx, "INSERT INTO schema_t (id) VALUES ($1) ON CONFLICT DO NOTHING RETURNING *", i)
			if err == nil {
				_, err = shapeOf(rows)
			}
			if err != nil {
				fail("writer", err)
			}
			progress[4].Add(1)
		}
	}()
	stopAll := func() {
		select {
		case <-stop:
		default:
			close(stop)
			wg.Wait()
		}
	}
	defer stopAll()

	// settle waits until every reader and the writer ran two more
	// statements.
	settle := func(step string) {
		var want [5]int64
		for i := range progress {
			want[i] = progress[i].Load() + 2
		}
		deadline := time.Now().Add(time.Minute)
		for i := range progress {
			for progress[i].Load() < want[i] {
				if time.Now().After(deadline) {
					t.Fatalf("after %s: goroutine %d made no progress in a minute", step, i)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}

	type step struct{ ddl, shape string }
	var steps []step
	cols := []string{"id:int4", "a:int4", "b:text"}
	shape := func(f func(c string) string) string {
		var out []string
		for _, c := range cols {
			if c = f(c); c != "" {
				out = append(out, c)
			}
		}
		cols = out
		return strings.Join(cols, ",")
	}
	same := func(c string) string { return c }
	for c := 0; c < 3; c++ {
		add := fmt.Sprintf("c%d:int4", c)
		cols = append(cols, add)
		steps = append(steps, step{fmt.Sprintf("ALTER TABLE schema_t ADD COLUMN c%d int DEFAULT 7", c), shape(same)})
		steps = append(steps, step{"ALTER TABLE schema_t ALTER COLUMN a TYPE text USING a::text", shape(func(c string) string {
			if c == "a:int4" {
				return "a:text"
			}
			return c
		})})
		steps = append(steps, step{"ALTER TABLE schema_t DROP COLUMN b", shape(func(c string) string {
			if c == "b:text" {
				return ""
			}
			return c
		})})
		cols = []string{"id:int4", "a:int4", "b:text", fmt.Sprintf("d%d:bool", c)}
		steps = append(steps, step{fmt.Sprintf(`BEGIN; DROP TABLE schema_t; CREATE TABLE schema_t (id int PRIMARY KEY, a int, b text, d%d bool);
				INSERT INTO schema_t SELECT g, g, 'y', true FROM generate_series(1, 3) g; COMMIT`, c), shape(same)})
	}
	settle("start")
	for _, s := range steps {
		mustExec(t, ctx, p, s.ddl)
		replicated(t, ctx)
		settle(s.ddl)
		for _, route := range routes {
			for form := 0; form < 3; form++ {
				got, err := read(ctx, form, route)
				if err != nil {
					t.Errorf("after %q, read form %d on %v: %v", s.ddl, form, route, err)
				} else if got != s.shape {
					t.Errorf("after %q, read form %d on %v: shape %s, want %s", s.ddl, form, route, got, s.shape)
				}
			}
		}
		if t.Failed() {
			break
		}
	}
	stopAll()
	for i := range progress {
		if progress[i].Load() < int64(2*len(steps)) {
			t.Errorf("goroutine %d ran only %d statements", i, progress[i].Load())
		}
	}
	if n := nerrs.Load(); n != 0 {
		t.Errorf("%d statements outside transactions failed during schema changes, first ones:\n%s", n, strings.Join(errs, "\n"))
	}
}

// TestStaleStatementInTransaction: inside a transaction a statement whose
// cached description a schema change made elsewhere made stale is refused
// by the server, rolled back to the savepoint sent with it, described
// afresh and run again: the transaction goes on (its earlier write is
// kept) and commits, and the event says the statement ran again.
func TestStaleStatementInTransaction(t *testing.T) {
	ctx := testCtx(t)
	db, _, rec := open(t)
	const q = "SELECT * FROM stale_tx WHERE id >= $1"
	c := staleInTx(t, ctx, db, "stale_tx", q, nil)
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO stale_tx (id, a) VALUES ($1, $1)", 2); err != nil {
		t.Fatal(err)
	}
	got, err := shapeOf(queryOK(t)(tx.QueryContext(ctx, q, 0)))
	if err != nil || got != "id:int4,a:int4,b:text" {
		t.Fatalf("in a transaction, a stale statement: %q, %v; want the new shape", got, err)
	}
	if ev := lastOf(rec, q); !ev.Retried || ev.Err != nil {
		t.Errorf("the stale statement's event: Retried %v, Err %v; want it run again without error", ev.Retried, ev.Err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(pgrouted.WithRoute(ctx, pgrouted.Primary), "SELECT count(*) FROM stale_tx").Scan(&n); err != nil || n != 2 {
		t.Fatalf("after the commit: %d rows, %v; want 2 (the write before the stale statement kept)", n, err)
	}
}

// TestStaleFirstStatementInTransaction: a transaction's first statement,
// whose cached description a schema change made elsewhere made stale, is
// sent without a savepoint (txstale.go); refused by the server, it ends
// the transaction, which is begun again with the same options (nothing
// else ran in it), and runs again described afresh: the transaction goes
// on, at its isolation level, and commits.
func TestStaleFirstStatementInTransaction(t *testing.T) {
	ctx := testCtx(t)
	db, _, rec := open(t)
	const q = "SELECT * FROM stale_first WHERE id >= $1"
	opts := &sql.TxOptions{Isolation: sql.LevelRepeatableRead}
	c := staleInTx(t, ctx, db, "stale_first", q, opts)
	tx, err := c.BeginTx(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	got, err := shapeOf(queryOK(t)(tx.QueryContext(ctx, q, 0)))
	if err != nil || got != "id:int4,a:int4,b:text" {
		t.Fatalf("a stale first statement: %q, %v; want the new shape", got, err)
	}
	if ev := lastOf(rec, q); !ev.Retried || ev.Err != nil {
		t.Errorf("the stale statement's event: Retried %v, Err %v; want it run again without error", ev.Retried, ev.Err)
	}
	var iso string
	if err := tx.QueryRowContext(ctx, "SHOW transaction_isolation").Scan(&iso); err != nil || iso != "repeatable read" {
		t.Fatalf("the transaction begun again: isolation %q, %v; want repeatable read", iso, err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO stale_first (id, a) VALUES ($1, $1)", 2); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(pgrouted.WithRoute(ctx, pgrouted.Primary), "SELECT count(*) FROM stale_first").Scan(&n); err != nil || n != 2 {
		t.Fatalf("after the commit: %d rows, %v; want 2", n, err)
	}
}

// staleInTx makes table (id int, a int) with one row, runs q on a
// connection of db inside a transaction begun with opts (which describes
// and caches it), commits, and adds a column b text to table: q's cached
// description is stale for the transactions the connection begins next.
// The connection is closed when the test ends.
func staleInTx(t *testing.T, ctx context.Context, db *sql.DB, table, q string, opts *sql.TxOptions) *sql.Conn {
	t.Helper()
	p := cluster.Primary()
	mustExec(t, ctx, p, "DROP TABLE IF EXISTS "+table+"; CREATE TABLE "+table+" (id int, a int); INSERT INTO "+table+" VALUES (1, 1)")
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tx, err := c.BeginTx(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shapeOf(queryOK(t)(tx.QueryContext(ctx, q, 0))); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, p, "ALTER TABLE "+table+" ADD COLUMN b text")
	return c
}

// lastOf is the last event rec recorded for query (zero when none).
func lastOf(rec *routes, query string) pgrouted.RouteEvent {
	var ev pgrouted.RouteEvent
	for _, e := range rec.snapshot() {
		if e.Query == query {
			ev = e
		}
	}
	return ev
}

// queryOK fails the test on a query's error.
func queryOK(t *testing.T) func(*sql.Rows, error) *sql.Rows {
	return func(rows *sql.Rows, err error) *sql.Rows {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
}

// TestDescriptionsFollowSearchPath: a connection that set its search_path
// does not share statement descriptions with the others: the same text
// names another table there.
func TestDescriptionsFollowSearchPath(t *testing.T) {
	ctx := testCtx(t)
	db, _, _ := open(t)
	mustExec(t, ctx, cluster.Primary(), `DROP SCHEMA IF EXISTS sp_other CASCADE; CREATE SCHEMA sp_other;
		DROP TABLE IF EXISTS sp_t; CREATE TABLE sp_t (v int);
		CREATE TABLE sp_other.sp_t (v text, w text DEFAULT 'w')`)
	a, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := a.ExecContext(ctx, "SET search_path TO sp_other"); err != nil {
		t.Fatal(err)
	}
	const ins = "INSERT INTO sp_t (v) VALUES ($1) RETURNING *"
	for i, step := range []struct {
		c     *sql.Conn
		arg   any
		shape string
	}{
		{a, "text", "v:text,w:text"},
		{b, 5, "v:int4"},
		{a, "again", "v:text,w:text"},
		{b, 6, "v:int4"},
	} {
		rows, err := step.c.QueryContext(ctx, ins, step.arg)
		if err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
		if got, err := shapeOf(rows); err != nil || got != step.shape {
			t.Fatalf("insert %d: %q, %v; want %s", i, got, err, step.shape)
		}
	}
}

// TestCheckedReadOfAStaleDescription: a read checked on its replica in the
// same pipeline, sent with a description a schema change made stale, runs
// again on the same borrowed connection, and its rows hold that
// connection until they are closed.
func TestCheckedReadOfAStaleDescription(t *testing.T) {
	// The writes are a Session's, so that each read checks at once
	// (ReasonDeferred otherwise, after a few).
	ctx := pgrouted.WithSession(testCtx(t), pgrouted.NewSession())
	// Probes far apart: right after a write, only the check can tell.
	db, conn, rec := openDSN(t, cluster.DSN()+"&pgrouted_names="+names()+"&pgrouted_probe_interval=5s&pgrouted_latency_window=off&pgrouted_replica_max_conns=1", nil)
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS stale_checked; CREATE TABLE stale_checked (id int PRIMARY KEY, a int)"); err != nil {
		t.Fatal(err)
	}
	const q = "SELECT * FROM stale_checked WHERE id >= $1"
	cols := "id:int4,a:int4"
	exercised := 0
	for i := 0; i < 8 && exercised < 2; i++ {
		if _, err := db.ExecContext(ctx, "INSERT INTO stale_checked (id, a) VALUES ($1, $1)", i); err != nil {
			t.Fatal(err)
		}
		replicated(t, ctx)
		rows, err := db.QueryContext(ctx, q, 0)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		ev := lastRead(t, rec)
		if !ev.Primary && ev.Reason == pgrouted.ReasonCheck && ev.Retried {
			exercised++
			for _, h := range conn.Topology().Hosts {
				if h.Name == ev.Endpoint && (h.InflightReads != 1 || h.Pool.AcquiredConns != 1) {
					t.Errorf("read %d on %s, rows open: %d reads in flight, %d connections acquired; want 1 and 1", i, h.Name, h.InflightReads, h.Pool.AcquiredConns)
				}
			}
		}
		if got, err := shapeOf(rows); err != nil || got != cols {
			t.Fatalf("read %d: %q, %v; want %s", i, got, err, cols)
		}
		// Made elsewhere: the connector's descriptions do not know.
		mustExec(t, ctx, cluster.Primary(), fmt.Sprintf("ALTER TABLE stale_checked ADD COLUMN c%d int", i))
		cols += fmt.Sprintf(",c%d:int4", i)
	}
	if exercised == 0 {
		t.Fatal("no checked replica read ran again after a stale description: the test did not exercise it")
	}
	// Run again on the same replica after a stale description: not a
	// replica's failure.
	if got := conn.Stats().ReplicaRetries; got != 0 {
		t.Errorf("Stats.ReplicaRetries = %d after reads that ran again on their replica, want 0", got)
	}
}
