//go:build unix

package pgrouted_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// TestReadBackSkipsReplicasCatchingUp: with replay paused on every
// replica, a read-back right after its write finds no replica that has
// it. Once a few checks said so, the read-backs go to the primary at once
// (catching-up) instead of checking a replica that refuses them (behind),
// but for one in 8 that still checks; each sees its row. Once replay
// resumes, the same read is served by a replica again. Through the driver
// and through a Pool. (Replay is paused rather than delayed: however slow
// the test runs, under -race or a loaded machine, every check fails.) The
// writes are a Session's: their positions are read with them, so every
// read that checks does so at once (without one, the read of a deferred
// position has a rule of its own: TestDeferredPositionReadWhenItPays).
func TestReadBackSkipsReplicasCatchingUp(t *testing.T) {
	forEachClient(t, testReadBackSkipsReplicasCatchingUp)
}

func testReadBackSkipsReplicasCatchingUp(t *testing.T, open opener) {
	ctx := pgrouted.WithSession(testCtx(t), pgrouted.NewSession())
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS catchup; CREATE TABLE catchup (id int)")
	replicated(t, ctx)
	db, conn, rec := open(t)
	replicasReady(t, conn)
	// Until a replica serves a read-back after checking it: the replicas
	// are then known to follow the writes' timeline (a replica whose probe
	// does not say so yet refuses the read without a check).
	// Generous: on a loaded machine replay can trail the writes for
	// seconds.
	seen := map[pgrouted.Reason]int{}
	for i, deadline := -1, time.Now().Add(45*time.Second); ; i-- {
		ev := writeReadBack(t, ctx, db, rec, "catchup", i)
		if !ev.Primary && ev.Reason == pgrouted.ReasonCheck {
			break
		}
		seen[ev.Reason]++
		if time.Now().After(deadline) {
			top, _ := json.Marshal(conn.Topology())
			t.Fatalf("no read-back was served by a replica after a check within 45s: %v; topology: %s", seen, top)
		}
	}
	for _, r := range cluster.Replicas() {
		if err := r.PauseReplay(ctx); err != nil {
			t.Fatal(err)
		}
	}
	const n = 160
	// The reads above may have gone to the primary without a check too
	// (on a busy machine the replicas can be slow to replay them): the
	// counter is compared with the reads below only.
	fallbacks := conn.Stats().Fallbacks[pgrouted.ReasonCatchingUp]
	reasons := map[pgrouted.Reason]int{}
	for i := range n {
		ev := writeReadBack(t, ctx, db, rec, "catchup", i)
		reasons[ev.Reason]++
	}
	t.Logf("%d read-backs: %v", n, reasons)
	if reasons[pgrouted.ReasonCatchingUp] < n/2 {
		t.Fatalf("%d of %d read-backs went to the primary without a check (%v); want most: every check of a write that young fails", reasons[pgrouted.ReasonCatchingUp], n, reasons)
	}
	if reasons[pgrouted.ReasonBehind] == 0 {
		t.Fatalf("no read-back checked a replica (%v): one in 8 should, to notice when the replicas catch up faster", reasons)
	}
	if got := conn.Stats().Fallbacks[pgrouted.ReasonCatchingUp] - fallbacks; got != uint64(reasons[pgrouted.ReasonCatchingUp]) {
		t.Fatalf("Stats.Fallbacks[catching-up] grew by %d, the read-backs' events say %d", got, reasons[pgrouted.ReasonCatchingUp])
	}
	for _, r := range cluster.Replicas() {
		if err := r.ResumeReplay(ctx); err != nil {
			t.Fatal(err)
		}
	}
	untilReplica(t, ctx, db, rec, "SELECT count(*) FROM catchup WHERE id >= 0", n)
}
