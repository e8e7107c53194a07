//go:build unix

package topology_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/topology"
	"go.uber.org/goleak"
)

// fakePatroni is a Patroni REST API that answers GET /cluster with what the
// test sets, or fails.
type fakePatroni struct {
	*httptest.Server
	mu       sync.Mutex
	members  []map[string]any
	status   int // 0: 200
	requests int
	auth     string // the last Authorization header
}

func newFakePatroni(t *testing.T) *fakePatroni {
	t.Helper()
	f := &fakePatroni{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.requests++
		f.auth = r.Header.Get("Authorization")
		if r.URL.Path != "/cluster" {
			http.NotFound(w, r)
			return
		}
		if f.status != 0 {
			w.WriteHeader(f.status)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"members": f.members, "scope": "test"})
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakePatroni) set(status int, members ...map[string]any) {
	f.mu.Lock()
	f.status, f.members = status, members
	f.mu.Unlock()
}

// member is one /cluster member for node i of the test cluster, at the
// address the topology probes.
func member(t *testing.T, i int, role, state string, tags map[string]any) map[string]any {
	t.Helper()
	host, port, err := net.SplitHostPort(cluster.Node(i).Addr())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	m := map[string]any{"name": cluster.Node(i).Name(), "role": role, "state": state, "host": host, "port": p,
		"api_url": "http://" + host + ":8008/patroni", "timeline": 1}
	if role != "leader" {
		m["lag"] = 0
	}
	if tags != nil {
		m["tags"] = tags
	}
	return m
}

// waitSnap waits, on Changed, until cond holds for a snapshot, or fails
// after limit saying what it waited for.
func waitSnap(t *testing.T, top *topology.Topology, limit time.Duration, what string, cond func(*topology.Snapshot) bool) *topology.Snapshot {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		ch := top.Changed()
		s := top.Snapshot()
		if cond(s) {
			return s
		}
		select {
		case <-ch:
		case <-deadline.C:
			js, _ := json.Marshal(s)
			t.Fatalf("after %v, still not %s; snapshot: %s", limit, what, js)
		}
	}
}

