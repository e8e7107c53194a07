//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/testcluster"
)

// These tests run pgrouted through a PgBouncer in transaction pooling mode
// in front of each node of the package's cluster, as many deployments do.

var (
	bouncersOnce sync.Once
	bouncersErr  error
	txBouncers   *testcluster.Poolers
)

// bouncers returns the package's transaction-mode poolers, one in front of
// each node, started on first use and stopped with the cluster. A missing
// pgbouncer fails the test with the command that installs it.
func bouncers(t testing.TB) *testcluster.Poolers {
	t.Helper()
	bouncersOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		txBouncers, bouncersErr = cluster.StartPoolers(ctx, testcluster.PoolTransaction)
	})
	if bouncersErr != nil {
		t.Fatal(bouncersErr)
	}
	return txBouncers
}

// openPooled opens pgrouted's driver on the transaction poolers, with
// extra DSN parameters and a log buffer, as openPooledClient does.
func openPooled(t testing.TB, extra ...string) (*sql.DB, *pgrouted.Connector, *routes, *syncBuffer) {
	t.Helper()
	c, conn, rec, logs := openPooledClient(t, openSQLClientDSN, extra...)
	return c.(sqlClient).DB, conn, rec, logs
}

// openPooledClient opens a client (by open: the driver or the Pool) on the
// transaction poolers, with extra DSN parameters and a log buffer, and
// waits until every host's probe has seen its pooler.
func openPooledClient(t testing.TB, open dsnOpener, extra ...string) (client, *pgrouted.Connector, *routes, *syncBuffer) {
	t.Helper()
	dsn := bouncers(t).DSN() + "&pgrouted_probe_interval=100ms&pgrouted_lease=5s&pgrouted_write_timeout=20s&pgrouted_names=" + names()
	for _, e := range extra {
		dsn += "&" + e
	}
	logs := &syncBuffer{}
	db, conn, rec := open(t, dsn, func(cfg *pgrouted.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	replicasReady(t, conn) // every host probed, not just one replica
	for _, h := range conn.Topology().Hosts {
		if !h.Pooler {
			t.Fatalf("%s: the probes do not see the PgBouncer in front of it: %+v", h.Name, h)
		}
	}
	return db, conn, rec, logs
}

// TestPooledFreshWhileWALIsUnflushed: the pooler tests open connectors on
// the default staleness budget (30 s) one after the other, on a primary a
// previous test may have left holding WAL it has not flushed: a read that
// set hint bits (wal_log_hints) and rolled back, an autovacuum cancelled by
// a DROP TABLE. PostgreSQL flushes that WAL only at the next commit or at
// its background writer's next standby snapshot, up to 15 s later; until
// then the primary's insert position is past what any standby can replay.
// A connector opened then must still prove the caught-up replicas fresh
// (by transaction IDs) and send reads to them at once, not after 15 s.
func TestPooledFreshWhileWALIsUnflushed(t *testing.T) {
	ctx := testCtx(t)
	primary := cluster.Primary()
	c, err := primary.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	// unflushed is how many bytes of WAL the primary holds unflushed before
	// position insert (none when not positive; a page header is not a
	// record).
	unflushed := func(insert string) (n int64) {
		if err := c.QueryRow(ctx, "SELECT pg_wal_lsn_diff($1::text::pg_lsn, pg_current_wal_flush_lsn())", insert).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Reads must go to a replica while that WAL is still unflushed. Each
	// attempt begins right after the background writer's standby snapshot
	// (waitStandbySnapshot), which would flush it, so that the next is
	// up to 15 s away; when something else flushes it while the connector
	// opens (a commit of autovacuum's), this attempt proves nothing, and
	// another runs, on a table of its own (the first one's hint bits are
	// set).
	//
	// Autovacuum is off while it runs: its commits, on this test's tables
	// or on those earlier tests of the process left, flushed the read's WAL
	// before the connector opened in all 5 attempts of a fresh-clone run
	// (the test in its fourth shard, after other tests' tables).
	mustExec(t, ctx, primary, "ALTER SYSTEM SET autovacuum = off")
	mustExec(t, ctx, primary, "SELECT pg_reload_conf()")
	t.Cleanup(func() {
		bg := context.Background()
		if err := primary.Exec(bg, "ALTER SYSTEM RESET autovacuum"); err != nil {
			t.Errorf("turn autovacuum back on: %v", err)
		}
		if err := primary.Exec(bg, "SELECT pg_reload_conf()"); err != nil {
			t.Errorf("turn autovacuum back on: %v", err)
		}
	})
	// walSince's, created before any attempt: its own records would
	// otherwise be the first it reports.
	_, walinspect := c.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_walinspect")
	const attempts = 5
	for attempt := 1; ; attempt++ {
		table := fmt.Sprintf("pgb_unflushed%d", attempt)
		// Dead rows that earlier tests' DDL left in the catalogs are
		// pruned by the connector's reads of them (Heap2 PRUNE), whose
		// pages, written out of the small shared buffers, flushed the
		// read's WAL before reads went to a replica (seen with
		// walSince): vacuumed first, no read prunes them.
		mustExec(t, ctx, primary, "VACUUM")
		mustExec(t, ctx, primary, "DROP TABLE IF EXISTS "+table+"; CREATE TABLE "+table+" AS SELECT i FROM generate_series(1, 2000) AS i")
		t.Cleanup(func() { primary.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
		var created string
		if err := c.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&created); err != nil {
			t.Fatal(err)
		}
		replicated(t, ctx)
		waitStandbySnapshot(t, ctx, c, created)
		// After a checkpoint, the first read of each page logs the page
		// to set its hint bits (wal_log_hints); the read rolls back, so
		// nothing asks for that WAL to be flushed.
		var beforeRead string
		for _, q := range []string{"CHECKPOINT", "BEGIN", "SELECT count(*) FROM " + table, "ROLLBACK"} {
			if q == "BEGIN" {
				if err := c.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&beforeRead); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		var insert string
		if err := c.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&insert); err != nil {
			t.Fatal(err)
		}
		if n := unflushed(insert); n < 64 {
			// Flushed already (a commit of autovacuum's, a standby
			// snapshot after all): this attempt proves nothing.
			t.Logf("attempt %d: the rolled-back read left %d bytes of WAL unflushed before %s: another attempt; %s", attempt, n, insert, walSince(t, ctx, c, beforeRead, walinspect))
			if attempt == attempts {
				t.Fatalf("in %d attempts, the primary flushed the read's WAL before a connector could open: the test proved nothing", attempts)
			}
			continue
		}
		// A connector on the default budget, measured until reads go to
		// a replica (waitReplicaRoute), not until the rest of what
		// openPooled waits for (its catalog's first read, every host's
		// probe): the WAL must still be unflushed when reads first go
		// to a replica, and a later wait only gives the primary time to
		// flush it.
		began := time.Now()
		cfg, err := pgrouted.ParseConfig(bouncers(t).DSN() + "&pgrouted_probe_interval=100ms&pgrouted_lease=5s&pgrouted_names=" + names())
		if err != nil {
			t.Fatal(err)
		}
		conn, err := pgrouted.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(conn)
		waitReplicaRoute(t, conn)
		took := time.Since(began)
		still := unflushed(insert)
		t.Logf("attempt %d: reads on a replica %s after opening; %d bytes before %s unflushed then", attempt, took.Round(time.Millisecond), still, insert)
		if still >= 64 {
			for _, h := range conn.Topology().Hosts {
				if h.Role == "standby" && h.LagBound == nil {
					t.Errorf("%s: no staleness bound while the primary holds unflushed WAL: %+v", h.Name, h)
				}
			}
			db.Close()
			return
		}
		t.Logf("attempt %d: flushed before reads went to a replica; %s", attempt, walSince(t, ctx, c, beforeRead, walinspect))
		if attempt == attempts {
			t.Fatalf("in %d attempts, reads went to a replica only once the primary had flushed its WAL (the last after %s)", attempts, took)
		}
		db.Close()
	}
}

// walSince says which WAL records the primary (c) flushed from position
// from on, other than the read's hint-bit images: what ended an attempt of
// TestPooledFreshWhileWALIsUnflushed (pg_walinspect, whose creation
// failed with created when not nil; a commit, a standby snapshot, a
// checkpoint).
func walSince(t *testing.T, ctx context.Context, c *pgx.Conn, from string, created error) string {
	t.Helper()
	if created != nil {
		return "pg_walinspect: " + created.Error()
	}
	rows, err := c.Query(ctx, `SELECT resource_manager || ' ' || record_type || coalesce(' xid ' || nullif(xid::text, '0'), '') || ' at ' || start_lsn::text
		FROM pg_get_wal_records_info($1::text::pg_lsn, pg_current_wal_flush_lsn())
		WHERE record_type <> 'FPI_FOR_HINT' ORDER BY start_lsn`, from)
	if err != nil {
		return "pg_walinspect: " + err.Error()
	}
	recs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "pg_walinspect: " + err.Error()
	}
	if len(recs) > 12 {
		recs = append(recs[:12], fmt.Sprintf("and %d more", len(recs)-12))
	}
	return fmt.Sprintf("WAL flushed since %s, hint-bit images aside: %s", from, strings.Join(recs, "; "))
}

// waitStandbySnapshot waits until the primary (c) flushed WAL past after,
// a position just after a commit: the background writer's standby snapshot
// (a RUNNING_XACTS record, which the WAL writer flushes within
// wal_writer_delay). The background writer logs one at most once in 15 s,
// and only after WAL that counts since its last (the commit's table): once
// it logged it, WAL a read inserts then stays unflushed for up to 15 s,
// where right after an idle period it would be flushed within a few
// hundred milliseconds, before a connector opening on a loaded machine
// could prove anything. It gives up after 40 s (another attempt follows).
func waitStandbySnapshot(t *testing.T, ctx context.Context, c *pgx.Conn, after string) {
	t.Helper()
	deadline := time.Now().Add(40 * time.Second)
	for {
		var flushed bool
		if err := c.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn() > $1::text::pg_lsn", after).Scan(&flushed); err != nil {
			t.Fatal(err)
		}
		if flushed {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("no WAL flushed past %s within 40 s: no standby snapshot seen", after)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runWorkload is the issue's: workers goroutines each insert a row and read it
// back, n times, through db. A read that does not find the row just
// written is stale. runReadBacks reads each row back readBacks times.
type workloadResult struct {
	ops, errs, stale    int64
	reads, replicaReads int64
	firstErrs           []string
	fallbacks           map[pgrouted.Reason]int // the reads on the primary, by reason
}

func runWorkload(t testing.TB, ctx context.Context, db *sql.DB, rec *routes, table string, workers, n int) workloadResult {
	t.Helper()
	return runReadBacks(t, ctx, db, rec, table, workers, n, 1)
}

func runReadBacks(t testing.TB, ctx context.Context, db *sql.DB, rec *routes, table string, workers, n, readBacks int) workloadResult {
	t.Helper()
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+table+" (id bigserial PRIMARY KEY, worker int NOT NULL, n int NOT NULL, v text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+table) })
	before := len(rec.snapshot())
	var res workloadResult
	var mu sync.Mutex
	fail := func(err error) {
		atomic.AddInt64(&res.errs, 1)
		mu.Lock()
		if len(res.firstErrs) < 5 {
			res.firstErrs = append(res.firstErrs, err.Error())
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				v := fmt.Sprintf("w%d-%d", w, i)
				atomic.AddInt64(&res.ops, 1+int64(readBacks))
				if _, err := db.ExecContext(ctx, "INSERT INTO "+table+" (worker, n, v) VALUES ($1, $2, $3)", w, i, v); err != nil {
					fail(err)
					continue
				}
				for range readBacks {
					var got string
					err := db.QueryRowContext(ctx, "SELECT v FROM "+table+" WHERE worker = $1 AND n = $2", w, i).Scan(&got)
					switch {
					case errors.Is(err, sql.ErrNoRows):
						atomic.AddInt64(&res.stale, 1)
					case err != nil:
						fail(err)
					case got != v:
						fail(fmt.Errorf("read %q, want %q", got, v))
					}
				}
			}
		}()
	}
	wg.Wait()
	res.fallbacks = map[pgrouted.Reason]int{}
	for _, e := range rec.snapshot()[before:] {
		if e.Op == pgrouted.OpRead && e.Err == nil {
			res.reads++
			if !e.Primary {
				res.replicaReads++
			} else {
				res.fallbacks[e.Reason]++
			}
		}
	}
	return res
}

// TestPooledRouting: through PgBouncer in transaction mode, a write runs on
// the primary, a read of it (once replicated) on a replica, as without the
// pooler; the probes see the pooler, and pgx's own statements use no named
// prepared statement there (a read that falls back to the primary, a DDL).
func TestPooledRouting(t *testing.T) {
	ctx := testCtx(t)
	db, conn, rec, logs := openPooled(t)
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS pgb_routing; CREATE TABLE pgb_routing (id int, v text)"); err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf("pgb-routing-%d", time.Now().UnixNano())
	if _, err := db.ExecContext(ctx, "INSERT INTO pgb_routing VALUES (1, $1) /* "+marker+"-w */", marker); err != nil {
		t.Fatal(err)
	}
	if on := ranOn(t, marker+"-w"); len(on) != 1 || on[0] != cluster.Primary().Name() {
		t.Fatalf("the write ran on %v, want the primary %s only", on, cluster.Primary().Name())
	}
	replicated(t, ctx)
	waitReplicaRoute(t, conn)
	var v string
	if err := db.QueryRowContext(ctx, "SELECT v FROM pgb_routing WHERE id = 1 /* "+marker+"-r */").Scan(&v); err != nil || v != marker {
		t.Fatalf("read back %q, %v; want %q", v, err, marker)
	}
	ev := lastRead(t, rec)
	on := ranOn(t, marker+"-r")
	if ev.Primary || len(on) != 1 || on[0] == cluster.Primary().Name() || on[0] != ev.Endpoint {
		t.Fatalf("the read ran on %v (event %+v), want one replica", on, ev.Decision)
	}
	// A read forced to the primary takes pgx's own path: behind the
	// pooler, as the unnamed statement, not one of pgx's named ones
	// (the server logs which: "execute <unnamed>" or "execute
	// stmtcache_…").
	for i := 0; i < 20; i++ {
		if err := db.QueryRowContext(pgrouted.WithRoute(ctx, pgrouted.Primary), "SELECT v FROM pgb_routing WHERE id = $1 /* "+marker+"-p */", 1).Scan(&v); err != nil {
			t.Fatalf("read on the primary through the pooler: %v", err)
		}
	}
	lines := logLines(t, cluster.Primary(), marker+"-p")
	if len(lines) < 20 {
		t.Fatalf("the primary logged %d executions of the forced read, want 20: %q", len(lines), lines)
	}
	for _, l := range lines {
		if strings.Contains(l, "stmtcache_") || !strings.Contains(l, "execute <unnamed>") {
			t.Fatalf("behind the pooler, pgx's path ran a named statement: %s", l)
		}
	}
	if !strings.Contains(logs.String(), "host behind a connection pooler") {
		t.Fatalf("the pooler in front of the primary was not logged: %q", logs.String())
	}
	// A read-only transaction runs on a replica (once one is eligible: on
	// a loaded machine late probes can leave none for a moment); the
	// pooler keeps one server session for the whole transaction.
	waitReplicaRoute(t, conn)
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() // on a failure: an open transaction would hold DB.Close
	var pid1, pid2 int
	if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid1); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRowContext(ctx, "SELECT v FROM pgb_routing WHERE id = $1", 1).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid2); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if pid1 != pid2 {
		t.Fatalf("a transaction through the pooler ran on two server sessions (%d, %d)", pid1, pid2)
	}
	evs := rec.snapshot()
	if ev := evs[len(evs)-1]; ev.Primary || ev.Reason != pgrouted.ReasonInTx {
		top, _ := json.Marshal(conn.Topology())
		t.Fatalf("the read-only transaction's last statement: %+v, want a replica (in-tx); topology now: %s", ev.Decision, top)
	}
}

// logLines returns the lines of node n's server log that hold marker.
func logLines(t testing.TB, n *testcluster.Node, marker string) []string {
	t.Helper()
	b, err := os.ReadFile(n.LogFile())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, marker) {
			out = append(out, l)
		}
	}
	return out
}

