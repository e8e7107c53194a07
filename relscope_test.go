//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// delayReplicas makes each replica's stream of WAL arrive late: the first
// by delays[0], the next by delays[1] (the last delay for the rest).
func delayReplicas(t *testing.T, delays ...time.Duration) {
	t.Helper()
	for i, r := range cluster.Replicas() {
		if err := r.ReplicationFault().Latency(delays[min(i, len(delays)-1)]); err != nil {
			t.Fatal(err)
		}
	}
}

// waitRelationScope waits until a read of products right after a write to
// orders would go to a replica without a check: the catalog's relations
// are known, and the write counts for orders only.
func waitRelationScope(t *testing.T, ctx context.Context, db *sql.DB, conn *pgrouted.Connector, write, read string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		if _, err := db.ExecContext(ctx, write, args...); err != nil {
			t.Fatal(err)
		}
		d, err := conn.Explain(ctx, read)
		if err == nil && !d.Primary && d.Reason == pgrouted.ReasonReplica {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a read of another relation right after a write: %+v, %v; want a replica", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRelationScopeConservative: with replicas 20 ms behind, a read right
// after a write sees it in every case the text alone does not tell: a
// trigger writing another table, a view over the written table, a
// cascading delete read from the child, a function that writes, a writable
// CTE, a rule DO ALSO, a partition written through its parent and the
// parent read after a write to the partition, a schema-qualified write
// read back unqualified through search_path. And a read of a relation
// nobody wrote right after such writes goes to a replica: the scope is
// not the whole process.
func TestRelationScopeConservative(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), `DROP SCHEMA IF EXISTS rs CASCADE; CREATE SCHEMA rs;
CREATE TABLE rs.src (id int); CREATE TABLE rs.dst (id int);
CREATE FUNCTION rs.copy_row() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN INSERT INTO rs.dst VALUES (NEW.id); RETURN NEW; END$$;
CREATE TRIGGER copy AFTER INSERT ON rs.src FOR EACH ROW EXECUTE FUNCTION rs.copy_row();
CREATE TABLE rs.base_t (id int); CREATE VIEW rs.base_v AS SELECT * FROM rs.base_t;
CREATE TABLE rs.parent_t (id int PRIMARY KEY); CREATE TABLE rs.child_t (pid int REFERENCES rs.parent_t ON DELETE CASCADE);
INSERT INTO rs.parent_t SELECT g FROM generate_series(1, 15) g; INSERT INTO rs.child_t SELECT g FROM generate_series(1, 15) g;
CREATE TABLE rs.fn_t (id int);
CREATE FUNCTION rs.write_fn(i int) RETURNS int LANGUAGE sql VOLATILE AS 'INSERT INTO rs.fn_t VALUES (i) RETURNING i';
CREATE TABLE rs.cte_a (id int); CREATE TABLE rs.cte_b (id int);
CREATE TABLE rs.ruled (id int); CREATE TABLE rs.rule_log (id int);
CREATE RULE log AS ON INSERT TO rs.ruled DO ALSO INSERT INTO rs.rule_log VALUES (NEW.id);
CREATE TABLE rs.meas (id int, k int) PARTITION BY LIST (k); CREATE TABLE rs.meas_1 PARTITION OF rs.meas FOR VALUES IN (1);
CREATE TABLE rs.qual (id int);
CREATE TABLE rs.untouched (id int); INSERT INTO rs.untouched VALUES (1)`)
	replicated(t, ctx)
	db, conn, rec := openDSN(t, cluster.DSN()+"&search_path=rs&pgrouted_write_functions=rs.write_fn&pgrouted_names="+names(), nil)
	// The catalog read at start knows the schema: a write to one table
	// leaves a read of another on a replica.
	waitRelationScope(t, ctx, db, conn, "INSERT INTO rs.qual VALUES (0)", "SELECT count(*) FROM rs.untouched")
	delayReplicas(t, 20*time.Millisecond)

	type step struct{ write, read string }
	cases := []struct {
		name  string
		steps []step
		want  []int // the count each step's read must find
	}{
		{"trigger", []step{{"INSERT INTO rs.src VALUES ($1)", "SELECT count(*) FROM rs.dst WHERE id = $1"}}, []int{1}},
		{"view", []step{{"INSERT INTO rs.base_t VALUES ($1)", "SELECT count(*) FROM rs.base_v WHERE id = $1"}}, []int{1}},
		{"cascade", []step{{"DELETE FROM rs.parent_t WHERE id = $1", "SELECT count(*) FROM rs.child_t WHERE pid = $1"}}, []int{0}},
		{"writable-cte", []step{{"WITH a AS (INSERT INTO rs.cte_a VALUES ($1)) INSERT INTO rs.cte_b VALUES ($1)", "SELECT count(*) FROM rs.cte_a WHERE id = $1"}}, []int{1}},
		{"rule", []step{{"INSERT INTO rs.ruled VALUES ($1)", "SELECT count(*) FROM rs.rule_log WHERE id = $1"}}, []int{1}},
		{"partition-through-parent", []step{{"INSERT INTO rs.meas VALUES ($1, 1)", "SELECT count(*) FROM rs.meas_1 WHERE id = $1"}}, []int{1}},
		{"parent-after-partition", []step{{"INSERT INTO rs.meas_1 VALUES ($1 + 1000, 1)", "SELECT count(*) FROM rs.meas WHERE id = $1 + 1000"}}, []int{1}},
		{"search-path", []step{{"INSERT INTO rs.qual VALUES ($1)", "SELECT count(*) FROM qual WHERE id = $1"}}, []int{1}},
		// A function configured as a write (pgrouted_write_functions): it
		// runs on the primary without pinning the connection there.
		{"function", []step{{"SELECT rs.write_fn($1)", "SELECT count(*) FROM rs.fn_t WHERE id = $1"}}, []int{1}},
	}
	// A read of a table nobody wrote, right after a write to another: on
	// a replica.
	for range 5 {
		if _, err := db.ExecContext(ctx, "INSERT INTO rs.qual VALUES (-1)"); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM rs.untouched WHERE id = 1").Scan(&n); err != nil || n != 1 {
			t.Fatalf("untouched: %d, %v", n, err)
		}
		if e := lastEvent(t, rec, "SELECT count(*) FROM rs.untouched WHERE id = 1"); e.Primary {
			t.Fatalf("a read of an untouched table right after a write to another ran on the primary: %+v", e.Decision)
		}
	}
	const rounds = 15
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The cases before it wrote for every relation: once the
			// replicas hold those writes, a read of an untouched table
			// needs nothing, so that this case's reads depend on its own
			// writes alone.
			deadline := time.Now().Add(45 * time.Second)
			for {
				d, err := conn.Explain(ctx, "SELECT count(*) FROM rs.untouched")
				if err == nil && !d.Primary && d.Reason == pgrouted.ReasonReplica {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("a read of an untouched table: %+v, %v; want a replica", d, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			stale, onReplica := 0, 0
			for i := 1; i <= rounds; i++ {
				for j, s := range tc.steps {
					if _, err := db.ExecContext(ctx, s.write, i); err != nil {
						t.Fatal(err)
					}
					var n int
					if err := db.QueryRowContext(ctx, s.read, i).Scan(&n); err != nil {
						t.Fatal(err)
					}
					if !lastEvent(t, rec, s.read).Primary {
						onReplica++
					}
					if n != tc.want[j] {
						stale++
						t.Errorf("round %d: %q right after %q found %d, want %d", i, s.read, s.write, n, tc.want[j])
					}
				}
			}
			t.Logf("%d of %d reads on replicas", onReplica, rounds*len(tc.steps))
			if stale > 0 {
				t.Fatalf("%d stale reads in %d rounds", stale, rounds)
			}
		})
	}
}

