//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/testcluster"
	"go.uber.org/goleak"
)

func TestOpenByDriverName(t *testing.T) {
	ctx := testCtx(t)
	db, err := sql.Open("pgrouted", cluster.DSN()+"&pgrouted_probe_interval=100ms")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	var rec bool
	if err := db.QueryRowContext(pgrouted.WithRoute(ctx, pgrouted.Primary), "SELECT pg_is_in_recovery()").Scan(&rec); err != nil || rec {
		t.Fatalf("forced primary read: in recovery %v, %v", rec, err)
	}
	if _, err := sql.Open("pgrouted", "postgres://u:hunter2secret@h1/db?pgrouted_max_lagg=1s"); err == nil || strings.Contains(err.Error(), "hunter2secret") || !strings.Contains(err.Error(), "pgrouted_max_lag") {
		t.Fatalf("bad key: %v", err)
	}
}

// TestReadYourWrites: writers insert a row and read it back at once through
// the same *sql.DB while replication is delayed; no read may miss its row,
// and replicas serve the later reads of those rows (see replicaShare2).
func TestReadYourWrites(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS ryw; CREATE TABLE ryw (id bigserial PRIMARY KEY, w int, n int)")
	replicated(t, ctx)
	db, _, rec := open(t)
	delayReplicas(t, 20*time.Millisecond)
	share := replicaShare(t, db, rec, "ryw", 40, func(int) context.Context { return ctx })
	if share < minReplicaShare {
		t.Fatalf("replicas served %.0f%% of the reads they could serve, want at least %.0f%%", 100*share, 100*minReplicaShare)
	}
}

// TestSessionStatementsRaiseNoMarks: a statement that changes nothing but
// its session (SET, RESET, LISTEN, UNLISTEN, DEALLOCATE) raises no
// read-your-writes mark: the connector's reads do not wait for a WAL
// position it did not write. The replicas replay a second behind, after a
// write the connector does not know of: a mark raised to the primary's
// position would send every read to the primary. A write through the
// connector still raises them (the control).
func TestSessionStatementsRaiseNoMarks(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS setmarks; CREATE TABLE setmarks (id int)")
	replicated(t, ctx)
	db, conn, _ := open(t)
	delayReplicas(t, time.Second)
	mustExec(t, ctx, cluster.Primary(), "INSERT INTO setmarks VALUES (0)")
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// proven: a read goes to a replica its last probe proved (not one it
	// would check first, nor the primary).
	proven := func() (pgrouted.Decision, bool) {
		t.Helper()
		d, err := conn.Explain(ctx, readOfEveryRelation)
		if err != nil {
			t.Fatal(err)
		}
		return d, !d.Primary && d.Reason == pgrouted.ReasonReplica
	}
	if d, ok := proven(); !ok {
		t.Fatalf("before any statement, a read does not go to a proven replica: %+v", d)
	}
	for _, stmt := range []string{
		"SET application_name = 'setmarks'", "SET LOCAL statement_timeout = '5s'", "SET TRANSACTION READ ONLY",
		"RESET application_name", "LISTEN setmarks", "UNLISTEN *", "DEALLOCATE ALL",
	} {
		if _, err := c.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
		if d, ok := proven(); !ok {
			t.Errorf("after %q, a read of every relation goes to %s (%s), not to a proven replica: the statement wrote nothing", stmt, d.Endpoint, d.Reason)
		}
	}
	if _, err := c.ExecContext(ctx, "INSERT INTO setmarks VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if d, ok := proven(); ok {
		t.Fatalf("right after a write through the connector, with the replicas a second behind, a read goes to %s, proven: the control proves nothing", d.Endpoint)
	}
}