// TestPooledWorkload is the workload: 6 workers inserting a row and
// reading it back through pgrouted, with the plain DSN (no
// default_query_exec_mode) of the README's "Behind a connection pooler":
// no error, no stale read. The replica share depends on how far behind
// the replicas are at each read, so it is reported, not asserted.
func TestPooledWorkload(t *testing.T) {
	ctx := testCtx(t)
	db, _, rec, _ := openPooled(t)
	r := runWorkload(t, ctx, db, rec, "pgb_work", 6, 250)
	t.Logf("through PgBouncer (pool_mode=transaction): %d statements, %d errors, %d stale reads, %d of %d reads on replicas (%.1f%%)",
		r.ops, r.errs, r.stale, r.replicaReads, r.reads, 100*float64(r.replicaReads)/float64(max(r.reads, 1)))
	if r.errs != 0 || r.stale != 0 {
		t.Fatalf("%d errors (first: %q), %d stale reads; want none", r.errs, r.firstErrs, r.stale)
	}
	if r.reads != 6*250 {
		t.Fatalf("%d reads recorded, want %d", r.reads, 6*250)
	}
}

// TestPooledReadBacks: six users in a tight loop, each inserting a row and
// reading it back five times, through PgBouncer in transaction mode, with
// the default exec mode and with cache_describe: none stale, and most
// reads on replicas. The first read after a write needs its position,
// deferred without a Session: read on the primary, then checked on a
// replica. The replicas' catch-up record once kept each check by the
// write's age when the check was sent, a round trip (two behind the pooler)
// after the age at which reads ask it, so that the checks that found the
// write never counted where reads looked and those that missed did; and
// the reads that explore such a record were sent to the primary by the
// deferred-position record: reads right after a write, then all five, went
// to the primary ("catching-up"): 0.6 % to 90 % on replicas from one run
// to the next, 48 % and 63 % where the issue measured it
// (TestCatchUpRecordsThePlannedAge, TestExploringReadReadsADeferredPosition).
// Fixed, 88 % to 99 % on an idle machine (the goal: 90 %), 80 % to
// 96 % on a loaded one (make test's lanes, or two busy loops beside it),
// where replay is slower and the first read after a write finds it less
// often: a share, not a duration, so the test asks for the fix, not for
// the machine's speed, and fails when no try reaches 70 %. Each try is a
// new connector on a new table, a count of reads; up to 3, each reported.
func TestPooledReadBacks(t *testing.T) {
	ctx := testCtx(t)
	for _, mode := range []string{"default", "cache_describe"} {
		t.Run("mode="+mode, func(t *testing.T) {
			var extra []string
			if mode != "default" {
				extra = append(extra, "default_query_exec_mode="+mode)
			}
			var tries []string
			for try := range 3 {
				db, conn, rec, _ := openPooled(t, extra...)
				waitReplicaRoute(t, conn)
				r := runReadBacks(t, ctx, db, rec, fmt.Sprintf("pgb_readbacks_%s_%d", mode, try), 6, 100, 5)
				db.Close()
				share := float64(r.replicaReads) / float64(max(r.reads, 1))
				tries = append(tries, fmt.Sprintf("%d of %d reads on replicas (%.1f%%), on the primary by reason %v", r.replicaReads, r.reads, 100*share, r.fallbacks))
				t.Logf("try %d: %s", try+1, tries[len(tries)-1])
				if r.errs != 0 || r.stale != 0 {
					t.Fatalf("%d errors (first: %q), %d stale reads; want none", r.errs, r.firstErrs, r.stale)
				}
				if r.reads != 6*100*5 {
					t.Fatalf("%d reads recorded, want %d", r.reads, 6*100*5)
				}
				if share >= 0.7 {
					return
				}
			}
			t.Fatalf("replicas served less than 70%% of the reads in every try: %q", tries)
		})
	}
}

