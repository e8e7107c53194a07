//go:build unix

package pgrouted_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// globalHelperEnv, set in the environment of an exec of this test binary,
// makes it a reader process (globalHelper) instead of a test run: its value
// is the DSN it opens.
const globalHelperEnv = "PGROUTED_TEST_READER_DSN"

// globalHelper is the second process of TestGlobalAcrossProcesses: its own
// pgrouted on the DSN in globalHelperEnv. It prints "ready" once reads go
// to replicas, then for each id read on stdin runs one read of that id and
// prints "<id> <rows> <primary> <endpoint> <reason> <global>".
func globalHelper() int {
	dsn := os.Getenv(globalHelperEnv)
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var last pgrouted.RouteEvent
	cfg.OnRoute = func(e pgrouted.RouteEvent) {
		if e.Op == pgrouted.OpRead {
			last = e // reads run one at a time
		}
	}
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := conn.Explain(ctx, "SELECT 1")
		if err == nil && !d.Primary && conn.Topology().Primary != "" {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "reads do not go to a replica: %+v %v\n", d, err)
			return 2
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		id, err := strconv.Atoi(in.Text())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM globalx WHERE id = $1", id).Scan(&n); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("%d %d %v %s %s %v\n", id, n, last.Primary, last.Endpoint, last.Reason, last.Global)
	}
	st := conn.Stats()
	fmt.Fprintf(os.Stderr, "reader stats: %d position fetches, %d global reads, %d replica waits (%d timeouts)\n",
		st.PositionFetches, st.GlobalReads, st.ReplicaWaits, st.ReplicaWaitTimeouts)
	return 0
}

// reader is a globalHelper process.
type reader struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// startReader execs this test binary as a reader process on dsn.
func startReader(t *testing.T, dsn string) *reader {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), globalHelperEnv+"="+dsn)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &reader{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(func() {
		in.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("reader process: %v", err)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Error("reader process did not end")
		}
	})
	if !r.out.Scan() || r.out.Text() != "ready" {
		t.Fatalf("reader process did not start: %q", r.out.Text())
	}
	return r
}

// readResult is one read of a reader process.
type readResult struct {
	rows     int
	primary  bool
	endpoint string
	reason   string
	global   bool
}

// read asks the reader process to read id, and returns what it saw.
func (r *reader) read(t *testing.T, id int) readResult {
	t.Helper()
	if _, err := fmt.Fprintln(r.in, id); err != nil {
		t.Fatal(err)
	}
	if !r.out.Scan() {
		t.Fatalf("reader process ended: %v", r.out.Err())
	}
	f := strings.Fields(r.out.Text())
	if len(f) != 6 || f[0] != strconv.Itoa(id) {
		t.Fatalf("reader process answered %q to %d", r.out.Text(), id)
	}
	n, _ := strconv.Atoi(f[1])
	return readResult{rows: n, primary: f[2] == "true", endpoint: f[3], reason: f[4], global: f[5] == "true"}
}

// applyDelay makes every replica replay commits d late
// (recovery_min_apply_delay) until the test ends.
func applyDelay(t *testing.T, ctx context.Context, d time.Duration) {
	t.Helper()
	for _, r := range cluster.Replicas() {
		mustExec(t, ctx, r, fmt.Sprintf("ALTER SYSTEM SET recovery_min_apply_delay = '%dms'", d.Milliseconds()))
		mustExec(t, ctx, r, "SELECT pg_reload_conf()")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, r := range cluster.Replicas() {
			if err := r.Exec(ctx, "ALTER SYSTEM RESET recovery_min_apply_delay"); err != nil {
				t.Error(err)
				continue
			}
			if err := r.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
				t.Error(err)
			}
		}
	})
}

