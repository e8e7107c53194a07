//go:build unix

package pgrouted_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted"
)

// TestRefusedReadFallbackError: a read a replica refused with SQLSTATE 25006
// (a function wrongly listed as a read) may not run again on the primary
// under pgrouted_fallback=error: it fails with ErrNoReplica, wrapping the
// server's refusal, and nothing ran on the primary.
func TestRefusedReadFallbackError(t *testing.T) {
	ctx := testCtx(t)
	setupFunctions(t, ctx)
	db, _, rec := openFunctions(t, "pgrouted_read_functions=app.add_item", "pgrouted_fallback=error")
	v := fmt.Sprintf("refused-error-%d", time.Now().UnixNano())
	var id int64
	err := db.QueryRowContext(ctx, "SELECT app.add_item($1)", v).Scan(&id)
	var re *pgrouted.RouteError
	var pe *pgconn.PgError
	if !errors.Is(err, pgrouted.ErrNoReplica) || !errors.As(err, &re) || re.Reason != pgrouted.ReasonRetry25006 {
		t.Fatalf("a read refused by its replica under pgrouted_fallback=error: %v, want ErrNoReplica (%s)", err, pgrouted.ReasonRetry25006)
	}
	if !errors.As(err, &pe) || pe.Code != "25006" {
		t.Fatalf("the error %v does not wrap the replica's refusal (25006)", err)
	}
	var n int
	if err := cluster.Primary().QueryRow(ctx, "SELECT count(*) FROM app.items WHERE v = $1", []any{v}, &n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d rows on the primary, want none: it may not fall back", n)
	}
	ev := rec.snapshot()
	if last := ev[len(ev)-1]; last.Primary || last.Err == nil {
		t.Fatalf("its RouteEvent: %+v (err %v), want a failed read on a replica", last.Decision, last.Err)
	}
}

// TestDescribeFallbackError: a statement prepared while no replica can
// serve the caller and reads may not fall back (pgrouted_fallback=error, or
// forced to a replica) fails to prepare with the routing error, as its
// executions would, instead of being described on the primary.
func TestDescribeFallbackError(t *testing.T) {
	ctx := testCtx(t)
	for _, tc := range []struct {
		name  string
		extra string
		ctx   func(context.Context) context.Context
	}{
		{"fallback-error", "pgrouted_fallback=error", func(ctx context.Context) context.Context { return ctx }},
		{"forced", "pgrouted_fallback=primary", func(ctx context.Context) context.Context { return pgrouted.WithRoute(ctx, pgrouted.Replica) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A long probe interval keeps the session's position unknown
			// for the test (see TestNoReplicaReasons).
			db, _, _ := open(t, tc.extra, "pgrouted_probe_interval=2s")
			var s pgrouted.Session
			if err := s.UnmarshalText([]byte(";unknown")); err != nil {
				t.Fatal(err)
			}
			st, err := db.PrepareContext(tc.ctx(pgrouted.WithSession(ctx, &s)), "SELECT 1")
			if err == nil {
				st.Close()
			}
			var re *pgrouted.RouteError
			if !errors.Is(err, pgrouted.ErrNoReplica) || !errors.As(err, &re) || re.Reason != pgrouted.ReasonPositionUnknown {
				t.Fatalf("prepare with no replica and no fallback: %v, want ErrNoReplica (%s)", err, pgrouted.ReasonPositionUnknown)
			}
		})
	}
	// With the fallback allowed, the primary describes it.
	db, _, _ := open(t, "pgrouted_probe_interval=2s")
	var s pgrouted.Session
	if err := s.UnmarshalText([]byte(";unknown")); err != nil {
		t.Fatal(err)
	}
	st, err := db.PrepareContext(pgrouted.WithSession(ctx, &s), "SELECT 1")
	if err != nil {
		t.Fatalf("prepare with the fallback allowed: %v", err)
	}
	st.Close()
}

// TestByteLagReadingsAgree: the byte lag a Config.Select hook is offered
// and the one Topology reports are one reading. On an idle primary whose
// last record ends at a page boundary (after pg_switch_wal), its insert
// position is a page header past the end of its WAL: a caught-up replica is
// 0 bytes behind, not a header's size.
func TestByteLagReadingsAgree(t *testing.T) {
	ctx := testCtx(t)
	var mu sync.Mutex
	offered := map[string]pgrouted.Candidate{}
	db, conn, _ := openDSN(t, cluster.DSN()+"&pgrouted_probe_interval=100ms&pgrouted_latency_window=off&pgrouted_names="+names(), func(c *pgrouted.Config) {
		c.Select = func(_ context.Context, cs []pgrouted.Candidate) string {
			mu.Lock()
			defer mu.Unlock()
			clear(offered)
			for _, c := range cs {
				offered[c.Name] = c
			}
			return ""
		}
	})
	replicasReady(t, conn)
	mustExec(t, ctx, cluster.Primary(), "CREATE TABLE IF NOT EXISTS bytelag_t (id int); INSERT INTO bytelag_t VALUES (1)")
	mustExec(t, ctx, cluster.Primary(), "SELECT pg_switch_wal()")
	replicated(t, ctx)
	agreed, zero := 0, 0
	deadline := time.Now().Add(30 * time.Second)
	for agreed < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("%d stable readings in 30s, want 20", agreed)
		}
		before := conn.Topology()
		var one int
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatal(err)
		}
		after := conn.Topology()
		mu.Lock()
		got := maps.Clone(offered)
		mu.Unlock()
		for i, h := range before.Hosts {
			a := after.Hosts[i]
			c, ok := got[h.Name]
			if !ok || h.ByteLag == nil || a.ByteLag == nil || *h.ByteLag != *a.ByteLag || h.ReplayLSN != a.ReplayLSN || !c.ByteLagKnown {
				// Not offered, or a probe moved the positions between the
				// readings: no comparison.
				continue
			}
			if c.ByteLag != *h.ByteLag {
				// Seen once on a loaded machine, not explained: the
				// offered lag looked like the replay before pg_switch_wal
				// against the primary's position after it. The snapshots
				// around the read tell which reading moved.
				bj, _ := json.Marshal(before)
				aj, _ := json.Marshal(after)
				t.Fatalf("%s: Config.Select was offered a byte lag of %d, Topology reports %d (replay %s); offered %+v; topology before the read %s; after %s",
					h.Name, c.ByteLag, *h.ByteLag, h.ReplayLSN, got, bj, aj)
			}
			agreed++
			if c.ByteLag == 0 {
				zero++
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if zero == 0 {
		t.Fatalf("no reading found a caught-up replica 0 bytes behind an idle primary")
	}
}
