package pgrouted

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgrouted/pgrouted/circuit"
	"github.com/pgrouted/pgrouted/lagmeter"

	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/topology"
)

// testConnector is a Connector with hosts of the given weights and RTTs,
// for unit tests of the choice among candidates, and its view.
func testConnector(policy dsn.SelectPolicy, window time.Duration, weights []int, rtts []time.Duration) (*Connector, *view) {
	c := &Connector{}
	s := &topology.Snapshot{Primary: -1}
	for i, w := range weights {
		c.hosts.add(&host{Host: dsn.Host{Name: string(rune('a' + i)), Weight: w}, idx: i})
		s.Hosts = append(s.Hosts, topology.HostState{Name: string(rune('a' + i)), RTT: rtts[i]})
	}
	c.picker = newPicker(policy, window, nil, nil)
	return c, newView(s, c.hosts.all())
}

// choose is Connector.choose among the hosts of v numbered cand, and the
// number of the one chosen.
func choose(c *Connector, v *view, advance bool, cand ...int) int {
	hs := make([]*hostView, len(cand))
	for k, i := range cand {
		hs[k] = &v.hosts[i]
	}
	return c.choose(context.Background(), hs, advance).idx
}

func counts(c *Connector, v *view, n int, cand ...int) map[int]int {
	got := map[int]int{}
	for k := 0; k < n; k++ {
		got[choose(c, v, true, cand...)]++
	}
	return got
}

func TestChoosePolicies(t *testing.T) {
	ms := time.Millisecond
	c, s := testConnector(dsn.SelectWeighted, dsn.LatencyWindowOff, []int{3, 1, 2}, []time.Duration{ms, ms, ms})
	if got := counts(c, s, 600, 0, 1, 2); got[0] != 300 || got[1] != 100 || got[2] != 200 {
		t.Fatalf("weighted 3:1:2 over 600 reads: %v", got)
	}
	// Interleaved, not in bursts: no host gets more than its weight in a row.
	c, s = testConnector(dsn.SelectWeighted, dsn.LatencyWindowOff, []int{5, 5}, []time.Duration{ms, ms})
	run, last := 0, -1
	for k := 0; k < 100; k++ {
		h := choose(c, s, true, 0, 1)
		if h == last {
			run++
		} else {
			run, last = 1, h
		}
		if run > 5 {
			t.Fatalf("weighted 5:5 gave %d reads in a row to host %d", run, h)
		}
	}
	c, s = testConnector(dsn.SelectRoundRobin, dsn.LatencyWindowOff, []int{1, 1, 1}, []time.Duration{ms, ms, ms})
	if got := counts(c, s, 300, 0, 1, 2); got[0] != 100 || got[1] != 100 || got[2] != 100 {
		t.Fatalf("round-robin: %v", got)
	}
	// Explain's view does not move the position.
	before := choose(c, s, false, 0, 1, 2)
	if again := choose(c, s, false, 0, 1, 2); again != before {
		t.Fatal("choose without advance moved")
	}
	c, s = testConnector(dsn.SelectNearest, 20*ms, []int{1, 1, 1}, []time.Duration{9 * ms, 3 * ms, 5 * ms})
	if got := counts(c, s, 50, 0, 1, 2); got[1] != 50 {
		t.Fatalf("nearest: %v", got)
	}
	// The latency window keeps the replicas within 20ms of the fastest.
	c, s = testConnector(dsn.SelectRoundRobin, 20*ms, []int{1, 1, 1}, []time.Duration{50 * ms, 3 * ms, 22 * ms})
	if got := counts(c, s, 100, 0, 1, 2); got[0] != 0 || got[1] != 50 || got[2] != 50 {
		t.Fatalf("round-robin in a 20ms window: %v", got)
	}
	// No RTT known: every candidate.
	c, s = testConnector(dsn.SelectRoundRobin, 20*ms, []int{1, 1}, []time.Duration{0, 0})
	if got := counts(c, s, 100, 0, 1); got[0] != 50 || got[1] != 50 {
		t.Fatalf("round-robin without RTTs: %v", got)
	}
	c, s = testConnector(dsn.SelectLeastInflight, dsn.LatencyWindowOff, []int{1, 1}, []time.Duration{ms, ms})
	c.hosts.all()[0].flight.n.Store(10)
	if got := counts(c, s, 100, 0, 1); got[1] != 100 {
		t.Fatalf("least-inflight with host 0 busy: %v", got)
	}
	c, s = testConnector(dsn.SelectRandom, dsn.LatencyWindowOff, []int{1, 1}, []time.Duration{ms, ms})
	if got := counts(c, s, 200, 0, 1); got[0] < 50 || got[1] < 50 {
		t.Fatalf("random: %v", got)
	}
}

