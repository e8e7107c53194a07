//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgrouted/pgrouted"
	"go.uber.org/goleak"
)

// The tests of pgxpool's pool_ keys, which size and time the primary's
// sessions in both faces. They count a client's sessions on the primary
// in pg_stat_activity, by the application_name its DSN sets (pgrouted's
// probes and catalog reads have their own, pgrouted-probe).

// poolKeysDSN is open's DSN with application_name app and extra.
func poolKeysDSN(app string, extra ...string) string {
	dsn := cluster.DSN() + "&pgrouted_probe_interval=100ms&pgrouted_lease=5s&pgrouted_write_timeout=20s&pgrouted_names=" + names() +
		"&application_name=" + app
	for _, e := range extra {
		dsn += "&" + e
	}
	return dsn
}

// sessionWatch reads the primary's pg_stat_activity on a connection of
// its own.
type sessionWatch struct {
	conn *pgx.Conn
	app  string
	c    *pgrouted.Connector
}

func watchSessions(t *testing.T, ctx context.Context, app string, c *pgrouted.Connector) *sessionWatch {
	t.Helper()
	conn, err := cluster.Primary().Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return &sessionWatch{conn: conn, app: app, c: c}
}

// pids returns the server processes of the client's primary sessions:
// its backends on the primary, less the connections of the primary's
// replica pool (pgrouted's own reads there, if any: counted, not
// told apart, so the count is the number of primary sessions or less
// only while one of them opens or closes).
func (w *sessionWatch) pids(t *testing.T, ctx context.Context) (pids []int32, pool int32) {
	t.Helper()
	if err := w.conn.QueryRow(ctx, "SELECT coalesce(array_agg(pid ORDER BY pid), '{}') FROM pg_stat_activity WHERE application_name = $1 AND backend_type = 'client backend'", w.app).Scan(&pids); err != nil {
		t.Fatal(err)
	}
	for _, h := range w.c.Topology().Hosts {
		if h.Role == "primary" {
			pool = h.Pool.TotalConns
		}
	}
	return pids, pool
}

// count is len(pids) less the primary's replica pool.
func (w *sessionWatch) count(t *testing.T, ctx context.Context) int {
	t.Helper()
	pids, pool := w.pids(t, ctx)
	return len(pids) - int(pool)
}