// TestGlobalAcrossProcesses: process A (this one, its own pgrouted)
// inserts a row and hands its id to process B (an exec of this test
// binary, with another pgrouted), which reads it at once, while the
// replicas replay 20 ms behind. B under pgrouted_consistency=global with
// pgrouted_replica_wait=100ms never misses the row, and replicas serve at
// least 90% of its reads; B under session consistency, without A's token,
// does miss rows (so the first result means something): it reads until
// one misses.
func TestGlobalAcrossProcesses(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS globalx; CREATE TABLE globalx (id int PRIMARY KEY)")
	replicated(t, ctx)
	applyDelay(t, ctx, 20*time.Millisecond)
	writer, _, _ := open(t)
	base := cluster.DSN() + "&pgrouted_probe_interval=100ms&pgrouted_lease=5s&pgrouted_names=" + names() + "&pgrouted_replica_wait=100ms"

	id := 0
	reasons := map[string]int{}
	run := func(r *reader, n int) (misses, onReplica, global int) {
		clear(reasons)
		for range n {
			id++
			if _, err := writer.ExecContext(ctx, "INSERT INTO globalx VALUES ($1)", id); err != nil {
				t.Fatal(err)
			}
			res := r.read(t, id)
			reasons[fmt.Sprintf("%s/primary=%v/global=%v", res.reason, res.primary, res.global)]++
			if res.rows != 1 {
				misses++
			}
			if !res.primary {
				onReplica++
			}
			if res.global {
				global++
			}
		}
		return misses, onReplica, global
	}

	const n = 300
	g := startReader(t, base+"&pgrouted_consistency=global")
	gMiss, gReplica, gGlobal := run(g, n)
	t.Logf("global: reasons %v", reasons)
	// Session without a token: until a read misses, 100 reads at a time
	// (a read misses when it reaches a replica within the 20 ms, which a
	// slower machine does less often), 1000 at most.
	s := startReader(t, base+"&pgrouted_consistency=session")
	sMiss, sReplica, sReads := 0, 0, 0
	for sMiss == 0 && sReads < 1000 {
		m, r, _ := run(s, 100)
		sMiss, sReplica, sReads = sMiss+m, sReplica+r, sReads+100
	}
	t.Logf("global: %d of %d reads missed the row, %d ran on replicas, %d used a global position; session without a token: %d of %d missed, %d on replicas",
		gMiss, n, gReplica, gGlobal, sMiss, sReads, sReplica)
	if gMiss != 0 {
		t.Errorf("global: %d of %d reads in another process missed a row committed before they began", gMiss, n)
	}
	if gReplica*10 < n*9 {
		t.Errorf("global: replicas served %d of %d reads, want at least 90%%", gReplica, n)
	}
	if gGlobal != n {
		t.Errorf("global: %d of %d reads say they used a global position", gGlobal, n)
	}
	if sMiss == 0 {
		t.Errorf("session without a token: no read of %d missed a row, with replicas 20ms behind: the test cannot tell global from session", sReads)
	}
}

