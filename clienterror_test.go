//go:build unix

package pgrouted_test

import (
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// lastEvent returns the last RouteEvent of query.
func lastEvent(t *testing.T, rec *routes, query string) pgrouted.RouteEvent {
	t.Helper()
	evs := rec.snapshot()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Query == query {
			return evs[i]
		}
	}
	t.Fatalf("no RouteEvent for %q", query)
	return pgrouted.RouteEvent{}
}

// TestArgumentThatCannotBeEncoded: an argument no host could encode fails
// at once: a read on a replica is not retried elsewhere nor reported as
// replica-failed, on pgx's path and on the checked (pipelined) one; a
// write with one was never sent, so the read-your-writes position stays
// known.
func TestArgumentThatCannotBeEncoded(t *testing.T) {
	ctx := testCtx(t)
	// Probes far apart: right after a write, only the check can tell.
	db, conn, rec := openDSN(t, cluster.DSN()+"&pgrouted_names="+names()+"&pgrouted_probe_interval=5s&pgrouted_latency_window=off", nil)
	bad := make(chan int)                                                // pgx has no encoding for a channel
	const read = "SELECT $1::int AS enc_read FROM generate_series(1, 1)" // every relation: it needs the write below
	// check reads with the argument, and reports false when the read ran
	// on a replica without a check although reason wants one: a probe
	// saw the write replayed first (probes are 5 s apart, and replicated
	// may wait that long on a loaded machine), so the path was not tried.
	check := func(path string, reason pgrouted.Reason) bool {
		t.Helper()
		if _, err := db.QueryContext(ctx, read, bad); err == nil {
			t.Fatalf("%s: a channel as an argument: no error", path)
		}
		ev := lastEvent(t, rec, read)
		if !ev.Retried && !ev.Primary && reason == pgrouted.ReasonCheck && ev.Reason == pgrouted.ReasonReplica {
			return false
		}
		if ev.Retried || ev.Primary || ev.Reason != reason {
			t.Errorf("%s: the read was retried or moved: %+v, want %s on a replica", path, ev.Decision, reason)
		}
		return true
	}
	check("pgx's path", pgrouted.ReasonReplica)
	if got := conn.Stats().ReplicaRetries; got != 0 {
		t.Errorf("ReplicaRetries = %d, want 0", got)
	}

	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS enc_t (v int)"); err != nil {
		t.Fatal(err)
	}
	waitReplicaRoute(t, conn)
	const write = "INSERT INTO enc_t VALUES ($1)"
	if _, err := db.ExecContext(ctx, write, bad); err == nil {
		t.Fatal("a channel as an argument of a write: no error")
	}
	d, err := conn.Explain(ctx, readOfEveryRelation)
	if err != nil || d.Reason == pgrouted.ReasonPositionUnknown {
		t.Errorf("after a write that was never sent, a read: %+v, %v; want its position known", d, err)
	}
	// A write, whose position the probes have not seen replayed yet: the
	// next read checks its replica in the pipeline with the read. Up to 3
	// tries, each after a write of its own, when a probe came between.
	for try := 1; ; try++ {
		if _, err := db.ExecContext(ctx, write, 1); err != nil {
			t.Fatal(err)
		}
		replicated(t, ctx)
		if check("the checked path", pgrouted.ReasonCheck) {
			break
		}
		if try == 3 {
			t.Fatal("the checked path: 3 reads after a write ran without a check (a probe saw each write replayed first)")
		}
		t.Logf("try %d: a probe saw the write replayed before the read: once more", try)
	}
	if got := conn.Stats().ReplicaRetries; got != 0 {
		t.Errorf("ReplicaRetries = %d, want 0", got)
	}
}

// TestPositionReadIsBounded: when the primary stops answering after a
// write whose position is read in its own round trip, the write that
// succeeded still returns: the read of the position gives up.
func TestPositionReadIsBounded(t *testing.T) {
	restore(t)
	ctx := testCtx(t)
	// The simple protocol: the position is read after the rows are closed,
	// on its own.
	db, _, _ := open(t, "default_query_exec_mode=simple_protocol")
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS bound_t (id serial, v int)"); err != nil {
		t.Fatal(err)
	}
	rows, err := db.QueryContext(ctx, "INSERT INTO bound_t (v) VALUES (1) RETURNING id")
	if err != nil {
		t.Fatal(err)
	}
	// Not to the end: database/sql would close the rows there.
	if !rows.Next() {
		t.Fatal(rows.Err())
	}
	if err := cluster.Primary().Fault().Blackhole(); err != nil {
		t.Fatal(err)
	}
	defer cluster.Primary().Fault().Heal()
	done := make(chan error, 1)
	go func() { done <- rows.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("closing the rows of a write that succeeded: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("closing the rows of a write waits on a silent primary for more than a minute")
	}
}
