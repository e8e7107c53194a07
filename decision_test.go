//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted"
)

// The tests in this file check that a read-only transaction follows the
// same routing decision as an autocommit read (fallback, forced routes,
// pinning), and that a statement inside a transaction never leaves it.

// inRecovery reports whether q (a query returning pg_is_in_recovery())
// ran on a standby.
func inRecovery(t *testing.T, ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) bool {
	t.Helper()
	var r bool
	if err := q.QueryRowContext(ctx, "SELECT pg_is_in_recovery()").Scan(&r); err != nil {
		t.Fatal(err)
	}
	return r
}

// wantNoReplica checks that err is ErrNoReplica with reason.
func wantNoReplica(t *testing.T, what string, err error, reason pgrouted.Reason) {
	t.Helper()
	var re *pgrouted.RouteError
	if !errors.Is(err, pgrouted.ErrNoReplica) || !errors.As(err, &re) || re.Reason != reason {
		t.Fatalf("%s: %v, want ErrNoReplica (%s)", what, err, reason)
	}
}

// Under pgrouted_fallback=error, a read-only transaction whose replica is
// found behind by its position check fails as an autocommit read does,
// instead of running on the primary.
func TestReadOnlyTxFallbackErrorBehind(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	db, _, rec := open(t, "pgrouted_fallback=error")
	mustExec(t, ctx, cluster.Primary(), "CREATE TABLE IF NOT EXISTS ro_behind_t (id int)")
	replicated(t, ctx)
	for _, r := range cluster.Replicas() {
		if err := r.PauseReplay(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO ro_behind_t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	// The autocommit read: the rule the transaction must follow.
	var n int
	err := db.QueryRowContext(ctx, "SELECT count(*) FROM ro_behind_t").Scan(&n)
	wantNoReplica(t, "autocommit read with every replica behind", err, pgrouted.ReasonBehind)

	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err == nil {
		onStandby := inRecovery(t, ctx, tx)
		tx.Rollback()
		t.Fatalf("read-only transaction with every replica behind under fallback=error began (on a standby: %v), want ErrNoReplica (behind)", onStandby)
	}
	wantNoReplica(t, "read-only transaction with every replica behind", err, pgrouted.ReasonBehind)
	for _, e := range rec.snapshot() {
		if e.Op == pgrouted.OpTx && e.Query == "BEGIN" && e.Primary {
			t.Fatalf("a BEGIN ran on the primary: %+v", e)
		}
	}
}

// Under pgrouted_fallback=error, a read-only transaction whose replicas'
// connections fail fails as an autocommit read does, instead of running on
// the primary. The replicas' data connections are refused by a hook after
// connecting, while their probes (which do not run it) keep them healthy.
func TestReadOnlyTxFallbackErrorConnection(t *testing.T) {
	ctx := testCtx(t)
	// Failures of data connections must not open the circuits: the
	// transaction must meet the failing connections, as the read does.
	refused := errors.New("test: replica connection refused")
	db, _, rec := openDSN(t, cluster.DSN()+"&pgrouted_probe_interval=100ms&pgrouted_lease=5s&pgrouted_fallback=error&pgrouted_circuit_failures=1000&pgrouted_names="+names(), func(c *pgrouted.Config) {
		for i := range c.Hosts {
			if i == 0 {
				continue // node0, the primary
			}
			c.Hosts[i].ConnConfig.AfterConnect = func(context.Context, *pgconn.PgConn) error { return refused }
		}
	})
	var one int
	err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	wantNoReplica(t, "autocommit read with every replica connection failing", err, pgrouted.ReasonUnhealthy)

	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err == nil {
		onStandby := inRecovery(t, ctx, tx)
		tx.Rollback()
		t.Fatalf("read-only transaction with every replica connection failing under fallback=error began (on a standby: %v), want ErrNoReplica", onStandby)
	}
	wantNoReplica(t, "read-only transaction with every replica connection failing", err, pgrouted.ReasonUnhealthy)
	if !errors.Is(err, refused) {
		t.Errorf("the RouteError does not carry the connection's error: %v", err)
	}
	for _, e := range rec.snapshot() {
		if e.Op == pgrouted.OpTx && e.Query == "BEGIN" && e.Primary {
			t.Fatalf("a BEGIN ran on the primary: %+v", e)
		}
	}
}

// A read-only transaction forced to a replica goes to a replica on a
// connection pinned to the primary by session state, as a forced
// autocommit read does.
func TestForcedReplicaTxOnPinnedConn(t *testing.T) {
	ctx := testCtx(t)
	db, conn, rec := open(t)
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "SET application_name = 'pinned_forced'"); err != nil {
		t.Fatal(err)
	}
	// The SET raised the connector's marks to the primary's insert
	// position after it, as every statement that is not a read does: WAL
	// the primary may not have flushed yet (a read's hint-bit images), which
	// no replica holds until it does, up to 15 s later; and another test's
	// commit just before leaves the replicas unproven within the staleness
	// budget until their next probe. The forced read below has no fallback:
	// it would find every replica behind (a fresh-clone run without -race
	// did). So the primary flushes (replicatedInserted), and the test waits
	// until reads of every relation go to a replica.
	replicatedInserted(t, ctx)
	waitReplicaRoute(t, conn)
	rctx := pgrouted.WithRoute(ctx, pgrouted.Replica)
	if !inRecovery(t, rctx, c) {
		t.Fatal("forced autocommit read on a pinned connection ran on the primary")
	}
	if inRecovery(t, ctx, c) {
		t.Fatal("autocommit read on a pinned connection ran on a replica")
	}
	tx, err := c.BeginTx(rctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if !inRecovery(t, ctx, tx) {
		var reasons []string
		for _, e := range rec.snapshot() {
			if e.Query == "BEGIN" {
				reasons = append(reasons, fmt.Sprintf("%s on %s", e.Reason, e.Endpoint))
			}
		}
		t.Fatalf("read-only transaction forced to a replica on a pinned connection ran on the primary (BEGIN events: %v)", reasons)
	}
	// Not forced, the pinned connection keeps it on the primary.
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	tx2, err := c.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback()
	if inRecovery(t, ctx, tx2) {
		t.Fatal("read-only transaction on a pinned connection ran on a replica")
	}
}

// A read forced to a replica (by comment or by context) inside a
// transaction opened with SQL BEGIN runs inside that transaction, on the
// primary: it sees the transaction's own uncommitted row.
func TestForcedReplicaReadInSQLTx(t *testing.T) {
	ctx := testCtx(t)
	db, _, rec := open(t)
	mustExec(t, ctx, cluster.Primary(), "CREATE TABLE IF NOT EXISTS sqltx_t (v text)")
	replicated(t, ctx)
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	defer c.ExecContext(context.Background(), "ROLLBACK")
	if _, err := c.ExecContext(ctx, "INSERT INTO sqltx_t VALUES ('uncommitted')"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		name string
		ctx  context.Context
		sql  string
	}{
		{"comment", ctx, "/* pgrouted:replica */ SELECT pg_is_in_recovery(), count(*) FROM sqltx_t WHERE v = 'uncommitted' -- sqltxforced1"},
		{"context", pgrouted.WithRoute(ctx, pgrouted.Replica), "SELECT pg_is_in_recovery(), count(*) FROM sqltx_t WHERE v = 'uncommitted' -- sqltxforced2"},
	} {
		var standby bool
		var n int
		if err := c.QueryRowContext(k.ctx, k.sql).Scan(&standby, &n); err != nil {
			t.Fatalf("%s: %v", k.name, err)
		}
		if standby || n != 1 {
			t.Errorf("forced replica read (%s) inside a SQL transaction ran outside it (on a standby: %v, saw the transaction's row: %v)", k.name, standby, n == 1)
		}
		if on := ranOn(t, k.sql[len(k.sql)-12:]); !slices.Equal(on, []string{"node0"}) {
			t.Errorf("forced replica read (%s) inside a SQL transaction ran on %v", k.name, on)
		}
	}
	for _, e := range rec.snapshot() {
		if e.Op == pgrouted.OpRead && len(e.Query) > 12 && e.Query[len(e.Query)-12:len(e.Query)-1] == "sqltxforced" && e.Reason != pgrouted.ReasonInTx {
			t.Errorf("forced read in a SQL transaction reported %q, want %q", e.Reason, pgrouted.ReasonInTx)
		}
	}
	// Inside a database/sql transaction on the primary, a forced read stays
	// in it too.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO sqltx_t VALUES ('in-tx')"); err != nil {
		t.Fatal(err)
	}
	var standby bool
	var n int
	if err := tx.QueryRowContext(pgrouted.WithRoute(ctx, pgrouted.Replica), "/* pgrouted:replica */ SELECT pg_is_in_recovery(), count(*) FROM sqltx_t WHERE v = 'in-tx'").Scan(&standby, &n); err != nil {
		t.Fatal(err)
	}
	if standby || n != 1 {
		t.Errorf("forced replica read inside a database/sql transaction ran outside it (on a standby: %v, saw its row: %v)", standby, n == 1)
	}
}
