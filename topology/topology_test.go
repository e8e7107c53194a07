//go:build unix

package topology_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted/internal/testhelp"
	"github.com/pgrouted/pgrouted/lagmeter"
	"github.com/pgrouted/pgrouted/testcluster"
	"github.com/pgrouted/pgrouted/topology"
	"go.uber.org/goleak"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	testcluster.Main(m, testcluster.Options{
		Replicas: 2,
		Logf:     testhelp.Logf,
	}, func(c *testcluster.Cluster) { cluster = c })
}

// testCtx is a context for one test: it ends after 2 minutes or with the test.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	return testhelp.Context(t, 2*time.Minute)
}

// restore puts the cluster back when the test ends, for a test that breaks it.
func restore(t *testing.T) {
	t.Helper()
	testhelp.Restore(t, cluster)
}

// hosts returns the cluster's nodes as topology hosts, in the given order of
// node indexes, connecting as user (empty: the cluster's).
func hosts(t *testing.T, user string, order ...int) []topology.Host {
	t.Helper()
	var hs []topology.Host
	for _, i := range order {
		n := cluster.Node(i)
		cfg, err := pgconn.ParseConfig(n.DSN())
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			cfg.User = user
		}
		hs = append(hs, topology.Host{Name: n.Name(), Addr: n.Addr(), Config: cfg})
	}
	return hs
}

func start(t *testing.T, hs []topology.Host, opts topology.Options) *topology.Topology {
	t.Helper()
	top, err := topology.New(hs, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { top.Close() })
	return top
}

// waitFor polls the snapshot until cond holds, or fails after limit.
func waitFor(t *testing.T, top *topology.Topology, limit time.Duration, what string, cond func(*topology.Snapshot) bool) (*topology.Snapshot, time.Duration) {
	t.Helper()
	began := time.Now()
	for {
		s := top.Snapshot()
		if cond(s) {
			return s, time.Since(began)
		}
		if time.Since(began) > limit {
			t.Fatalf("after %v, still not %s; snapshot: %+v", limit, what, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func primaryName(s *topology.Snapshot) string {
	if s.Primary < 0 {
		return ""
	}
	return s.Hosts[s.Primary].Name
}

func rolesKnown(s *topology.Snapshot) bool {
	for _, h := range s.Hosts {
		if h.Role == topology.RoleUnknown {
			return false
		}
	}
	return true
}

func TestRolesWhateverTheOrder(t *testing.T) {
	for _, order := range [][]int{{0, 1, 2}, {2, 1, 0}, {1, 0, 2}, {1, 2, 0}} {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			top := start(t, hosts(t, "", order...), topology.Options{Interval: 100 * time.Millisecond})
			s, _ := waitFor(t, top, 30*time.Second, "all roles known", func(s *topology.Snapshot) bool {
				return rolesKnown(s) && s.Primary >= 0
			})
			if got := primaryName(s); got != "node0" {
				t.Fatalf("primary = %q, want node0", got)
			}
			if !s.LeaseValid(time.Now()) {
				t.Fatal("primary not authoritative right after its probe")
			}
			if s.Epoch != 1 {
				t.Fatalf("epoch = %d, want 1 for the first primary", s.Epoch)
			}
			for _, h := range s.Hosts {
				switch h.Name {
				case "node0":
					if h.Role != topology.RolePrimary || h.InsertLSN == 0 || h.Timeline == 0 {
						t.Errorf("%s: %+v", h.Name, h)
					}
				default:
					if h.Role != topology.RoleStandby || h.ReplayLSN == 0 || h.ReceiveLSN == 0 {
						t.Errorf("%s: %+v", h.Name, h)
					}
				}
				if !h.Healthy || h.RTT <= 0 || h.SystemID == 0 {
					t.Errorf("%s: healthy=%v rtt=%v system id=%d", h.Name, h.Healthy, h.RTT, h.SystemID)
				}
			}
		})
	}
}

func TestSyncStateReported(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	p := cluster.Primary()
	if err := p.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = 'node1'"); err != nil {
		t.Fatal(err)
	}
	if err := p.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Exec(context.Background(), "ALTER SYSTEM RESET synchronous_standby_names")
		p.Exec(context.Background(), "SELECT pg_reload_conf()")
	})
	top := start(t, hosts(t, "", 0, 1, 2), topology.Options{Interval: 100 * time.Millisecond})
	// A standby appears in pg_stat_replication once its walreceiver has
	// connected: one restored by the previous test may take a moment.
	waitFor(t, top, 30*time.Second, "node1 reported sync and node2 async", func(s *topology.Snapshot) bool {
		return s.Primary >= 0 && s.Hosts[s.Index("node1")].SyncState == "sync" && s.Hosts[s.Index("node2")].SyncState == "async"
	})
}