func TestReadOnlyTransactions(t *testing.T) {
	ctx := testCtx(t)
	db, _, rec := open(t)
	inRecovery := func(tx *sql.Tx) bool {
		t.Helper()
		var r bool
		if err := tx.QueryRowContext(ctx, "SELECT pg_is_in_recovery()").Scan(&r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, iso := range []sql.IsolationLevel{sql.LevelDefault, sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSnapshot} {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: iso})
		if err != nil {
			t.Fatal(err)
		}
		if !inRecovery(tx) {
			t.Errorf("read-only %s transaction did not run on a replica", iso)
		}
		var level string
		if err := tx.QueryRowContext(ctx, "SHOW transaction_isolation").Scan(&level); err != nil {
			t.Fatal(err)
		}
		want := map[sql.IsolationLevel]string{sql.LevelDefault: "read committed", sql.LevelReadCommitted: "read committed", sql.LevelRepeatableRead: "repeatable read", sql.LevelSnapshot: "repeatable read"}[iso]
		if level != want {
			t.Errorf("%s transaction runs at %q, want %q", iso, level, want)
		}
		if _, err := tx.ExecContext(ctx, "CREATE TABLE ro_nope (id int)"); err == nil {
			t.Error("a write in a read-only transaction succeeded")
		}
		tx.Rollback()
	}
	// A hot standby has no SERIALIZABLE: the primary runs it, at that level.
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelSerializable})
	if err != nil {
		t.Fatal(err)
	}
	if inRecovery(tx) {
		t.Error("read-only serializable transaction ran on a replica")
	}
	var level string
	tx.QueryRowContext(ctx, "SHOW transaction_isolation").Scan(&level)
	if level != "serializable" {
		t.Errorf("serializable transaction runs at %q", level)
	}
	tx.Commit()
	if _, err := db.BeginTx(pgrouted.WithRoute(ctx, pgrouted.Replica), &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelSerializable}); err == nil {
		t.Error("serializable transaction forced to a replica did not fail")
	}
	for _, iso := range []sql.IsolationLevel{sql.LevelWriteCommitted, sql.LevelLinearizable} {
		if _, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: iso}); err == nil || !strings.Contains(err.Error(), "not supported") {
			t.Errorf("isolation %s: %v, want a clear refusal", iso, err)
		}
	}
	// Read-write transactions run on the primary, and their writes are
	// read back after commit.
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if inRecovery(tx) {
		t.Fatal("read-write transaction on a replica")
	}
	if _, err := tx.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS txw (id int); INSERT INTO txw VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM txw").Scan(&n); err != nil || n < 1 {
		t.Fatalf("read after commit: %d, %v", n, err)
	}
	// readonly_tx=primary keeps them on the primary.
	db2, _, _ := open(t, "pgrouted_readonly_tx=primary")
	tx, err = db2.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if inRecovery(tx) {
		t.Error("readonly_tx=primary: read-only transaction on a replica")
	}
	tx.Rollback()
	for _, e := range rec.snapshot() {
		if e.Op == pgrouted.OpTx && e.Query == "BEGIN" && e.Endpoint == "" && e.Err == nil {
			t.Errorf("BEGIN event without endpoint: %+v", e)
		}
	}
}

func TestSessionStatePins(t *testing.T) {
	ctx := testCtx(t)
	db, _, _ := open(t)
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var rec bool
	if err := c.QueryRowContext(ctx, "SELECT pg_is_in_recovery()").Scan(&rec); err != nil || !rec {
		t.Fatalf("before SET, a read ran on the primary (%v)", err)
	}
	if _, err := c.ExecContext(ctx, "SET application_name = 'pinned-session'"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		var name string
		if err := c.QueryRowContext(ctx, "SELECT current_setting('application_name'), pg_is_in_recovery()").Scan(&name, &rec); err != nil {
			t.Fatal(err)
		}
		if name != "pinned-session" || rec {
			t.Fatalf("after SET: application_name %q on a standby %v; want the pinned primary session", name, rec)
		}
	}
}