// mixedRounds is how many rounds TestMixedTablesService measures the
// replicas' share on (about 5 s with -race on a 2-core machine that other
// tests load, 1 s without; it ran 5 s before, and wanted at least 40
// rounds in them),
// mixedDeadline how long they may take before the test fails with what it
// counted.
const (
	mixedRounds   = 1000
	mixedDeadline = 2 * time.Minute
)

// TestMixedTablesService: the service of the issue that scoped
// read-your-writes by relation, with the DSN's defaults: 8 users each
// write an order, read it back at once, then read 4 products (a table
// nobody writes), while the replicas replay 15 and 40 ms behind, for
// mixedRounds rounds in all (however long they take). Every read-back
// finds its order; at least 75% of all reads run on replicas, and nearly
// every products read.
func TestMixedTablesService(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), `DROP TABLE IF EXISTS mx_orders, mx_products;
CREATE TABLE mx_orders (id bigserial PRIMARY KEY, user_id int, v int);
CREATE TABLE mx_products (id int PRIMARY KEY, name text);
INSERT INTO mx_products SELECT g, 'p' || g FROM generate_series(1, 100) g`)
	replicated(t, ctx)
	db, conn, rec := openDSN(t, cluster.DSN()+"&pgrouted_names="+names(), nil)
	const (
		write    = "INSERT INTO mx_orders (user_id, v) VALUES ($1, $2) RETURNING id"
		readBack = "SELECT v FROM mx_orders WHERE id = $1"
		product  = "SELECT name FROM mx_products WHERE id = $1"
	)
	waitRelationScope(t, ctx, db, conn, "INSERT INTO mx_orders (user_id, v) VALUES (0, 0)", product)
	delayReplicas(t, 15*time.Millisecond, 40*time.Millisecond)
	db.SetMaxOpenConns(16)
	// rounds counts the rounds begun, done those that ended.
	var stale, errs, rounds, done atomic.Int64
	var firstErr atomic.Value
	began := time.Now()
	deadline := began.Add(mixedDeadline)
	var wg sync.WaitGroup
	for u := range 8 {
		wg.Go(func() {
			for i := 0; rounds.Add(1) <= mixedRounds && time.Now().Before(deadline); i++ {
				v := u*1_000_000 + i
				var id int64
				if err := db.QueryRowContext(ctx, write, u, v).Scan(&id); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err)
					return
				}
				var got int
				err := db.QueryRowContext(ctx, readBack, id).Scan(&got)
				switch {
				case errors.Is(err, sql.ErrNoRows):
					stale.Add(1)
				case err != nil:
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err)
				case got != v:
					stale.Add(1)
				}
				for k := range 4 {
					var name string
					if err := db.QueryRowContext(ctx, product, 1+(i*4+k)%100).Scan(&name); err != nil {
						errs.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	var reads, onReplica, products, productsOnReplica int
	for _, e := range rec.snapshot() {
		if e.Op != pgrouted.OpRead || (e.Query != readBack && e.Query != product) {
			continue
		}
		reads++
		if !e.Primary {
			onReplica++
		}
		if e.Query == product {
			products++
			if !e.Primary {
				productsOnReplica++
			}
		}
	}
	share := float64(onReplica) / float64(max(reads, 1))
	took := time.Since(began).Round(100 * time.Millisecond)
	t.Logf("%d rounds in %s: %d of %d reads on replicas (%.1f%%), products %d of %d; stale %d, errors %d",
		done.Load(), took, onReplica, reads, 100*share, productsOnReplica, products, stale.Load(), errs.Load())
	if stale.Load() != 0 || errs.Load() != 0 {
		t.Fatalf("%d stale read-backs, %d errors (first: %v)", stale.Load(), errs.Load(), firstErr.Load())
	}
	if done.Load() < mixedRounds {
		t.Fatalf("only %d rounds of %d in %s (deadline %s): too few to measure", done.Load(), mixedRounds, took, mixedDeadline)
	}
	if share < 0.75 {
		t.Fatalf("replicas served %.1f%% of the reads, want at least 75%%", 100*share)
	}
	if p := float64(productsOnReplica) / float64(max(products, 1)); p < 0.9 {
		t.Fatalf("replicas served %.1f%% of the products reads, want nearly all (90%%)", 100*p)
	}
}

// TestProcessScopeIsSaid: a process whose reads without a Session wait for
// every request's writes (here: reads of the table all of them write, the
// replicas 40 ms behind) counts those reads (Stats.ProcessScopeReads) and
// says once in the log why the replicas sit idle and what to do; with a
// Session per user, none count.
func TestProcessScopeIsSaid(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS ps_t; CREATE TABLE ps_t (id bigserial PRIMARY KEY, u int)")
	replicated(t, ctx)
	logs := &syncBuffer{}
	db, conn, _ := openDSN(t, cluster.DSN()+"&pgrouted_names="+names(), func(c *pgrouted.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	waitRelationScope(t, ctx, db, conn, "INSERT INTO ps_t (u) VALUES (0)", "SELECT 1")
	delayReplicas(t, 40*time.Millisecond)
	run := func(session bool) {
		t.Helper()
		var wg sync.WaitGroup
		for u := range 4 {
			wg.Go(func() {
				c := ctx
				if session {
					c = pgrouted.WithSession(ctx, pgrouted.NewSession())
				}
				for range 300 {
					if _, err := db.ExecContext(c, "INSERT INTO ps_t (u) VALUES ($1)", u); err != nil {
						t.Error(err)
						return
					}
					var n int
					if err := db.QueryRowContext(c, "SELECT count(*) FROM ps_t WHERE u = $1", u).Scan(&n); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	run(false)
	blocked := conn.Stats().ProcessScopeReads
	if blocked < 600 {
		t.Fatalf("%d of 1200 reads without a Session counted as waiting for the process's writes, want most", blocked)
	}
	if n := strings.Count(logs.String(), "most reads without a Session"); n != 1 {
		t.Fatalf("the log said it %d times, want once:\n%s", n, logs.String())
	}
	run(true)
	if got := conn.Stats().ProcessScopeReads; got != blocked {
		t.Fatalf("reads with a Session counted: %d more", got-blocked)
	}
}