// TestPooledStatementsAreUnnamed: through a transaction pooler, where a
// named statement may be missing on the server session the next
// transaction gets, the pipelined paths (writes with their position, checked
// reads, statements inside transactions) send the unnamed statement only:
// no Parse message on any connection names a statement.
func TestPooledStatementsAreUnnamed(t *testing.T) {
	ctx := testCtx(t)
	w := &wire{} // every connection, the probes' too
	dsn := bouncers(t).DSN() + "&pgrouted_probe_interval=100ms&pgrouted_lease=5s&pgrouted_write_timeout=20s&pgrouted_names=" + names()
	db, conn, rec := openDSN(t, dsn, func(cfg *pgrouted.Config) {
		for i := range cfg.Hosts {
			cc := cfg.Hosts[i].ConnConfig
			cc.DialFunc = w.dial(cc.DialFunc)
		}
	})
	replicasReady(t, conn)
	r := runWorkload(t, ctx, db, rec, "pgb_unnamed", 4, 50)
	if r.errs != 0 || r.stale != 0 {
		t.Fatalf("%d errors (first: %q), %d stale reads; want none", r.errs, r.firstErrs, r.stale)
	}
	for i := 0; i < 3; i++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "UPDATE pgb_unnamed SET v = $1 WHERE worker = $2 AND n = $3", "tx", 0, i); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	all, named := w.parses("")
	t.Logf("%d Parse messages through the poolers, %d of them named", all, named)
	if named != 0 {
		t.Errorf("%d Parse messages named a statement through a transaction pooler; want none", named)
	}
	if all < 200 {
		t.Errorf("%d Parse messages: the workload did not run through the extended protocol", all)
	}
}