func TestPreparedStatements(t *testing.T) {
	ctx := testCtx(t)
	mustExec(t, ctx, cluster.Primary(), "CREATE TABLE IF NOT EXISTS prep (id int)")
	replicated(t, ctx)
	db, conn, _ := open(t, "pgrouted_latency_window=off") // spreading, not latency, is tested
	replicasReady(t, conn)
	read, err := db.PrepareContext(ctx, "SELECT inet_server_port(), pg_is_in_recovery() WHERE $1::int > 0")
	if err != nil {
		t.Fatal(err)
	}
	defer read.Close()
	write, err := db.PrepareContext(ctx, "INSERT INTO prep VALUES ($1) RETURNING inet_server_port()")
	if err != nil {
		t.Fatal(err)
	}
	defer write.Close()
	ports := map[string]int{}
	for i := 1; i <= 10; i++ {
		var port int
		var rec bool
		if err := read.QueryRowContext(ctx, i).Scan(&port, &rec); err != nil {
			t.Fatal(err)
		}
		if !rec {
			t.Fatalf("prepared read %d ran on the primary", i)
		}
		ports[nodeByPort(t, port).Name()]++
		if i == 5 {
			if err := write.QueryRowContext(ctx, i).Scan(&port); err != nil {
				t.Fatal(err)
			}
			if n := nodeByPort(t, port); n.Name() != "node0" {
				t.Fatalf("prepared write ran on %s", n.Name())
			}
			waitReplicaRoute(t, conn)
		}
	}
	if len(ports) != 2 {
		t.Fatalf("prepared reads were not spread over both replicas: %v", ports)
	}
}

func TestExplainHasNoSideEffect(t *testing.T) {
	ctx := testCtx(t)
	db, conn, _ := open(t)
	d1, err := conn.Explain(ctx, "SELECT 1")
	if err != nil || d1.Primary || d1.Op != pgrouted.OpRead || d1.Reason != pgrouted.ReasonReplica {
		t.Fatalf("Explain(SELECT 1) = %+v, %v", d1, err)
	}
	for i := 0; i < 5; i++ {
		if d, _ := conn.Explain(ctx, "SELECT 1"); d != d1 {
			t.Fatalf("Explain moved: %+v then %+v", d1, d)
		}
	}
	// The next read runs where Explain said.
	var port int
	if err := db.QueryRowContext(ctx, "SELECT inet_server_port()").Scan(&port); err != nil {
		t.Fatal(err)
	}
	if got := nodeByPort(t, port).Name(); got != d1.Endpoint {
		t.Fatalf("read ran on %s, Explain said %s", got, d1.Endpoint)
	}
	d, err := conn.Explain(ctx, "INSERT INTO t VALUES (1)")
	if err != nil || !d.Primary || d.Endpoint != "node0" || d.Op != pgrouted.OpWrite {
		t.Fatalf("Explain(INSERT) = %+v, %v", d, err)
	}
	d, err = conn.Explain(pgrouted.WithRoute(ctx, pgrouted.Replica), "UPDATE t SET a = 1")
	if !errors.Is(err, pgrouted.ErrWriteOnReplica) {
		t.Fatalf("Explain(forced write) = %+v, %v", d, err)
	}
	if d, _ := conn.Explain(ctx, "SELECT id FROM t FOR UPDATE"); d.Op != pgrouted.OpLock || !d.Primary {
		t.Fatalf("Explain(FOR UPDATE) = %+v", d)
	}
}

func TestOnRouteHookCannotBreakStatements(t *testing.T) {
	ctx := testCtx(t)
	cfg, err := pgrouted.ParseConfig(cluster.DSN() + "&pgrouted_probe_interval=100ms")
	if err != nil {
		t.Fatal(err)
	}
	var calls, starts, ends atomic.Int64
	cfg.OnRoute = func(pgrouted.RouteEvent) {
		calls.Add(1)
		panic("hook bug")
	}
	cfg.OnStart = func(_ context.Context, query string) func(pgrouted.RouteEvent) {
		if starts.Add(1)%2 == 0 {
			panic("start hook bug")
		}
		return func(pgrouted.RouteEvent) {
			ends.Add(1)
			panic("end hook bug")
		}
	}
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	for range 4 {
		var one int
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("statement with panicking hooks: %v", err)
		}
	}
	if calls.Load() == 0 || starts.Load() == 0 || ends.Load() == 0 {
		t.Fatalf("hooks called: OnRoute %d, OnStart %d, its end %d times", calls.Load(), starts.Load(), ends.Load())
	}
}

// TestNoLeakAfterClose: closing the *sql.DB stops every goroutine and closes
// every connection pgrouted opened, on every node.
func TestNoLeakAfterClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := testCtx(t)
	db, err := sql.Open("pgrouted", cluster.DSN()+"&pgrouted_probe_interval=50ms&application_name=leakcheck")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		var one int
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "SELECT pg_advisory_lock(7), pg_advisory_unlock(7)"); err != nil {
			t.Fatal(err)
		}
		tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		tx.QueryRowContext(ctx, "SELECT 1").Scan(&one)
		tx.Commit()
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range cluster.Nodes() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			var left int
			err := n.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name IN ('leakcheck', 'pgrouted-probe')", nil, &left)
			if err != nil {
				t.Fatal(err)
			}
			if left == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d pgrouted connections left after db.Close", n.Name(), left)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestFailoverUnderLoad promotes a replica and stops the primary while