func TestFailoverFollowed(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	interval := 500 * time.Millisecond
	top := start(t, hosts(t, "", 0, 1, 2), topology.Options{Interval: interval})
	events, cancel := top.Subscribe(64)
	defer cancel()
	// node1 seen as a standby, with its timeline and replay position,
	// before it is promoted: the switch floor checked below is what it
	// was last seen to replay (a busy machine can promote it before its
	// first probe otherwise, and the floor is unknown).
	s0, _ := waitFor(t, top, 30*time.Second, "node0 primary and node1 a standby", func(s *topology.Snapshot) bool {
		h := s.Hosts[s.Index("node1")]
		return primaryName(s) == "node0" && h.Role == topology.RoleStandby && h.Timeline != 0 && h.ReplayLSN != 0
	})

	old, promoted := cluster.Node(0), cluster.Node(1)
	if err := old.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	promoteAt := time.Now()
	if err := promoted.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promotedAt := time.Now()
	s, _ := waitFor(t, top, interval+5*time.Second, "node1 primary", func(s *topology.Snapshot) bool { return primaryName(s) == "node1" })
	t.Logf("new primary noticed %v after the promotion began, %v after it completed (probe interval %v)",
		time.Since(promoteAt).Round(time.Millisecond), time.Since(promotedAt).Round(time.Millisecond), interval)
	if s.Epoch != s0.Epoch+1 {
		t.Fatalf("epoch = %d, want %d", s.Epoch, s0.Epoch+1)
	}
	oldTL := s0.Hosts[s0.Index("node0")].Timeline
	h := s.Hosts[s.Index("node1")]
	if h.Timeline != oldTL+1 {
		t.Fatalf("new primary's timeline = %d", h.Timeline)
	}
	// Its timeline history says where it left the old timeline: at or
	// after what it was last seen to replay as a standby, which is the
	// lower bound known without the history.
	sp, ok := lagmeter.SwitchPoint(h.Switches, oldTL)
	if !ok || sp == 0 {
		t.Fatalf("new primary's history %v lacks timeline %d", h.Switches, oldTL)
	}
	if f := h.SwitchFloor; f.Timeline != oldTL || f.LSN == 0 || f.LSN > sp {
		t.Fatalf("switch floor %+v, switch point %v", f, sp)
	}
	t.Logf("timeline %d left at %v (last replay seen %v)", oldTL, sp, h.SwitchFloor.LSN)
	if h := s.Hosts[s.Index("node0")]; h.Healthy {
		t.Fatalf("stopped node0 still healthy: %+v", h)
	}
	// The old primary comes back as a standby of the new one.
	if err := old.Rejoin(ctx, promoted); err != nil {
		t.Fatal(err)
	}
	s, _ = waitFor(t, top, 30*time.Second, "node0 standby", func(s *topology.Snapshot) bool {
		h := s.Hosts[s.Index("node0")]
		return h.Healthy && h.Role == topology.RoleStandby
	})
	if primaryName(s) != "node1" || s.Epoch != s0.Epoch+1 {
		t.Fatalf("after the old primary rejoined: primary %q epoch %d", primaryName(s), s.Epoch)
	}
	var kinds []string
	for len(events) > 0 {
		e := <-events
		kinds = append(kinds, fmt.Sprintf("%s(%s<-%s)", e.Kind, e.Host, e.Previous))
	}
	want := fmt.Sprintf("%s(%s<-%s)", topology.EventPrimaryChanged, "node1", "node0")
	found := false
	for _, k := range kinds {
		found = found || k == want
	}
	if !found {
		t.Fatalf("events %v lack %s", kinds, want)
	}
	t.Logf("events: %v", kinds)
}