// TestPooledReplicaCheck: with replay paused on every replica behind its
// pooler, a read of the caller's own write is checked on the replica, found
// behind, and served by the primary; once replay resumes, the same read goes
// back to a replica.
func TestPooledReplicaCheck(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	db, _, rec, _ := openPooled(t)
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS pgb_check; CREATE TABLE pgb_check (id int)"); err != nil {
		t.Fatal(err)
	}
	replicated(t, ctx)
	for _, r := range cluster.Replicas() {
		if err := r.PauseReplay(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO pgb_check VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM pgb_check").Scan(&n); err != nil || n != 1 {
		t.Fatalf("read of the caller's write: %d, %v; want 1", n, err)
	}
	if ev := lastRead(t, rec); !ev.Primary || ev.Reason != pgrouted.ReasonBehind {
		t.Fatalf("read with every replica paused behind the write: %+v, want the primary (behind)", ev.Decision)
	}
	for _, r := range cluster.Replicas() {
		if err := r.ResumeReplay(ctx); err != nil {
			t.Fatal(err)
		}
	}
	untilReplica(t, ctx, sqlClient{db}, rec, "SELECT count(*) FROM pgb_check", 1)
}

// TestPooledFailover: the primary dies behind its pooler and a replica is
// promoted behind its own; the probes, through the poolers, follow, and
// writes go to the new primary. Through the driver and through the Pool.
func TestPooledFailover(t *testing.T) {
	forEachClientDSN(t, testPooledFailover)
}