// writers and readers run: writes resume on the new primary, and reads keep
// working. Through the driver and through the Pool.
func TestFailoverUnderLoad(t *testing.T) {
	forEachClient(t, testFailoverUnderLoad)
}

func testFailoverUnderLoad(t *testing.T, open opener) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS fo; CREATE TABLE fo (id bigserial PRIMARY KEY, w int)")
	replicated(t, ctx)
	db, _, _ := open(t)
	old, promoted, other := cluster.Node(0), cluster.Node(1), cluster.Node(2)
	nodeOf := portNames(t)
	// stopped is set once the old primary's Stop returned: a write issued
	// after that cannot have run there.
	var stopped atomic.Bool
	type write struct {
		at         time.Time // when its result came back (logged only)
		node       string
		afterStop  bool // issued after the old primary was stopped
		unknownPos int  // the port when it names no node
	}
	var mu sync.Mutex
	var writes []write
	count := func(node string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, w := range writes {
			if w.node == node {
				n++
			}
		}
		return n
	}
	var writeErrs, readErrs, reads atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var halted sync.Once
	halt := func() { halted.Do(func() { close(stop); wg.Wait() }) }
	// On failure, the workers stop at once, even one stuck in a read.
	wctx, cancelWork := context.WithCancel(ctx)
	defer func() { cancelWork(); halt() }()
	for w := 0; w < 4; w++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				afterStop := stopped.Load()
				var port int
				err := db.QueryRowContext(wctx, "INSERT INTO fo (w) VALUES ($1) RETURNING inet_server_port()", w).Scan(&port)
				if err != nil {
					writeErrs.Add(1)
					t.Logf("write error: %v", err)
					time.Sleep(5 * time.Millisecond)
					continue
				}
				wr := write{at: time.Now(), node: nodeOf[port], afterStop: afterStop}
				if wr.node == "" {
					wr.unknownPos = port
				}
				mu.Lock()
				writes = append(writes, wr)
				mu.Unlock()
			}
		}()
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var n int
				if err := db.QueryRowContext(wctx, "SELECT count(*) FROM fo").Scan(&n); err != nil {
					readErrs.Add(1)
					t.Logf("read error: %v", err)
				} else {
					reads.Add(1)
				}
			}
		}()
	}
	// The load runs on the old primary before the failover.
	for deadline := time.Now().Add(30 * time.Second); count(old.Name()) < 20 || reads.Load() < 20; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s, %d writes on %s and %d reads: the load does not run", count(old.Name()), old.Name(), reads.Load())
		}
	}
	if err := old.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped.Store(true)
	promotedAt := time.Now() // pg_ctl promote starts
	if err := promoted.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.Follow(ctx, promoted); err != nil {
		t.Fatal(err)
	}
	// Writes go on for a while on the new primary.
	for deadline := time.Now().Add(30 * time.Second); count(promoted.Name()) < 50; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("writes did not resume on %s within 30s: %d there", promoted.Name(), count(promoted.Name()))
		}
	}
	halt()
	var lastOld, firstNew time.Time
	for _, w := range writes {
		switch w.node {
		case old.Name():
			if w.afterStop {
				t.Errorf("a write issued after %s was stopped succeeded there", old.Name())
			}
			if w.at.After(lastOld) {
				lastOld = w.at
			}
		case promoted.Name():
			if firstNew.IsZero() || w.at.Before(firstNew) {
				firstNew = w.at
			}
		case "":
			t.Errorf("a write ran on port %d, which is no node's", w.unknownPos)
		default:
			t.Errorf("a write ran on %s", w.node)
		}
	}
	t.Logf("writes unavailable for %v (last on the old primary to first on the new one); first write on the new primary %v after pg_ctl promote began; %d write errors during the failover; %d reads, %d read errors",
		firstNew.Sub(lastOld).Round(time.Millisecond), firstNew.Sub(promotedAt).Round(time.Millisecond), writeErrs.Load(), reads.Load(), readErrs.Load())
	if readErrs.Load() > 0 {
		t.Errorf("%d reads failed during the failover", readErrs.Load())
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM fo").Scan(&n); err != nil || n < 50 {
		t.Fatalf("after failover: %d rows, %v", n, err)
	}
}