// TestProbeCutByShutdown: a probe that the server answers in part and
// then ends (FATAL 57P01, as a primary shutting down does between the
// probe's statements) failed; it does not count as a probe of a primary of
// unknown timeline (whose claim, inside its lease, made every other
// primary a conflict: a failover's new primary was refused until the lease
// ran out). The cut is made real: for the role the probe connects as,
// public.pg_walfile_name, ahead of pg_catalog on its search_path, ends the
// session that calls it (the timeline statement, after the role's).
func TestProbeCutByShutdown(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	p := cluster.Node(0)
	setup := `DROP ROLE IF EXISTS cutoff; CREATE ROLE cutoff LOGIN;
CREATE OR REPLACE FUNCTION public.pg_walfile_name(pg_lsn) RETURNS text LANGUAGE sql
	AS $$ SELECT pg_terminate_backend(pg_backend_pid()); SELECT pg_sleep(5)::text $$;
ALTER ROLE cutoff SET search_path = public, pg_catalog`
	if err := p.Exec(ctx, setup); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cluster.Node(0).Exec(context.Background(), "DROP FUNCTION IF EXISTS public.pg_walfile_name(pg_lsn); DROP ROLE IF EXISTS cutoff")
	})
	top := start(t, hosts(t, "cutoff", 0), topology.Options{Interval: 100 * time.Millisecond})
	s, _ := waitFor(t, top, 10*time.Second, "a probe failed by the server's FATAL", func(s *topology.Snapshot) bool {
		h := s.Hosts[0]
		if h.Healthy && h.Role == topology.RolePrimary && h.Timeline == 0 {
			t.Fatalf("a probe cut after its first statement counted as one of a primary of unknown timeline: %+v", h)
		}
		return strings.Contains(h.LastError, "terminating connection")
	})
	if s.Primary >= 0 {
		t.Fatalf("primary %q from probes that all failed", primaryName(s))
	}
	t.Logf("%s: %s", s.Hosts[0].Name, s.Hosts[0].LastError)
}