func TestReplicaRetryable(t *testing.T) {
	// Covered with real servers elsewhere; here the classification alone.
	if replicaRetryable(errTestContext{}) {
		t.Fatal("a cancelled context is not retried")
	}
}

// TestReplicaRetryableBySQLState: a recovery conflict is known by its
// SQLSTATE, whatever the language of the message (lc_messages): the texts
// here are German and French servers' and made-up ones.
func TestReplicaRetryableBySQLState(t *testing.T) {
	for _, tc := range []struct {
		code, message string
		want          bool
	}{
		{"40001", "canceling statement due to conflict with recovery", true},
		{"40001", "storniere Anfrage wegen Konflikt mit der Wiederherstellung", true},
		{"40001", "annulation de la requête à cause d'un conflit avec la restauration", true},
		{"40001", "", true},
		{"57P04", "breche Verbindung ab wegen Konflikt mit der Wiederherstellung", true},
		{"57P04", "terminating connection due to conflict with recovery", true},
		{"57P01", "Verbindung wird abgebrochen aufgrund von Anweisung des Administrators", true},
		{"57P03", "das Datenbanksystem startet", true},
		{"40P01", "Verklemmung (Deadlock) entdeckt", false},
		{"40P01", "canceling statement due to conflict with recovery", false},
		{"42P01", "Relation »t« existiert nicht", false},
		{"57014", "canceling statement due to statement timeout", false},
		{"22012", "conflict with recovery", false},
	} {
		pe := &pgconn.PgError{Severity: "ERROR", Code: tc.code, Message: tc.message}
		for _, err := range []error{pe, fmt.Errorf("read: %w", pe)} {
			if got := replicaRetryable(err); got != tc.want {
				t.Errorf("%s %q (%T): retryable %v, want %v", tc.code, tc.message, err, got, tc.want)
			}
		}
	}
}

type errTestContext struct{}

func (errTestContext) Error() string { return "context canceled" }
func (errTestContext) Is(target error) bool {
	return target.Error() == "context canceled"
}

// benchConnector is a Connector over n healthy, caught-up standbys (and a
// primary), enough for pickReplica.
func benchConnector(b *testing.B, policy dsn.SelectPolicy, n int) (*Connector, *view) {
	c := &Connector{hostSet: hostSet{history: lagmeter.NewHistory(0)}}
	c.cfg.Consistency = dsn.ConsistencySession
	s := &topology.Snapshot{Primary: 0, Lease: time.Minute, Confirmed: time.Now()}
	for i := 0; i <= n; i++ {
		name := fmt.Sprintf("h%d", i)
		br, err := circuit.New(name, circuit.Config{})
		if err != nil {
			b.Fatal(err)
		}
		c.hosts.add(&host{Host: dsn.Host{Name: name, Weight: 1 + i%3}, idx: i, breaker: br, maxConns: 4})
		h := topology.HostState{Name: name, Role: topology.RoleStandby, Healthy: true, RTT: time.Duration(1+i%5) * time.Millisecond, SystemID: 7, Timeline: 1, ReplayLSN: 1 << 30}
		if i == 0 {
			h.Role, h.ReplayLSN, h.InsertLSN = topology.RolePrimary, 0, 1<<30
		}
		s.Hosts = append(s.Hosts, h)
	}
	c.picker = newPicker(policy, 20*time.Millisecond, nil, nil)
	c.rw.writes.Wrote(false, nil, lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 1 << 29}, time.Now(), time.Time{})
	return c, newView(s, c.hosts.all())
}

// BenchmarkPickReplica: the whole eligibility check and choice of a read's
// replica among 3 and 32 standbys, per strategy.
func BenchmarkPickReplica(b *testing.B) {
	for _, policy := range []dsn.SelectPolicy{dsn.SelectRoundRobin, dsn.SelectWeighted, dsn.SelectLeastInflight, dsn.SelectNearest, dsn.SelectRandom} {
		for _, n := range []int{3, 32} {
			b.Run(fmt.Sprintf("%s/%d", policy, n), func(b *testing.B) {
				c, s := benchConnector(b, policy, n)
				in := c.intentOf(noOptions)
				rc := readCtx{ctx: context.Background(), level: in.Level, wait: in.Wait, st: c.rw.writes.Every().Load(), now: time.Now()}
				b.ReportAllocs()
				for b.Loop() {
					if p := pickOf(c, s, &rc, nil); p.host == nil || p.host.idx < 1 {
						b.Fatalf("no replica: %+v", p)
					}
				}
			})
		}
	}
}

