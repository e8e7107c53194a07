//go:build unix

package pgrouted_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// forgedOpen opens a Connector on the cluster whose reads may wait 100ms
// on a replica, logging to logs.
func forgedOpen(t *testing.T, logs *syncBuffer, extra string) (*sql.DB, *pgrouted.Connector) {
	t.Helper()
	dsn := cluster.DSN() + "&pgrouted_probe_interval=100ms&pgrouted_lease=5s&pgrouted_replica_wait=100ms&pgrouted_names=" + names() + extra
	db, conn, _ := openDSN(t, dsn, func(cfg *pgrouted.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	return db, conn
}

// tokenOf writes a row through db with a new Session and returns the
// Session's token, its system identifier and its timeline.
func tokenOf(t *testing.T, ctx context.Context, db *sql.DB, write string) (string, uint64, uint32) {
	t.Helper()
	s := pgrouted.NewSession()
	if _, err := db.ExecContext(pgrouted.WithSession(ctx, s), write); err != nil {
		t.Fatal(err)
	}
	b, err := s.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	var wm lagmeter.Watermark
	if err := wm.UnmarshalText(b); err != nil || wm.IsZero() {
		t.Fatalf("token after a write: %q, %v", b, err)
	}
	return string(b), wm.SystemID, wm.Timeline
}

// restored is a Session restored from token, as a service restores one
// from a client: a token of another cluster is ignored.
func restored(t *testing.T, token string) *pgrouted.Session {
	t.Helper()
	s := pgrouted.NewSession()
	s.IgnoreForeign(nil)
	if err := s.UnmarshalText([]byte(token)); err != nil {
		t.Fatal(err)
	}
	return s
}

// honestRun is what the honest users of TestForgedTokensHurtNobody saw.
type honestRun struct{ reads, misses, onReplica int }

// TestForgedTokensHurtNobody: two Connectors (two instances of a
// service) serve honest users, who write through one and read their write
// at once through the other with their token, while the replicas replay
// 20ms behind and reads may wait 100ms; meanwhile forged tokens (a
// position far ahead of the primary's, a little ahead, on a later
// timeline, of another cluster) arrive at 40 a second at each instance.
// The forged requests get normal answers; the honest read-backs all see
// their rows, and replicas serve at least 80% of them, as without the
// forgers (each forged position far or a little ahead would otherwise
// make its read wait 100ms on a replica and then stop the waits on it for
// everyone: honest read-backs, 20ms behind, then ran on the primary).
// Nothing is reported lost; every forged token is counted
// (Stats.ForgedTokens), one each, on the Connector that received them:
// those past the primary's position, on a later timeline and of another
// cluster alike.
func TestForgedTokensHurtNobody(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS forged; CREATE TABLE forged (id int PRIMARY KEY)")
	replicated(t, ctx)
	applyDelay(t, ctx, 20*time.Millisecond)
	logs := &syncBuffer{}
	dbs := [2]*sql.DB{}
	conns := [2]*pgrouted.Connector{}
	for i := range dbs {
		dbs[i], conns[i] = forgedOpen(t, logs, "")
	}

	_, sys, tli := tokenOf(t, ctx, dbs[0], "INSERT INTO forged VALUES (0)")
	var insert string
	if err := dbs[0].QueryRowContext(pgrouted.WithRoute(ctx, pgrouted.Primary), "SELECT pg_current_wal_insert_lsn()::text").Scan(&insert); err != nil {
		t.Fatal(err)
	}
	lsn, err := lagmeter.ParseLSN(insert)
	if err != nil {
		t.Fatal(err)
	}
	far := lagmeter.Watermark{SystemID: sys, Timeline: tli, LSN: 0xFFFFFFFFFFFFFF00}.String()
	// 16 MB: the honest users write far less than that during the test.
	little := lagmeter.Watermark{SystemID: sys, Timeline: tli, LSN: lsn + 16<<20}.String()
	later := lagmeter.Watermark{SystemID: sys, Timeline: tli + 1, LSN: lsn}.String()
	foreign := lagmeter.Watermark{SystemID: sys + 1, Timeline: tli, LSN: lsn}.String()
	forged := []string{far, little, later, foreign}
	replicated(t, ctx)

	const users, each = 4, 60
	nextID := atomic.Int64{}
	// forgers sends forged tokens to both Connectors at 40 a second each
	// until stop closes, and counts them per Connector.
	forgers := func(stop <-chan struct{}) (sent [2]int, errs []error) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range dbs {
			wg.Go(func() {
				tick := time.NewTicker(25 * time.Millisecond)
				defer tick.Stop()
				for k := 0; ; k++ {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					// Each in its own goroutine: a read that waits does not
					// delay the next.
					tok := forged[k%len(forged)]
					wg.Go(func() {
						var n int
						err := dbs[i].QueryRowContext(pgrouted.WithSession(ctx, restored(t, tok)), "SELECT count(*) FROM forged WHERE id = 0").Scan(&n)
						mu.Lock()
						defer mu.Unlock()
						sent[i]++
						if err == nil && n != 1 {
							err = fmt.Errorf("found %d rows", n)
						}
						if err != nil {
							errs = append(errs, fmt.Errorf("a read with forged token %q: %w", tok, err))
						}
					})
				}
			})
		}
		<-stop
		wg.Wait()
		return sent, errs
	}
	// honest runs the users: each writes a row through one Connector and
	// reads it back at once through the other, carrying its token.
	honest := func() (run honestRun) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for u := range users {
			wg.Go(func() {
				var token string
				var mine honestRun
				defer func() {
					mu.Lock()
					run.reads += mine.reads
					run.misses += mine.misses
					run.onReplica += mine.onReplica
					mu.Unlock()
				}()
				w, r := dbs[u%2], dbs[1-u%2]
				for range each {
					id := nextID.Add(1)
					s := pgrouted.NewSession()
					if token != "" {
						s = restored(t, token)
					}
					if _, err := w.ExecContext(pgrouted.WithSession(ctx, s), "INSERT INTO forged VALUES ($1)", id); err != nil {
						t.Error(err)
						return
					}
					b, err := s.MarshalText()
					if err != nil {
						t.Error(err)
						return
					}
					token = string(b)
					var n int
					var onReplica bool
					err = r.QueryRowContext(pgrouted.WithSession(ctx, restored(t, token)),
						"SELECT count(*), pg_is_in_recovery() FROM forged WHERE id = $1", id).Scan(&n, &onReplica)
					if err != nil {
						t.Error(err)
						return
					}
					mine.reads++
					if n != 1 {
						mine.misses++
					}
					if onReplica {
						mine.onReplica++
					}
				}
			})
		}
		wg.Wait()
		return run
	}

	// The share of read-backs that replicas serve is measured under load
	// on a machine whose two CPUs the other tests share: a probe late by
	// a few hundred milliseconds (its replica then looks further behind
	// than the wait) sends a burst of read-backs to the primary with or
	// without forgers. One low share in a run is not a failure of the
	// code; three in a row are: up to 3 tries. (With forgers and without
	// the protections, the share is far lower on every try.) Every
	// other check holds on every try.
	const tries = 3
	var stats [2]pgrouted.Stats
	for i := range conns {
		stats[i] = conns[i].Stats()
	}
	for try := 1; ; try++ {
		stop := make(chan struct{})
		type forgerResult struct {
			sent [2]int
			errs []error
		}
		done := make(chan forgerResult)
		go func() {
			var r forgerResult
			r.sent, r.errs = forgers(stop)
			done <- r
		}()
		run := honest()
		close(stop)
		fr := <-done
		for _, err := range fr.errs {
			t.Error(err)
		}
		t.Logf("try %d: %d honest read-backs, %d missed, %d (%.0f%%) on replicas; forged tokens sent %v",
			try, run.reads, run.misses, run.onReplica, 100*float64(run.onReplica)/float64(max(run.reads, 1)), fr.sent)
		if t.Failed() {
			t.FailNow()
		}
		if run.reads != users*each || run.misses != 0 {
			t.Fatalf("%d of %d honest read-backs missed their row", run.misses, run.reads)
		}
		for i, c := range conns {
			st := c.Stats()
			if st.LostWrites != stats[i].LostWrites || st.TimelineResets != stats[i].TimelineResets {
				t.Fatalf("connector %d: %d lost writes, %d timeline resets counted, want none", i, st.LostWrites-stats[i].LostWrites, st.TimelineResets-stats[i].TimelineResets)
			}
			if got := st.ForgedTokens - stats[i].ForgedTokens; got != uint64(fr.sent[i]) {
				t.Fatalf("connector %d: %d forged tokens counted, want %d (the forged tokens it received); %d position fetches failed",
					i, got, fr.sent[i], st.PositionFetchErrors-stats[i].PositionFetchErrors)
			}
			stats[i] = st
		}
		if l := logs.String(); strings.Contains(l, "lost") {
			t.Fatalf("forged tokens made the log report lost writes: %s", l)
		}
		if run.onReplica*10 >= run.reads*8 {
			return
		}
		if try == tries {
			t.Fatalf("replicas served %d of %d honest read-backs on %d tries in a row, want at least 80%%", run.onReplica, run.reads, tries)
		}
	}
}

