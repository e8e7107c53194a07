//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/testcluster"
)

// frozenConnectTimeout is the connect_timeout of the frozen-primary tests:
// far longer than any bound they wait with, so that a write that reached
// the new primary within such a bound did not wait for a dial to the old
// one to time out.
const frozenConnectTimeout = 30 * time.Second

// TestFrozenPrimary: the primary stops answering without closing anything
// (its processes frozen, or its network cut), a replica is promoted, and
// the old primary comes back later still believing it is the primary. Four
// writers insert rows tagged (writer, sequence) in a loop throughout; a
// fifth connection opens its primary session while the primary is frozen.
//
//   - The statements in flight on the old primary end with ErrOutcomeUnknown
//     before the old primary is back, and are never run again.
//   - The dial to the old primary is abandoned once the promotion is seen:
//     that write runs on the new primary, long before connect_timeout.
//   - Every writer writes on the new primary before the old one is back.
//   - No write issued after the failover reaches the old primary, and no
//     statement runs twice (the rows on both servers say so once the old
//     primary is back).
//
// The time from the promotion to the first write on the new primary is
// logged (the README's failover section quotes it), and bounded only by
// frozenBound, which is below connect_timeout and the lease: no timing
// assertion of a busy machine.
//
// PGROUTED_FROZEN_INTERVALS (a comma list of durations) runs both faults
// at each of those probe intervals instead of the frozen primary at 250ms
// and the blackholed one at 1s, to measure. Through the driver and through
// the Pool (whose fifth connection is one from Pool.Acquire).
func TestFrozenPrimary(t *testing.T) {
	type fault struct {
		name  string
		apply func(ctx context.Context, n *testcluster.Node) error
		heal  func(n *testcluster.Node) error
	}
	frozen := fault{"frozen",
		func(ctx context.Context, n *testcluster.Node) error { return n.Freeze(ctx) },
		func(n *testcluster.Node) error { return n.Thaw() }}
	blackholed := fault{"blackholed",
		func(_ context.Context, n *testcluster.Node) error { return n.Fault().Blackhole() },
		func(n *testcluster.Node) error { return n.Fault().Heal() }}
	type run struct {
		f        fault
		interval time.Duration
	}
	runs := []run{{frozen, 250 * time.Millisecond}, {blackholed, time.Second}}
	if env := os.Getenv("PGROUTED_FROZEN_INTERVALS"); env != "" {
		runs = nil
		for _, v := range strings.Split(env, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				t.Fatalf("PGROUTED_FROZEN_INTERVALS: %v", err)
			}
			runs = append(runs, run{frozen, d}, run{blackholed, d})
		}
	}
	for _, r := range runs {
		t.Run(fmt.Sprintf("%s-%v", r.f.name, r.interval), func(t *testing.T) {
			forEachClient(t, func(t *testing.T, open opener) { frozenPrimary(t, open, r.interval, r.f.apply, r.f.heal) })
		})
	}
}

// frozenBound bounds each wait of the frozen-primary tests for what
// pgrouted must do after the promotion: well below connect_timeout and the
// lease, so that neither a dial timing out nor the lease running out can
// satisfy it.
const frozenBound = 20 * time.Second

