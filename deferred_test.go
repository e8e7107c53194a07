package pgrouted_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// TestWriteDefersItsPosition: a write without a Session runs alone on the
// primary, as pgx runs it (no read of the WAL position after it: the
// session's last statement on the server is the write); the first read
// after it that a replica may serve reads the position once, and sees the
// write. With a Session the position is read at once: its token carries
// it. Through the driver and through the Pool.
func TestWriteDefersItsPosition(t *testing.T) {
	forEachClient(t, testWriteDefersItsPosition)
}

func testWriteDefersItsPosition(t *testing.T, open opener) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS deferred_pos; CREATE TABLE deferred_pos (id int)")
	replicated(t, ctx)
	app := "deferred_" + strings.ReplaceAll(t.Name(), "/", "_")
	db, conn, rec := open(t, "application_name="+app)

	// lastStatements are the last statements of the client's sessions on
	// the primary.
	lastStatements := func() []string {
		t.Helper()
		var all string
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if err := cluster.Primary().QueryRow(ctx, "SELECT coalesce(string_agg(query, E'\\n'), '') FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle'", []any{app}, &all); err != nil {
				t.Fatal(err)
			}
			if all != "" || time.Now().After(deadline) {
				return strings.Split(all, "\n")
			}
		}
	}
	for i := 1; i <= 3; i++ {
		marker := fmt.Sprintf("deferred-write-%d", i)
		if err := db.ExecContext(ctx, "INSERT INTO deferred_pos VALUES ($1) /* "+marker+" */", i); err != nil {
			t.Fatal(err)
		}
		found := false
		last := lastStatements()
		for _, q := range last {
			found = found || strings.Contains(q, marker)
		}
		if !found {
			t.Fatalf("write %d: the session's last statements on the primary are %q: something ran after the write", i, last)
		}
	}
	if st := conn.Stats(); st.PositionFetches != 0 || st.DeferredPositionReads != 0 {
		t.Fatalf("positions read before any read: %+v", st)
	}
	// The first read-back (a new connector has no record of its replicas'
	// checks: it checks) reads the position once.
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM deferred_pos").Scan(&n); err != nil || n != 3 {
		t.Fatalf("read-back: %d, %v; want 3", n, err)
	}
	ev := lastRead(t, rec)
	st := conn.Stats()
	if ev.Primary || ev.Reason != pgrouted.ReasonCheck || st.DeferredPositionReads != 1 || st.PositionFetches != 1 {
		t.Fatalf("read-back: %+v; stats: %d position reads for %d deferred reads; want a replica's check after one read of the position",
			ev, st.PositionFetches, st.DeferredPositionReads)
	}
	// The next read needs no new position: it was kept.
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM deferred_pos").Scan(&n); err != nil || n != 3 {
		t.Fatalf("second read: %d, %v; want 3", n, err)
	}
	if st := conn.Stats(); st.PositionFetches != 1 {
		t.Fatalf("second read: %d position reads, want still 1", st.PositionFetches)
	}

	// With a Session: the position is read after the write, at once.
	s := pgrouted.NewSession()
	if err := db.ExecContext(pgrouted.WithSession(ctx, s), "INSERT INTO deferred_pos VALUES (4)"); err != nil {
		t.Fatal(err)
	}
	tok, err := s.MarshalText()
	if err != nil || len(tok) == 0 || strings.Contains(string(tok), "unknown") {
		t.Fatalf("a Session's token after its write: %q, %v; want its position", tok, err)
	}
}