func TestSplitBrain(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	p := cluster.Node(0)
	// A role that cannot read the timeline: pg_walfile_name is revoked.
	if err := p.Exec(ctx, "DROP ROLE IF EXISTS noprivs; CREATE ROLE noprivs LOGIN; REVOKE EXECUTE ON FUNCTION pg_walfile_name(pg_lsn) FROM PUBLIC"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Restore (registered first) runs after this: fix node0, the
		// primary Restore copies from.
		cluster.Node(0).Exec(context.Background(), "GRANT EXECUTE ON FUNCTION pg_walfile_name(pg_lsn) TO PUBLIC")
		cluster.Node(1).Exec(context.Background(), "GRANT EXECUTE ON FUNCTION pg_walfile_name(pg_lsn) TO PUBLIC")
	})
	lsn, _ := p.CurrentLSN(ctx)
	if err := cluster.Node(1).WaitReplayed(ctx, lsn); err != nil {
		t.Fatal(err)
	}

	top := start(t, hosts(t, "", 0, 1, 2), topology.Options{Interval: 100 * time.Millisecond, EventBuffer: 256})
	blind := start(t, hosts(t, "noprivs", 0, 1, 2), topology.Options{Interval: 100 * time.Millisecond})
	waitFor(t, top, 30*time.Second, "node0 primary", func(s *topology.Snapshot) bool { return primaryName(s) == "node0" })
	// With one primary, an unreadable timeline does not matter.
	bs, _ := waitFor(t, blind, 10*time.Second, "node0 primary (unprivileged)", func(s *topology.Snapshot) bool { return primaryName(s) == "node0" })
	if h := bs.Hosts[0]; h.Timeline != 0 {
		t.Fatalf("unprivileged probe read timeline %d; the test needs it unreadable", h.Timeline)
	}

	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Node(1).Promote(ctx); err != nil {
		t.Fatal(err)
	}
	// What the view went through (each change of a host's role, health
	// or timeline), for the failure message below: once the conflicts
	// counted were those of this wait (node0's claim inside its lease,
	// node1's promotion beside it), and node1 became primary only when
	// the lease ran out.
	var trace []string
	var last string
	waitFor(t, top, 30*time.Second, "node1 primary", func(s *topology.Snapshot) bool {
		var b strings.Builder
		for _, h := range s.Hosts {
			fmt.Fprintf(&b, " %s:%s/%v/tl%d", h.Name, h.Role, h.Healthy, h.Timeline)
		}
		// The conflict count moves every probe round while in conflict:
		// a change is one of the primary or the hosts.
		if cur := fmt.Sprintf("primary %q:%s", primaryName(s), b.String()); cur != last {
			trace = append(trace, fmt.Sprintf("%s %s (conflicts %d)", time.Now().Format("15:04:05.000"), cur, s.Conflicts))
			last = cur
		}
		return primaryName(s) == "node1"
	})
	// The old primary starts again, as a primary: split brain.
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	s, _ := waitFor(t, top, 30*time.Second, "both out of recovery", func(s *topology.Snapshot) bool {
		return s.Hosts[0].Healthy && s.Hosts[0].Role == topology.RolePrimary && s.Hosts[1].Role == topology.RolePrimary
	})
	epoch := s.Epoch
	// Several more probe rounds: node1, on the higher timeline, stays.
	time.Sleep(500 * time.Millisecond)
	s = top.Snapshot()
	if primaryName(s) != "node1" || s.Epoch != epoch || s.Conflicts != 0 {
		// Seen once (conflicts 87, unloaded, without -race): what the
		// privileged view went through, and the hosts as it sees them.
		var evs []string
		for len(evs) < 256 {
			select {
			case e := <-top.Events():
				evs = append(evs, fmt.Sprintf("%+v", e))
				continue
			default:
			}
			break
		}
		for _, h := range s.Hosts {
			t.Logf("%s: role %s healthy %v timeline %d last success %v last error %q", h.Name, h.Role, h.Healthy, h.Timeline, h.LastSuccess.Format("15:04:05.000"), h.LastError)
		}
		t.Fatalf("split brain: primary %q epoch %d (want node1, %d), conflicts %d; events %v; during the failover: %s", primaryName(s), s.Epoch, epoch, s.Conflicts, evs, strings.Join(trace, "; "))
	}
	if s.Hosts[1].Timeline <= s.Hosts[0].Timeline {
		t.Fatalf("timelines: node1 %d, node0 %d", s.Hosts[1].Timeline, s.Hosts[0].Timeline)
	}
	// Without the timelines, nobody can tell: no primary, and conflicts
	// are counted.
	bs, _ = waitFor(t, blind, 10*time.Second, "conflict (unprivileged)", func(s *topology.Snapshot) bool {
		return s.Hosts[0].Healthy && s.Hosts[0].Role == topology.RolePrimary && s.Hosts[1].Role == topology.RolePrimary && s.Conflicts > 0
	})
	if bs.Primary != -1 || !bs.Conflict {
		t.Fatalf("unprivileged view of a split brain: primary %q conflict %v", primaryName(bs), bs.Conflict)
	}
	c1 := bs.Conflicts
	bs, _ = waitFor(t, blind, 10*time.Second, "conflict counter growing", func(s *topology.Snapshot) bool { return s.Conflicts > c1 })
	if bs.Primary != -1 {
		t.Fatalf("conflict resolved to %q", primaryName(bs))
	}
}

func TestLeaseExpiresWhenPrimaryCutOff(t *testing.T) {
	restore(t)
	lease := time.Second
	top := start(t, hosts(t, "", 0, 1, 2), topology.Options{Interval: 100 * time.Millisecond, Timeout: 300 * time.Millisecond, Lease: lease})
	s0, _ := waitFor(t, top, 30*time.Second, "node0 primary", func(s *topology.Snapshot) bool { return primaryName(s) == "node0" })
	if err := cluster.Node(0).Fault().Blackhole(); err != nil {
		t.Fatal(err)
	}
	// A probe sent from now on cannot reach node0 (one sent before may
	// still be answered).
	cut := time.Now()
	// Remember the last snapshot that still named a primary.
	last := s0
	_, took := waitFor(t, top, 30*time.Second, "no authoritative primary", func(s *topology.Snapshot) bool {
		if s.Primary >= 0 {
			last = s
		}
		return !s.LeaseValid(time.Now())
	})
	t.Logf("primary lost %v after the cut (lease %v)", took, lease)
	lastConfirmed := last.Confirmed
	// No probe sent into the blackhole confirmed the primary.
	if !lastConfirmed.Before(cut) {
		t.Fatalf("primary confirmed at %v, after it was cut off at %v", lastConfirmed, cut)
	}
	if gap := time.Since(lastConfirmed); gap < lease {
		t.Fatalf("primary lost %v after its last confirmation, before the lease (%v) ran out", gap, lease)
	}
	// The last snapshot that named the primary no longer gives it to
	// whoever routes by it, now that its lease has run out.
	now := time.Now()
	if h, ok := last.PrimaryHost(now); ok || last.LeaseRemaining(now) != 0 {
		t.Fatalf("a snapshot confirmed %v ago, with a lease of %v, still gives the primary (%v, %v), lease remaining %v",
			now.Sub(lastConfirmed), lease, h != nil, ok, last.LeaseRemaining(now))
	}
	if h := top.Snapshot().Hosts[0]; h.Healthy || h.LastError == "" {
		t.Fatalf("cut-off primary: %+v", h)
	}
	waitFor(t, top, 5*time.Second, "primary index cleared", func(s *topology.Snapshot) bool { return s.Primary == -1 })
	if err := cluster.Node(0).Fault().Heal(); err != nil {
		t.Fatal(err)
	}
	s, _ := waitFor(t, top, 30*time.Second, "node0 primary again", func(s *topology.Snapshot) bool {
		return primaryName(s) == "node0" && s.LeaseValid(time.Now())
	})
	if s.Epoch != s0.Epoch {
		t.Fatalf("epoch went from %d to %d, but the primary is the same host", s0.Epoch, s.Epoch)
	}
}

