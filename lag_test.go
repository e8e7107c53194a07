package pgrouted_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// replicaShare runs the read-your-writes workload: each of 8 goroutines
// inserts a row and reads it back at once, then reads its older rows, for
// d. It fails on any miss and returns the share of reads replicas served.
func replicaShare(t *testing.T, db *sql.DB, rec *routes, d time.Duration, session func(w int) context.Context) float64 {
	return replicaShare2(t, db, db, rec, d, session, func(_ int, c context.Context) context.Context { return c })
}

// replicaShare2 is replicaShare with writes on wdb and reads on rdb; carry
// gives the reads' context from the writes' after each write (a token
// carried to another process).
func replicaShare2(t *testing.T, wdb, rdb *sql.DB, rec *routes, d time.Duration, session func(w int) context.Context, carry func(w int, c context.Context) context.Context) float64 {
	t.Helper()
	// Each run writes its own rows: writers of earlier runs used other w.
	base := int(shareRuns.Add(1)) * 100
	var misses, reads atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := session(w)
			idx := w
			w := base + w
			for n := 0; time.Now().Before(deadline); n++ {
				if _, err := wdb.ExecContext(c, "INSERT INTO lagw (w, n) VALUES ($1, $2)", w, n); err != nil {
					t.Error(err)
					return
				}
				rc := carry(idx, c)
				var got int
				if err := rdb.QueryRowContext(rc, "SELECT count(*) FROM lagw WHERE w = $1 AND n = $2", w, n).Scan(&got); err != nil {
					t.Error(err)
					return
				}
				reads.Add(1)
				if got != 1 {
					misses.Add(1)
				}
				for k := 0; k < 3; k++ {
					if err := rdb.QueryRowContext(rc, "SELECT count(*) FROM lagw WHERE w = $1", w).Scan(&got); err != nil {
						t.Error(err)
						return
					}
					reads.Add(1)
					if got < n+1 {
						misses.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	if misses.Load() != 0 {
		t.Fatalf("%d of %d reads missed their own writes", misses.Load(), reads.Load())
	}
	onReplica, total := 0, 0
	for _, e := range rec.snapshot() {
		if e.Op == pgrouted.OpRead && e.Err == nil {
			total++
			if !e.Primary {
				onReplica++
			}
		}
	}
	return float64(onReplica) / float64(max(total, 1))
}

var shareRuns atomic.Int64

// TestReadYourWritesUnderDelay: with replication delayed on every replica,
// no read misses its own write, with the connector's watermark, with
// per-user Sessions, and with Sessions carried to a second *sql.DB (another
// "process") by their text token. The replicas' share of reads is reported
// next to what a 1s pin-after-write gives.
func TestReadYourWritesUnderDelay(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS lagw; CREATE TABLE lagw (w int, n int)")
	replicated(t, ctx)
	for _, r := range cluster.Replicas() {
		if err := r.ReplicationFault().Latency(30 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	plain := func(int) context.Context { return ctx }

	// 8 writers for 20s on one *sql.DB: the connector's watermark.
	db, _, rec := open(t)
	shareConn := replicaShare(t, db, rec, 20*time.Second, plain)

	// The same with per-user Sessions across two *sql.DB, two
	// "processes": each write's session travels to the reader as its text
	// token.
	writer, _, _ := open(t)
	reader, _, recR := open(t)
	sessions := make([]*pgrouted.Session, 8)
	for i := range sessions {
		sessions[i] = pgrouted.NewSession()
	}
	shareSess := replicaShare2(t, writer, reader, recR, 20*time.Second,
		func(w int) context.Context { return pgrouted.WithSession(ctx, sessions[w]) },
		func(w int, _ context.Context) context.Context {
			token, err := sessions[w].MarshalText()
			if err != nil || len(token) == 0 {
				t.Errorf("token: %q, %v", token, err)
			}
			carried := pgrouted.NewSession()
			if err := carried.UnmarshalText(token); err != nil {
				t.Error(err)
			}
			return pgrouted.WithSession(ctx, carried)
		})

	dbPin, _, recPin := open(t, "pgrouted_pin_after_write=1s")
	sharePin := replicaShare(t, dbPin, recPin, 5*time.Second, plain)
	t.Logf("share of reads served by replicas: connector watermark %.0f%%, per-user sessions carried by token %.0f%%, pin-after-write 1s %.0f%%",
		100*shareConn, 100*shareSess, 100*sharePin)
}

func TestSessionToken(t *testing.T) {
	var s pgrouted.Session
	if b, err := s.MarshalText(); err != nil || len(b) != 0 {
		t.Fatalf("empty session token = %q, %v", b, err)
	}
	for _, bad := range []string{"v2:1:1:0/1", "v1:zz:1:0/1", "garbage", "v1:1:1", "v1:1:0:0/1"} {
		if err := s.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("token %q accepted", bad)
		}
	}
	for _, good := range []string{"v1:1A:2:0/3000000", "v1:1A:2:0/3000000;unknown"} {
		if err := s.UnmarshalText([]byte(good)); err != nil {
			t.Fatalf("token %q: %v", good, err)
		}
		if b, _ := s.MarshalText(); string(b) != good {
			t.Fatalf("round trip of %q gave %q", good, b)
		}
	}
	// A token from another cluster is refused clearly.
	ctx := testCtx(t)
	db, _, _ := open(t)
	if err := s.UnmarshalText([]byte("v1:1A:1:0/1")); err != nil {
		t.Fatal(err)
	}
	_, err := db.QueryContext(pgrouted.WithSession(ctx, &s), "SELECT 1")
	if !errors.Is(err, pgrouted.ErrForeignSession) {
		t.Fatalf("read with a foreign session token: %v, want ErrForeignSession", err)
	}
}

// readsOn runs n plain reads and counts the endpoints that served them.
func readsOn(t *testing.T, db *sql.DB, rec *routes, n int) map[string]int {
	t.Helper()
	ctx := testCtx(t)
	before := len(rec.snapshot())
	for i := 0; i < n; i++ {
		var one int
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatal(err)
		}
	}
	on := map[string]int{}
	for _, e := range rec.snapshot()[before:] {
		if e.Op == pgrouted.OpRead {
			on[e.Endpoint]++
		}
	}
	return on
}

// waitReads polls until n reads satisfy cond, or fails after limit.
func waitReads(t *testing.T, db *sql.DB, rec *routes, limit time.Duration, what string, cond func(map[string]int) bool) time.Duration {
	t.Helper()
	began := time.Now()
	for {
		on := readsOn(t, db, rec, 20)
		if cond(on) {
			return time.Since(began)
		}
		if time.Since(began) > limit {
			t.Fatalf("after %v, still not %s: reads went to %v", limit, what, on)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// keepWriting writes on the primary directly (not through pgrouted, so the
// connector's own watermark stays put) until the test ends.
func keepWriting(t *testing.T, pad int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	mustExec(t, testCtx(t), cluster.Primary(), "CREATE TABLE IF NOT EXISTS churn (id bigserial, pad text)")
	go func() {
		defer close(done)
		conn, err := cluster.Primary().Connect(ctx)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		for ctx.Err() == nil {
			conn.Exec(ctx, "INSERT INTO churn (pad) SELECT repeat('x', $1) FROM generate_series(1, 10)", pad)
			time.Sleep(20 * time.Millisecond)
		}
	}()
}

func TestMaxLagTimeBudget(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	db, _, rec := open(t, "pgrouted_max_lag=2s")
	paused := cluster.Node(1)
	keepWriting(t, 10)
	waitReads(t, db, rec, 10*time.Second, "reads on node1", func(on map[string]int) bool { return on["node1"] > 0 })
	if err := paused.PauseReplay(ctx); err != nil {
		t.Fatal(err)
	}
	took := waitReads(t, db, rec, 2*time.Second+time.Second+5*time.Second, "node1 excluded", func(on map[string]int) bool { return on["node1"] == 0 && on["node2"] > 0 })
	t.Logf("paused replica excluded %v after the pause (budget 2s, probe interval 100ms)", took.Round(10*time.Millisecond))
	if err := paused.ResumeReplay(ctx); err != nil {
		t.Fatal(err)
	}
	took = waitReads(t, db, rec, 10*time.Second, "node1 back", func(on map[string]int) bool { return on["node1"] > 0 })
	t.Logf("resumed replica back after %v", took.Round(10*time.Millisecond))
}

func TestMaxLagByteBudget(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	db, _, rec := open(t, "pgrouted_max_lag=256KB")
	paused := cluster.Node(2)
	waitReads(t, db, rec, 10*time.Second, "reads on node2", func(on map[string]int) bool { return on["node2"] > 0 })
	if err := paused.PauseReplay(ctx); err != nil {
		t.Fatal(err)
	}
	keepWriting(t, 2000) // ~20 kB of rows every 20ms
	took := waitReads(t, db, rec, 20*time.Second, "node2 excluded", func(on map[string]int) bool { return on["node2"] == 0 && on["node1"] > 0 })
	t.Logf("paused replica excluded by bytes %v after the pause", took.Round(10*time.Millisecond))
	if err := paused.ResumeReplay(ctx); err != nil {
		t.Fatal(err)
	}
	waitReads(t, db, rec, 20*time.Second, "node2 back", func(on map[string]int) bool { return on["node2"] > 0 })
}

// TestIdlePrimaryKeepsReplicasEligible: with no write at all for 10s, the
// staleness bound of caught-up replicas stays about one probe interval.
func TestIdlePrimaryKeepsReplicasEligible(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	replicated(t, ctx)
	db, conn, rec := open(t, "pgrouted_max_lag=2s")
	end := time.Now().Add(10 * time.Second)
	for time.Now().Before(end) {
		d, err := conn.Explain(ctx, "SELECT 1")
		if err != nil || d.Primary {
			t.Fatalf("idle primary: a read would go to %+v (%v)", d, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	on := readsOn(t, db, rec, 20)
	if on["node1"] == 0 || on["node2"] == 0 {
		t.Fatalf("after 10s idle, reads went to %v", on)
	}
}

func TestFailedProbeMakesReplicaIneligible(t *testing.T) {
	restore(t)
	db, _, rec := open(t, "pgrouted_max_lag=5s")
	waitReads(t, db, rec, 10*time.Second, "reads on node2", func(on map[string]int) bool { return on["node2"] > 0 })
	if err := cluster.Node(2).Fault().Blackhole(); err != nil {
		t.Fatal(err)
	}
	waitReads(t, db, rec, 10*time.Second, "node2 excluded", func(on map[string]int) bool { return on["node2"] == 0 && on["node1"] > 0 })
	// And it stays out while its probes fail.
	time.Sleep(time.Second)
	if on := readsOn(t, db, rec, 40); on["node2"] != 0 {
		t.Fatalf("cut-off replica served %d reads", on["node2"])
	}
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}