// TestForgedTokenAfterFailover: after a failover, a token on the old
// timeline with a position past the switch point (anyone can write one)
// is answered normally and reported lost by nobody: no count, no log line,
// however often it comes. The same position from a signed token is (the
// count and the log work, so their silence means something), once however
// often that token is replayed, and a token signed with another key, or
// unsigned, is refused by UnmarshalSigned.
func TestForgedTokenAfterFailover(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS forgedf; CREATE TABLE forgedf (id int)")
	replicated(t, ctx)
	logs := &syncBuffer{}
	db, conn := forgedOpen(t, logs, "&pgrouted_max_lag=none&pgrouted_circuit_max_backoff=1s")
	_, sys, tli := tokenOf(t, ctx, db, "INSERT INTO forgedf VALUES (1)")
	replicated(t, ctx)
	failOver(t, ctx, conn, false)

	old := lagmeter.Watermark{SystemID: sys, Timeline: tli, LSN: 0xFFFFFFFFFFFFFF00}.String()
	read := func(s *pgrouted.Session) {
		t.Helper()
		var n int
		if err := db.QueryRowContext(pgrouted.WithSession(ctx, s), "SELECT count(*) FROM forgedf").Scan(&n); err != nil || n != 1 {
			t.Fatalf("read with a token of the old timeline: %d, %v; want 1", n, err)
		}
	}
	before := conn.Stats()
	for range 20 {
		read(restored(t, old))
	}
	if st := conn.Stats(); st.LostWrites != before.LostWrites || st.TimelineResets != before.TimelineResets || strings.Contains(logs.String(), "lost") {
		t.Fatalf("unsigned tokens of the old timeline: %d lost writes, %d timeline resets, log %q; want nothing reported",
			st.LostWrites-before.LostWrites, st.TimelineResets-before.TimelineResets, logs.String())
	}

	key, other := bytes.Repeat([]byte("k"), 32), bytes.Repeat([]byte("o"), 32)
	signed, err := restored(t, old).MarshalSigned(key)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, token string }{
		{"unsigned", old},
		{"another key", string(mustSign(t, old, other))},
		{"a byte changed", strings.Replace(string(signed), "s1.", "s1.9", 1)},
	} {
		if err := pgrouted.NewSession().UnmarshalSigned([]byte(tc.token), [][]byte{key}, time.Hour); !errors.Is(err, pgrouted.ErrTokenSignature) {
			t.Errorf("UnmarshalSigned of a token %s: %v, want ErrTokenSignature", tc.name, err)
		}
	}
	// The signed token, replayed: the loss is counted and logged once.
	for range 5 {
		s := pgrouted.NewSession()
		if err := s.UnmarshalSigned(signed, [][]byte{other, key}, time.Hour); err != nil {
			t.Fatal(err)
		}
		read(s)
	}
	if st, n := conn.Stats(), strings.Count(logs.String(), "was lost with the old primary"); st.LostWrites != before.LostWrites+1 || n != 1 {
		t.Fatalf("a signed token of the old timeline past the switch point, read 5 times: %d lost writes, logged %d times (%q); want one, logged once",
			st.LostWrites-before.LostWrites, n, logs.String())
	}
}

// mustSign signs token with key.
func mustSign(t *testing.T, token string, key []byte) []byte {
	t.Helper()
	s := pgrouted.NewSession()
	if err := s.UnmarshalText([]byte(token)); err != nil {
		t.Fatal(err)
	}
	b, err := s.MarshalSigned(key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