// TestWriteOnATerminatedSession: the server ends an idle primary session
// (pg_terminate_backend, as a fast shutdown does to every session: FATAL
// 57P01) just before a write is sent on it. The write got no answer, so it
// committed nothing: it runs again on a new session, once, and succeeds
// (the rows say once). An Exec and an INSERT … RETURNING, through the
// driver and through the Pool.
func TestWriteOnATerminatedSession(t *testing.T) {
	forEachClient(t, testWriteOnATerminatedSession)
}

func testWriteOnATerminatedSession(t *testing.T, open opener) {
	ctx := testCtx(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS termw; CREATE TABLE termw (id int)")
	app := "termw_" + strings.ReplaceAll(t.Name(), "/", "_")
	db, _, rec := open(t, "application_name="+app)
	p := cluster.Primary()
	// terminate ends the client's sessions on the primary and waits until
	// they are gone; the client's next statement finds its session ended.
	// (Only those: the client's pool opens new ones meanwhile, for its
	// probe and its catalog's fingerprint.)
	terminate := func() {
		t.Helper()
		var pids []int32
		if err := p.QueryRow(ctx, "SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()", []any{app}, &pids); err != nil {
			t.Fatal(err)
		}
		mustExec(t, ctx, p, fmt.Sprintf("SELECT pg_terminate_backend(pid) FROM unnest('%s'::int[]) pid", pgIntArray(pids)))
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			var left int
			if err := p.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)", []any{pids}, &left); err != nil {
				t.Fatal(err)
			}
			if left == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d sessions left 10s after pg_terminate_backend", left)
			}
		}
	}
	var port int
	for id, returning := range []bool{false, true, false, true} {
		// A write opens the primary session the next one reuses: no
		// ping checks it first (primary sessions are not pinged on
		// reuse), so the write finds it ended.
		if err := db.ExecContext(ctx, "INSERT INTO termw VALUES ($1)", -1); err != nil {
			t.Fatal(err)
		}
		terminate()
		var err error
		if returning {
			err = db.QueryRowContext(ctx, "INSERT INTO termw VALUES ($1) RETURNING inet_server_port()", id).Scan(&port)
		} else {
			err = db.ExecContext(ctx, "INSERT INTO termw VALUES ($1)", id)
		}
		if err != nil {
			t.Fatalf("write %d (returning %v) on a session the server had ended: %v", id, returning, err)
		}
		if e := rec.snapshot(); !e[len(e)-1].Primary || e[len(e)-1].Err != nil {
			t.Fatalf("write %d: %+v", id, e[len(e)-1])
		}
		var n int
		if err := p.QueryRow(ctx, "SELECT count(*) FROM termw WHERE id = $1", []any{id}, &n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("write %d (returning %v): %d rows, want 1", id, returning, n)
		}
	}
}

// TestReadOnATerminatedSession: the server ends the primary session a read
// runs on (pg_terminate_backend, as a fast shutdown does to every session:
// FATAL 57P01), either while it is idle, just before the read is sent, or
// while the read runs, before its row. A read has no effect and the caller
// saw nothing of it: it runs again on a new session and returns its row.
// Forced to the primary, through the driver and through the Pool.
func TestReadOnATerminatedSession(t *testing.T) {
	forEachClient(t, testReadOnATerminatedSession)
}

