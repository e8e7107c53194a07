//go:build unix

package pgrouted_test

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// failoverDB opens a client (by open) on the cluster as user (the
// cluster's own, a superuser, when empty), with a recorder and a log
// buffer.
func failoverDB(t *testing.T, open dsnOpener, user string) (client, *pgrouted.Connector, *routes, *syncBuffer) {
	t.Helper()
	// No staleness budget: the new primary's history starts empty, and
	// the default budget would keep the first reads after the failover
	// off the replicas (position-unknown) whatever the watermark says,
	// which is what these tests read. Open circuits probed every second
	// at most: a replica rebuilt during the failover (seconds of failed
	// probes) is back as soon as it runs, not after a doubled backoff.
	dsn := cluster.DSN() + "&pgrouted_probe_interval=100ms&pgrouted_max_lag=none&pgrouted_circuit_max_backoff=1s&pgrouted_names=" + names()
	if user != "" {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(user)
		dsn = u.String()
	}
	logs := &syncBuffer{}
	db, conn, rec := open(t, dsn, func(cfg *pgrouted.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	return db, conn, rec, logs
}

// failOver kills node0, heals the replication links, promotes node1,
// points node2 at it (rebuilt from node1 with rebuild) and waits until the
// connector sees node1 as the primary.
func failOver(t *testing.T, ctx context.Context, conn *pgrouted.Connector, rebuild bool) {
	t.Helper()
	if err := cluster.Node(0).Kill(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range cluster.Replicas() {
		if err := r.ReplicationFault().Heal(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cluster.Node(1).Promote(ctx); err != nil {
		t.Fatal(err)
	}
	// After a write only the old primary had, node2 may hold WAL past the
	// switch point (what the old primary sent it while the links were
	// being cut) and could not follow: rebuild it then.
	follow := cluster.Node(2).Follow
	if rebuild {
		follow = cluster.Node(2).Rejoin
	}
	if err := follow(ctx, cluster.Node(1)); err != nil {
		t.Fatal(err)
	}
	// A replica rebuilt here had failed probes all along, and its open
	// circuit is probed after a doubled backoff (up to 30 s, unless the
	// connector caps it): wait past that cap.
	deadline := time.Now().Add(45 * time.Second)
	for {
		top := conn.Topology()
		if top.Primary == "node1" {
			if h := top.Hosts[2]; h.Name == "node2" && h.Healthy && h.Role == "standby" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node1 primary and node2 its standby not seen: %+v", top)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeNoStandbyGets runs a write through db that the old primary
// acknowledges and no standby receives: the replication links are cut
// before it runs, and failOver heals them once the primary is dead.
func writeNoStandbyGets(t *testing.T, ctx context.Context, db client, write string) {
	t.Helper()
	for _, r := range cluster.Replicas() {
		if err := r.ReplicationFault().Blackhole(); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.ExecContext(ctx, write); err != nil {
		t.Fatal(err)
	}
	// The links stay cut until failOver has killed the primary: healed
	// before, a standby could still fetch the write from it.
}

// lastRead returns the last read's event.
func lastRead(t *testing.T, rec *routes) pgrouted.RouteEvent {
	t.Helper()
	evs := rec.snapshot()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Op == pgrouted.OpRead {
			return evs[i]
		}
	}
	t.Fatal("no read recorded")
	return pgrouted.RouteEvent{}
}

// untilReplica reads until a read of the session runs on a replica, checking
// what it sees each time: the gate never stays closed for ever.
func untilReplica(t *testing.T, ctx context.Context, db client, rec *routes, query string, want int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var n int
		if err := db.QueryRowContext(ctx, query).Scan(&n); err != nil || n != want {
			t.Fatalf("%s: %d, %v; want %d", query, n, err, want)
		}
		if !lastRead(t, rec).Primary {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("reads of the session never went back to a replica")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWriteThatSurvivedAFailover: a session's write reached the standby
// that was then promoted. The new timeline's history says the write is in
// it: read-your-writes carries over to the new timeline, nothing is
// reported lost, and reads go on to a replica that has it. Through the
// driver and through the Pool.
func TestWriteThatSurvivedAFailover(t *testing.T) {
	forEachClientDSN(t, testWriteThatSurvivedAFailover)
}

func testWriteThatSurvivedAFailover(t *testing.T, open dsnOpener) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS survived; CREATE TABLE survived (id int)")
	replicated(t, ctx)
	db, conn, rec, logs := failoverDB(t, open, "")
	s := pgrouted.NewSession()
	sctx := pgrouted.WithSession(ctx, s)
	if err := db.ExecContext(sctx, "INSERT INTO survived VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	replicated(t, ctx)
	failOver(t, ctx, conn, false)
	var n int
	if err := db.QueryRowContext(sctx, "SELECT count(*) FROM survived").Scan(&n); err != nil || n != 1 {
		t.Fatalf("read after the failover: %d, %v", n, err)
	}
	if ev := lastRead(t, rec); ev.WriteLost || ev.Reason == pgrouted.ReasonPositionUnknown {
		t.Fatalf("first read after the failover: %+v (lost %v): the history shows the write survived", ev.Decision, ev.WriteLost)
	}
	untilReplica(t, sctx, db, rec, "SELECT count(*) FROM survived", 1)
	// The lines about writes (loss.go), not the topology's
	// primary-lost event, which a failover may log.
	if st := conn.Stats(); st.LostWrites != 0 || st.TimelineResets != 0 || strings.Contains(logs.String(), "been lost") || strings.Contains(logs.String(), "lost with the old primary") {
		t.Fatalf("a write that survived was reported: stats %+v, logs %q", st, logs.String())
	}
}

// TestLostWriteIsReported: the old primary acknowledged a session's write
// that no standby received, then died; the promoted standby's history
// leaves the old timeline before that write. pgrouted tells the
// application (RouteEvent.WriteLost on the read that found it,
// Stats.LostWrites, a warning), claims nothing for the lost write, and does
// not keep reads off the replicas. Through the driver and through the Pool.
func TestLostWriteIsReported(t *testing.T) {
	forEachClientDSN(t, testLostWriteIsReported)
}

func testLostWriteIsReported(t *testing.T, open dsnOpener) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS lost; CREATE TABLE lost (id int)")
	replicated(t, ctx)
	db, conn, rec, logs := failoverDB(t, open, "")
	sctx := pgrouted.WithSession(ctx, pgrouted.NewSession())
	writeNoStandbyGets(t, sctx, db, "INSERT INTO lost VALUES (1)")
	failOver(t, ctx, conn, true)
	var n int
	if err := db.QueryRowContext(sctx, "SELECT count(*) FROM lost").Scan(&n); err != nil || n != 0 {
		t.Fatalf("read after the failover: %d, %v; want 0 (the write is gone)", n, err)
	}
	if ev := lastRead(t, rec); !ev.WriteLost {
		t.Fatalf("the read after the failover did not report the lost write: %+v", ev)
	}
	if st := conn.Stats(); st.LostWrites != 1 || !strings.Contains(logs.String(), "was lost with the old primary") {
		t.Fatalf("lost write not reported: stats %+v, logs %q", st, logs.String())
	}
	untilReplica(t, sctx, db, rec, "SELECT count(*) FROM lost", 0)
	if ev := lastRead(t, rec); ev.WriteLost {
		t.Fatal("the loss is reported once, not on every read")
	}
}

// TestWatermarkAcrossFailoverWithoutHistory: a role that may not read the
// timeline history file cannot tell whether a write past the promoted
// standby's last known position survived. pgrouted says it may have been
// lost, reads it from the new primary, and goes back to the replicas once
// the new timeline's position is known. Through the driver and through the
// Pool.
func TestWatermarkAcrossFailoverWithoutHistory(t *testing.T) {
	forEachClientDSN(t, testWatermarkAcrossFailoverWithoutHistory)
}

func testWatermarkAcrossFailoverWithoutHistory(t *testing.T, open dsnOpener) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), `DO $$ BEGIN
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'plain') THEN CREATE ROLE plain LOGIN; END IF;
	END $$`)
	mustExec(t, ctx, cluster.Primary(), "GRANT pg_monitor TO plain")
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS across; CREATE TABLE across (id int)")
	mustExec(t, ctx, cluster.Primary(), "GRANT ALL ON across TO plain")
	replicated(t, ctx)
	db, conn, rec, logs := failoverDB(t, open, "plain")
	sctx := pgrouted.WithSession(ctx, pgrouted.NewSession())
	writeNoStandbyGets(t, sctx, db, "INSERT INTO across VALUES (1)")
	failOver(t, ctx, conn, true)
	if sw := conn.Topology(); strings.Contains(logs.String(), "was lost") {
		t.Fatalf("a role without the history claimed to know: %+v", sw)
	}
	possiblyLost(t, sctx, db, conn, rec, logs, "SELECT count(*) FROM across")
}

// possiblyLost reads query (a count of the rows of a write the old
// primary alone acknowledged) after a failover whose outcome for the
// write nobody can tell: the first read runs on the new primary
// (position-unknown) and sees 0 rows, the loss is reported as possible
// (TimelineResets, the log) and not as certain (no WriteLost, LostWrites
// 0), and reads go back to the replicas.
func possiblyLost(t *testing.T, ctx context.Context, db client, conn *pgrouted.Connector, rec *routes, logs *syncBuffer, query string) {
	t.Helper()
	var n int
	if err := db.QueryRowContext(ctx, query).Scan(&n); err != nil || n != 0 {
		t.Fatalf("read after the failover: %d, %v; want 0 (the write is gone)", n, err)
	}
	if ev := lastRead(t, rec); !ev.Primary || ev.Endpoint != "node1" || ev.Reason != pgrouted.ReasonPositionUnknown || ev.WriteLost {
		t.Fatalf("first read after the failover: %+v (lost %v), want the new primary (position-unknown)", ev.Decision, ev.WriteLost)
	}
	if st := conn.Stats(); st.TimelineResets == 0 || st.LostWrites != 0 || !strings.Contains(logs.String(), "may have been lost") {
		t.Fatalf("the possible loss was not reported as such: stats %+v, logs %q", st, logs.String())
	}
	untilReplica(t, ctx, db, rec, query, 0)
}

// TestDeferredWriteAcrossFailover: a write without a Session (its position
// deferred: nobody read it) that the old primary acknowledged and no
// standby received. After the failover nobody can tell whether it
// survived: pgrouted says it may have been lost (not that it was), reads
// from the new primary until a probe of it supplies a position on its
// timeline, then from the replicas. No read sees less than the new
// primary. Through the driver and through the Pool.
func TestDeferredWriteAcrossFailover(t *testing.T) {
	forEachClientDSN(t, testDeferredWriteAcrossFailover)
}

func testDeferredWriteAcrossFailover(t *testing.T, open dsnOpener) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS deferred_lost; CREATE TABLE deferred_lost (id int)")
	replicated(t, ctx)
	db, conn, rec, logs := failoverDB(t, open, "")
	writeNoStandbyGets(t, ctx, db, "INSERT INTO deferred_lost VALUES (1)")
	failOver(t, ctx, conn, true)
	possiblyLost(t, ctx, db, conn, rec, logs, "SELECT count(*) FROM deferred_lost")
}