func frozenPrimary(t *testing.T, open opener, interval time.Duration, fault func(context.Context, *testcluster.Node) error, heal func(*testcluster.Node) error) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS fz; CREATE TABLE fz (w int, seq int, at timestamptz DEFAULT clock_timestamp())")
	replicated(t, ctx)
	old, promoted := cluster.Node(0), cluster.Node(1)
	// The old primary's open circuit is probed less and less often while
	// it stays frozen (the wait doubles from the probe interval): capped
	// at 2s, the wait for it to be probed back after the heal does not
	// depend on how long the freeze lasted (longer on a loaded machine).
	db, conn, rec := open(t, "pgrouted_probe_interval="+interval.String(), "pgrouted_lease=60s", "pgrouted_write_timeout=60s",
		"pgrouted_circuit_max_backoff=2s", fmt.Sprintf("connect_timeout=%d", int(frozenConnectTimeout/time.Second)))
	const writers, readers = 4, 2
	// When the fault begins, every writer's and reader's call must take
	// an idle connection whose session is open on the old primary, so
	// that what the old primary holds is their statements. A call that
	// opened a connection then would wait in its dial (as the fifth
	// connection below does on purpose) and run on the new primary as a
	// new statement: a primary reader held there is no read run again,
	// and with both readers so held no read was (1 run in 100 under
	// load, the Pool's readers both dialing: the goroutines pile up at
	// the fault and the last ones find no idle connection). So the
	// client opens one connection per writer and reader first, each with
	// its primary session, and keeps them idle (database/sql keeps two
	// by default).
	db.SetMaxIdleConns(writers + readers + 1)
	{
		warm := make([]clientConn, 0, writers+readers)
		for range writers + readers {
			c, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			warm = append(warm, c)
			var one int
			if err := c.QueryRowContext(pgrouted.WithRoute(ctx, pgrouted.Primary), "SELECT 1").Scan(&one); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range warm {
			c.Close()
		}
		if n := db.Idle(); n != writers+readers {
			t.Fatalf("%d idle connections, want %d", n, writers+readers)
		}
	}

	// outcome is one statement's end.
	type outcome struct {
		w, seq    int
		after     bool // issued after the connector saw the new primary
		err       error
		ended     time.Time
		heldUntil bool // it ended after the old primary was back
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
		failover atomic.Bool // the connector named the promoted node primary
		back     atomic.Bool // the old primary is back
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var halted sync.Once
	halt := func() { halted.Do(func() { close(stop); wg.Wait() }) }
	wctx, cancelWork := context.WithCancel(ctx)
	defer func() { cancelWork(); halt() }()
	// write runs one statement through ex, or, with ex nil, through a
	// new connection of the client (client.Conn), whose primary session
	// it opens.
	write := func(ex interface {
		ExecContext(context.Context, string, ...any) error
	}, w, seq int) outcome {
		o := outcome{w: w, seq: seq, after: failover.Load()}
		if ex == nil {
			var c clientConn
			if c, o.err = db.Conn(wctx); o.err == nil {
				defer c.Close()
				ex = c
			}
		}
		if o.err == nil {
			o.err = ex.ExecContext(wctx, "INSERT INTO fz (w, seq) VALUES ($1, $2)", w, seq)
		}
		o.ended, o.heldUntil = time.Now(), back.Load()
		mu.Lock()
		outcomes = append(outcomes, o)
		mu.Unlock()
		return o
	}
	var done [writers + 1]atomic.Int64 // statements each writer completed
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				if o := write(db, w, seq); o.err != nil && !errors.Is(o.err, pgrouted.ErrOutcomeUnknown) {
					time.Sleep(5 * time.Millisecond)
				}
				done[w].Add(1)
			}
		}()
	}
	// Two readers read on the primary throughout: a read held by the old
	// primary runs again on the new one, and none fails.
	var reads [readers]atomic.Int64
	var readErrs atomic.Int64
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx := pgrouted.WithRoute(wctx, pgrouted.Primary)
			for {
				select {
				case <-stop:
					return
				default:
				}
				var one int
				if err := db.QueryRowContext(rctx, fmt.Sprintf("SELECT 1 /* primary reader %d */", r)).Scan(&one); err != nil {
					if wctx.Err() == nil {
						readErrs.Add(1)
						t.Errorf("primary reader %d: %v", r, err)
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				reads[r].Add(1)
			}
		}()
	}
	// waitDone waits until every writer in ws completed a statement more
	// than from, within frozenBound.
	counts := func() []int64 {
		c := make([]int64, len(done))
		for i := range c {
			c[i] = done[i].Load()
		}
		return c
	}
	waitDone := func(what string, from []int64, ws ...int) {
		t.Helper()
		deadline := time.Now().Add(frozenBound)
		for _, w := range ws {
			for done[w].Load() <= from[w] {
				if time.Now().After(deadline) {
					t.Fatalf("%s: writer %d completed no statement within %v", what, w, frozenBound)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	all := []int{0, 1, 2, 3}
	waitDone("before the fault", make([]int64, len(done)), all...)
	waitDone("before the fault", counts(), all...)

	if err := fault(ctx, old); err != nil {
		t.Fatal(err)
	}
	faultAt := time.Now()
	healed := false
	defer func() {
		if !healed {
			heal(old)
		}
	}()
	// Every writer's and reader's connection is busy on the old primary:
	// a new connection opens its primary session there now, and waits.
	// Held means in use, none idle, and no statement completed for a
	// while: one that completed as the fault began keeps its connection
	// in use for a moment, then leaves it idle, with its session on the
	// old primary, for the next caller.
	progress := func() (n int64) {
		for i := range done {
			n += done[i].Load()
		}
		for i := range reads {
			n += reads[i].Load()
		}
		return n
	}
	const held = 250 * time.Millisecond
	for deadline, last, since := time.Now().Add(frozenBound), progress(), time.Now(); ; time.Sleep(5 * time.Millisecond) {
		if n := progress(); n != last || db.InUse() < writers+readers || db.Idle() > 0 {
			last, since = n, time.Now()
		} else if time.Since(since) >= held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the writers and readers are not all held by the old primary: %d connections in use, %d idle", db.InUse(), db.Idle())
		}
	}
	dialed := make(chan outcome, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		dialed <- write(nil, writers, 0)
		done[writers].Add(1)
	}()
	time.Sleep(500 * time.Millisecond) // as the user did: the promotion comes a moment later
	// From when pg_ctl promote starts: the new primary may take writes
	// before it returns.
	promotedAt := time.Now()
	if err := promoted.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(frozenBound); conn.Topology().Primary != promoted.Name(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the connector does not name %s primary within %v of its promotion: %+v", promoted.Name(), frozenBound, conn.Topology())
		}
	}
	failover.Store(true)
	seen := time.Since(promotedAt)
	// Every writer, and the new connection, writes again (on the new
	// primary) while the old one is still frozen.
	waitDone("after the promotion", counts(), all...)
	for r := range reads {
		for from, deadline := reads[r].Load(), time.Now().Add(frozenBound); reads[r].Load() <= from+1; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after the promotion: primary reader %d completed no read within %v", r, frozenBound)
			}
		}
	}
	select {
	case o := <-dialed:
		if o.err != nil {
			t.Fatalf("the write whose dial went to the frozen primary failed: %v", o.err)
		}
	case <-time.After(frozenBound):
		t.Fatalf("the write whose dial went to the frozen primary did not complete within %v of the promotion (connect_timeout %v)", frozenBound, frozenConnectTimeout)
	}
	firstNew := time.Time{}
	mu.Lock()
	for _, o := range outcomes {
		if o.err == nil && o.ended.After(promotedAt) && (firstNew.IsZero() || o.ended.Before(firstNew)) {
			firstNew = o.ended
		}
	}
	mu.Unlock()
	// The old primary comes back, still a primary on the old timeline;
	// the writers go on, on the new primary.
	healed = true
	if err := heal(old); err != nil {
		t.Fatal(err)
	}
	back.Store(true)
	for deadline := time.Now().Add(frozenBound); ; time.Sleep(5 * time.Millisecond) {
		h := conn.Topology().Hosts[0]
		if h.Name == old.Name() && h.Healthy && h.Role == "primary" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old primary was not probed back within %v: %+v", frozenBound, h)
		}
	}
	waitDone("with the old primary back", counts(), all...)
	waitDone("with the old primary back", counts(), all...)
	halt()
	t.Logf("probe interval %v: from the start of pg_ctl promote, the connector named the new primary after %v, and the first write ran there after %v (%v after the fault, the promotion began %v after it)",
		interval, seen.Round(time.Millisecond), firstNew.Sub(promotedAt).Round(time.Millisecond), firstNew.Sub(faultAt).Round(time.Millisecond), promotedAt.Sub(faultAt).Round(time.Millisecond))
	if firstNew.IsZero() {
		t.Fatal("no write succeeded after the promotion")
	}

	// What each server holds: each statement's rows, by the transaction
	// that wrote them (xmin). A row the old primary wrote before the fork
	// is on the new primary too, replicated, with the same xmin; a
	// statement that ran on each would have two. The old primary first
	// finishes what it had received before it froze.
	type key struct{ w, seq int }
	rowsOn := func(n *testcluster.Node) map[key][]string {
		t.Helper()
		c, err := n.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		for deadline := time.Now().Add(frozenBound); ; time.Sleep(10 * time.Millisecond) {
			var busy int
			if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND state <> 'idle' AND pid <> pg_backend_pid() AND application_name NOT IN ('pgrouted-probe')").Scan(&busy); err != nil {
				t.Fatal(err)
			}
			if busy == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d statements still running %v after it came back", n.Name(), busy, frozenBound)
			}
		}
		rows, err := c.Query(ctx, "SELECT w, seq, xmin::text FROM fz")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		m := map[key][]string{}
		for rows.Next() {
			var k key
			var xmin string
			if err := rows.Scan(&k.w, &k.seq, &xmin); err != nil {
				t.Fatal(err)
			}
			m[k] = append(m[k], xmin)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return m
	}
	xminsOld, xminsNew := rowsOn(old), rowsOn(promoted)
	var lost, okAfter int
	for _, o := range outcomes {
		k := key{o.w, o.seq}
		onOld, onNew := len(xminsOld[k]), len(xminsNew[k])
		if onOld > 1 || onNew > 1 || (onOld == 1 && onNew == 1 && xminsOld[k][0] != xminsNew[k][0]) {
			t.Errorf("writer %d statement %d ran twice: rows by transactions %v on %s, %v on %s", o.w, o.seq, xminsOld[k], old.Name(), xminsNew[k], promoted.Name())
		}
		switch {
		case o.err == nil:
			if onOld+onNew == 0 {
				t.Errorf("writer %d statement %d succeeded and is on neither server", o.w, o.seq)
			}
			if o.after {
				okAfter++
			}
		case errors.Is(o.err, pgrouted.ErrOutcomeUnknown):
			lost++
			var re *pgrouted.RouteError
			if !errors.As(o.err, &re) || re.Reason != pgrouted.ReasonPrimaryLost {
				t.Errorf("writer %d statement %d: %v is not a RouteError with reason %s", o.w, o.seq, o.err, pgrouted.ReasonPrimaryLost)
			}
			if errors.Is(o.err, driver.ErrBadConn) || errors.Is(o.err, context.Canceled) {
				t.Errorf("writer %d statement %d: %v matches driver.ErrBadConn or context.Canceled: database/sql or the caller would run it again", o.w, o.seq, o.err)
			}
			if o.heldUntil {
				t.Errorf("writer %d statement %d was held until the old primary came back: %v", o.w, o.seq, o.err)
			}
			if onNew > 0 && onOld == 0 {
				// On both, it ran on the old primary before the fork and
				// was replicated: its answer was what got lost.
				t.Errorf("writer %d statement %d ended with an unknown outcome and ran on the new primary %s", o.w, o.seq, promoted.Name())
			}
		default:
			t.Errorf("writer %d statement %d: %v", o.w, o.seq, o.err)
		}
		if o.after && onOld > 0 {
			t.Errorf("writer %d statement %d, issued after the failover, reached the old primary %s", o.w, o.seq, old.Name())
		}
	}
	if lost == 0 {
		t.Error("no statement in flight on the old primary ended with ErrOutcomeUnknown")
	}
	if n := conn.Stats().RouteErrors[pgrouted.ReasonPrimaryLost]; n != uint64(lost) {
		t.Errorf("Stats().RouteErrors[%q] = %d, want %d", pgrouted.ReasonPrimaryLost, n, lost)
	}
	if okAfter == 0 {
		t.Error("no write issued after the failover succeeded")
	}
	rerun := 0
	for _, e := range rec.snapshot() {
		if e.Err != nil && errors.Is(e.Err, pgrouted.ErrOutcomeUnknown) && e.Retried {
			t.Errorf("a statement with an unknown outcome was run again: %+v", e)
		}
		if e.Op == pgrouted.OpRead && e.Retried && e.Err == nil && e.Endpoint == promoted.Name() {
			rerun++
		}
	}
	if rerun == 0 {
		t.Error("no read held by the old primary ran again on the new one")
	}
	t.Logf("%d statements, %d ended with an unknown outcome, %d issued after the failover succeeded; %d reads held by the old primary ran again on the new one", len(outcomes), lost, okAfter, rerun)
}