// TestGlobalRouting: WithConsistency selects global for one request in a
// process whose default is session, and session in one whose default is
// global; Explain under global reads no position; under 32 concurrent
// global readers the fetches are shared (at most one per three reads).
func TestGlobalRouting(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS globalr; CREATE TABLE globalr (id int)")
	replicated(t, ctx)

	db, conn, rec := open(t)
	var n int
	// A global read with no replica eligible at that moment runs on the
	// primary without the read index (on a loaded machine late probes can
	// leave none for a moment): such a read proves nothing either way, and
	// is tried again once reads go to a replica (3 times at most).
	for attempt := 1; ; attempt++ {
		before := conn.Stats().PositionFetches
		if err := db.QueryRowContext(pgrouted.WithConsistency(ctx, pgrouted.ConsistencyGlobal), "SELECT count(*) FROM globalr").Scan(&n); err != nil {
			t.Fatal(err)
		}
		ev := lastRead(t, rec)
		if !ev.Global && ev.Primary && attempt < 3 {
			t.Logf("attempt %d: the global read ran on the primary without the read index (%s): no replica was eligible; again", attempt, ev.Reason)
			waitReplicaRoute(t, conn)
			continue
		}
		if fetches := conn.Stats().PositionFetches - before; !ev.Global || fetches != 1 {
			t.Fatalf("a read with WithConsistency(global) under a session default: %+v, %d fetches; want a global read, one fetch", ev.Decision, fetches)
		}
		break
	}
	fetched := conn.Stats().PositionFetches
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM globalr").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if ev := lastRead(t, rec); ev.Global || conn.Stats().PositionFetches != fetched {
		t.Fatalf("a plain read under a session default: Global %v, %d fetches; want neither", ev.Global, conn.Stats().PositionFetches-fetched)
	}

	gdb, gconn, grec := open(t, "pgrouted_consistency=global", "pgrouted_replica_max_conns=32")
	before := gconn.Stats().PositionFetches
	for range 10 {
		if _, err := gconn.Explain(ctx, "SELECT count(*) FROM globalr"); err != nil {
			t.Fatal(err)
		}
	}
	if after := gconn.Stats().PositionFetches; after != before {
		t.Fatalf("Explain under global read the primary's position %d times, want no side effect", after-before)
	}
	if err := gdb.QueryRowContext(pgrouted.WithConsistency(ctx, pgrouted.ConsistencySession), "SELECT count(*) FROM globalr").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if ev := lastRead(t, grec); ev.Global || gconn.Stats().PositionFetches != before {
		t.Fatalf("a read with WithConsistency(session) under a global default: Global %v; want a session read, no fetch", ev.Global)
	}

	// 32 readers at once, 50 reads each, over a network: 5 ms round trips
	// to every node. (On loopback, with 32 goroutines on two busy cores, a
	// fetch costs far less than a read's CPU; the fetches are still shared,
	// one in flight at a time, but each serves fewer reads.)
	for _, n := range cluster.Nodes() {
		if err := n.Fault().Latency(5 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Fault().Latency(0) })
	}
	const readers, each = 32, 50
	st0 := gconn.Stats()
	ev0 := len(grec.snapshot())
	errs := make(chan error, readers)
	for range readers {
		go func() {
			var err error
			for range each {
				var n int
				if err = gdb.QueryRowContext(ctx, "SELECT count(*) FROM globalr").Scan(&n); err != nil {
					break
				}
			}
			errs <- err
		}()
	}
	for range readers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	st := gconn.Stats()
	fetches, reads := st.PositionFetches-st0.PositionFetches, st.GlobalReads-st0.GlobalReads
	t.Logf("32 concurrent global readers: %d reads served by %d position fetches (%.3f per read)", reads, fetches, float64(fetches)/float64(reads))
	// Every read used the read index, or ran on the primary without it
	// (no replica eligible at that moment: on a starved machine the
	// probes can time a replica out): the count is what the reads' events
	// say, and most of them shared fetches.
	// A read whose fetch failed (on a starved machine a fetch can time
	// out) asked for a position and got none: its event says Global, with
	// ReasonPositionUnknown, and Stats.GlobalReads does not count it (see
	// RouteEvent.Global and Stats).
	global, unknown, onPrimary := 0, 0, 0
	for _, ev := range grec.snapshot()[ev0:] {
		switch {
		case ev.Global && ev.Reason == pgrouted.ReasonPositionUnknown:
			unknown++
		case ev.Global:
			global++
		case ev.Primary:
			onPrimary++
		default:
			t.Fatalf("a read under the global default ran on %s without the read index (%s)", ev.Endpoint, ev.Reason)
		}
	}
	if global+unknown+onPrimary != readers*each || reads != uint64(global) {
		t.Fatalf("%d global reads counted, %d by the events (%d more whose fetch failed, %d more on the primary without the index), want %d in all", reads, global, unknown, onPrimary, readers*each)
	}
	if unknown > 0 && st.PositionFetchErrors == st0.PositionFetchErrors {
		t.Fatalf("%d reads say their position fetch failed, and no fetch failed", unknown)
	}
	if global < readers*each/2 {
		t.Fatalf("only %d of %d reads used the read index (%d on the primary)", global, readers*each, onPrimary)
	}
	// Without sharing there would be a fetch per read. How many reads
	// share one depends on how long a fetch takes against a read (usually
	// about one fetch per ten reads here, once one per four unloaded,
	// without -race): the bound asks for sharing, not for a speed, which
	// make bench measures.
	if fetches*3 > reads {
		where := map[string]int{}
		for _, ev := range grec.snapshot()[ev0:] {
			where[fmt.Sprintf("%s/%s", ev.Endpoint, ev.Reason)]++
		}
		t.Fatalf("%d position fetches for %d reads, want at most one third; reads by endpoint/reason %v", fetches, reads, where)
	}
}

// TestGlobalThroughFailover: a writer (its own pgrouted) inserts rows one
// after another; global readers (another pgrouted) each read the last row
// acknowledged before their read began, while the replication links are
// cut (the old primary acknowledges writes no standby receives), the
// primary is killed and a standby promoted. No read fails, and no read
// misses a row acknowledged before it began, except rows lost with the
// old primary (asynchronous replication allows it): those are told apart
// by the new primary's table (a stale read would miss a row it has).
// Before the cut, the readers run for 2 s and until 20 of their reads ran
// on a replica; the cut lasts 1 s and until 10 writes were acknowledged
// in it (writes only the old primary has). Through the driver and through
// the Pool.
func TestGlobalThroughFailover(t *testing.T) {
	forEachClient(t, testGlobalThroughFailover)
}

