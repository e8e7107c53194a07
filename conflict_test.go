//go:build unix

package pgrouted_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgrouted/pgrouted"
)

// TestRecoveryConflictRunsElsewhere: a read that a standby ends for a
// recovery conflict, on a real cluster, is known by its SQLSTATE and runs
// again elsewhere. The conflict: the database the read runs in is dropped
// on the primary while the read runs on a standby, which terminates it
// when it replays the drop (57P04, "terminating connection due to conflict
// with recovery"). Another host cannot serve it either (the database is
// gone), so the read still fails; what is checked is that it was run
// again (RouteEvent.Retried), not returned with the standby's error.
func TestRecoveryConflictRunsElsewhere(t *testing.T) {
	ctx := testCtx(t)
	const dbName = "pgrouted_conflict"
	p := cluster.Primary()
	p.Exec(ctx, "DROP DATABASE IF EXISTS "+dbName+" WITH (FORCE)")
	if err := p.Exec(ctx, "CREATE DATABASE "+dbName); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Exec(context.Background(), "DROP DATABASE IF EXISTS "+dbName+" WITH (FORCE)") })
	if err := cluster.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	dsn := strings.Replace(cluster.DSN(), "/postgres?", "/"+dbName+"?", 1)
	if dsn == cluster.DSN() {
		t.Fatalf("no database name to replace in %s", cluster.DSN())
	}
	db, _, rec := openDSN(t, dsn+"&pgrouted_probe_interval=100ms&pgrouted_names="+names(), nil)

	const q = "SELECT pg_sleep(60) -- conflicting read"
	done := make(chan error, 1)
	go func() {
		var s string
		done <- db.QueryRowContext(pgrouted.WithRoute(ctx, pgrouted.Replica), q).Scan(&s)
	}()
	// Wait until a standby runs it.
	for deadline := time.Now().Add(30 * time.Second); ; {
		running := false
		for _, r := range cluster.Replicas() {
			var n int
			if err := r.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query = $1", []any{q}, &n); err != nil {
				t.Fatal(err)
			}
			running = running || n == 1
		}
		if running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no standby runs the read 30s after it was issued")
		}
		select {
		case err := <-done:
			t.Fatalf("the read ended before the conflict: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := p.Exec(ctx, "DROP DATABASE "+dbName+" WITH (FORCE)"); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(45 * time.Second):
		t.Fatal("the read did not end 45s after its database was dropped")
	}
	// The standby's error as the read's own is a read not run again; a
	// RouteError that names it as what the last host said (no other
	// replica could take the read: their sessions in the database were
	// ended by the same drop, and its probes failed) is a read that was.
	var pe *pgconn.PgError
	var re *pgrouted.RouteError
	if !errors.As(err, &re) && errors.As(err, &pe) && pe.Code == "57P04" {
		t.Fatalf("the read returned the standby's recovery conflict (%v): it was not run again elsewhere", err)
	}
	var ev *pgrouted.RouteEvent
	for _, e := range rec.snapshot() {
		if e.Query == q {
			ev = &e
		}
	}
	if ev == nil || !ev.Retried {
		t.Fatalf("the read's event %+v: want Retried (run again after the standby's conflict); error %v", ev, err)
	}
	t.Logf("after the conflict: %s", fmt.Sprint(err))
}