// TestFrozenReplicaReleasesReads: a replica whose processes are frozen holds
// the reads running on it until its probes fail and its circuit opens;
// then they are released and run elsewhere (nothing had been returned),
// and no read fails. connect_timeout is far longer than the waits, so
// that a read released by its dial timing out would not pass. Through the
// driver and through the Pool.
func TestFrozenReplicaReleasesReads(t *testing.T) {
	forEachClient(t, testFrozenReplicaReleasesReads)
}

func testFrozenReplicaReleasesReads(t *testing.T, open opener) {
	ctx := testCtx(t)
	restore(t)
	db, conn, rec := open(t, fmt.Sprintf("connect_timeout=%d", int(frozenConnectTimeout/time.Second)), "pgrouted_latency_window=off")
	replicasReady(t, conn)
	waitClientReads(t, db, rec, 10*time.Second, "reads on node2", func(on map[string]int) bool { return on["node2"] > 0 })
	n := cluster.Node(2)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var halted sync.Once
	halt := func() { halted.Do(func() { close(stop); wg.Wait() }) }
	wctx, cancelWork := context.WithCancel(ctx)
	defer func() { cancelWork(); halt() }()
	const readers = 6
	var done [readers]atomic.Int64
	for g := 0; g < readers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := fmt.Sprintf("SELECT %d /* frozen reader */", g)
			for {
				select {
				case <-stop:
					return
				default:
				}
				var one int
				if err := db.QueryRowContext(wctx, q).Scan(&one); err != nil {
					if wctx.Err() == nil {
						t.Errorf("reader %d: %v", g, err)
					}
					return
				}
				done[g].Add(1)
			}
		}()
	}
	counts := func() []int64 {
		c := make([]int64, readers)
		for g := range c {
			c[g] = done[g].Load()
		}
		return c
	}
	waitEvery := func(what string, from []int64) {
		t.Helper()
		deadline := time.Now().Add(frozenBound)
		for g := 0; g < readers; {
			if done[g].Load() > from[g] {
				g++
				continue
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: reader %d completed no read within %v", what, g, frozenBound)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitEvery("before the freeze", make([]int64, readers))
	if err := n.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			n.Thaw()
		}
	}()
	for deadline := time.Now().Add(frozenBound); ; time.Sleep(5 * time.Millisecond) {
		if h := conn.Topology().Hosts[2]; h.Name == n.Name() && h.Circuit == "open" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's circuit did not open within %v of its freeze: %+v", n.Name(), frozenBound, conn.Topology().Hosts[2])
		}
	}
	// Twice: a read held by the frozen replica when its circuit opened is
	// released, then the reader goes on.
	waitEvery("once the circuit is open", counts())
	waitEvery("once the circuit is open", counts())
	halt()
	thawed = true
	if err := n.Thaw(); err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, e := range rec.snapshot() {
		if e.Err != nil {
			t.Errorf("a read failed: %v", e.Err)
		}
		if e.Retried && e.Err == nil && e.Endpoint != n.Name() {
			held++
		}
	}
	t.Logf("%d reads held by the frozen replica ran elsewhere", held)
	if held == 0 {
		t.Error("no read was held by the frozen replica: the test did not exercise it")
	}
	if got := conn.Stats().ReplicaRetries; got != uint64(held) {
		t.Errorf("Stats.ReplicaRetries = %d, want %d (the reads that ran elsewhere)", got, held)
	}
}

