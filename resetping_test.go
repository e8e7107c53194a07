//go:build unix

package pgrouted_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// TestReplicaReadOnAFrozenPrimarysConnection: a connection whose primary
// session is on a primary that froze (its lease still running, no
// promotion) is reused, after more than a second idle, for a read that a
// replica serves. The read runs on the replica at once: reusing the
// connection sends nothing to the primary (pgx's stdlib pinged an idle
// session on reuse, and the ping waited for the frozen primary until the
// term ended: the replica read with it, and a primary read held there ran
// on the next primary as a new read, not as one run again). Through the
// driver and through the Pool.
func TestReplicaReadOnAFrozenPrimarysConnection(t *testing.T) {
	forEachClient(t, testReplicaReadOnAFrozenPrimarysConnection)
}

func testReplicaReadOnAFrozenPrimarysConnection(t *testing.T, open opener) {
	ctx := testCtx(t)
	restore(t)
	// The lease outlasts the test: only a ping could hold the read, and
	// nothing ends the term to release it.
	db, conn, rec := open(t, "pgrouted_lease=120s", "pgrouted_write_timeout=60s",
		fmt.Sprintf("connect_timeout=%d", int(frozenConnectTimeout/time.Second)))
	replicasReady(t, conn)
	// One connection, reused by each call below: its primary session is
	// opened by a read forced to the primary (no write, so no replica
	// lacks the connector's writes).
	db.SetMaxIdleConns(1)
	var one int
	if err := db.QueryRowContext(pgrouted.WithRoute(ctx, pgrouted.Primary), "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
	if ev := lastRead(t, rec); !ev.Primary {
		t.Fatalf("the read forced to the primary: %+v", ev.Decision)
	}
	waitClientReads(t, db, rec, 10*time.Second, "reads on a replica", func(on map[string]int) bool {
		return on["node1"]+on["node2"] > 0
	})
	if n := db.InUse() + db.Idle(); n != 1 {
		t.Fatalf("%d connections, want the one", n)
	}
	time.Sleep(1100 * time.Millisecond) // idle long enough for pgx's stdlib to ping it
	primary := cluster.Primary()
	if err := primary.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			primary.Thaw()
		}
	}()
	// The bound is far below the lease, which alone would end a ping's
	// wait, and far above a replica read on a loaded machine.
	const bound = 15 * time.Second
	rctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	began := time.Now()
	err := db.QueryRowContext(rctx, "SELECT 2").Scan(&one)
	took := time.Since(began)
	thawed = true
	if err := primary.Thaw(); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatalf("a replica read on a connection whose primary session is on the frozen primary: %v after %v", err, took.Round(time.Millisecond))
	}
	if ev := lastRead(t, rec); ev.Primary || ev.Err != nil {
		t.Fatalf("the read: %+v, %v; want a replica", ev.Decision, ev.Err)
	}
	t.Logf("the replica read took %v with the primary frozen", took.Round(time.Millisecond))
}
