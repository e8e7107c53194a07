//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/internal/testhelp"
	"github.com/pgrouted/pgrouted/testcluster"
)

// The Patroni cluster (etcd and three Patroni members) of the Patroni
// tests, started on first use; TestPatroni closes it when it ends, so that
// it does not load the machine during the rest of the package, and TestMain
// closes it if a test left it open.
var (
	patroniMu sync.Mutex
	patroni   *testcluster.PatroniCluster
)

// patroniCluster returns the package's Patroni cluster, starting it when
// none runs. It fails the test (never skips) when the cluster cannot start:
// without Patroni or etcd the error gives the command that installs them.
func patroniCluster(t *testing.T) *testcluster.PatroniCluster {
	t.Helper()
	patroniMu.Lock()
	defer patroniMu.Unlock()
	if patroni != nil {
		return patroni
	}
	ctx, cancel := context.WithTimeout(context.Background(), testcluster.MainStartTimeout)
	defer cancel()
	pc, err := testcluster.StartPatroni(ctx, testcluster.PatroniOptions{
		Logf: testhelp.Logf,
	})
	if err != nil {
		t.Fatalf("cannot start the Patroni cluster: %v", err)
	}
	if err := pc.Member("pg0").Exec(ctx, `CREATE TABLE patroni_w (
		id bigserial PRIMARY KEY,
		tag text NOT NULL,
		port int NOT NULL DEFAULT inet_server_port(),
		at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
		pc.Close()
		t.Fatal(err)
	}
	patroni = pc
	return pc
}

// closePatroni closes the Patroni cluster if one runs.
func closePatroni() error {
	patroniMu.Lock()
	defer patroniMu.Unlock()
	if patroni == nil {
		return nil
	}
	err := patroni.Close()
	patroni = nil
	return err
}

// patroniDSN is a DSN on the given members (in that order) with the Patroni
// provider on every member's REST API, plus extra parameters.
func patroniDSN(pc *testcluster.PatroniCluster, members []*testcluster.PatroniMember, extra ...string) string {
	dsn := pc.DSNOf(members...) + "&pgrouted_topology=patroni&pgrouted_patroni_endpoints=" +
		strings.Join(pc.Endpoints(), ",") + "&pgrouted_patroni_timeout=500ms"
	return withParams(dsn, extra...)
}

// withParams adds extra to dsn, after a probe interval of 1s: the probe's
// timeout follows it (at least 500ms), and a probe that must open a new
// connection to a Patroni member authenticates with SCRAM, whose key
// derivation alone, under -race on a CI machine whose CPUs every lane
// shares, can take most of 500ms (a clean-clone CI run saw the replicas'
// probes fail "failed SASL auth: timeout" for 45s).
func withParams(dsn string, extra ...string) string {
	dsn += "&pgrouted_probe_interval=1s"
	for _, e := range extra {
		dsn += "&" + e
	}
	return dsn
}

// memberByPort maps inet_server_port() to a member's name.
func memberByPort(pc *testcluster.PatroniCluster, port int) string {
	for _, m := range pc.Members() {
		if m.Port() == port {
			return m.Name()
		}
	}
	return fmt.Sprintf("port %d (no member)", port)
}

// healthy brings the Patroni cluster back to every member running (after
// a switchover, a killed leader, a tag or a stopped REST API; at once when
// nothing is broken) and returns its leader and replicas.
func healthy(t *testing.T, ctx context.Context, pc *testcluster.PatroniCluster) (*testcluster.PatroniMember, []*testcluster.PatroniMember) {
	t.Helper()
	if err := pc.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	leader, err := pc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var replicas []*testcluster.PatroniMember
	for _, m := range pc.Members() {
		if m != leader {
			replicas = append(replicas, m)
		}
	}
	return leader, replicas
}

// writeTagged inserts a row tagged tag through db and returns the port of
// the server it landed on, read back from the row itself.
func writeTagged(ctx context.Context, db client, tag string) (int, error) {
	var port int
	err := db.QueryRowContext(ctx, "INSERT INTO patroni_w (tag) VALUES ($1) RETURNING port", tag).Scan(&port)
	return port, err
}

// readPorts runs n reads through db and counts them per member.
func readPorts(t *testing.T, ctx context.Context, pc *testcluster.PatroniCluster, db *sql.DB, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for i := 0; i < n; i++ {
		var port int
		if err := db.QueryRowContext(ctx, "SELECT inet_server_port()").Scan(&port); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		got[memberByPort(pc, port)]++
	}
	return got
}

// workload writes and reads through one client until stopped, and keeps
// what happened: the write outage is the longest time between two
// successful writes.
type workload struct {
	name   string
	db     client
	tag    string
	stop   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	mu     sync.Mutex
	writes int
	wErrs  []error
	reads  int
	rErrs  []error
	last   time.Time
	gap    time.Duration
	done   []doneWrite // the successful writes, in order
}

// doneWrite is a successful write of a workload: the server it ran on, by
// its port (RETURNING), and when it was issued and answered.
type doneWrite struct {
	port             int
	issued, answered time.Time
}

func startWorkload(name string, db client, tag string) *workload {
	w := &workload{name: name, db: db, tag: tag, stop: make(chan struct{})}
	w.wg.Add(2)
	go func() {
		defer w.wg.Done()
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			issued := time.Now()
			port, err := writeTagged(ctx, db, tag)
			cancel()
			now := time.Now()
			w.mu.Lock()
			if err != nil {
				w.wErrs = append(w.wErrs, err)
			} else {
				w.done = append(w.done, doneWrite{port: port, issued: issued, answered: now})
				w.writes++
				if !w.last.IsZero() && now.Sub(w.last) > w.gap {
					w.gap = now.Sub(w.last)
				}
				w.last = now
			}
			w.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	go func() {
		defer w.wg.Done()
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			var port int
			err := db.QueryRowContext(ctx, "SELECT inet_server_port()").Scan(&port)
			cancel()
			w.mu.Lock()
			if err != nil {
				w.rErrs = append(w.rErrs, err)
			} else {
				w.reads++
			}
			w.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return w
}

// successes is the number of successful writes so far.
func (w *workload) successes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes
}

func (w *workload) finish() {
	w.once.Do(func() { close(w.stop) })
	w.wg.Wait()
}

// waitWrites waits until the workloads have each written n more rows.
func waitWrites(t *testing.T, what string, ws ...*workload) {
	t.Helper()
	start := make([]int, len(ws))
	for i, w := range ws {
		start[i] = w.successes()
	}
	deadline := time.Now().Add(60 * time.Second)
	for i, w := range ws {
		for w.successes() < start[i]+5 {
			if time.Now().After(deadline) {
				for _, w := range ws {
					w.finish()
				}
				t.Fatalf("%s: the %s workload wrote %d rows in 60s, want 5 (errors: %v)", what, w.name, w.successes()-start[i], w.wErrs)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// checkFailover checks on the server what the workloads wrote across a
// change of leader from old to leader at changed: every row is on the old
// or on the new leader, none reached the old leader once the new one had
// taken one (by the rows' own clock_timestamp()), and rows were written on
// the new leader; reads never failed. It logs the write outage.
func checkFailover(t *testing.T, ctx context.Context, pc *testcluster.PatroniCluster, event string, old, leader *testcluster.PatroniMember, ws ...*workload) {
	t.Helper()
	for _, w := range ws {
		var onOld, onNew, elsewhere int
		var lastOld, firstNew *time.Time
		err := leader.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE port = $2),
			count(*) FILTER (WHERE port = $3),
			count(*) FILTER (WHERE port NOT IN ($2, $3)),
			max(at) FILTER (WHERE port = $2),
			min(at) FILTER (WHERE port = $3)
			FROM patroni_w WHERE tag = $1`, []any{w.tag, old.Port(), leader.Port()},
			&onOld, &onNew, &elsewhere, &lastOld, &firstNew)
		if err != nil {
			t.Fatal(err)
		}
		if elsewhere > 0 {
			t.Errorf("%s, %s provider: %d writes ran on neither the old leader %s nor the new one %s", event, w.name, elsewhere, old.Name(), leader.Name())
		}
		if onNew == 0 {
			t.Errorf("%s, %s provider: no write ran on the new leader %s", event, w.name, leader.Name())
		}
		if lastOld != nil && firstNew != nil && !lastOld.Before(*firstNew) {
			t.Errorf("%s, %s provider: a write ran on the old leader %s at %s, after the new leader %s took one at %s",
				event, w.name, old.Name(), lastOld.Format(time.RFC3339Nano), leader.Name(), firstNew.Format(time.RFC3339Nano))
		}
		// The same on the client's side, which also sees the rows the old
		// leader took and the new one never got (a killed leader's last
		// writes, which pg_rewind discards): no write issued after the
		// first write on the new leader was answered ran on the old one.
		var firstNewAnswered time.Time
		for _, d := range w.done {
			if d.port == leader.Port() && (firstNewAnswered.IsZero() || d.answered.Before(firstNewAnswered)) {
				firstNewAnswered = d.answered
			}
		}
		for _, d := range w.done {
			if d.port == old.Port() && !firstNewAnswered.IsZero() && d.issued.After(firstNewAnswered) {
				t.Errorf("%s, %s provider: a write issued at %s ran on the old leader %s, after a write on the new leader %s was answered at %s",
					event, w.name, d.issued.Format(time.RFC3339Nano), old.Name(), leader.Name(), firstNewAnswered.Format(time.RFC3339Nano))
				break
			}
		}
		if len(w.rErrs) > 0 {
			t.Errorf("%s, %s provider: %d of %d reads failed; the first: %v", event, w.name, len(w.rErrs), len(w.rErrs)+w.reads, w.rErrs[0])
		}
		var firstErr error
		if len(w.wErrs) > 0 {
			firstErr = w.wErrs[0]
		}
		t.Logf("%s, pgrouted_topology=%s: write outage %s (the longest time between two successful writes); %d writes (%d on %s, %d on %s), %d failed (first: %v); %d reads, none failed",
			event, w.name, w.gap.Round(time.Millisecond), w.writes, onOld, old.Name(), onNew, leader.Name(), len(w.wErrs), firstErr, w.reads)
	}
}