// TestFrozenPrimaryLeaseEnds: with no promotion, a frozen primary's lease
// runs out. The statement in flight on it ends then, with
// ErrOutcomeUnknown; a write issued after that waits for a primary and
// fails with ErrNoPrimary (nothing was sent); once the primary is thawed,
// writes run on it again, in a new term of the same epoch. Through the
// driver and through the Pool.
func TestFrozenPrimaryLeaseEnds(t *testing.T) {
	forEachClient(t, testFrozenPrimaryLeaseEnds)
}

func testFrozenPrimaryLeaseEnds(t *testing.T, open opener) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS fl; CREATE TABLE fl (id int)")
	replicated(t, ctx)
	const lease = 2 * time.Second
	// pgrouted_circuit_max_backoff: as in frozenPrimary, the wait for the
	// thawed primary does not depend on how long the freeze lasted.
	pool, conn, _ := open(t, "pgrouted_lease="+lease.String(), "pgrouted_write_timeout=1s", "pgrouted_circuit_max_backoff=2s",
		fmt.Sprintf("connect_timeout=%d", int(frozenConnectTimeout/time.Second)))
	// One connection throughout, whose primary session is the one frozen
	// (database/sql and pgxpool would ping a pooled one before reusing
	// it). The Pool's, from Pool.Acquire, is pinned to that session: once
	// it is gone, the connection is released and another one acquired
	// (poolConn).
	db, err := pool.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	old := cluster.Node(0)
	if err := db.ExecContext(ctx, "INSERT INTO fl VALUES (0)"); err != nil {
		t.Fatal(err)
	}
	epoch := conn.Topology().Epoch
	if err := old.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			old.Thaw()
		}
	}()
	frozeAt := time.Now()
	held := make(chan error, 1)
	go func() {
		held <- db.ExecContext(ctx, "INSERT INTO fl VALUES (1)")
	}()
	select {
	case err := <-held:
		if !errors.Is(err, pgrouted.ErrOutcomeUnknown) {
			t.Fatalf("the write held by the frozen primary ended with %v, not ErrOutcomeUnknown", err)
		}
		if pgconn.SafeToRetry(fmt.Errorf("handler: %w", err)) {
			t.Fatalf("the write held by the frozen primary: %v: pgconn.SafeToRetry true, want false (it may have run)", err)
		}
		t.Logf("the write held by the frozen primary ended %v after the freeze (lease %v): %v", time.Since(frozeAt).Round(time.Millisecond), lease, err)
	case <-time.After(frozenBound):
		t.Fatalf("the write held by the frozen primary did not end within %v (lease %v, connect_timeout %v)", frozenBound, lease, frozenConnectTimeout)
	}
	if err := db.ExecContext(ctx, "INSERT INTO fl VALUES (2)"); !errors.Is(err, pgrouted.ErrNoPrimary) || !pgconn.SafeToRetry(fmt.Errorf("handler: %w", err)) {
		t.Fatalf("a write with no primary: %v, want ErrNoPrimary, safe to retry", err)
	}
	thawed = true
	if err := old.Thaw(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(frozenBound); ; time.Sleep(10 * time.Millisecond) {
		var port int
		err := db.QueryRowContext(ctx, "INSERT INTO fl VALUES (3) RETURNING inet_server_port()").Scan(&port)
		if err == nil {
			if name := portNames(t)[port]; name != old.Name() {
				t.Fatalf("the write after the thaw ran on %s", name)
			}
			break
		}
		if !errors.Is(err, pgrouted.ErrNoPrimary) || time.Now().After(deadline) {
			t.Fatalf("a write after the thaw: %v", err)
		}
	}
	if e := conn.Topology().Epoch; e != epoch {
		t.Errorf("epoch %d after the thaw, %d before: the primary did not change", e, epoch)
	}
	var twos int
	if err := old.QueryRow(ctx, "SELECT count(*) FROM fl WHERE id = 2", nil, &twos); err != nil || twos != 0 {
		t.Fatalf("the write refused with ErrNoPrimary is on the primary %d times (%v)", twos, err)
	}
}

