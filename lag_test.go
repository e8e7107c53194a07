//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// replicaShare runs rounds of the read-your-writes workload on table
// (columns w, n) through db, and returns the share of the later reads that
// replicas served: see replicaShare2.
func replicaShare(t *testing.T, db *sql.DB, rec *routes, table string, rounds int, session func(w int) context.Context) float64 {
	t.Helper()
	return replicaShare2(t, db, db, rec, table, rounds, session, func(_ int, c context.Context) context.Context { return c })
}

// laterReads marks the reads of replicaShare2's second phase in their text.
const laterReads = "/* later read */"

// replicaShare2 runs rounds of two phases (however long they take: the
// share is measured on rounds*40 later reads, not on what a time gives a
// machine; rounds that have not ended within shareDeadline fail the test
// with what they counted), with writes on wdb and reads on rdb; carry gives
// the reads' context from the writes' after each write (a token carried to
// another process).
//
// Phase one: 8 writers at once each insert a row into table and read it
// back at once, while the replicas lag: any read that misses its own row
// fails the test. Phase two, once every replica has replayed the writes:
// each writer reads its rows 5 times (a "later read"); any that misses a row
// fails the test too.
//
// It returns the share of the later reads that ran on a replica, counted
// from rec's route events. Every replica holds what they ask for, so a
// driver that serves reads from replicas sends them there (the replay
// check is made inline when the probes have not seen it yet); one that
// sends reads to the primary, or pins them there for a while after a
// write, does not.
func replicaShare2(t *testing.T, wdb, rdb *sql.DB, rec *routes, table string, rounds int, session func(w int) context.Context, carry func(w int, c context.Context) context.Context) float64 {
	t.Helper()
	ctx := testCtx(t)
	// Each run writes its own rows: writers of earlier runs used other w.
	base := int(shareRuns.Add(1)) * 100
	insert := fmt.Sprintf("INSERT INTO %s (w, n) VALUES ($1, $2)", table)
	readBack := fmt.Sprintf("SELECT count(*) FROM %s WHERE w = $1 AND n = $2", table)
	readAll := fmt.Sprintf("SELECT count(*) FROM %s WHERE w = $1 %s", table, laterReads)
	const writers = 8
	var misses, reads atomic.Int64
	ctxs := make([]context.Context, writers)
	for w := range ctxs {
		ctxs[w] = session(w)
	}
	// phase runs f for every writer at once and waits for them all; it
	// reports whether none failed.
	phase := func(f func(w int, c context.Context) error) bool {
		var wg sync.WaitGroup
		var failed atomic.Bool
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f(w, ctxs[w]); err != nil {
					t.Errorf("writer %d: %v", w, err)
					failed.Store(true)
				}
			}()
		}
		wg.Wait()
		return !failed.Load()
	}
	before := len(rec.snapshot())
	began := time.Now()
	for n := range rounds {
		if time.Since(began) > shareDeadline {
			t.Fatalf("%d of %d rounds ended in %s (deadline %s): %d reads, %d missed", n, rounds, time.Since(began).Round(time.Second), shareDeadline, reads.Load(), misses.Load())
		}
		ok := phase(func(w int, c context.Context) error {
			if _, err := wdb.ExecContext(c, insert, base+w, n); err != nil {
				return err
			}
			var got int
			if err := rdb.QueryRowContext(carry(w, c), readBack, base+w, n).Scan(&got); err != nil {
				return err
			}
			reads.Add(1)
			if got != 1 {
				misses.Add(1)
			}
			return nil
		})
		if !ok {
			t.FailNow()
		}
		replicated(t, ctx)
		ok = phase(func(w int, c context.Context) error {
			rc := carry(w, c)
			for k := 0; k < 5; k++ {
				var got int
				if err := rdb.QueryRowContext(rc, readAll, base+w).Scan(&got); err != nil {
					return err
				}
				reads.Add(1)
				if got != n+1 {
					misses.Add(1)
				}
			}
			return nil
		})
		if !ok {
			t.FailNow()
		}
	}
	if misses.Load() != 0 {
		t.Fatalf("%d of %d reads missed their own writes", misses.Load(), reads.Load())
	}
	onReplica, later, backOnReplica, back := 0, 0, 0, 0
	for _, e := range rec.snapshot()[before:] {
		if e.Op != pgrouted.OpRead || e.Err != nil {
			continue
		}
		if strings.Contains(e.Query, laterReads) {
			later++
			if !e.Primary {
				onReplica++
			}
		} else if strings.HasPrefix(e.Query, readBack) {
			back++
			if !e.Primary {
				backOnReplica++
			}
		}
	}
	if want := rounds * writers * 5; later != want {
		t.Fatalf("%d route events for the %d later reads", later, want)
	}
	t.Logf("%d rounds in %s, %d reads, no miss; replicas served %d of %d reads right after the write, %d of %d later reads",
		rounds, time.Since(began).Round(100*time.Millisecond), reads.Load(), backOnReplica, back, onReplica, later)
	return float64(onReplica) / float64(later)
}

// shareDeadline bounds replicaShare2's rounds: generous, as a round took
// about 0.1 s on a 2-core machine that other tests load (0.15 s in a CI).
const shareDeadline = 2 * time.Minute

// minReplicaShare is the share of replicaShare's later reads that replicas
// must serve. They all could; the margin is for a replica whose probe timed
// out on a busy machine. A driver that sends reads to the primary, or pins
// them there for a while after a write, serves none.
const minReplicaShare = 0.6

var shareRuns atomic.Int64