func testPooledFailover(t *testing.T, open dsnOpener) {
	ctx := testCtx(t)
	restore(t)
	db, conn, rec, _ := openPooledClient(t, open)
	if err := db.ExecContext(ctx, "DROP TABLE IF EXISTS pgb_failover; CREATE TABLE pgb_failover (id int)"); err != nil {
		t.Fatal(err)
	}
	if err := db.ExecContext(ctx, "INSERT INTO pgb_failover VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	replicated(t, ctx)
	failOver(t, ctx, conn, false)
	marker := fmt.Sprintf("pgb-failover-%d", time.Now().UnixNano())
	if err := db.ExecContext(ctx, "INSERT INTO pgb_failover VALUES (2) /* "+marker+" */"); err != nil {
		t.Fatalf("write after the failover: %v", err)
	}
	if on := ranOn(t, marker); len(on) != 1 || on[0] != "node1" {
		t.Fatalf("the write after the failover ran on %v, want node1", on)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM pgb_failover").Scan(&n); err != nil || n != 2 {
		t.Fatalf("read after the failover: %d, %v; want 2", n, err)
	}
	var writes []string
	for _, e := range rec.snapshot() {
		if e.Op == pgrouted.OpWrite && e.Err == nil && strings.Contains(e.Query, marker) {
			writes = append(writes, e.Endpoint)
		}
	}
	if len(writes) != 1 || writes[0] != "node1" {
		t.Fatalf("route events of the write: %v, want node1", writes)
	}
}

// TestPooledSessionStateIsNotASession shows what a transaction pooler
// takes away, and that pgrouted says so: a SET through pgrouted pins the
// connection to its primary session, which behind PgBouncer in transaction
// mode is only a client connection to the pooler. The server session the
// SET ran on goes back to the pool, where another client gets it with the
// setting; while that client holds it, the pinned connection's next
// statement runs on another server session, without it. pgrouted logs the
// pin behind a pooler once.
func TestPooledSessionStateIsNotASession(t *testing.T) {
	ctx := testCtx(t)
	db, _, rec, logs := openPooled(t)
	pinned, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close()
	if _, err := pinned.ExecContext(ctx, "SET lock_timeout = '4321s'"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "session state on a host behind a connection pooler") {
		t.Fatalf("the pin behind a pooler was not logged: %q", logs.String())
	}
	// Other clients of the primary's pooler, each holding its server
	// session in an open transaction until one has the SET's: PgBouncer
	// hands out the most recently released idle server session first, so
	// a client that gave its session back at once would get that same
	// session again on the next try. Holding them walks through every
	// idle session of the pool (40 at most, far more than this test's
	// clients use), whichever a probe held at the moment of the SET.
	type held struct {
		c  *pgx.Conn
		tx pgx.Tx
	}
	var others []held
	release := func() {
		for _, h := range others {
			h.tx.Rollback(context.Background())
			h.c.Close(context.Background())
		}
		others = nil
	}
	defer release()
	var other *pgx.Conn
	var otherTx pgx.Tx
	for attempt := 0; attempt < 30 && otherTx == nil; attempt++ {
		// The simple protocol: no named statement to meet on a session
		// another client prepared it on (42P05).
		cc, err := pgx.ParseConfig(bouncers(t).Of(cluster.Primary()).DSN())
		if err != nil {
			t.Fatal(err)
		}
		cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		c, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := c.Begin(ctx)
		if err != nil {
			c.Close(ctx)
			t.Fatal(err)
		}
		var lt string
		if err := tx.QueryRow(ctx, "SELECT current_setting('lock_timeout')").Scan(&lt); err != nil {
			c.Close(ctx)
			t.Fatal(err)
		}
		if lt == "4321s" {
			other, otherTx = c, tx
			break
		}
		others = append(others, held{c, tx})
	}
	// The sessions without the setting go back to the pool for the pinned
	// connection's next statement.
	release()
	if otherTx == nil {
		t.Fatal("no other client of the pooler got the server session of the SET in 30 tries")
	}
	defer other.Close(context.Background())
	// The other client holds the SET's server session in its transaction:
	// the pinned connection runs on another one.
	var lt string
	if err := pinned.QueryRowContext(ctx, "SHOW lock_timeout").Scan(&lt); err != nil {
		t.Fatal(err)
	}
	if lt == "4321s" {
		t.Fatal("the pinned connection saw its SET while another client held the server session it ran on")
	}
	if ev := rec.snapshot()[len(rec.snapshot())-1]; !ev.Primary || ev.Reason != pgrouted.ReasonPinned {
		t.Fatalf("the SHOW after the SET: %+v, want the primary (pinned)", ev.Decision)
	}
	// Leave no session with the setting in the pool.
	if _, err := otherTx.Exec(ctx, "RESET lock_timeout"); err != nil {
		t.Fatal(err)
	}
	if err := otherTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPooledPreparedStatementHint: a statement run with pgx's named
// prepared statements (here asked for with pgx's exec mode option; the
// DSN's default_query_exec_mode is not needed behind a pooler the probes
// see) meets, through a transaction pooler, the statement another client
// prepared on the same server session. The error is PostgreSQL's (42P05,
// errors.As finds it), and says which setting avoids it.
func TestPooledPreparedStatementHint(t *testing.T) {
	ctx := testCtx(t)
	db, _, _, _ := openPooled(t)
	var got error
	for attempt := 0; attempt < 20 && got == nil; attempt++ {
		q := fmt.Sprintf("SELECT %d AS attempt, pg_backend_pid()", attempt)
		other, err := pgx.Connect(ctx, bouncers(t).Of(cluster.Primary()).DSN())
		if err != nil {
			t.Fatal(err)
		}
		var a, pid int
		err = other.QueryRow(ctx, q).Scan(&a, &pid) // prepares stmtcache_… on its server session
		other.Close(ctx)
		var oe *pgconn.PgError
		if errors.As(err, &oe) && oe.Code == "26000" {
			// The other client's own statement went to another server
			// session than its prepare (the pooler's doing, pgx's
			// named statements): it prepared nothing to meet.
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got = db.QueryRowContext(pgrouted.WithRoute(ctx, pgrouted.Primary), q, pgx.QueryExecModeCacheStatement).Scan(&a, &pid)
	}
	var pe *pgconn.PgError
	switch {
	case got == nil:
		t.Fatal("in 20 tries, the named statement never met another client's on a server session")
	case !errors.As(got, &pe) || pe.Code != "42P05":
		t.Fatalf("error %v, want PostgreSQL's 42P05", got)
	case !strings.Contains(got.Error(), "default_query_exec_mode=cache_describe") || !strings.Contains(got.Error(), "connection pooler"):
		t.Fatalf("the error does not say which setting avoids it: %v", got)
	}
	t.Logf("error: %v", got)
}

var (
	sessionBouncersOnce sync.Once
	sessionBouncersErr  error
	sessionBouncers     *testcluster.Poolers
)

// sessionPoolers returns the package's session-mode poolers, started on
// first use (by the benchmark only) and stopped with the cluster.
func sessionPoolers(tb testing.TB) *testcluster.Poolers {
	tb.Helper()
	sessionBouncersOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sessionBouncers, sessionBouncersErr = cluster.StartPoolers(ctx, testcluster.PoolSession)
	})
	if sessionBouncersErr != nil {
		tb.Fatal(sessionBouncersErr)
	}
	return sessionBouncers
}

// BenchmarkPooler is the cost of each way of running pgrouted through
// PgBouncer, against the same cluster without it: path is direct (no
// pooler), PgBouncer in transaction mode, or in session mode; mode is the
// DSN's default_query_exec_mode (default: none given, which behind a
// pooler the probes see means cache_describe for pgx's own statements).
// op=read is a one-row read by key, on a replica (the connector wrote
// nothing: no position check); op=write-read inserts a row and reads it
// back (read-your-writes: a replica that proves it has the row, or the
// primary), and reports the share of those reads that a replica served.
// Each reports its network round trips per op (every connection's, the
// probes' included), which the load of the machine does not change.
// The README's "Behind a connection pooler" quotes a run of
//
//	go test -run '^$' -bench BenchmarkPooler -benchtime 2000x -count 5 .
func BenchmarkPooler(b *testing.B) {
	ctx := context.Background()
	if err := cluster.Primary().Exec(ctx, `DROP TABLE IF EXISTS pgb_bench;
		CREATE TABLE pgb_bench (id bigserial PRIMARY KEY, v text NOT NULL);
		INSERT INTO pgb_bench (v) SELECT 'row ' || i FROM generate_series(1, 1000) AS i`); err != nil {
		b.Fatal(err)
	}
	if err := cluster.WaitReplicated(ctx); err != nil {
		b.Fatal(err)
	}
	paths := []struct {
		name string
		dsn  func(testing.TB) string
	}{
		{"direct", func(testing.TB) string { return cluster.DSN() }},
		{"pgbouncer-transaction", func(tb testing.TB) string { return bouncers(tb).DSN() }},
		{"pgbouncer-session", func(tb testing.TB) string { return sessionPoolers(tb).DSN() }},
	}
	modes := []string{"default", "cache_describe", "exec", "simple_protocol"}
	for _, path := range paths {
		for _, mode := range modes {
			if path.name != "pgbouncer-transaction" && mode != "default" && mode != "exec" {
				continue
			}
			b.Run("path="+path.name+"/mode="+mode, func(b *testing.B) {
				// Probes 1 s apart: their round trips count too, but
				// at 3 per second they weigh nothing per op.
				dsn := path.dsn(b) + "&pgrouted_probe_interval=1s&pgrouted_names=" + names()
				if mode != "default" {
					dsn += "&default_query_exec_mode=" + mode
				}
				for _, op := range []string{"read", "write-read"} {
					b.Run("op="+op, func(b *testing.B) {
						var trips atomic.Int64
						db, _, rec := openDSN(b, dsn, func(cfg *pgrouted.Config) { countRoundTrips(cfg, &trips) })
						db.SetMaxIdleConns(4)
						var v string
						before := len(rec.snapshot())
						b.ReportAllocs()
						b.ResetTimer()
						trips.Store(0)
						i := 0
						for b.Loop() {
							i++
							id := int64(1 + i%1000)
							if op == "write-read" {
								if err := db.QueryRowContext(ctx, "INSERT INTO pgb_bench (v) VALUES ($1) RETURNING id", "bench").Scan(&id); err != nil {
									b.Fatal(err)
								}
							}
							if err := db.QueryRowContext(ctx, "SELECT v FROM pgb_bench WHERE id = $1", id).Scan(&v); err != nil {
								b.Fatal(err)
							}
						}
						b.StopTimer()
						b.ReportMetric(float64(trips.Load())/float64(b.N), "round-trips/op")
						reads, onReplica := 0, 0
						for _, e := range rec.snapshot()[before:] {
							if e.Op == pgrouted.OpRead {
								reads++
								if !e.Primary {
									onReplica++
								}
							}
						}
						b.ReportMetric(100*float64(onReplica)/float64(max(reads, 1)), "%replica")
					})
				}
			})
		}
	}
}

// countRoundTrips makes every connection of cfg's hosts count its round
// trips in n: a write after a read (or the first write) starts one.
func countRoundTrips(cfg *pgrouted.Config, n *atomic.Int64) {
	for i := range cfg.Hosts {
		cc := cfg.Hosts[i].ConnConfig
		dial := cc.DialFunc
		cc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := &tripConn{Conn: c, n: n}
			tc.read.Store(true)
			return tc, nil
		}
	}
}

// tripConn counts the round trips of one connection.
type tripConn struct {
	net.Conn
	n    *atomic.Int64
	read atomic.Bool // the last operation was a read (pgconn may read in the background)
}

func (c *tripConn) Write(p []byte) (int, error) {
	if c.read.Swap(false) {
		c.n.Add(1)
	}
	return c.Conn.Write(p)
}

func (c *tripConn) Read(p []byte) (int, error) {
	k, err := c.Conn.Read(p)
	if k > 0 {
		c.read.Store(true)
	}
	return k, err
}