// TestTermEndsDuringReturningRows: an INSERT … RETURNING whose rows reached
// the caller and whose commit then waits (a deferred trigger sleeps at
// commit) when the primary's term ends (the provider clears the primary):
// pgrouted closes the session, and the caller reading the rows gets
// ErrOutcomeUnknown (the write may have committed, and here it did), not
// a bare network error. Under session consistency the rows come from
// pgrouted's pipeline (the write and its position read); under eventual,
// from pgx's own rows. Through the driver and through the Pool.
func TestTermEndsDuringReturningRows(t *testing.T) {
	forEachClientDSN(t, testTermEndsDuringReturningRows)
}

func testTermEndsDuringReturningRows(t *testing.T, open dsnOpener) {
	ctx := testCtx(t)
	slowCommitTable(t, ctx)
	for _, consistency := range []string{"session", "eventual"} {
		t.Run(consistency, func(t *testing.T) {
			db, conn, _, m := openManualClient(t, open, "pgrouted_consistency="+consistency, "pgrouted_write_timeout=1s")
			run := fmt.Sprintf("%s-%d", consistency, time.Now().UnixNano())
			// 1000 rows: the RETURNING rows (200 KB) fill the server's
			// output buffer, so they reach the caller before the commit,
			// whose answer waits for the trigger.
			rows, err := db.QueryContext(ctx, `INSERT INTO term_ret (v, run)
				SELECT repeat('x', 200), $1 FROM generate_series(1, 1000) RETURNING v`, run)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			if !rows.Next() {
				t.Fatalf("no first row: %v", rows.Err())
			}
			// The trigger sleeps at commit: end the term now.
			waitSleeping(t, ctx, "term_ret")
			m.ClearPrimary()
			waitTopology(t, conn, 10*time.Second, "no primary once cleared", func(s pgrouted.Snapshot) bool { return s.Primary == "" })
			n := 1
			for rows.Next() {
				n++
			}
			err = rows.Err()
			if err == nil {
				err = rows.Close()
			}
			if !errors.Is(err, pgrouted.ErrOutcomeUnknown) {
				t.Fatalf("after %d rows, the rows of a write whose primary's term ended before its commit answered: %v; want ErrOutcomeUnknown", n, err)
			}
			// It had run: the outcome was unknown to the caller only.
			waitCommitted(t, ctx, run, 1000)
		})
	}
}