func testGlobalThroughFailover(t *testing.T, open opener) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS globalf; CREATE TABLE globalf (id int PRIMARY KEY)")
	replicated(t, ctx)
	writer, _, _ := open(t)
	rdb, rconn, rrec := open(t, "pgrouted_consistency=global", "pgrouted_replica_wait=100ms")

	var acked atomic.Int64 // the last id whose insert was acknowledged
	stop := make(chan struct{})
	var wg sync.WaitGroup
	halt := sync.OnceFunc(func() { close(stop) })
	defer func() { halt(); wg.Wait() }() // also when the test fails first
	wg.Add(1)
	go func() {
		defer wg.Done()
		for id := int64(1); ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := writer.ExecContext(ctx, "INSERT INTO globalf VALUES ($1)", id); err == nil {
				acked.Store(id)
			} else {
				time.Sleep(5 * time.Millisecond) // during the failover
			}
		}
	}()
	var (
		mu     sync.Mutex
		misses []int64
		errs   []error
		reads  atomic.Int64
	)
	const readers = 4
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := acked.Load() // acknowledged before the read begins
				if id == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				var n int
				err := rdb.QueryRowContext(ctx, "SELECT count(*) FROM globalf WHERE id = $1", id).Scan(&n)
				reads.Add(1)
				mu.Lock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case n != 1:
					misses = append(misses, id)
				}
				mu.Unlock()
			}
		}()
	}
	// globalOnReplica counts the global reads that ran on a replica.
	globalOnReplica := func() (n int) {
		for _, e := range rrec.snapshot() {
			if e.Op == pgrouted.OpRead && e.Err == nil && e.Global && !e.Primary {
				n++
			}
		}
		return n
	}
	// Each phase lasts its time, and on until it holds what the checks
	// below need (a slower machine does less in that time): before the
	// cut, global reads on a replica; during it, writes only the old
	// primary has.
	const enoughOnReplica, enoughCutOff = 20, 10
	phaseUntil(t, "before the cut", 2*time.Second, func() (bool, string) {
		n := globalOnReplica()
		return n >= enoughOnReplica, fmt.Sprintf("%d global reads on a replica, want %d", n, enoughOnReplica)
	})
	// From now on the old primary acknowledges writes no standby receives.
	for _, r := range cluster.Replicas() {
		if err := r.ReplicationFault().Blackhole(); err != nil {
			t.Fatal(err)
		}
	}
	cut := acked.Load()
	phaseUntil(t, "replication cut", time.Second, func() (bool, string) {
		n := acked.Load() - cut
		return n >= enoughCutOff, fmt.Sprintf("%d writes acknowledged since the cut, want %d", n, enoughCutOff)
	})
	lastOld := acked.Load()
	failOver(t, ctx, rconn, true)
	time.Sleep(3 * time.Second)
	halt()
	wg.Wait()

	// What the new primary has tells a lost write from a stale read.
	var survived int64
	if err := cluster.Node(1).QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM globalf WHERE id <= $1", []any{lastOld}, &survived); err != nil {
		t.Fatal(err)
	}
	present := func(id int64) bool {
		var n int
		if err := cluster.Node(1).QueryRow(ctx, "SELECT count(*) FROM globalf WHERE id = $1", []any{id}, &n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	var stale, lost []int64
	for _, id := range misses {
		if present(id) {
			stale = append(stale, id)
		} else {
			lost = append(lost, id)
		}
	}
	onReplica, global := 0, 0 // through the whole run
	for _, e := range rrec.snapshot() {
		if e.Op == pgrouted.OpRead && e.Err == nil && e.Global {
			global++
			if !e.Primary {
				onReplica++
			}
		}
	}
	st := rconn.Stats()
	t.Logf("%d reads (%d global, %d on replicas), %d errors; rows %d..%d acknowledged by the old primary were lost with it; %d reads missed a lost row, %d missed a row the new primary has; reader stats: %d fetches (%d failed)",
		reads.Load(), global, onReplica, len(errs), survived+1, lastOld, len(lost), len(stale), st.PositionFetches, st.PositionFetchErrors)
	if len(errs) > 0 {
		t.Errorf("%d reads failed through the failover; first: %v", len(errs), errs[0])
	}
	if len(stale) > 0 {
		t.Errorf("%d reads missed rows acknowledged before they began that the new primary has (stale reads): %v", len(stale), stale[:min(len(stale), 10)])
	}
	if survived >= lastOld {
		t.Errorf("no write acknowledged by the old primary was lost (last survivor %d, last acknowledged %d): the test did not cut replication", survived, lastOld)
	}
	if onReplica == 0 {
		t.Error("no global read ran on a replica")
	}
}

// phaseUntil lasts at least d, and on until enough says it holds what it
// should; after a minute more, the test fails with what enough says.
func phaseUntil(t *testing.T, what string, d time.Duration, enough func() (bool, string)) {
	t.Helper()
	began := time.Now()
	time.Sleep(d)
	for {
		ok, figures := enough()
		if ok {
			return
		}
		if time.Since(began) > d+time.Minute {
			t.Fatalf("%s: %s after %s", what, figures, time.Since(began).Round(time.Second))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestGlobalWritesServeReads: in a process that writes as well as reads,
// the positions its writes with a Session read after their commits
// (autocommit writes, COMMITs; a write without one defers its position:
// internal/consistency) serve its waiting global reads in place of fetches
// (Stats.PositionsShared), and no read misses a row another process's
// write had acknowledged before the read began.
func TestGlobalWritesServeReads(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS globalw, globalo; CREATE TABLE globalw (id bigint PRIMARY KEY); CREATE TABLE globalo (id bigint)")
	replicated(t, ctx)

	wdb, _, _ := open(t) // another process's writes
	// Probes every 3 s: their positions (offered too) serve no read here.
	gdb, gconn, _ := open(t, "pgrouted_consistency=global", "pgrouted_replica_max_conns=32", "pgrouted_probe_interval=3s")
	var acked, next atomic.Int64
	if _, err := wdb.ExecContext(ctx, "INSERT INTO globalw VALUES (0)"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var writers sync.WaitGroup
	werrs := make(chan error, 4)
	write := func(f func() error) {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := f(); err != nil {
					werrs <- err
					return
				}
			}
		}()
	}
	write(func() error { // the other process
		id := next.Add(1)
		if _, err := wdb.ExecContext(ctx, "INSERT INTO globalw VALUES ($1)", id); err != nil {
			return err
		}
		for cur := acked.Load(); id > cur && !acked.CompareAndSwap(cur, id); cur = acked.Load() {
		}
		return nil
	})
	sctx := pgrouted.WithSession(ctx, pgrouted.NewSession())
	for range 2 { // this process's autocommit writes
		write(func() error {
			_, err := gdb.ExecContext(sctx, "INSERT INTO globalo VALUES (1)")
			return err
		})
	}
	write(func() error { // and its transactions
		tx, err := gdb.BeginTx(sctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO globalo VALUES (2)"); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	})

	const readers, each = 16, 100
	st0 := gconn.Stats()
	var misses atomic.Int64
	errs := make(chan error, readers)
	for range readers {
		go func() {
			var err error
			for range each {
				id := acked.Load() // acknowledged before the read begins
				var n int
				if err = gdb.QueryRowContext(ctx, "SELECT count(*) FROM globalw WHERE id = $1", id).Scan(&n); err != nil {
					break
				}
				if n != 1 {
					misses.Add(1)
				}
			}
			errs <- err
		}()
	}
	for range readers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	writers.Wait()
	close(werrs)
	for err := range werrs {
		t.Fatal(err)
	}
	st := gconn.Stats()
	fetches, shared, reads := st.PositionFetches-st0.PositionFetches, st.PositionsShared-st0.PositionsShared, st.GlobalReads-st0.GlobalReads
	t.Logf("%d global reads: %d position fetches, %d positions shared by writes (%.3f fetches per read)", reads, fetches, shared, float64(fetches)/float64(reads))
	if m := misses.Load(); m != 0 {
		t.Fatalf("%d reads missed a row acknowledged before they began", m)
	}
	if reads != readers*each {
		t.Fatalf("%d global reads counted, want %d", reads, readers*each)
	}
	if shared == 0 {
		t.Fatal("no position read after a write served a global read")
	}
}
