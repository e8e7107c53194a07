//go:build unix

package pgrouted_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/internal/testhelp"
	"github.com/pgrouted/pgrouted/testcluster"
	"github.com/pgrouted/pgrouted/topology"
)

// fakePatroniAPI is a Patroni REST API under the test's control, answering
// GET /cluster with the members last set: the attacker of the discovery
// tests, who may name any server.
type fakePatroniAPI struct {
	*httptest.Server
	mu      sync.Mutex
	members []topology.Member
	answers int
}

func newFakePatroniAPI(t *testing.T, ms ...topology.Member) *fakePatroniAPI {
	t.Helper()
	f := &fakePatroniAPI{members: ms}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/cluster" {
			http.NotFound(w, r)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.answers++
		out := make([]map[string]any, 0, len(f.members))
		for _, m := range f.members {
			out = append(out, map[string]any{"name": m.Name, "role": m.Role, "state": m.State, "host": m.Host,
				"port": m.Port, "timeline": 1, "lag": 0, "tags": map[string]any{"noloadbalance": m.NoLoadBalance}})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"members": out})
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakePatroniAPI) set(ms ...topology.Member) {
	f.mu.Lock()
	f.members = ms
	f.mu.Unlock()
}

// served returns how many answers the API gave.
func (f *fakePatroniAPI) served() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.answers
}