func testReadOnATerminatedSession(t *testing.T, open opener) {
	ctx := testCtx(t)
	app := "termr_" + strings.ReplaceAll(t.Name(), "/", "_")
	db, conn, rec := open(t, "application_name="+app)
	for _, route := range []pgrouted.Route{pgrouted.Primary, pgrouted.Replica} {
		rctx := pgrouted.WithRoute(ctx, route)
		// terminate ends the client's sessions on the node named name
		// that match where.
		terminate := func(name, where string) {
			t.Helper()
			for _, node := range cluster.Nodes() {
				if node.Name() == name {
					if endSessions(t, ctx, node, app, where) == 0 {
						t.Fatalf("%v: no session of the client on %s where %s", route, name, where)
					}
					return
				}
			}
			t.Fatalf("no node %s", name)
		}
		// ranOn is the node the client's last statement ran on.
		ranOn := func() string {
			e := rec.snapshot()
			return e[len(e)-1].Endpoint
		}
		// Each case begins with every standby eligible again: a
		// replica read that failed on one runs on the other.
		for i := 0; i < 2; i++ {
			replicasReady(t, conn)
			if route == pgrouted.Primary {
				// Idle: the read opens the session the next one reuses.
				// (Not on replicas: the next read may take another
				// connection, and one ended there would be left in the
				// pool for the retry of a later case.)
				var n int
				if err := db.QueryRowContext(rctx, "SELECT 1").Scan(&n); err != nil {
					t.Fatal(err)
				}
				terminate(ranOn(), "query = 'SELECT 1'")
				waitGone(t, ctx, app, "query = 'SELECT 1'")
				if err := db.QueryRowContext(rctx, "SELECT 2").Scan(&n); err != nil || n != 2 {
					t.Fatalf("%v: read %d on a session the server had ended: %d, %v", route, i, n, err)
				}
				if e := rec.snapshot(); !e[len(e)-1].Primary || e[len(e)-1].Err != nil {
					t.Fatalf("%v: read %d: %+v", route, i, e[len(e)-1])
				}
			}
			// Running: the read is in pg_sleep when its session ends.
			replicasReady(t, conn)
			done := make(chan error, 1)
			go func() {
				var m int
				err := db.QueryRowContext(rctx, "SELECT 3 FROM pg_sleep(1)").Scan(&m)
				if err == nil && m != 3 {
					err = fmt.Errorf("got %d", m)
				}
				done <- err
			}()
			// Only the sessions running it when first seen: the read
			// runs again elsewhere, which must not be ended too.
			const running = "query LIKE 'SELECT 3 FROM pg_sleep%' AND state = 'active'"
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				ended := 0
				for _, node := range cluster.Nodes() {
					if ended = endSessions(t, ctx, node, app, running); ended > 0 {
						break
					}
				}
				if ended > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%v: the read did not start within 20s", route)
				}
			}
			if err := <-done; err != nil {
				t.Fatalf("%v: read %d whose session the server ended while it ran: %v", route, i, err)
			}
		}
		// Answered: the session ends while the server still sends rows
		// the caller has not read. Rows closed after the one the caller
		// wanted (as QueryRow's are) are whole: no error. Rows read to
		// their end are cut: an error. Under causal consistency too (the
		// read's bound is read after it in the same round trip).
		for _, level := range []pgrouted.Consistency{"", pgrouted.ConsistencyCausal} {
			for _, toEnd := range []bool{false, true} {
				qctx := rctx
				if level != "" {
					// A Session of its own: an ended read leaves its
					// bound unknown until the primary's next probe.
					qctx = pgrouted.WithSession(pgrouted.WithConsistency(rctx, level), pgrouted.NewSession())
				}
				replicasReady(t, conn)
				rows, err := db.QueryContext(qctx, "SELECT repeat('x', 1000) FROM generate_series(1, 100000)")
				if err != nil {
					t.Fatal(err)
				}
				if !rows.Next() {
					t.Fatalf("%v: no first row: %v", route, rows.Err())
				}
				const sending = "query LIKE 'SELECT repeat%' AND state = 'active'"
				terminate(ranOn(), sending)
				waitGone(t, ctx, app, sending)
				n := 1
				if toEnd {
					for rows.Next() {
						n++
					}
				}
				err = rows.Close()
				if err == nil {
					err = rows.Err() // database/sql's: Next's error
				}
				switch {
				case !toEnd && err != nil:
					t.Fatalf("%v, consistency %q: rows closed after their first row, whose session then ended: %v", route, level, err)
				case toEnd && (err == nil || n == 100000):
					t.Fatalf("%v, consistency %q: rows read to their end, whose session ended after %d rows of 100000: %v, want an error", route, level, n, err)
				}
			}
		}
	}
}

