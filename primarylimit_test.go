//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgrouted/pgrouted"
)

// openPrimaryAlone opens pgrouted on a DSN of the primary alone: every
// read falls back to the primary (reason no-replicas).
func openPrimaryAlone(t *testing.T, extra string) (*sql.DB, *pgrouted.Connector) {
	t.Helper()
	dsn := "postgres://postgres@" + cluster.Primary().Addr() + "/postgres?sslmode=disable&pgrouted_probe_interval=100ms" + extra
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	for deadline := time.Now().Add(15 * time.Second); conn.Topology().Primary == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no primary known 15s after opening a DSN of the primary alone: %+v", conn.Topology())
		}
	}
	return db, conn
}

// limitProbe is a function labelled STABLE (so that a call of it is a
// read) that counts the statements active on the server whose text holds
// marker, then sleeps 0.4 s: n calls at once each see how many of them ran
// at once when it started.
const limitProbe = `CREATE OR REPLACE FUNCTION limit_probe(marker text) RETURNS int STABLE LANGUAGE plpgsql AS $$
DECLARE n int;
BEGIN
	SELECT count(*) INTO n FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%' || marker || '%';
	PERFORM pg_sleep(0.4);
	RETURN n;
END $$`

// concurrentReads runs n reads at once with ctx, each of which counts the
// reads of the same text active on the primary when it starts
// (limitProbe), and returns the most any of them saw and the errors.
func concurrentReads(t *testing.T, ctx context.Context, db *sql.DB, n int, marker string) (most int, errs []error) {
	t.Helper()
	q := fmt.Sprintf("SELECT limit_probe('%s')", marker)
	// Every connection is opened first, so that the reads start together.
	conns := make([]*sql.Conn, n)
	for i := range conns {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var active int
			err := c.QueryRowContext(ctx, q).Scan(&active)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			most = max(most, active)
		}()
	}
	close(start)
	wg.Wait()
	return most, errs
}

// TestPrimaryReadLimit: with pgrouted_primary_read_limit=2, never more
// than 2 reads that no replica could serve run on the primary at once
// (counted by the reads themselves in pg_stat_activity); past it a read
// without a wait fails at once with a retryable primary-busy RouteError,
// and a read with a wait waits for a slot. Reads sent to the primary for
// another reason (WithRoute) are not held back, and without a limit the
// same reads run all at once (the count can fail).
func TestPrimaryReadLimit(t *testing.T) {
	ctx := testCtx(t)
	const n, limit = 8, 2
	mustExec(t, ctx, cluster.Primary(), limitProbe)
	replicated(t, ctx)
	db, conn := openPrimaryAlone(t, fmt.Sprintf("&pgrouted_primary_read_limit=%d", limit))

	most, errs := concurrentReads(t, ctx, db, n, "limit-nowait-3f1")
	if most > limit {
		t.Errorf("%d fallback reads ran at once on the primary, limit %d", most, limit)
	}
	if len(errs) == 0 {
		t.Errorf("%d reads of 0.4 s at once with a limit of %d and no wait: none failed", n, limit)
	}
	for _, err := range errs {
		var re *pgrouted.RouteError
		if !errors.As(err, &re) || re.Reason != pgrouted.ReasonPrimaryBusy || !errors.Is(err, pgrouted.ErrPrimaryBusy) {
			t.Fatalf("read past the limit: %v, want a RouteError of reason %s", err, pgrouted.ReasonPrimaryBusy)
		}
		if !pgconn.SafeToRetry(fmt.Errorf("handler: %w", err)) {
			t.Fatalf("read past the limit: %v: pgconn.SafeToRetry false, want true (nothing was sent)", err)
		}
	}
	if got := conn.Stats().RouteErrors[pgrouted.ReasonPrimaryBusy]; got != uint64(len(errs)) {
		t.Errorf("Stats.RouteErrors[%s] = %d, want the %d reads that failed", pgrouted.ReasonPrimaryBusy, got, len(errs))
	}
	t.Logf("no wait: at most %d at once, %d of %d failed", most, len(errs), n)

	// With a wait, they take turns.
	before := conn.Stats()
	most, errs = concurrentReads(t, pgrouted.WithReplicaWait(ctx, time.Minute), db, n, "limit-wait-9c2")
	if len(errs) > 0 {
		t.Fatalf("reads that may wait a minute for a slot: %v", errs[0])
	}
	if most > limit {
		t.Errorf("%d fallback reads ran at once on the primary, limit %d", most, limit)
	}
	after := conn.Stats()
	if after.PrimaryReadWaits == before.PrimaryReadWaits {
		t.Errorf("Stats.PrimaryReadWaits did not move: %d reads of 0.4 s at once with a limit of %d waited for none", n, limit)
	}
	if after.PrimaryReadsPeak > limit {
		t.Errorf("Stats.PrimaryReadsPeak = %d, limit %d", after.PrimaryReadsPeak, limit)
	}
	t.Logf("with a wait: at most %d at once, %d waits", most, after.PrimaryReadWaits-before.PrimaryReadWaits)

	// Forced to the primary: not a fallback read.
	most, errs = concurrentReads(t, pgrouted.WithRoute(ctx, pgrouted.Primary), db, n, "limit-forced-5d7")
	if len(errs) > 0 {
		t.Fatalf("reads forced to the primary: %v", errs[0])
	}
	if most <= limit {
		t.Errorf("reads forced to the primary ran at most %d at once: held back by the limit on fallback reads (%d)", most, limit)
	}

	// Without a limit: all at once.
	db0, _ := openPrimaryAlone(t, "")
	most, errs = concurrentReads(t, ctx, db0, n, "limit-none-1a8")
	if len(errs) > 0 {
		t.Fatalf("reads without a limit: %v", errs[0])
	}
	if most <= limit {
		t.Errorf("without a limit, %d reads of 0.4 s at once ran at most %d at once: the count cannot tell", n, most)
	}
}