func TestPickReplicaAllocatesNothing(t *testing.T) {
	for _, policy := range []dsn.SelectPolicy{dsn.SelectRoundRobin, dsn.SelectWeighted, dsn.SelectLeastInflight, dsn.SelectNearest, dsn.SelectRandom} {
		c, s := benchConnector(&testing.B{}, policy, 32)
		in := c.intentOf(noOptions)
		rc := readCtx{ctx: context.Background(), level: in.Level, wait: in.Wait, st: c.rw.writes.Every().Load(), now: time.Now()}
		if n := testing.AllocsPerRun(200, func() { var pk pick; c.pickReplica(s, &rc, true, nil, &pk) }); n != 0 {
			t.Errorf("%s: %v allocations per pick", policy, n)
		}
	}
}

// TestWorthChecking: of the replicas a read must check, those whose checks
// at its write's age mostly fail are dropped; when that leaves none, one
// read in consistency.ExploreEvery keeps them all (Explain never does, nor counts).
func TestWorthChecking(t *testing.T) {
	var c Connector
	a, b := &host{}, &host{}
	age := 100 * time.Microsecond
	now := consistency.Now()
	for range 3 {
		a.catchUp.Record(age, now, false)
	}
	cand := func() []*hostView { return []*hostView{{host: a}, {host: b}} }
	if got, explores := c.worthChecking(cand(), age, now, true); len(got) != 1 || got[0].host != b || explores {
		t.Fatalf("kept %d replicas, want the one whose checks succeed", len(got))
	}
	for range 3 {
		b.catchUp.Record(age, now, false)
	}
	for range 100 {
		if got, _ := c.worthChecking(cand(), age, now, false); len(got) != 0 {
			t.Fatal("Explain explored")
		}
	}
	explored := 0
	for range 8 * consistency.ExploreEvery {
		if got, explores := c.worthChecking(cand(), age, now, true); len(got) == 2 && explores {
			explored++
		} else if len(got) != 0 {
			t.Fatalf("kept %d replicas, want all or none", len(got))
		}
	}
	if explored != 8 {
		t.Fatalf("%d of %d reads explored, want 1 in %d", explored, 8*consistency.ExploreEvery, consistency.ExploreEvery)
	}
}

// TestCatchUpRecordsThePlannedAge: a replica's record of its position
// checks is kept by the age of the caller's write when the read was
// planned, the age worthChecking asks it at, however late the check is
// sent. A read whose position is deferred reads it on the primary before
// its check (a round trip, two behind a connection pooler): when the record
// was kept by the age at sending, the checks that found the write never
// counted at the planned age, those that missed did (for younger ages
// too), and the read right after a write went to the primary
// ("catching-up") however fast the replica replayed: behind PgBouncer in
// transaction mode, 48 % of a read-back workload's reads on replicas
// instead of 90 %.
func TestCatchUpRecordsThePlannedAge(t *testing.T) {
	c, v := benchConnector(&testing.B{}, dsn.SelectRoundRobin, 1)
	now := consistency.Now()
	wrote := now.Add(-300 * time.Microsecond)
	// A write the replica's last probe (replay 1<<30) does not prove it
	// holds: its read must check.
	c.rw.writes.Wrote(false, nil, lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 1<<30 + 1}, wrote, time.Time{})
	in := c.intentOf(noOptions)
	rc := readCtx{ctx: context.Background(), level: in.Level, wait: in.Wait, st: c.rw.writes.Every().Load(), now: now}
	plan := func() pick {
		var pk pick
		c.pickReplica(v, &rc, false, nil, &pk) // as Explain: no exploring read
		return pk
	}
	pk := plan()
	if pk.host == nil || !pk.check || pk.checkAge != now.Sub(wrote) {
		t.Fatalf("planned %+v; want a checked read on the replica, its check recorded at the write's age when planned (%v)", pk, now.Sub(wrote))
	}
	h := pk.host.host
	// Its checks are sent 5 ms later (a position read on the primary
	// in between, on a slow network): three miss, the read after them
	// goes to the primary; three find the write, the read after them
	// checks again.
	sent := now.Add(5 * time.Millisecond)
	for range 3 {
		h.recordCheck(pk.checkAge, 0, sent, errNotCaughtUp)
	}
	if got := plan(); got.host != nil || got.reason != ReasonCatchingUp {
		t.Fatalf("after checks that missed: %+v, want the primary, %s", got, ReasonCatchingUp)
	}
	for range 3 {
		h.recordCheck(pk.checkAge, 0, sent, nil)
	}
	if got := plan(); got.host != v.of(h) || !got.check {
		t.Fatalf("after checks that found the write: %+v, want a checked read on the replica again", got)
	}
}

// intentOf is the intent Connector.setIntent resolves for options o.
func (c *Connector) intentOf(o *options) consistency.Intent {
	var in consistency.Intent
	c.setIntent(&in, o)
	return in
}

// pickOf is pickReplica's choice for a read of rc in v (advancing),
// skipping skip.
func pickOf(c *Connector, v *view, rc *readCtx, skip *host) pick {
	var pk pick
	c.pickReplica(v, rc, true, skip, &pk)
	return pk
}