// waitFor polls until ok holds of the client's primary sessions, and fails
// with what it last saw after a minute.
func (w *sessionWatch) waitFor(t *testing.T, ctx context.Context, what string, ok func(pids []int32, pool int32) bool) []int32 {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		pids, pool := w.pids(t, ctx)
		if ok(pids, pool) {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute: the client's backends on the primary are %v (%d of them its replica pool's)", what, pids, pool)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// face is the last element of t's name: the face forEachClientDSN runs.
func face(t *testing.T) string {
	return t.Name()[strings.LastIndex(t.Name(), "/")+1:]
}

// primaryPID returns the primary session's server process that a
// statement of c runs on.
func primaryPID(t *testing.T, ctx context.Context, c interface {
	QueryRowContext(context.Context, string, ...any) scanner
}) int32 {
	t.Helper()
	var pid int32
	if err := c.QueryRowContext(pgrouted.WithRoute(ctx, pgrouted.Primary), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestPoolMaxConnsCapsPrimarySessions: with pool_max_conns=2, never more
// than 2 of a client's sessions are open on the primary, and a third
// writer waits for one and then runs; through database/sql with more
// connections allowed than that, and idle ones keeping their sessions.
func TestPoolMaxConnsCapsPrimarySessions(t *testing.T) {
	forEachClientDSN(t, func(t *testing.T, open dsnOpener) {
		ctx := testCtx(t)
		app := "pk-max-" + face(t)
		c, conn, _ := open(t, poolKeysDSN(app, "pool_max_conns=2"), nil)
		if sc, ok := c.(sqlClient); ok {
			sc.SetMaxOpenConns(8)
			sc.SetMaxIdleConns(8)
		}
		w := watchSessions(t, ctx, app, conn)

		// Count while writers run: three at a time, each statement a
		// while on the primary.
		stop := make(chan struct{})
		var most atomic.Int64
		var sampled sync.WaitGroup
		sampled.Add(1)
		go func() {
			defer sampled.Done()
			for {
				if n := int64(w.count(t, ctx)); n > most.Load() {
					most.Store(n)
				}
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
		const writers, rounds = 3, 4
		var wg sync.WaitGroup
		errs := make(chan error, writers*rounds)
		var ran atomic.Int64
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					err := c.ExecContext(pgrouted.WithRoute(ctx, pgrouted.Primary), fmt.Sprintf("SELECT pg_sleep(0.2) /* writer %d round %d */", i, r))
					if err != nil {
						errs <- fmt.Errorf("writer %d round %d: %w", i, r, err)
						continue
					}
					ran.Add(1)
				}
			}()
		}
		wg.Wait()
		close(stop)
		sampled.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if ran.Load() != writers*rounds {
			t.Fatalf("%d of %d statements ran", ran.Load(), writers*rounds)
		}
		if n := most.Load(); n > 2 {
			t.Fatalf("%d of the client's sessions on the primary at once, want at most 2 (pool_max_conns=2)", n)
		} else if n < 1 {
			t.Fatalf("no session of the client seen on the primary while its writers ran (application_name %s)", app)
		}
		if n := w.count(t, ctx); n > 2 {
			t.Fatalf("%d sessions open after the writers, want at most 2", n)
		}
	})
}

// TestPoolMaxConnsReclaimsIdleSessions: through database/sql, a
// connection that needs a primary session while pool_max_conns idle
// connections hold theirs takes over the session of one without session
// state (no deadlock), never the one with session state; when every idle
// one has session state, it fails after pgrouted_write_timeout with an
// error naming pool_max_conns, and nothing was sent.
func TestPoolMaxConnsReclaimsIdleSessions(t *testing.T) {
	ctx := testCtx(t)
	const app = "pk-reclaim"
	db, conn, _ := openDSN(t, poolKeysDSN(app, "pool_max_conns=2", "pgrouted_write_timeout=1s"), nil)
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	w := watchSessions(t, ctx, app, conn)
	primary := pgrouted.WithRoute(ctx, pgrouted.Primary)

	conns := make([]*sql.Conn, 3)
	for i := range conns {
		var err error
		if conns[i], err = db.Conn(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pidOf := func(c *sql.Conn) (int32, error) {
		var pid int32
		err := c.QueryRowContext(primary, "SELECT pg_backend_pid()").Scan(&pid)
		return pid, err
	}
	// The first holds session state; the second none. Both go back idle,
	// keeping their sessions.
	if _, err := conns[0].ExecContext(ctx, "SET statement_timeout = '4321ms'"); err != nil {
		t.Fatal(err)
	}
	pinned, err := pidOf(conns[0])
	if err != nil {
		t.Fatal(err)
	}
	plain, err := pidOf(conns[1])
	if err != nil {
		t.Fatal(err)
	}
	conns[0].Close()
	conns[1].Close()
	w.waitFor(t, ctx, "the two idle connections' sessions open", func(pids []int32, _ int32) bool {
		return slices.Contains(pids, pinned) && slices.Contains(pids, plain)
	})

	// The third, held since before, needs one: it takes over the plain
	// one's, not the one with session state.
	var third int32
	var timeout string
	if err := conns[2].QueryRowContext(primary, "SELECT pg_backend_pid(), current_setting('statement_timeout')").Scan(&third, &timeout); err != nil {
		t.Fatalf("a third connection's statement with two idle ones holding the sessions: %v", err)
	}
	if third == pinned || timeout == "4321ms" {
		t.Fatalf("the third connection runs on server process %d with statement_timeout %s: the idle session with session state (%d) was taken", third, timeout, pinned)
	}
	pids, _ := w.pids(t, ctx)
	if !slices.Contains(pids, pinned) || !slices.Contains(pids, third) {
		t.Fatalf("sessions %v: want the idle one with session state (%d) and the third's (%d)", pids, pinned, third)
	}
	if n := w.count(t, ctx); n > 2 {
		t.Fatalf("%d sessions open, want at most 2", n)
	}

	// The third gets session state too and goes back idle: no idle
	// session may be taken over, so a fourth connection waits
	// pgrouted_write_timeout and fails, naming pool_max_conns.
	if _, err := conns[2].ExecContext(ctx, "SET statement_timeout = '1234ms'"); err != nil {
		t.Fatal(err)
	}
	conns[2].Close()
	fourth, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer fourth.Close()
	// The fourth may be one of the idle ones (database/sql reuses them):
	// then it has its session and state. Ask for connections until one
	// is new: at most three are idle.
	held := []*sql.Conn{fourth}
	defer func() {
		for _, c := range held[1:] {
			c.Close()
		}
	}()
	var failed error
	for range 3 {
		c := held[len(held)-1]
		var to string
		if err := c.QueryRowContext(primary, "SHOW statement_timeout").Scan(&to); err != nil {
			failed = err
			break
		}
		// An idle one with its session: keep it out of the way.
		next, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, next)
	}
	if failed == nil {
		t.Fatal("a connection that needed a session, both held with session state, ran")
	}
	if !strings.Contains(failed.Error(), "pool_max_conns") || !strings.Contains(failed.Error(), "pgrouted_write_timeout") {
		t.Fatalf("the error %q does not name pool_max_conns and the wait", failed)
	}
	var safe interface{ SafeToRetry() bool }
	if !errors.As(failed, &safe) || !safe.SafeToRetry() {
		t.Fatalf("the error %v does not say that nothing was sent", failed)
	}
	if n := w.count(t, ctx); n > 2 {
		t.Fatalf("%d sessions open, want at most 2", n)
	}
}

// TestPoolMaxConnLifetimeAndIdleTime: an idle primary session past
// pool_max_conn_lifetime, or idle longer than pool_max_conn_idle_time, is
// closed, and the next statement runs on a new one.
func TestPoolMaxConnLifetimeAndIdleTime(t *testing.T) {
	for _, key := range []string{"pool_max_conn_lifetime=1s", "pool_max_conn_idle_time=1s"} {
		t.Run(strings.TrimSuffix(key, "=1s"), func(t *testing.T) {
			forEachClientDSN(t, func(t *testing.T, open dsnOpener) {
				ctx := testCtx(t)
				app := "pk-" + strings.TrimPrefix(strings.TrimSuffix(key, "=1s"), "pool_max_conn_") + "-" + face(t)
				c, conn, _ := open(t, poolKeysDSN(app, key, "pool_health_check_period=100ms"), nil)
				w := watchSessions(t, ctx, app, conn)
				first := primaryPID(t, ctx, c)
				w.waitFor(t, ctx, "the first session closed ("+key+")", func(pids []int32, _ int32) bool {
					return !slices.Contains(pids, first)
				})
				if next := primaryPID(t, ctx, c); next == first {
					t.Fatalf("the statement after the close ran on the same server process %d", next)
				}
				if pc, ok := c.(poolClient); ok {
					st := primaryStat(t, pc.Pool)
					if st.MaxLifetimeDestroyCount+st.MaxIdleDestroyCount == 0 {
						t.Fatalf("Stat counts no session closed for its age or idleness: %+v", st)
					}
				}
			})
		})
	}
}

// TestPoolMaxConnLifetimePinned: a primary session with session state
// past its lifetime is not reset in its connection: database/sql drops
// the connection (whether it was put back after its lifetime, or its
// lifetime ended while it was idle), and no later statement sees its
// state.
func TestPoolMaxConnLifetimePinned(t *testing.T) {
	for _, when := range []string{"put back", "idle"} {
		t.Run(strings.ReplaceAll(when, " ", "-"), func(t *testing.T) {
			ctx := testCtx(t)
			app := "pk-pinned-" + strings.ReplaceAll(when, " ", "-")
			// No health check within the test: the lifetime is met where
			// the connection is put back or taken again.
			db, conn, _ := openDSN(t, poolKeysDSN(app, "pool_max_conn_lifetime=1s", "pool_health_check_period=1h"), nil)
			db.SetMaxOpenConns(1)
			w := watchSessions(t, ctx, app, conn)
			primary := pgrouted.WithRoute(ctx, pgrouted.Primary)

			sc, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sc.ExecContext(ctx, "SET statement_timeout = '4321ms'"); err != nil {
				t.Fatal(err)
			}
			var pid int32
			if err := sc.QueryRowContext(primary, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				t.Fatal(err)
			}
			var old any // the driver's connection
			if err := sc.Raw(func(dc any) error { old = dc; return nil }); err != nil {
				t.Fatal(err)
			}
			if when == "put back" {
				time.Sleep(1500 * time.Millisecond) // past its lifetime, in use
				sc.Close()
				w.waitFor(t, ctx, "the connection put back after its session's lifetime closed", func(pids []int32, _ int32) bool {
					return !slices.Contains(pids, pid)
				})
			} else {
				sc.Close()
				time.Sleep(1500 * time.Millisecond) // past its lifetime, idle
			}
			sc, err = db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer sc.Close()
			var to string
			var next int32
			if err := sc.QueryRowContext(primary, "SELECT current_setting('statement_timeout'), pg_backend_pid()").Scan(&to, &next); err != nil {
				t.Fatal(err)
			}
			if to == "4321ms" || next == pid {
				t.Fatalf("the next statement ran on server process %d (the old one %d) with statement_timeout %s: the session state outlived the session's lifetime", next, pid, to)
			}
			// Not the same connection with its session silently replaced
			// (the SET lost under it): database/sql dropped it.
			if err := sc.Raw(func(dc any) error {
				if dc == old {
					return errors.New("the connection whose session held state past its lifetime is in use again, on a new session")
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			w.waitFor(t, ctx, "the old session closed", func(pids []int32, _ int32) bool {
				return !slices.Contains(pids, pid)
			})
		})
	}
}

// TestPoolMinConnsKeepsSessions: pool_min_conns keeps that many primary
// sessions open: the idle-time closes stop there, and a Pool opens them
// before any statement needs one.
func TestPoolMinConnsKeepsSessions(t *testing.T) {
	forEachClientDSN(t, func(t *testing.T, open dsnOpener) {
		ctx := testCtx(t)
		app := "pk-min-" + face(t)
		c, conn, _ := open(t, poolKeysDSN(app, "pool_min_conns=2", "pool_max_conn_idle_time=1s", "pool_health_check_period=100ms"), nil)
		w := watchSessions(t, ctx, app, conn)
		if _, ok := c.(poolClient); ok {
			w.waitFor(t, ctx, "a Pool opens pool_min_conns=2 sessions", func(pids []int32, pool int32) bool {
				return len(pids)-int(pool) >= 2
			})
		}
		c.SetMaxIdleConns(8)
		// Four at once: four sessions, then idle.
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := c.ExecContext(pgrouted.WithRoute(ctx, pgrouted.Primary), fmt.Sprintf("SELECT pg_sleep(0.3) /* min %d */", i)); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		w.waitFor(t, ctx, "idle sessions closed down to pool_min_conns=2", func(pids []int32, pool int32) bool {
			return len(pids)-int(pool) == 2
		})
		// And no further: several idle times and health checks later,
		// two are open still.
		until := time.Now().Add(2500 * time.Millisecond)
		for time.Now().Before(until) {
			if n := w.count(t, ctx); n < 2 {
				t.Fatalf("%d sessions open, fewer than pool_min_conns=2", n)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if pc, ok := c.(poolClient); ok {
			if st := primaryStat(t, pc.Pool); st.MaxIdleDestroyCount < 1 {
				t.Fatalf("Stat counts no idle session closed: %+v", st)
			}
		}
	})
}

// primaryStat returns the primary's entry of p.Stat: its primary sessions'
// figures.
func primaryStat(t *testing.T, p *pgrouted.Pool) pgrouted.PoolInfo {
	t.Helper()
	var found *pgrouted.PoolInfo
	for _, h := range p.Stat() {
		if h.Primary != nil {
			if found != nil {
				t.Fatalf("two hosts with primary figures: %+v", p.Stat())
			}
			found = h.Primary
		}
	}
	if found == nil {
		t.Fatalf("no host with primary figures: %+v", p.Stat())
	}
	return *found
}

// TestPoolStatPrimary: Stat gives the primary's entry the figures of its
// sessions, as pgxpool.Stat has them, its durations in nanoseconds in
// JSON; the other hosts' entries have none.
func TestPoolStatPrimary(t *testing.T) {
	// With a pool_ key the sessions are maintained (a list of the idle
	// ones, under a lock); without one, only counted (primarysessions.go).
	t.Run("maintained", func(t *testing.T) { testPoolStatPrimary(t, "pool_max_conns=3", 3) })
	t.Run("counted", func(t *testing.T) { testPoolStatPrimary(t, "", 0) })
}

func testPoolStatPrimary(t *testing.T, key string, max int32) {
	ctx := testCtx(t)
	extra := []string{"application_name=pk-stat"}
	if key != "" {
		extra = append(extra, key)
	}
	p, _ := openPool(t, nil, extra...)
	before := primaryStat(t, p)
	if before.MaxConns != max {
		t.Fatalf("MaxConns %d, want %d (pool_max_conns)", before.MaxConns, max)
	}
	// Three statements at once on the primary (their rows open), then
	// one more.
	primary := pgrouted.WithRoute(ctx, pgrouted.Primary)
	var open []pgx.Rows
	for range 3 {
		rows, err := p.Query(primary, "SELECT pg_backend_pid() /* stat */")
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, rows)
	}
	if st := primaryStat(t, p); st.AcquiredConns != 3 || st.TotalConns != 3 {
		t.Errorf("three rows open on the primary: %+v, want 3 sessions acquired", st)
	}
	for _, rows := range open {
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Exec(primary, "SELECT 1 /* stat again */"); err != nil {
		t.Fatal(err)
	}
	st := primaryStat(t, p)
	switch {
	case st.NewConnsCount-before.NewConnsCount < 3:
		t.Errorf("NewConnsCount grew by %d for three writers at once, want 3: %+v", st.NewConnsCount-before.NewConnsCount, st)
	case st.AcquireCount-before.AcquireCount < 4:
		t.Errorf("AcquireCount grew by %d for four statements on the primary: %+v", st.AcquireCount-before.AcquireCount, st)
	case st.EmptyAcquireCount < 3 || st.EmptyAcquireWaitTime <= 0 || st.AcquireDuration < st.EmptyAcquireWaitTime:
		t.Errorf("the acquires that opened a session are not counted: %+v", st)
	case st.TotalConns != 3 || st.IdleConns != 3 || st.AcquiredConns != 0 || st.ConstructingConns != 0:
		t.Errorf("want 3 sessions open, all idle: %+v", st)
	case st.TotalConns != st.AcquiredConns+st.IdleConns+st.ConstructingConns:
		t.Errorf("TotalConns is not the sum of the others: %+v", st)
	}

	b, err := json.Marshal(p.Stat())
	if err != nil {
		t.Fatal(err)
	}
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	primaries := 0
	for _, h := range raw {
		if m, ok := h["primary"]; ok {
			primaries++
			var f map[string]json.Number
			if err := json.Unmarshal(m, &f); err != nil {
				t.Fatal(err)
			}
			if len(f) != 13 {
				t.Errorf("primary figures in JSON: %d, want pgxpool.Stat's 13: %s", len(f), m)
			}
			for _, k := range []string{"acquireDuration", "emptyAcquireWaitTime"} {
				if n, err := f[k].Int64(); err != nil || n < 1000 {
					t.Errorf("%s is %s in JSON, want whole nanoseconds", k, f[k])
				}
			}
		}
	}
	if primaries != 1 {
		t.Errorf("%d hosts with primary figures in JSON, want 1: %s", primaries, b)
	}
}

// TestPoolKeysNoLeakAfterClose: with the health check of the primary's
// sessions running (and keeping sessions open), closing the *sql.DB or
// the Pool stops every goroutine and closes every session.
func TestPoolKeysNoLeakAfterClose(t *testing.T) {
	for _, face := range []string{"sql", "pool"} {
		t.Run(face, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			ctx := testCtx(t)
			app := "pk-leak-" + face
			dsn := poolKeysDSN(app, "pool_min_conns=2", "pool_max_conns=3", "pool_max_conn_lifetime=1s", "pool_max_conn_lifetime_jitter=200ms", "pool_health_check_period=100ms")
			cfg, err := pgrouted.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			var exec func(context.Context, string) error
			var closeIt func() error
			if face == "sql" {
				c, err := pgrouted.NewConnector(cfg)
				if err != nil {
					t.Fatal(err)
				}
				db := sql.OpenDB(c)
				exec = func(ctx context.Context, q string) error { _, err := db.ExecContext(ctx, q); return err }
				closeIt = db.Close
			} else {
				p, err := pgrouted.NewPoolWithConfig(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				exec = func(ctx context.Context, q string) error { _, err := p.Exec(ctx, q); return err }
				closeIt = func() error { p.Close(); return nil }
			}
			deadline := time.Now().Add(1500 * time.Millisecond) // a lifetime and more: sessions renewed
			for i := 0; time.Now().Before(deadline); i++ {
				if err := exec(pgrouted.WithRoute(ctx, pgrouted.Primary), fmt.Sprintf("SELECT pg_sleep(0.01) /* leak %d */", i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := closeIt(); err != nil {
				t.Fatal(err)
			}
			n := cluster.Primary()
			until := time.Now().Add(30 * time.Second)
			for {
				var left int
				if err := n.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", []any{app}, &left); err != nil {
					t.Fatal(err)
				}
				if left == 0 {
					break
				}
				if time.Now().After(until) {
					t.Fatalf("%d sessions left on the primary after Close", left)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestPoolMinIdleConns: a Pool keeps pool_min_idle_conns primary sessions
// idle, beside the ones in use.
func TestPoolMinIdleConns(t *testing.T) {
	ctx := testCtx(t)
	const app = "pk-min-idle"
	p, _ := openPoolDSN(t, poolKeysDSN(app, "pool_min_idle_conns=2", "pool_health_check_period=100ms"), nil)
	w := watchSessions(t, ctx, app, p.Connector())
	held, err := p.Acquire(ctx) // one session in use
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	var pid int32
	if err := held.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	w.waitFor(t, ctx, "two idle sessions beside the acquired one", func(pids []int32, pool int32) bool {
		return slices.Contains(pids, pid) && len(pids)-int(pool) >= 3
	})
	deadline := time.Now().Add(time.Minute)
	for {
		st := primaryStat(t, p)
		if st.IdleConns >= 2 && st.AcquiredConns >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Stat: %+v, want 2 idle sessions and the acquired one", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