// TestPatroni runs pgrouted with pgrouted_topology=patroni against a real
// Patroni cluster. The subtests share one cluster and run in order; the
// last one kills the leader. The ones that take the primary away (the
// endpoints unreachable, the switchover, the killed leader) run through the
// driver and through the Pool.
func TestPatroni(t *testing.T) {
	pc := patroniCluster(t)
	t.Cleanup(func() {
		if err := closePatroni(); err != nil {
			t.Errorf("close the Patroni cluster: %v", err)
		}
	})
	ctx := testCtx(t)

	t.Run("writes go to the leader whatever the host order", func(t *testing.T) {
		leader, replicas := healthy(t, ctx, pc)
		orders := [][]*testcluster.PatroniMember{
			{leader, replicas[0], replicas[1]},
			{replicas[0], replicas[1], leader},
			{replicas[1], leader, replicas[0]},
		}
		for i, order := range orders {
			sdb, conn, _ := openDSN(t, patroniDSN(pc, order), nil)
			db := sqlClient{sdb}
			top := conn.Topology()
			if top.Provider == nil || top.Provider.Name != "patroni" || top.Provider.Leader == "" || top.Primary != top.Provider.Leader {
				t.Fatalf("order %d: topology %+v, provider %+v: want the patroni provider naming the primary", i, top, top.Provider)
			}
			tag := fmt.Sprintf("order-%d-%d", i, time.Now().UnixNano())
			port, err := writeTagged(ctx, db, tag)
			if err != nil {
				t.Fatalf("order %d: write: %v", i, err)
			}
			if port != leader.Port() {
				t.Fatalf("order %d (%s first): the write ran on %s, want the leader %s", i, order[0].Name(), memberByPort(pc, port), leader.Name())
			}
			db.Close()
		}
	})

	t.Run("reads spread over the replicas", func(t *testing.T) {
		leader, replicas := healthy(t, ctx, pc)
		db, conn, _ := openDSN(t, patroniDSN(pc, pc.Members(), "pgrouted_latency_window=off"), nil)
		replicasReady(t, conn)
		got := readPorts(t, ctx, pc, db, 40)
		for _, r := range replicas {
			if got[r.Name()] == 0 {
				t.Errorf("reads per member %v: none on the replica %s", got, r.Name())
			}
		}
		if got[leader.Name()] > 0 {
			t.Errorf("reads per member %v: %d on the leader %s with both replicas eligible", got, got[leader.Name()], leader.Name())
		}
	})

	t.Run("a noloadbalance member gets no reads", func(t *testing.T) {
		_, replicas := healthy(t, ctx, pc)
		tagged, other := replicas[0], replicas[1]
		t.Cleanup(func() {
			if err := tagged.ClearTags(context.Background()); err != nil {
				t.Errorf("clear the tag: %v", err)
			}
		})
		db, conn, _ := openDSN(t, patroniDSN(pc, pc.Members(), "pgrouted_latency_window=off"), nil)
		replicasReady(t, conn)
		if err := tagged.SetTag(ctx, "noloadbalance", true); err != nil {
			t.Fatal(err)
		}
		waitTopology(t, conn, 30*time.Second, tagged.Name()+" tagged noloadbalance", func(s pgrouted.Snapshot) bool {
			for _, h := range s.Hosts {
				if h.Address == tagged.Addr() {
					return h.NoLoadBalance && h.NoReads
				}
			}
			return false
		})
		got := readPorts(t, ctx, pc, db, 30)
		if got[tagged.Name()] > 0 || got[other.Name()] == 0 {
			t.Fatalf("reads per member %v: want none on %s (noloadbalance), some on %s", got, tagged.Name(), other.Name())
		}
	})

	t.Run("discover: a member the DSN does not name takes reads", func(t *testing.T) {
		leader, replicas := healthy(t, ctx, pc)
		named, unnamed := replicas[0], replicas[1]
		// With the password, a discovered member is used only over a
		// connection that proves the server's identity: here SCRAM
		// bound to the TLS channel.
		db, conn, _ := openDSN(t, withTLS(t, patroniDSN(pc, []*testcluster.PatroniMember{leader, named}, "pgrouted_discover=true", "pgrouted_latency_window=off"),
			"sslmode=require&channel_binding=require"), nil)
		waitTopology(t, conn, 30*time.Second, unnamed.Name()+" discovered", func(s pgrouted.Snapshot) bool {
			for _, h := range s.Hosts {
				if h.Address == unnamed.Addr() {
					return h.Discovered && h.Role == "standby" && h.Healthy && h.ReplayLSN != ""
				}
			}
			return false
		})
		replicasReady(t, conn)
		got := readPorts(t, ctx, pc, db, 40)
		if got[unnamed.Name()] == 0 {
			t.Fatalf("reads per member %v: none on %s, which Patroni reports and the DSN does not name", got, unnamed.Name())
		}
		// Without pgrouted_discover it takes none.
		db2, conn2, _ := openDSN(t, patroniDSN(pc, []*testcluster.PatroniMember{leader, named}, "pgrouted_latency_window=off"), nil)
		if n := len(conn2.Topology().Hosts); n != 2 {
			t.Fatalf("without pgrouted_discover: %d hosts, want the DSN's 2", n)
		}
		if got := readPorts(t, ctx, pc, db2, 20); got[unnamed.Name()] > 0 {
			t.Fatalf("without pgrouted_discover, reads per member %v: want none on %s", got, unnamed.Name())
		}
	})

	// Through the driver and through the Pool.
	t.Run("every endpoint unreachable: writes stop at the lease and resume when one answers", func(t *testing.T) {
		forEachClientDSN(t, func(t *testing.T, open dsnOpener) { patroniLeaseEnds(t, ctx, pc, open) })
	})

	// openAll opens, through the driver and through the Pool, a client
	// with the Patroni provider and one with the probes alone, on the same
	// members, and starts a workload on each.
	openAll := func(t *testing.T, event string) []*workload {
		extra := []string{"pgrouted_lease=5s", "pgrouted_write_timeout=20s"}
		run := time.Now().UnixNano()
		var ws []*workload
		for _, c := range []struct {
			name string
			open dsnOpener
		}{{"sql", openSQLClientDSN}, {"pool", openPoolClientDSN}} {
			pdb, _, _ := c.open(t, patroniDSN(pc, pc.Members(), extra...), nil)
			qdb, _, _ := c.open(t, withParams(pc.DSN(), extra...), nil)
			ws = append(ws,
				startWorkload("patroni/"+c.name, pdb, fmt.Sprintf("%s-patroni-%s-%d", event, c.name, run)),
				startWorkload("probe/"+c.name, qdb, fmt.Sprintf("%s-probe-%s-%d", event, c.name, run)))
		}
		return ws
	}

	t.Run("switchover", func(t *testing.T) {
		old, _ := healthy(t, ctx, pc)
		ws := openAll(t, "switchover")
		waitWrites(t, "before the switchover", ws...)
		leader, err := pc.Switchover(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		waitWrites(t, "after the switchover", ws...)
		for _, w := range ws {
			w.finish()
		}
		checkFailover(t, ctx, pc, "switchover", old, leader, ws...)
	})

	t.Run("killed leader", func(t *testing.T) {
		old, _ := healthy(t, ctx, pc)
		ws := openAll(t, "kill")
		waitWrites(t, "before the leader is killed", ws...)
		if _, err := pc.KillLeader(ctx); err != nil {
			t.Fatal(err)
		}
		leader, err := pc.WaitLeader(ctx, old)
		if err != nil {
			t.Fatal(err)
		}
		waitWrites(t, "after the leader was killed", ws...)
		for _, w := range ws {
			w.finish()
		}
		checkFailover(t, ctx, pc, "killed leader", old, leader, ws...)
		// The last subtest: the killed member stays down until Close, or
		// until the next subtest's healthy brings it back.
	})
}

// patroniLeaseEnds: with every Patroni endpoint unreachable, writes
// through a client that open opens stop at the lease (ErrNoPrimary), and
// resume on the leader when one endpoint answers again.
func patroniLeaseEnds(t *testing.T, ctx context.Context, pc *testcluster.PatroniCluster, open dsnOpener) {
	leader, replicas := healthy(t, ctx, pc)
	t.Cleanup(func() {
		for _, m := range pc.Members() {
			if err := m.StartREST(); err != nil {
				t.Error(err)
			}
		}
	})
	db, conn, _ := open(t, patroniDSN(pc, pc.Members(), "pgrouted_lease=2s", "pgrouted_write_timeout=1s"), nil)
	if _, err := writeTagged(ctx, db, "lease-before"); err != nil {
		t.Fatal(err)
	}
	for _, m := range pc.Members() {
		if err := m.StopREST(); err != nil {
			t.Fatal(err)
		}
	}
	stopped := time.Now()
	var last error
	var ok, unknown int
	for {
		_, err := writeTagged(ctx, db, "lease-during")
		if errors.Is(err, pgrouted.ErrOutcomeUnknown) && unknown == 0 {
			// In flight when the lease ended, its commit's answer
			// lost with the session pgrouted closed: it may have run.
			// The next write waits for a primary.
			unknown++
			continue
		}
		if err != nil {
			last = err
			break
		}
		ok++
		if time.Since(stopped) > 60*time.Second {
			t.Fatalf("writes still succeed 60s after every Patroni endpoint became unreachable (pgrouted_lease=2s)")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !errors.Is(last, pgrouted.ErrNoPrimary) {
		t.Fatalf("the write that failed once the endpoints were gone: %v; want ErrNoPrimary", last)
	}
	// PostgreSQL is fine: only Patroni's word is missing, and pgrouted
	// does not fall back to its probes alone.
	if rec, err := leader.IsInRecovery(ctx); err != nil || rec {
		t.Fatalf("the leader %s: in recovery %v, %v; want it running as primary", leader.Name(), rec, err)
	}
	if p := conn.Topology().Provider; p == nil || p.LastError == "" {
		t.Fatalf("provider %+v: want its last error", p)
	}
	t.Logf("writes stopped %s after the endpoints became unreachable (pgrouted_lease=2s), after %d successful writes (%d in flight at the lease's end)",
		time.Since(stopped).Round(time.Millisecond), ok, unknown)

	// One endpoint, a replica's, answers again.
	if err := replicas[1].StartREST(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		port, err := writeTagged(ctx, db, "lease-after")
		if err == nil {
			if port != leader.Port() {
				t.Fatalf("the write after the endpoint came back ran on %s, want the leader %s", memberByPort(pc, port), leader.Name())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes do not resume within 60s of %s's endpoint answering again: %v", replicas[1].Name(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// withTLS replaces, in dsn (a testcluster DSN), sslmode=disable by tls.
func withTLS(t *testing.T, dsn, tls string) string {
	t.Helper()
	out := strings.Replace(dsn, "sslmode=disable", tls, 1)
	if out == dsn {
		t.Fatal("no sslmode=disable in the DSN")
	}
	return out
}

// TestPatroniDiscoverReadsWithinProbes: with a real Patroni cluster, a DSN
// naming only the leader and pgrouted_discover=true, each member of the
// DSN's system that the DSN does not name takes reads within three probe
// intervals of the Connector's start, counted in probes of the leader (not
// timed). The members authenticate the DSN's role with a password sent in
// the clear (pg_hba method "password"), which sslmode=verify-full makes
// safe: the server proved its identity, as the DSN's own hosts do. (Before,
// discovered hosts had to authenticate with SCRAM whatever the TLS
// settings: such members never connected and served 0 reads.)
func TestPatroniDiscoverReadsWithinProbes(t *testing.T) {
	if err := closePatroni(); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	sctx, cancel := context.WithTimeout(ctx, testcluster.MainStartTimeout)
	defer cancel()
	pc, err := testcluster.StartPatroni(sctx, testcluster.PatroniOptions{Logf: testhelp.Logf, HostAuth: "password"})
	if err != nil {
		t.Fatalf("cannot start the Patroni cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := pc.Close(); err != nil {
			t.Errorf("close the Patroni cluster: %v", err)
		}
	})
	leader, replicas := healthy(t, ctx, pc)
	const probes = 3 // the bound, in probe intervals
	dsn := withTLS(t, patroniDSN(pc, []*testcluster.PatroniMember{leader}, "pgrouted_discover=true", "pgrouted_latency_window=off"),
		"sslmode=verify-full&sslrootcert="+url.QueryEscape(pc.RootCert()))
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
	// The leader is the DSN's only host: host 0. Its probes are counted
	// by their send times, as the topology publishes them.
	leaderName := conn.Topology().Hosts[0].Name
	var seen []time.Time
	count := func() int {
		if h, ok := pgrouted.TopologyHost(conn, leaderName); ok && !h.LastProbe.IsZero() && (len(seen) == 0 || !h.LastProbe.Equal(seen[len(seen)-1])) {
			seen = append(seen, h.LastProbe)
		}
		return len(seen)
	}
	got := map[string]int{}
	at := map[string]int{} // the leader's probe count at each member's first read
	reads := 0
	for {
		n := count()
		done := true
		for _, r := range replicas {
			done = done && got[r.Name()] > 0
		}
		if done {
			break
		}
		// Probe 1 is the first, at the start: within three intervals is
		// before probe 1+probes is published.
		if n > 1+probes {
			var states []string
			for _, r := range replicas {
				for _, h := range conn.Topology().Hosts {
					if h.Address == r.Addr() {
						states = append(states, fmt.Sprintf("%s: role %s, healthy %v, untrusted %q, no reads %v, last error %q",
							r.Name(), h.Role, h.Healthy, h.Untrusted, h.NoReads, h.LastError))
					}
				}
			}
			t.Fatalf("after %d probes of the leader (pgrouted_probe_interval=1s) and %d reads, reads per member %v: want every discovered member of the DSN's system to have taken reads within %d probe intervals; %s",
				n, reads, got, probes, strings.Join(states, "; "))
		}
		var port int
		if err := db.QueryRowContext(ctx, "SELECT inet_server_port()").Scan(&port); err != nil {
			t.Fatalf("read %d: %v", reads, err)
		}
		reads++
		name := memberByPort(pc, port)
		if got[name] == 0 {
			at[name] = count()
		}
		got[name]++
		time.Sleep(5 * time.Millisecond)
	}
	for _, r := range replicas {
		t.Logf("%s, discovered, took its first read at the leader's probe %d (%d reads in all, per member %v)", r.Name(), at[r.Name()], reads, got)
		h, _ := hostInfo(conn, r.Name())
		if !h.Discovered {
			t.Errorf("%s served reads but is not shown discovered: %+v", r.Name(), h)
		}
	}
}
