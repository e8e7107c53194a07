//go:build unix

package pgrouted_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted"
)

// The tests of this file check what pgrouted relies on that differs from
// one PostgreSQL major version to another, on the cluster's version (make
// test-versions runs them on 13 to 18).

// TestHotStandbyReported: from PostgreSQL 14 a server reports
// in_hot_standby at connect ("on" on a standby), and pgrouted refuses a
// primary session that lands on a standby at once; PostgreSQL 13 reports
// nothing, and pgrouted relies on the probes and on SQLSTATE 25006 there
// (TestWriteToADemotedPrimary).
func TestHotStandbyReported(t *testing.T) {
	ctx := testCtx(t)
	for _, n := range cluster.Nodes() {
		conn, err := pgx.Connect(ctx, n.DirectDSN())
		if err != nil {
			t.Fatal(err)
		}
		got := conn.PgConn().ParameterStatus("in_hot_standby")
		conn.Close(ctx)
		rec, err := n.IsInRecovery(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := ""
		if cluster.Major() >= 14 {
			want = map[bool]string{true: "on", false: "off"}[rec]
		}
		if got != want {
			t.Errorf("%s (in recovery: %v) on PostgreSQL %d reports in_hot_standby %q, want %q", n.Name(), rec, cluster.Major(), got, want)
		}
	}
}

// TestWriteToADemotedPrimary: the host the topology last saw as primary is
// a standby when a write opens its session there (the old primary rejoined
// as a standby before its next probe). From PostgreSQL 14 the session is
// refused at connect (in_hot_standby) and the write never reaches it; on
// 13 the write reaches it and is refused with SQLSTATE 25006. Either way
// pgrouted probes the host at once, waits for the topology to move, and
// runs the write once, on the new primary. Through the driver and through
// the Pool.
func TestWriteToADemotedPrimary(t *testing.T) {
	forEachClientDSN(t, testWriteToADemotedPrimary)
}

func testWriteToADemotedPrimary(t *testing.T, open dsnOpener) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "CREATE TABLE IF NOT EXISTS demoted_t (v text)")
	replicated(t, ctx)
	// Probes a minute apart: only the driver's own probe of the host
	// (and ours of node1, below) tells the topology what changed.
	db, conn, rec := open(t, cluster.DSN()+"&pgrouted_probe_interval=1m&pgrouted_max_lag=none&pgrouted_lease=5m&pgrouted_write_timeout=60s&pgrouted_names="+names(), nil)
	old, promoted := cluster.Node(0), cluster.Node(1)
	if top := conn.Topology(); top.Primary != old.Name() {
		t.Fatalf("the topology's primary is %q, want %s", top.Primary, old.Name())
	}
	if err := old.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := promoted.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := old.Rejoin(ctx, promoted); err != nil {
		t.Fatal(err)
	}
	if top := conn.Topology(); top.Primary != old.Name() {
		t.Fatalf("the topology's primary is %q before the write, want %s (still the old primary): the test cannot tell what the write did", top.Primary, old.Name())
	}

	marker := fmt.Sprintf("demoted-%d", time.Now().UnixNano())
	done := make(chan error, 1)
	go func() {
		done <- db.ExecContext(ctx, "INSERT INTO demoted_t VALUES ('"+marker+"')")
	}()
	// The driver's probe of the old primary shows it a standby; then
	// ours of node1 shows the new primary, which the write waits for.
	waitTopology(t, conn, 30*time.Second, old.Name()+" seen as a standby", func(s pgrouted.Snapshot) bool {
		for _, h := range s.Hosts {
			if h.Name == old.Name() {
				return h.Role == "standby"
			}
		}
		return false
	})
	pgrouted.ProbeNow(conn, 1)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("write: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the write did not return within 60s")
	}
	var on []string
	for _, e := range rec.snapshot() {
		if strings.Contains(e.Query, marker) {
			on = append(on, e.Endpoint)
		}
	}
	if len(on) != 1 || on[0] != promoted.Name() {
		t.Errorf("the write's route events name %v, want [%s]", on, promoted.Name())
	}
	var rows int
	if err := promoted.QueryRow(ctx, "SELECT count(*) FROM demoted_t WHERE v = $1", []any{marker}, &rows); err != nil || rows != 1 {
		t.Fatalf("the new primary holds %d rows of the write (%v), want 1", rows, err)
	}
	b, err := os.ReadFile(old.LogFile())
	if err != nil {
		t.Fatal(err)
	}
	reached := strings.Contains(string(b), marker)
	refused := strings.Contains(string(b), "cannot execute INSERT in a read-only transaction")
	switch {
	case cluster.Major() >= 14 && reached:
		t.Errorf("PostgreSQL %d: the write reached the demoted primary %s, whose in_hot_standby should have refused the session", cluster.Major(), old.Name())
	case cluster.Major() < 14 && !(reached && refused):
		t.Errorf("PostgreSQL %d: the demoted primary's log shows the write %v, its refusal %v: want both (there is no in_hot_standby before 14)", cluster.Major(), reached, refused)
	}
	t.Logf("PostgreSQL %d: the write reached the demoted primary: %v; ran on %s", cluster.Major(), reached, promoted.Name())
}

// TestReadOnlyPrimaryRefuses: a primary that refuses writes itself
// (default_transaction_read_only for the role) answers SQLSTATE 25006 as a
// demoted one does; the probe pgrouted sends then finds it the primary
// still, and the write fails with the server's error at once, instead of
// waiting for another primary until pgrouted_write_timeout.
func TestReadOnlyPrimaryRefuses(t *testing.T) {
	ctx := testCtx(t)
	mustExec(t, ctx, cluster.Primary(), `DROP ROLE IF EXISTS readonly_writer; CREATE ROLE readonly_writer LOGIN SUPERUSER;
		ALTER ROLE readonly_writer SET default_transaction_read_only = on;
		CREATE TABLE IF NOT EXISTS readonly_t (v text)`)
	replicated(t, ctx)
	u, err := url.Parse(cluster.DSN() + "&pgrouted_probe_interval=1m&pgrouted_max_lag=none&pgrouted_lease=5m&pgrouted_write_timeout=10m&pgrouted_names=" + names())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User("readonly_writer")
	db, _, _ := openDSN(t, u.String(), nil)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	_, err = db.ExecContext(wctx, "INSERT INTO readonly_t VALUES ('refused')")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "25006" || wctx.Err() != nil {
		t.Fatalf("write as a role whose transactions are read-only: %v (context: %v); want SQLSTATE 25006 long before pgrouted_write_timeout", err, wctx.Err())
	}
}
