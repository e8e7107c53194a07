//go:build unix

package testcluster_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgrouted/pgrouted/testcluster"
)

// TestCloneByCopyUnderWrites rebuilds a standby as a copy of the primary's
// data directory (what testcluster does where there is no pg_basebackup:
// the npm packages of PostgreSQL) while the primary keeps inserting and
// updating: the copy catches pages half-written, which WAL replay from the
// backup's checkpoint must repair. The standby must stream, and hold
// exactly the primary's rows once it replayed the primary's position.
func TestCloneByCopyUnderWrites(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	defer testcluster.SetForceCopy(true)()
	p, r := shared.Primary(), shared.Replicas()[1]
	mustExec(t, ctx, p, "DROP TABLE IF EXISTS copied; CREATE TABLE copied (id bigserial PRIMARY KEY, pad text)")

	// The writer stops between two statements, never under one: a
	// statement cut off by a cancelled context may still commit on the
	// primary after the writer returned, after the comparison below began.
	var halt atomic.Bool
	defer halt.Store(true)
	writes := make(chan int, 1)
	errs := make(chan error, 1)
	go func() {
		conn, err := pgx.Connect(ctx, p.DirectDSN())
		if err != nil {
			errs <- err
			return
		}
		defer conn.Close(context.Background())
		n := 0
		for !halt.Load() {
			_, err := conn.Exec(ctx, `INSERT INTO copied (pad) SELECT repeat(md5(random()::text), 16) FROM generate_series(1, 40);
				UPDATE copied SET pad = md5(pad) WHERE id IN (SELECT id FROM copied ORDER BY random() LIMIT 20)`)
			if err != nil {
				errs <- err
				return
			}
			n++
			select {
			case writes <- n:
			default:
			}
		}
		errs <- nil
	}()
	// The copy starts while writes run.
	select {
	case <-writes:
	case err := <-errs:
		t.Fatalf("writer: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no write within 30s")
	}
	if err := r.Rejoin(ctx, p); err != nil {
		t.Fatal(err)
	}
	// And go on a little after it, while the standby catches up.
	time.Sleep(200 * time.Millisecond)
	halt.Store(true)
	if err := <-errs; err != nil {
		t.Fatalf("writer: %v", err)
	}
	if err := shared.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	sum := func(n *testcluster.Node) (rows int, digest string) {
		t.Helper()
		if err := n.QueryRow(ctx, "SELECT count(*), coalesce(md5(string_agg(id || ':' || pad, ',' ORDER BY id)), '') FROM copied", nil, &rows, &digest); err != nil {
			t.Fatal(err)
		}
		return rows, digest
	}
	pr, pd := sum(p)
	rr, rd := sum(r)
	if pr == 0 || pr != rr || pd != rd {
		t.Fatalf("primary %s: %d rows (%s); standby %s copied under writes: %d rows (%s)", p, pr, pd, r, rr, rd)
	}
	if rec, err := r.IsInRecovery(ctx); err != nil || !rec {
		t.Fatalf("%s: in recovery = %v, %v", r, rec, err)
	}
	t.Logf("%s copied from %s under writes (%s): %d rows, same as the primary's", r, p, shared.Version(), rr)
}