// countLines is the number of lines of log holding every one of parts.
func countLines(log string, parts ...string) int {
	n := 0
	for _, line := range strings.Split(log, "\n") {
		all := line != ""
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

// foreignCluster starts a PostgreSQL cluster (with replicas streaming
// replicas) independent of the package's (another system identifier),
// logging every statement.
func foreignCluster(t *testing.T, replicas int) *testcluster.Cluster {
	t.Helper()
	c, err := testcluster.Start(testCtx(t), testcluster.Options{Replicas: replicas, Conf: []string{"log_statement = 'all'"}, Logf: testhelp.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// inLog reports whether n's server log holds s.
func inLog(t *testing.T, n *testcluster.Node, s string) bool {
	t.Helper()
	b, err := os.ReadFile(n.LogFile())
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), s)
}

// hostInfo returns the host named name in conn's Topology.
func hostInfo(conn *pgrouted.Connector, name string) (pgrouted.HostInfo, bool) {
	for _, h := range conn.Topology().Hosts {
		if h.Name == name {
			return h, true
		}
	}
	return pgrouted.HostInfo{}, false
}

// waitUntrusted waits until the topology shows the host named name
// untrusted for a reason holding want.
func waitUntrusted(t *testing.T, conn *pgrouted.Connector, name, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		h, ok := pgrouted.TopologyHost(conn, name)
		if ok && strings.Contains(h.Untrusted, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s, %s is not untrusted for %q: %+v", name, want, h)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDiscoverForeignSystem: a Patroni answer names a real PostgreSQL
// server of another system, first as one more replica, then as a leader
// beside the real one, then as the only leader. It gets no statement; reads
// go to the replicas of the cluster, the discovered one of this system
// included; writes go to the real primary, or nowhere.
func TestDiscoverForeignSystem(t *testing.T) {
	ctx := testCtx(t)
	primary, replicas := cluster.Primary(), cluster.Replicas()
	named, unnamed := replicas[0], replicas[1]
	other := foreignCluster(t, 1)
	foreign, foreignStandby := other.Primary(), other.Replicas()[0]
	mustExec(t, ctx, primary, "CREATE TABLE IF NOT EXISTS provider_t (v text)")
	mustExec(t, ctx, foreign, "CREATE TABLE IF NOT EXISTS provider_t (v text)")

	leader := memberOf(t, primary, topology.MemberLeader, topology.StateRunning)
	// The other system's primary as a leader, its standby as a replica.
	asLeader := memberOf(t, foreign, topology.MemberLeader, topology.StateRunning)
	asLeader.Name = "foreign"
	asReplica := memberOf(t, foreignStandby, topology.MemberReplica, topology.StateStreaming)
	asReplica.Name = "foreign-standby"
	rest := []topology.Member{
		memberOf(t, named, topology.MemberReplica, topology.StateStreaming),
		memberOf(t, unnamed, topology.MemberReplica, topology.StateStreaming),
	}
	api := newFakePatroniAPI(t, append([]topology.Member{leader, asReplica}, rest...)...)
	logs := &syncBuffer{}
	dsn := dsnOf(t, primary, named) + "&pgrouted_topology=patroni&pgrouted_patroni_endpoints=" + api.URL +
		"&pgrouted_discover=true&pgrouted_probe_interval=100ms&pgrouted_latency_window=off&pgrouted_write_timeout=1s"
	db, conn, rec := openDSN(t, dsn, func(c *pgrouted.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	waitUntrusted(t, conn, "foreign-standby", "is not the configured hosts'")
	waitTopology(t, conn, 30*time.Second, unnamed.Name()+" discovered and trusted", func(s pgrouted.Snapshot) bool {
		for _, h := range s.Hosts {
			if h.Name == unnamed.Name() {
				return h.Discovered && h.Role == "standby" && !h.NoReads && h.ReplayLSN != ""
			}
		}
		return false
	})
	if h, ok := hostInfo(conn, "foreign-standby"); !ok || !h.Discovered || !h.NoReads || !h.Healthy || h.Role != "standby" {
		t.Fatalf("Topology shows the foreign standby as %+v (found %v): want discovered, a healthy standby (probed), no reads", h, ok)
	}
	// Nothing of it counts: not its system identifier, not as a replica.
	if h, _ := pgrouted.TopologyHost(conn, "foreign-standby"); h.SystemID != 0 {
		t.Fatalf("the foreign standby's system identifier %d is shown", h.SystemID)
	}

	// As a replica: reads spread over the cluster's replicas (the
	// discovered one of this system too), none on it.
	marker := fmt.Sprintf("foreign-replica-%d", time.Now().UnixNano())
	on := markedReadsOn(t, ctx, db, 30, marker)
	if !strings.Contains(strings.Join(on, ","), unnamed.Name()) {
		t.Fatalf("reads ran on %v: none on %s, discovered and of this system", on, unnamed.Name())
	}
	if marked, w := marker+"-w", primary.Name(); true {
		if ran, err := insertMarked(t, ctx, db, rec, marked); err != nil || ran != w {
			t.Fatalf("write ran on %q (%v), want %s", ran, err, w)
		}
	}

	// As a leader beside the real one: its leader role counts for
	// nothing, not even a conflict; writes go to the real primary.
	api.set(append([]topology.Member{asLeader, leader, asReplica}, rest...)...)
	since := api.served()
	waitTopology(t, conn, 10*time.Second, "the view with two leaders applied", func(s pgrouted.Snapshot) bool {
		h, _ := pgrouted.TopologyHost(conn, "foreign")
		return api.served() > since+1 && strings.Contains(h.Untrusted, "is not the configured hosts'")
	})
	top := conn.Topology()
	if top.Primary != primary.Name() || top.Provider == nil || top.Provider.Conflict || top.Provider.Leader != primary.Name() {
		t.Fatalf("with the foreign server named leader too: primary %q, provider %+v; want %s, no conflict", top.Primary, top.Provider, primary.Name())
	}
	for k := range 5 {
		if ran, err := insertMarked(t, ctx, db, rec, fmt.Sprintf("%s-two-leaders-%d", marker, k)); err != nil || ran != primary.Name() {
			t.Fatalf("write ran on %q (%v), want %s", ran, err, primary.Name())
		}
	}

	// As the only leader, the real primary named a replica: no primary
	// at all (a write waits, then fails); it never writes there.
	demoted := leader
	demoted.Role = topology.MemberReplica
	api.set(append([]topology.Member{asLeader, demoted, asReplica}, rest...)...)
	waitTopology(t, conn, 10*time.Second, "no primary", func(s pgrouted.Snapshot) bool { return s.Primary == "" })
	if top := conn.Topology(); top.Provider == nil || top.Provider.UnknownLeader != "foreign" {
		t.Errorf("provider %+v: want the foreign leader reported as not authorised", top.Provider)
	}
	_, err := insertMarked(t, ctx, db, rec, marker+"-only-leader")
	if !errors.Is(err, pgrouted.ErrNoPrimary) {
		t.Fatalf("a write with the foreign server as the only leader: %v, want ErrNoPrimary", err)
	}

	// They got nothing: no route event, no statement counted, nothing in
	// their servers' logs. Each refusal said once, at Warn.
	for _, e := range rec.snapshot() {
		if strings.HasPrefix(e.Endpoint, "foreign") {
			t.Fatalf("a statement was routed to the other system: %+v", e)
		}
	}
	for _, name := range []string{"foreign", "foreign-standby"} {
		for op, n := range conn.Stats().Statements[name] {
			if n > 0 {
				t.Fatalf("Stats counts %d %s statements on %s", n, op, name)
			}
		}
		if n := countLines(logs.String(), "level=WARN", "discovered host refused", "host="+name+" ", "is not the configured hosts'"); n != 1 {
			t.Fatalf("%d Warn lines refusing %s, want 1; log:\n%s", n, name, logs)
		}
	}
	for _, n := range []*testcluster.Node{foreign, foreignStandby} {
		if inLog(t, n, marker) {
			t.Fatalf("a marked statement ran on %s of the other system", n)
		}
	}
}

// TestDiscoverNeedsProof: with a password in the DSN and neither
// sslmode=verify-full nor channel_binding=require, a discovered member is
// refused before anything is sent to it, whatever server it is: a trap
// (a listener counting the connections it is offered) and a real standby
// of the DSN's own system alike. The Topology and one Warn line per member
// say so, naming the settings to change; the password shows nowhere.
// Without a password, the same standby is trusted and takes reads.
func TestDiscoverNeedsProof(t *testing.T) {
	ctx := testCtx(t)
	primary, replicas := cluster.Primary(), cluster.Replicas()
	named, unnamed := replicas[0], replicas[1]
	trap, offered := connTrap(t)
	tm := topology.Member{Name: "trap", Host: "127.0.0.1", Port: trap, Role: topology.MemberReplica, State: topology.StateStreaming}
	api := newFakePatroniAPI(t,
		memberOf(t, primary, topology.MemberLeader, topology.StateRunning),
		memberOf(t, named, topology.MemberReplica, topology.StateStreaming),
		memberOf(t, unnamed, topology.MemberReplica, topology.StateStreaming),
		tm)
	password := fmt.Sprintf("pw-%d", time.Now().UnixNano())
	// The package's cluster trusts TCP connections: its hosts take any
	// password, and the DSN's hosts need no proof.
	plain := dsnOf(t, primary, named) + "&pgrouted_topology=patroni&pgrouted_patroni_endpoints=" + api.URL +
		"&pgrouted_discover=true&pgrouted_probe_interval=100ms&pgrouted_latency_window=off"
	withPW := strings.Replace(plain, "postgres://postgres@", "postgres://postgres:"+password+"@", 1)
	if !strings.Contains(withPW, password) {
		t.Fatal("no password in the DSN")
	}
	logs := &syncBuffer{}
	db, conn, rec := openDSN(t, withPW, func(c *pgrouted.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	for _, name := range []string{"trap", unnamed.Name()} {
		waitUntrusted(t, conn, name, "sslmode=verify-full or channel_binding=require")
	}
	since := api.served()
	waitTopology(t, conn, 10*time.Second, "more views applied", func(pgrouted.Snapshot) bool { return api.served() > since+3 })
	for _, name := range []string{"trap", unnamed.Name()} {
		h, ok := hostInfo(conn, name)
		if !ok || !h.Discovered || !h.NoReads || h.Healthy || h.Role != "unknown" || h.LastError != "" {
			t.Fatalf("Topology shows %s as %+v: want discovered, never probed, no reads", name, h)
		}
		if n := countLines(logs.String(), "level=WARN", "discovered host refused", "host="+name+" ", "sslmode=verify-full or channel_binding=require"); n != 1 {
			t.Fatalf("%d Warn lines refusing %s, want 1; log:\n%s", n, name, logs)
		}
	}
	if n := offered(); n != 0 {
		t.Fatalf("%d connections were opened to the trap", n)
	}
	marker := fmt.Sprintf("needs-proof-%d", time.Now().UnixNano())
	if on := markedReadsOn(t, ctx, db, 10, marker); len(on) != 1 || on[0] != named.Name() {
		t.Fatalf("reads ran on %v, want only on %s (the refused members get none)", on, named.Name())
	}
	for _, e := range rec.snapshot() {
		if e.Endpoint == "trap" || e.Endpoint == unnamed.Name() {
			t.Fatalf("a statement was routed to a refused member: %+v", e)
		}
	}
	js, _ := json.Marshal(conn.Topology())
	if strings.Contains(logs.String(), password) || strings.Contains(string(js), password) {
		t.Fatal("the password shows in the log or the topology")
	}

	// Without a password there is nothing to relay: the standby of this
	// system is trusted and takes reads (the trap stays down: nothing
	// answers there).
	_, conn2, _ := openDSN(t, plain, nil)
	waitTopology(t, conn2, 30*time.Second, unnamed.Name()+" trusted without a password", func(s pgrouted.Snapshot) bool {
		h, ok := hostInfo(conn2, unnamed.Name())
		return ok && h.Untrusted == "" && !h.NoReads && h.Role == "standby"
	})
	waitTopology(t, conn2, 30*time.Second, "the trap probed without a password", func(pgrouted.Snapshot) bool { return offered() > 0 })
	if h, _ := hostInfo(conn2, "trap"); strings.Contains(h.Untrusted, "sslmode") {
		t.Fatalf("without a password the trap is %+v: want it probed, not refused for want of proof", h)
	}
}

// connTrap listens on a loopback port and counts the connections it is
// offered (closing each at once); it returns the port and the count.
func connTrap(t *testing.T) (uint16, func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	n := 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
			c.Close()
		}
	}()
	return uint16(ln.Addr().(*net.TCPAddr).Port), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// TestDiscoverMaxCaps: a Patroni answer naming more members than
// pgrouted_discover_max adds that many hosts, and says once that it left
// the rest out.
func TestDiscoverMaxCaps(t *testing.T) {
	primary, replicas := cluster.Primary(), cluster.Replicas()
	ms := []topology.Member{
		memberOf(t, primary, topology.MemberLeader, topology.StateRunning),
		memberOf(t, replicas[0], topology.MemberReplica, topology.StateStreaming),
	}
	for k := range 40 {
		// Where nothing listens.
		ms = append(ms, topology.Member{Name: fmt.Sprintf("ghost%d", k), Host: "127.0.0.1", Port: uint16(1 + k),
			Role: topology.MemberReplica, State: topology.StateStreaming})
	}
	api := newFakePatroniAPI(t, ms...)
	logs := &syncBuffer{}
	dsn := dsnOf(t, primary, replicas[0]) + "&pgrouted_topology=patroni&pgrouted_patroni_endpoints=" + api.URL +
		"&pgrouted_discover=true&pgrouted_discover_max=3&pgrouted_probe_interval=100ms"
	_, conn, _ := openDSN(t, dsn, func(c *pgrouted.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	since := api.served()
	waitTopology(t, conn, 10*time.Second, "several views applied", func(pgrouted.Snapshot) bool { return api.served() > since+3 })
	top := conn.Topology()
	if len(top.Hosts) != 2+3 {
		t.Fatalf("%d hosts, want the DSN's 2 and 3 discovered", len(top.Hosts))
	}
	for _, h := range top.Hosts[2:] {
		if !h.Discovered || !h.NoReads {
			t.Errorf("discovered host %+v: want no reads (nothing listens there)", h)
		}
	}
	if n := countLines(logs.String(), "level=WARN", "left out", "pgrouted_discover_max=3", "left_out=37"); n != 1 {
		t.Fatalf("%d Warn lines saying members were left out, want 1; log:\n%s", n, logs)
	}
}

// TestMemberNamesChecked: a provider's member names that a terminal, a log
// or a metric label could not show as they are (an escape sequence, a
// direction override, a line break, 300 bytes) never reach them: the
// member is named by its address, which the Topology, its JSON and the log
// show, and the provider's part of the Topology says what was refused,
// printable. The member still serves (it is of the DSN's system).
func TestMemberNamesChecked(t *testing.T) {
	ctx := testCtx(t)
	primary, replicas := cluster.Primary(), cluster.Replicas()
	named, unnamed := replicas[0], replicas[1]
	m := topology.NewManual()
	odd := memberOf(t, unnamed, topology.MemberReplica, topology.StateStreaming)
	odd.Name = "pg\x1b[2J\u202etxt\nlevel=ERROR msg=forged"
	nb := memberOf(t, named, topology.MemberReplica, topology.StateStreaming)
	nb.NoLoadBalance = true // reads go to the odd member alone
	nb.Name = strings.Repeat("n", 300)
	m.SetMembers([]topology.Member{memberOf(t, primary, topology.MemberLeader, topology.StateRunning), nb, odd})
	logs := &syncBuffer{}
	dsn := dsnOf(t, primary, named) + "&pgrouted_probe_interval=100ms&pgrouted_discover=true&pgrouted_latency_window=off"
	db, conn, _ := openDSN(t, dsn, func(c *pgrouted.Config) {
		c.Provider = m
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	top := conn.Topology()
	h, ok := hostInfo(conn, unnamed.Addr())
	if !ok || !h.Discovered || h.Member != unnamed.Addr() {
		t.Fatalf("hosts %+v: want the odd member discovered under its address %s", top.Hosts, unnamed.Addr())
	}
	if h, _ := hostInfo(conn, named.Name()); h.Member != named.Addr() {
		t.Fatalf("the member with a 300-byte name shows as %q, want its address", h.Member)
	}
	if top.Provider == nil || !strings.Contains(top.Provider.BadMember, "300 bytes long") {
		t.Fatalf("provider %+v: want the refused name said", top.Provider)
	}
	marker := fmt.Sprintf("odd-name-%d", time.Now().UnixNano())
	if on := markedReadsOn(t, ctx, db, 3, marker); len(on) != 1 || on[0] != unnamed.Name() {
		t.Fatalf("reads ran on %v, want the odd member (%s)", on, unnamed.Name())
	}
	js, err := json.Marshal(conn.Topology())
	if err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"topology JSON": string(js), "log": logs.String()} {
		if strings.ContainsAny(text, "\x1b\u202e") || strings.Contains(text, "forged") || strings.Contains(text, strings.Repeat("n", 256)) {
			t.Errorf("the %s holds the odd name:\n%s", what, text)
		}
	}
	if countLines(logs.String(), "host discovered", "host="+unnamed.Addr()) != 1 {
		t.Errorf("no log line of the odd member discovered under its address:\n%s", logs)
	}
}