func TestRTTFollowsLatency(t *testing.T) {
	restore(t)
	top := start(t, hosts(t, "", 0, 1, 2), topology.Options{Interval: 50 * time.Millisecond})
	waitFor(t, top, 30*time.Second, "RTT known", func(s *topology.Snapshot) bool { return s.Hosts[1].RTT > 0 })
	before := top.Snapshot().Hosts[1].RTT
	if err := cluster.Node(1).Fault().Latency(30 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// Every probe now takes at least 30ms, so the EWMA climbs to 30ms and
	// beyond.
	s, took := waitFor(t, top, 15*time.Second, "node1 RTT EWMA at 30ms", func(s *topology.Snapshot) bool { return s.Hosts[1].RTT >= 30*time.Millisecond })
	t.Logf("node1 RTT EWMA %v -> %v in %v; node0 %v, node2 %v", before, s.Hosts[1].RTT, took, s.Hosts[0].RTT, s.Hosts[2].RTT)
	if err := cluster.Node(1).Fault().Latency(0); err != nil {
		t.Fatal(err)
	}
	s, _ = waitFor(t, top, 15*time.Second, "node1 RTT EWMA back down", func(s *topology.Snapshot) bool { return s.Hosts[1].RTT < 20*time.Millisecond })
	t.Logf("after removing the latency: node1 RTT EWMA %v", s.Hosts[1].RTT)
}

func TestSlowHostDoesNotDelayOthers(t *testing.T) {
	restore(t)
	top := start(t, hosts(t, "", 0, 1, 2), topology.Options{Interval: 100 * time.Millisecond, Timeout: 5 * time.Second})
	waitFor(t, top, 30*time.Second, "roles known", rolesKnown)
	// node2 hangs every probe for the whole 5s timeout.
	if err := cluster.Node(2).Fault().Blackhole(); err != nil {
		t.Fatal(err)
	}
	mark := top.Snapshot().Hosts[0].LastSuccess
	// node0 keeps being probed every 100ms meanwhile: 10 probes well
	// within one timeout of node2.
	count, last := 0, mark
	waitFor(t, top, 4*time.Second, "10 probes of node0 while node2 hangs", func(s *topology.Snapshot) bool {
		if ls := s.Hosts[0].LastSuccess; ls.After(last) {
			count, last = count+1, ls
		}
		return count >= 10
	})
	if err := cluster.Node(2).Fault().Heal(); err != nil {
		t.Fatal(err)
	}
}

func TestProbeNow(t *testing.T) {
	top := start(t, hosts(t, "", 0, 1, 2), topology.Options{Interval: time.Minute})
	s, _ := waitFor(t, top, 30*time.Second, "first probes", rolesKnown)
	first, other := s.Hosts[1].LastProbe, s.Hosts[0].LastProbe
	top.ProbeNow(1)
	// The interval is a minute: only ProbeNow can explain a second probe.
	waitFor(t, top, 20*time.Second, "a probe of node1 asked for", func(s *topology.Snapshot) bool { return s.Hosts[1].LastProbe.After(first) })
	if s := top.Snapshot(); !s.Hosts[0].LastProbe.Equal(other) {
		t.Fatal("node0 probed again without being asked")
	}
}

func TestCloseLeavesNoGoroutine(t *testing.T) {
	// The probers' connections go through testcluster's fault proxies,
	// whose handlers end a moment after the probers closed them: theirs
	// are the test cluster's goroutines, not the Topology's.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/pgrouted/pgrouted/testcluster/internal/faultproxy.(*Proxy).read"),
		goleak.IgnoreAnyFunction("github.com/pgrouted/pgrouted/testcluster/internal/faultproxy.(*Proxy).handle"),
		goleak.IgnoreAnyFunction("github.com/pgrouted/pgrouted/testcluster/internal/faultproxy.(*Proxy).write"))
	top, err := topology.New(hosts(t, "", 0, 1, 2), topology.Options{Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ch, _ := top.Subscribe(1) // never read: events are dropped, nothing blocks
	for rolesKnown(top.Snapshot()) == false {
		time.Sleep(10 * time.Millisecond)
	}
	top.ProbeNow(0)
	if err := top.Close(); err != nil {
		t.Fatal(err)
	}
	top.Close()
	for range ch {
	}
}

func TestSnapshotReadAllocatesNothing(t *testing.T) {
	top := start(t, hosts(t, "", 0, 1, 2), topology.Options{Interval: 100 * time.Millisecond})
	waitFor(t, top, 30*time.Second, "primary", func(s *topology.Snapshot) bool { return s.Primary >= 0 })
	allocs := testing.AllocsPerRun(1000, func() {
		s := top.Snapshot()
		if h, ok := s.PrimaryHost(time.Now()); !ok || h.Name == "" {
			panic("no primary")
		}
	})
	if allocs != 0 {
		t.Fatalf("reading the snapshot allocates %v times", allocs)
	}
}

func BenchmarkSnapshot(b *testing.B) {
	cfg, _ := pgconn.ParseConfig(cluster.Node(0).DSN())
	top, err := topology.New([]topology.Host{{Name: "node0", Config: cfg}}, topology.Options{Interval: 100 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer top.Close()
	for top.Snapshot().Primary < 0 {
		time.Sleep(10 * time.Millisecond)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s := top.Snapshot()
		if _, ok := s.PrimaryHost(time.Now()); !ok {
			b.Fatal("no primary")
		}
	}
}

// TestChangedWakesOnNewSnapshot: the channel from Changed closes when a
// newer snapshot is out (here: the probe ProbeNow asked for, with an
// interval of a minute), and at Close.
func TestChangedWakesOnNewSnapshot(t *testing.T) {
	top := start(t, hosts(t, "", 0, 1, 2), topology.Options{Interval: time.Minute})
	waitFor(t, top, 30*time.Second, "first probes", rolesKnown)
	ch := top.Changed()
	before := top.Snapshot()
	top.ProbeNow(1)
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal("no new snapshot within 20s of ProbeNow")
	}
	if top.Snapshot() == before {
		t.Fatal("Changed closed, but the snapshot is the same")
	}
	ch = top.Changed()
	top.Close()
	select {
	case <-ch:
	default:
		t.Fatal("Close did not close the channel from Changed")
	}
}

// TestEventsHoldTheBoot checks Options.EventBuffer: its subscription is
// made before any probe, so the boot's events (every host up, the primary
// found) are there however late it is read.
func TestEventsHoldTheBoot(t *testing.T) {
	top := start(t, hosts(t, "", 0, 1, 2), topology.Options{Interval: time.Minute, EventBuffer: 16})
	if top.Events() == nil {
		t.Fatal("Events is nil under EventBuffer 16")
	}
	// Read late: every host probed before the first read.
	waitFor(t, top, 30*time.Second, "every host probed", rolesKnown)
	up := map[string]bool{}
	primary := ""
	for len(up) < 3 || primary == "" {
		select {
		case e := <-top.Events():
			switch e.Kind {
			case topology.EventHostUp:
				up[e.Host] = true
			case topology.EventPrimaryChanged:
				primary = e.Host
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the boot's events: hosts up %v, primary %q", up, primary)
		}
	}
	if primary != "node0" {
		t.Fatalf("primary-changed names %q, want node0", primary)
	}
	if d := top.Dropped(); d != 0 {
		t.Fatalf("%d events dropped", d)
	}
	if top2 := start(t, hosts(t, "", 0), topology.Options{Interval: time.Minute}); top2.Events() != nil {
		t.Fatal("Events is not nil without EventBuffer")
	}
}