func patroniTopology(t *testing.T, endpoints []string, lease time.Duration) *topology.Topology {
	t.Helper()
	p, err := topology.NewPatroni(endpoints, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	return start(t, hosts(t, "", 0, 1, 2), topology.Options{Interval: 100 * time.Millisecond, Lease: lease, Provider: p})
}

func TestPatroniAuthority(t *testing.T) {
	f := newFakePatroni(t)
	f.set(0, member(t, 0, "leader", "running", nil), member(t, 1, "replica", "streaming", nil),
		member(t, 2, "replica", "running", map[string]any{"noloadbalance": true}))
	top := patroniTopology(t, []string{f.URL}, 2*time.Second)

	s := waitSnap(t, top, 20*time.Second, "node0 primary by Patroni and probe", func(s *topology.Snapshot) bool {
		return primaryName(s) == "node0" && s.LeaseValid(time.Now())
	})
	if s.Provider == nil || s.Provider.Name != "patroni" || s.Provider.Endpoint != f.URL || s.Provider.Leader != "node0" || s.Provider.LeaderTimeline != 1 {
		t.Fatalf("provider state %+v", s.Provider)
	}
	if s.Hosts[1].NoReads || !s.Hosts[2].NoReads || !s.Hosts[2].NoLoadBalance {
		t.Fatalf("noReads: node1 %v (want false), node2 %v (want true, noloadbalance)", s.Hosts[1].NoReads, s.Hosts[2].NoReads)
	}

	t.Run("replica named leader", func(t *testing.T) {
		f.set(0, member(t, 0, "replica", "running", nil), member(t, 1, "leader", "running", nil))
		// The view and node1's probe come separately: wait for both (a
		// snapshot can carry the view before node1's role is known).
		s := waitSnap(t, top, 10*time.Second, "Patroni's view naming node1 applied, node1 probed", func(s *topology.Snapshot) bool {
			return s.Provider.Leader == "node1" && s.Hosts[1].Role != topology.RoleUnknown
		})
		// node1's own probe finds it in recovery: no primary.
		if s.Primary >= 0 {
			t.Fatalf("primary %s while Patroni names node1, which is in recovery", primaryName(s))
		}
		if s.Hosts[1].Role != topology.RoleStandby {
			t.Fatalf("node1 role %v, want standby", s.Hosts[1].Role)
		}
		// node2 is not listed: it serves nothing.
		if !s.Hosts[2].NoReads {
			t.Fatal("node2, absent from the view, may serve reads")
		}
	})

	t.Run("standby_leader", func(t *testing.T) {
		f.set(0, member(t, 0, "standby_leader", "running", nil), member(t, 1, "replica", "running", nil))
		s := waitSnap(t, top, 10*time.Second, "the standby_leader view applied", func(s *topology.Snapshot) bool {
			return s.Hosts[0].MemberRole == "standby_leader"
		})
		if s.Primary >= 0 {
			t.Fatalf("primary %s under a standby_leader", primaryName(s))
		}
	})

	t.Run("two running leaders", func(t *testing.T) {
		before := top.Snapshot().Conflicts
		f.set(0, member(t, 0, "leader", "running", nil), member(t, 2, "leader", "running", nil))
		s := waitSnap(t, top, 10*time.Second, "a conflict counted", func(s *topology.Snapshot) bool {
			return s.Conflicts > before && s.Provider.Conflict
		})
		if s.Primary >= 0 || !s.Conflict {
			t.Fatalf("primary %q conflict %v with two running leaders", primaryName(s), s.Conflict)
		}
	})

	t.Run("unknown leader", func(t *testing.T) {
		f.set(0, map[string]any{"name": "elsewhere", "role": "leader", "state": "running", "host": "10.255.255.1", "port": 5432})
		s := waitSnap(t, top, 10*time.Second, "the unknown leader seen", func(s *topology.Snapshot) bool {
			return s.Provider.Unknown == "elsewhere"
		})
		if s.Primary >= 0 {
			t.Fatalf("primary %s while the leader is unknown", primaryName(s))
		}
	})

	t.Run("leader back, then every endpoint down", func(t *testing.T) {
		f.set(0, member(t, 0, "leader", "running", nil), member(t, 1, "replica", "streaming", nil))
		waitSnap(t, top, 10*time.Second, "node0 primary again", func(s *topology.Snapshot) bool {
			return primaryName(s) == "node0" && s.LeaseValid(time.Now())
		})
		f.set(http.StatusServiceUnavailable)
		s := waitSnap(t, top, 10*time.Second, "the provider's failure seen", func(s *topology.Snapshot) bool {
			return s.Provider.LastError != ""
		})
		if !strings.Contains(s.Provider.LastError, "503") {
			t.Errorf("last error %q, want the HTTP status", s.Provider.LastError)
		}
		// The probes still see node0 out of recovery; the lease runs out
		// all the same.
		waitSnap(t, top, 10*time.Second, "no primary once the provider's lease ran out", func(s *topology.Snapshot) bool {
			return s.Primary < 0 && s.Hosts[0].Role == topology.RolePrimary && s.Hosts[0].Healthy
		})
		f.set(0, member(t, 0, "leader", "running", nil))
		waitSnap(t, top, 10*time.Second, "node0 primary when Patroni answers again", func(s *topology.Snapshot) bool {
			return primaryName(s) == "node0" && s.LeaseValid(time.Now())
		})
	})
}

func TestPatroniEndpointsInOrder(t *testing.T) {
	down := newFakePatroni(t)
	down.set(http.StatusInternalServerError)
	up := newFakePatroni(t)
	up.set(0, member(t, 0, "leader", "running", nil))
	// A closed port first: refused at once.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	u := strings.Replace(up.URL, "http://", "http://patroni:s3cr3t-pw@", 1)
	p, err := topology.NewPatroni([]string{closed, down.URL, u}, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := p.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(up.URL, "http://", "http://patroni:xxxxx@", 1); v.Endpoint != want {
		t.Errorf("endpoint %q, want %q", v.Endpoint, want)
	}
	if len(v.Members) != 1 || v.Members[0].Name != "node0" {
		t.Errorf("members %+v", v.Members)
	}
	if up.auth == "" || !strings.HasPrefix(up.auth, "Basic ") {
		t.Errorf("Authorization %q, want basic auth", up.auth)
	}
	up.set(http.StatusServiceUnavailable)
	_, err = p.Current(context.Background())
	if err == nil {
		t.Fatal("no error with every endpoint failing")
	}
	for _, want := range []string{closed, down.URL, "500", "503"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "s3cr3t-pw") {
		t.Errorf("error shows the password: %s", err)
	}
	for _, e := range p.Endpoints() {
		if strings.Contains(e, "s3cr3t-pw") {
			t.Errorf("endpoint shows the password: %s", e)
		}
	}
}

func TestPatroniTimeout(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hang.Close()
	defer close(release)
	up := newFakePatroni(t)
	up.set(0, member(t, 1, "leader", "running", nil))
	p, err := topology.NewPatroni([]string{hang.URL, up.URL}, 200*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := p.Current(ctx)
	if err != nil {
		t.Fatalf("the second endpoint did not answer after the first timed out: %v", err)
	}
	if v.Endpoint != up.URL {
		t.Fatalf("endpoint %q, want %q", v.Endpoint, up.URL)
	}
}

func TestNewPatroniRejects(t *testing.T) {
	for _, bad := range [][]string{nil, {"pg-a:8008"}, {"ftp://pg-a"}, {"http://"}, {"http://u:hunter22@pg-a:8008?x=1"}, {"http://u:hunter22@pg a:%zz"}} {
		_, err := topology.NewPatroni(bad, 0, nil)
		if err == nil {
			t.Errorf("NewPatroni(%q) accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), "hunter22") {
			t.Errorf("error shows the password: %v", err)
		}
	}
}

// TestPatroniCloseLeavesNoGoroutine: the provider's poller and the probers
// of discovered hosts stop with the Topology, and the client's idle
// connections close with CloseIdleConnections.
func TestPatroniCloseLeavesNoGoroutine(t *testing.T) {
	f := newFakePatroni(t) // its server's goroutines are there before IgnoreCurrent
	// node2 listed twice: one host.
	f.set(0, member(t, 0, "leader", "running", nil), member(t, 1, "replica", "streaming", nil), member(t, 2, "replica", "streaming", nil), member(t, 2, "replica", "streaming", nil))
	// The probers' connections go through testcluster's fault proxies,
	// whose handlers end a moment after the probers closed them: theirs
	// are the test cluster's goroutines, not the Topology's. So are the
	// fake Patroni server's connection handlers, which end a moment after
	// the Topology's client closed its connections (the client's own
	// goroutines are still checked).
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/pgrouted/pgrouted/testcluster/internal/faultproxy.(*Proxy).read"),
		goleak.IgnoreAnyFunction("github.com/pgrouted/pgrouted/testcluster/internal/faultproxy.(*Proxy).handle"),
		goleak.IgnoreAnyFunction("github.com/pgrouted/pgrouted/testcluster/internal/faultproxy.(*Proxy).write"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		// pgx (5.13) drains a connection closed in the middle of an
		// operation in a goroutine of its own, bounded by a deadline.
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn.(*PgConn).asyncClose.func1"))
	p, err := topology.NewPatroni([]string{f.URL}, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var removed []int
	discover := func(i int, m topology.Member) (topology.Host, bool) {
		h := hosts(t, "", 2)[0]
		h.OnRemove = func() { mu.Lock(); removed = append(removed, i); mu.Unlock() }
		return h, true
	}
	top, err := topology.New(hosts(t, "", 0, 1), topology.Options{Interval: 20 * time.Millisecond, Provider: p, Discover: discover})
	if err != nil {
		t.Fatal(err)
	}
	// Trusted once its probe showed the DSN hosts' system, in recovery:
	// under load, after the probe that saw it a standby.
	s := waitSnap(t, top, 20*time.Second, "node2 discovered, probed and trusted", func(s *topology.Snapshot) bool {
		return len(s.Hosts) == 3 && s.Hosts[2].Discovered && s.Hosts[2].Role == topology.RoleStandby && s.Hosts[2].Untrusted == ""
	})
	if s.Hosts[2].NoReads {
		t.Fatal("the discovered streaming replica serves no reads")
	}
	if s := waitSnap(t, top, 20*time.Second, "another view", func(n *topology.Snapshot) bool { return n.Provider.Confirmed.After(s.Provider.Confirmed) }); len(s.Hosts) != 3 {
		t.Fatalf("%d hosts from a view listing node2 twice, want 3", len(s.Hosts))
	}
	f.set(0, member(t, 0, "leader", "running", nil), member(t, 1, "replica", "streaming", nil))
	s = waitSnap(t, top, 20*time.Second, "node2 removed", func(s *topology.Snapshot) bool { return s.Hosts[2].Removed })
	if s.Hosts[2].Role != topology.RoleUnknown || !s.Hosts[2].NoReads || s.Index("node2") != -1 {
		t.Fatalf("removed host %+v still looks usable", s.Hosts[2])
	}
	mu.Lock()
	if len(removed) != 1 || removed[0] != 2 {
		t.Errorf("OnRemove calls %v, want [2]", removed)
	}
	mu.Unlock()
	if err := top.Close(); err != nil {
		t.Fatal(err)
	}
	p.CloseIdleConnections()
}

// TestAskProvider: with a poll interval of a minute, only AskProvider can
// explain a second request.
func TestAskProvider(t *testing.T) {
	f := newFakePatroni(t)
	f.set(0, member(t, 0, "leader", "running", nil))
	p, err := topology.NewPatroni([]string{f.URL}, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	top := start(t, hosts(t, "", 0, 1, 2), topology.Options{Interval: time.Minute, Lease: 2 * time.Minute, Provider: p})
	waitSnap(t, top, 20*time.Second, "the first view", func(s *topology.Snapshot) bool { return s.Provider.Leader == "node0" })
	f.set(0, member(t, 1, "leader", "running", nil))
	top.AskProvider()
	waitSnap(t, top, 20*time.Second, "the view asked for", func(s *topology.Snapshot) bool { return s.Provider.Leader == "node1" })
	f.mu.Lock()
	n := f.requests
	f.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
}