// TestReadYourWritesUnderDelay: with replication delayed on every replica,
// no read misses its own write, with the connector's watermark, with
// per-user Sessions, and with Sessions carried to a second *sql.DB (another
// "process") by their text token; and replicas serve the later reads (at
// least minReplicaShare of them) with the watermark and with the Sessions.
// The share a 1s pin-after-write gives is logged beside them: it pins those
// reads to the primary.
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

	// 8 writers, 40 rounds (about 4 s without -race), on one *sql.DB:
	// the connector's watermark.
	db, _, rec := open(t)
	shareConn := replicaShare(t, db, rec, "lagw", 40, plain)

	// The same with per-user Sessions across two *sql.DB, two
	// "processes": each write's session travels to the reader as its text
	// token.
	writer, _, _ := open(t)
	reader, _, recR := open(t)
	sessions := make([]*pgrouted.Session, 8)
	for i := range sessions {
		sessions[i] = pgrouted.NewSession()
	}
	shareSess := replicaShare2(t, writer, reader, recR, "lagw", 40,
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
	sharePin := replicaShare(t, dbPin, recPin, "lagw", 12, plain)
	t.Logf("share of later reads served by replicas: connector watermark %.0f%%, per-user sessions carried by token %.0f%%, pin-after-write 1s %.0f%%",
		100*shareConn, 100*shareSess, 100*sharePin)
	if shareConn < minReplicaShare || shareSess < minReplicaShare {
		t.Fatalf("replicas served %.0f%% (connector watermark) and %.0f%% (per-user sessions) of the reads they could serve, want at least %.0f%%",
			100*shareConn, 100*shareSess, 100*minReplicaShare)
	}
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
	// A Session that ignores foreign tokens forgets it, once, and reads.
	dropped := 0
	s.IgnoreForeign(func() { dropped++ })
	for range 2 {
		var one int
		if err := db.QueryRowContext(pgrouted.WithSession(ctx, &s), "SELECT 1").Scan(&one); err != nil {
			t.Fatalf("read with a foreign token ignored: %v", err)
		}
	}
	if b, _ := s.MarshalText(); dropped != 1 || len(b) != 0 {
		t.Fatalf("after reads with a foreign token ignored: dropped %d times, token %q; want once, empty", dropped, b)
	}
}

// readsOn runs n plain reads and counts the endpoints that served them.
func readsOn(t *testing.T, db *sql.DB, rec *routes, n int) map[string]int {
	t.Helper()
	return clientReadsOn(t, sqlClient{db}, rec, n)
}

// clientReadsOn is readsOn through a client (a *sql.DB or a Pool).
func clientReadsOn(t *testing.T, db client, rec *routes, n int) map[string]int {
	t.Helper()
	return clientReadsOnEach(t, db, rec, n, nil)
}

// clientReadsOnEach is clientReadsOn, calling each (when not nil) before
// each read.
func clientReadsOnEach(t *testing.T, db client, rec *routes, n int, each func()) map[string]int {
	t.Helper()
	ctx := testCtx(t)
	before := len(rec.snapshot())
	for i := 0; i < n; i++ {
		if each != nil {
			each()
		}
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
	return waitClientReads(t, sqlClient{db}, rec, limit, what, cond)
}

// waitClientReads is waitReads through a client (a *sql.DB or a Pool).
func waitClientReads(t *testing.T, db client, rec *routes, limit time.Duration, what string, cond func(map[string]int) bool) time.Duration {
	t.Helper()
	began := time.Now()
	for {
		on := clientReadsOn(t, db, rec, 20)
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

// TestIdlePrimaryKeepsReplicasEligible: with no write at all for 5s (2.5 times the budget), the
// staleness bound of caught-up replicas stays about one probe interval.
func TestIdlePrimaryKeepsReplicasEligible(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	replicated(t, ctx)
	db, conn, rec := open(t, "pgrouted_max_lag=2s", "pgrouted_latency_window=off")
	end := time.Now().Add(5 * time.Second) // 2.5 budgets
	for time.Now().Before(end) {
		d, err := conn.Explain(ctx, "SELECT 1")
		if err != nil || d.Primary {
			t.Fatalf("idle primary: a read would go to %+v (%v)", d, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	on := readsOn(t, db, rec, 20)
	if on["node1"] == 0 || on["node2"] == 0 {
		t.Fatalf("after 5s idle, reads went to %v", on)
	}
}

// TestFailedProbeMakesReplicaIneligible: a replica whose network is cut
// (blackholed) stops serving reads once its probes fail, and stays out.
// Through the driver and through the Pool.
func TestFailedProbeMakesReplicaIneligible(t *testing.T) {
	forEachClient(t, testFailedProbeMakesReplicaIneligible)
}

func testFailedProbeMakesReplicaIneligible(t *testing.T, open opener) {
	restore(t)
	db, conn, rec := open(t, "pgrouted_max_lag=5s")
	waitClientReads(t, db, rec, 10*time.Second, "reads on node2", func(on map[string]int) bool { return on["node2"] > 0 })
	if err := cluster.Node(2).Fault().Blackhole(); err != nil {
		t.Fatal(err)
	}
	waitClientReads(t, db, rec, 10*time.Second, "node2 excluded", func(on map[string]int) bool { return on["node2"] == 0 && on["node1"] > 0 })
	// And it stays out while its probes fail: once they did, its circuit
	// is open.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if h := conn.Topology().Hosts[2]; h.Name == "node2" && !h.Healthy && h.Circuit == "open" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after the blackhole, node2 is not seen failing: %+v", conn.Topology().Hosts[2])
		}
	}
	if on := clientReadsOn(t, db, rec, 40); on["node2"] != 0 {
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