// TestReadsAfterIdleSessionsEnded: once the server ended the idle sessions
// of both replicas' pools (as a restart or pg_terminate_backend does),
// reads routed to replicas with no fallback still run, though the pools
// hand out those sessions for up to pgxpool's ping interval: the first
// read that meets an ended one drops its pool's sessions and runs again on
// a new session of the same host.
func TestReadsAfterIdleSessionsEnded(t *testing.T) {
	forEachClient(t, testReadsAfterIdleSessionsEnded)
}

func testReadsAfterIdleSessionsEnded(t *testing.T, open opener) {
	ctx := testCtx(t)
	app := "idleend_" + strings.ReplaceAll(t.Name(), "/", "_")
	db, conn, rec := open(t, "application_name="+app, "pgrouted_fallback=error")
	rctx := pgrouted.WithRoute(ctx, pgrouted.Replica)
	const last = "query LIKE 'SELECT 1 FROM pg_sleep%' AND state = 'idle'"
	for round := 0; round < 3; round++ {
		replicasReady(t, conn)
		idleOnEveryReplica(t, ctx, db, rctx, app, last)
		// Only the sessions those reads left idle: not the probes'.
		for _, r := range cluster.Replicas() {
			if endSessions(t, ctx, r, app, last) == 0 {
				t.Fatalf("round %d: no idle session of the client on %s", round, r.Name())
			}
		}
		for _, r := range cluster.Replicas() {
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
				var left int
				if err := r.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND "+last, []any{app}, &left); err != nil {
					t.Fatal(err)
				}
				if left == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d sessions left on %s 10s after pg_terminate_backend", left, r.Name())
				}
			}
		}
		for i := 0; i < 6; i++ {
			var n int
			if err := db.QueryRowContext(rctx, "SELECT 2").Scan(&n); err != nil || n != 2 {
				t.Fatalf("round %d, read %d after the replicas ended their idle sessions: %d, %v", round, i, n, err)
			}
			if e := rec.snapshot(); e[len(e)-1].Primary {
				t.Fatalf("round %d, read %d ran on the primary: %+v", round, i, e[len(e)-1])
			}
		}
	}
}

// idleOnEveryReplica runs concurrent reads (SELECT 1 FROM pg_sleep) in
// rctx until each replica holds an idle session of application app that
// matches last: a replica may not take reads at first (not yet proven
// after an earlier test's failover, or not picked).
func idleOnEveryReplica(t *testing.T, ctx context.Context, db client, rctx context.Context, app, last string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		var wg sync.WaitGroup
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var n int
				if err := db.QueryRowContext(rctx, "SELECT 1 FROM pg_sleep(0.05)").Scan(&n); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		every := true
		for _, r := range cluster.Replicas() {
			var idle int
			if err := r.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND "+last, []any{app}, &idle); err != nil {
				t.Fatal(err)
			}
			every = every && idle > 0
		}
		if every {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("after 30s of reads, a replica holds no idle session of the client")
		}
	}
}

// endSessions ends the sessions of application app on node that match
// where (pg_terminate_backend), and returns how many it ended.
func endSessions(t *testing.T, ctx context.Context, node *testcluster.Node, app, where string) int {
	t.Helper()
	var pids []int32
	if err := node.QueryRow(ctx, "SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid() AND "+where, []any{app}, &pids); err != nil {
		t.Fatal(err)
	}
	if len(pids) > 0 {
		mustExec(t, ctx, node, fmt.Sprintf("SELECT pg_terminate_backend(pid) FROM unnest('%s'::int[]) pid", pgIntArray(pids)))
	}
	return len(pids)
}

// waitGone waits until no session of application app on any node matches
// where.
func waitGone(t *testing.T, ctx context.Context, app, where string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		left := 0
		for _, node := range cluster.Nodes() {
			var c int
			if err := node.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND "+where, []any{app}, &c); err != nil {
				t.Fatal(err)
			}
			left += c
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions where %s left 10s after pg_terminate_backend", left, where)
		}
	}
}

