//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgrouted/pgrouted"
)

// wantReason runs a read and checks it fails with ErrNoReplica and reason.
func wantReason(t *testing.T, ctx context.Context, db *sql.DB, reason pgrouted.Reason) {
	t.Helper()
	var one int
	// A read of every relation: it needs every write of the connector.
	err := db.QueryRowContext(ctx, readOfEveryRelation).Scan(&one)
	var re *pgrouted.RouteError
	if !errors.Is(err, pgrouted.ErrNoReplica) || !errors.As(err, &re) || re.Reason != reason {
		t.Fatalf("read: %v, want ErrNoReplica (%s)", err, reason)
	}
	if !pgconn.SafeToRetry(fmt.Errorf("handler: %w", err)) {
		t.Fatalf("read: %v: pgconn.SafeToRetry false, want true (nothing reached a server)", err)
	}
}

// Each reason a read finds no replica, with pgrouted_fallback=error.
func TestNoReplicaReasons(t *testing.T) {
	ctx := testCtx(t)
	t.Run("no-replicas", func(t *testing.T) {
		// A DSN of the primary alone.
		dsn := "postgres://postgres@" + cluster.Primary().Addr() + "/postgres?sslmode=disable&pgrouted_probe_interval=100ms&pgrouted_fallback=error"
		cfg, err := pgrouted.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := pgrouted.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(conn)
		defer db.Close()
		for deadline := time.Now().Add(15 * time.Second); conn.Topology().Primary == ""; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no primary known 15s after opening a DSN of the primary alone: %+v", conn.Topology())
			}
		}
		wantReason(t, ctx, db, pgrouted.ReasonNoReplicas)
	})
	t.Run("unhealthy", func(t *testing.T) {
		restore(t)
		db, conn, _ := open(t, "pgrouted_fallback=error")
		for _, r := range cluster.Replicas() {
			if err := r.Fault().Blackhole(); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			d, err := conn.Explain(ctx, "SELECT 1")
			var re *pgrouted.RouteError
			if errors.As(err, &re) && re.Reason == pgrouted.ReasonUnhealthy {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("circuits did not open: %+v %v", d, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		wantReason(t, ctx, db, pgrouted.ReasonUnhealthy)
	})
	t.Run("behind", func(t *testing.T) {
		restore(t)
		db, _, _ := open(t, "pgrouted_fallback=error")
		mustExec(t, ctx, cluster.Primary(), "CREATE TABLE IF NOT EXISTS behind_t (id int)")
		replicated(t, ctx)
		for _, r := range cluster.Replicas() {
			if err := r.PauseReplay(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO behind_t VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		wantReason(t, ctx, db, pgrouted.ReasonBehind)
	})
	t.Run("saturated", func(t *testing.T) {
		// Both replicas must be eligible before each read holds one's only
		// connection, and none kept out by the latency window (noisy
		// first probes on a busy machine).
		db, conn, _ := open(t, "pgrouted_fallback=error", "pgrouted_replica_max_conns=1", "pgrouted_latency_window=off")
		replicasReady(t, conn)
		var held []*sql.Rows
		// Registered first: a failure below must not leave rows open, or
		// the *sql.DB's Close waits for them until the test's deadline.
		defer func() {
			for _, r := range held {
				r.Close()
			}
		}()
		for len(held) < 2 {
			rows, err := db.QueryContext(ctx, "SELECT generate_series(1, 3)")
			if err != nil {
				t.Fatalf("read %d of 2, each holding one replica's only connection: %v", len(held)+1, err)
			}
			held = append(held, rows)
		}
		wantReason(t, ctx, db, pgrouted.ReasonSaturated)
	})
	t.Run("position-unknown", func(t *testing.T) {
		// A session token whose last write's position could not be read:
		// until a primary probe sent after it arrived supplies one, no
		// replica can be proven to hold it. (A long probe interval keeps
		// that window open for the test.)
		db, _, _ := open(t, "pgrouted_fallback=error", "pgrouted_probe_interval=2s")
		var s pgrouted.Session
		if err := s.UnmarshalText([]byte(";unknown")); err != nil {
			t.Fatal(err)
		}
		wantReason(t, pgrouted.WithSession(ctx, &s), db, pgrouted.ReasonPositionUnknown)
	})
}