// slowCommitTable creates term_ret, whose inserts, one in 1000 rows, sleep
// 5s at commit (a deferred trigger): the time the tests have, once they
// saw the sleep, to end the primary's term before the commit answers (on a
// loaded machine, seconds).
func slowCommitTable(t *testing.T, ctx context.Context) {
	t.Helper()
	mustExec(t, ctx, cluster.Primary(), `
CREATE TABLE IF NOT EXISTS term_ret (id bigserial PRIMARY KEY, v text NOT NULL, run text NOT NULL);
CREATE OR REPLACE FUNCTION term_ret_slow_commit() RETURNS trigger LANGUAGE plpgsql AS
	$$ BEGIN PERFORM pg_sleep(5); RETURN NULL; END $$;
DROP TRIGGER IF EXISTS term_ret_slow ON term_ret;
CREATE CONSTRAINT TRIGGER term_ret_slow AFTER INSERT ON term_ret DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW WHEN (NEW.id % 1000 = 0) EXECUTE FUNCTION term_ret_slow_commit()`)
}

// waitCommitted waits until n rows of run are on the primary, and fails
// when another number is there after 20s.
func waitCommitted(t *testing.T, ctx context.Context, run string, n int) {
	t.Helper()
	var got int
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := cluster.Primary().QueryRow(ctx, "SELECT count(*) FROM term_ret WHERE run = $1", []any{run}, &got); err != nil {
			t.Fatal(err)
		}
		if got == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got != n {
		t.Fatalf("%d rows of the write committed, want %d (it ran once)", got, n)
	}
}

// waitSleeping waits until a statement on the primary naming table sleeps
// in pg_sleep.
func waitSleeping(t *testing.T, ctx context.Context, table string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := cluster.Primary().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event = 'PgSleep' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()`, []any{table}, &n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no statement on %s sleeps on the primary after 20s", table)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