// pgIntArray writes ns as a PostgreSQL array literal.
func pgIntArray(ns []int32) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(int(n))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// portNames maps each node's direct port (inet_server_port()) to its name,
// for goroutines, which must not call nodeByPort (it may t.Fatal).
func portNames(t *testing.T) map[int]string {
	t.Helper()
	m := map[int]string{}
	for _, n := range cluster.Nodes() {
		_, p, err := net.SplitHostPort(n.DirectAddr())
		if err != nil {
			t.Fatal(err)
		}
		port, err := strconv.Atoi(p)
		if err != nil {
			t.Fatal(err)
		}
		m[port] = n.Name()
	}
	return m
}

// TestWriteSeesAProbeThatEndedAtOnce: a write that the primary failed
// asks for a probe of it and waits for the probe's news; a probe that ends
// before the wait begins (one on a connection the server's restart broke
// fails at once) is that news: the wait returns at once, not at
// pgrouted_write_timeout, with probes a minute apart.
func TestWriteSeesAProbeThatEndedAtOnce(t *testing.T) {
	ctx := testCtx(t)
	_, conn, _ := openDSN(t, cluster.DSN()+"&pgrouted_probe_interval=1m&pgrouted_lease=5m&pgrouted_names="+names(), nil)
	if err := pgrouted.ProbeThenWait(ctx, conn, 0, 20*time.Second); err != nil {
		t.Fatalf("the wait for news of the primary after a probe recorded before it began: %v", err)
	}
}

// TestWritesWaitForAPrimary: with the primary down, a write waits up to
// pgrouted_write_timeout; it fails with ErrNoPrimary when no primary comes
// in time, and succeeds on the primary when it comes back in time. The
// waiting write is issued once the connector sees no primary, and the
// primary starts again only once that write is seen inside the driver,
// still running. Through the driver and through the Pool.
func TestWritesWaitForAPrimary(t *testing.T) {
	forEachClient(t, testWritesWaitForAPrimary)
}

func testWritesWaitForAPrimary(t *testing.T, open opener) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "CREATE TABLE IF NOT EXISTS waitw (id int)")
	// The write may wait 40s: on a CI machine whose CPUs every lane
	// shares, the restarted primary's start and the probes that find it
	// can take most of 15s.
	db, conn, _ := open(t, "pgrouted_write_timeout=40s")
	quick, _, _ := open(t, "pgrouted_write_timeout=500ms")
	p := cluster.Primary()
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	err := quick.ExecContext(ctx, "INSERT INTO waitw VALUES (1)")
	var re *pgrouted.RouteError
	if !errors.Is(err, pgrouted.ErrNoPrimary) || !errors.As(err, &re) || re.Reason != pgrouted.ReasonNoPrimary {
		t.Fatalf("write with the primary down and a 500ms write timeout: %v, want ErrNoPrimary", err)
	}
	t.Logf("write without a primary: %v", err)

	// The connector knows there is no primary (its lease ran out).
	for deadline := time.Now().Add(30 * time.Second); conn.Topology().Primary != ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("30s after the primary stopped, the connector still names a primary: %+v", conn.Topology())
		}
	}
	if n := db.InUse(); n != 0 {
		t.Fatalf("%d connections in use before the write", n)
	}
	type result struct {
		port int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.err = db.QueryRowContext(ctx, "INSERT INTO waitw VALUES (2) RETURNING inet_server_port()").Scan(&r.port)
		done <- r
	}()
	// The write is in the driver (it holds the client's only connection)
	// and has not returned: it waits, with no primary.
	for deadline := time.Now().Add(10 * time.Second); db.InUse() == 0; time.Sleep(time.Millisecond) {
		select {
		case r := <-done:
			t.Fatalf("with no primary, the write returned at once (port %d, %v): it did not wait", r.port, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the write did not start within 10s")
		}
	}
	if top := conn.Topology(); top.Primary != "" {
		t.Fatalf("a primary while %s is stopped: %+v", p.Name(), top)
	}
	select {
	case r := <-done:
		t.Fatalf("with no primary, the write returned at once (port %d, %v): it did not wait", r.port, r.err)
	default:
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("a write waiting for the primary to come back: %v", r.err)
		}
		if got := nodeByPort(t, r.port).Name(); got != p.Name() {
			t.Fatalf("the waiting write ran on %s, want %s", got, p.Name())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the waiting write did not return within 60s of the primary's restart (write timeout 40s)")
	}
}
