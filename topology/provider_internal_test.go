package topology

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/dsn"
)

func TestParseCluster(t *testing.T) {
	body, err := os.ReadFile("testdata/cluster-3.0.2.json")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := ParseCluster(body)
	if err != nil {
		t.Fatal(err)
	}
	want := []Member{
		{Name: "pg-a", Host: "127.0.0.1", Port: 5432, Role: "leader", State: "running", Timeline: 3, Lag: -1},
		{Name: "pg-b", Host: "127.0.0.1", Port: 5433, Role: "sync_standby", State: "running", Timeline: 3, Lag: 0},
		{Name: "pg-c", Host: "PG-C.example", Port: 5434, Role: "replica", State: "streaming", Timeline: 3, Lag: 16384, NoLoadBalance: true},
		{Name: "pg-d", Host: "pg-d.example", Port: 5435, Role: "replica", State: "starting", Lag: -1},
	}
	if len(ms) != len(want) {
		t.Fatalf("got %d members, want %d: %+v", len(ms), len(want), ms)
	}
	for i := range want {
		if ms[i] != want[i] {
			t.Errorf("member %d = %+v, want %+v", i, ms[i], want[i])
		}
	}
	for _, bad := range []string{``, `{}`, `{"members": 3}`, `{"members": [{"name": "x", "port": 70000}]}`, `not json`} {
		if _, err := ParseCluster([]byte(bad)); err == nil {
			t.Errorf("ParseCluster(%q) = nil error, want one", bad)
		}
	}
}

func TestTruthyTags(t *testing.T) {
	for _, c := range []struct {
		json string
		want bool
	}{
		{`true`, true}, {`false`, false}, {`"x"`, true}, {`""`, false}, {`1`, true}, {`0`, false}, {`null`, false},
	} {
		ms, err := ParseCluster([]byte(`{"members":[{"name":"a","tags":{"noloadbalance":` + c.json + `}}]}`))
		if err != nil {
			t.Fatal(err)
		}
		if ms[0].NoLoadBalance != c.want {
			t.Errorf("noloadbalance %s read as %v, want %v", c.json, ms[0].NoLoadBalance, c.want)
		}
	}
}

func TestAuthorize(t *testing.T) {
	hosts := []Endpoint{{Host: "db1", Port: 5432}, {Host: "db2", Port: 5432}, {Host: "db3", Port: 5433}, {Host: "evil", Port: 5432, Untrusted: true}}
	m := func(host string, port uint16, role, state string) Member {
		return Member{Name: host, Host: host, Port: port, Role: role, State: state, Timeline: 7}
	}
	cases := []struct {
		name     string
		members  []Member
		leader   int
		conflict bool
		unknown  string
		readable []bool
	}{
		{"leader and replicas", []Member{m("db1", 5432, "leader", "running"), m("db2", 5432, "replica", "streaming"), m("db3", 5433, "sync_standby", "running")},
			0, false, "", []bool{true, true, true}},
		{"pre-3.0 master, host case ignored", []Member{m("DB2", 5432, "master", "running"), m("db1", 5432, "replica", "running")},
			1, false, "", []bool{true, true, false}},
		{"leader not running", []Member{m("db1", 5432, "leader", "stopped"), m("db2", 5432, "replica", "running")},
			-1, false, "", []bool{false, true, false}},
		{"standby_leader never", []Member{m("db1", 5432, "standby_leader", "running"), m("db2", 5432, "replica", "streaming")},
			-1, false, "", []bool{true, true, false}},
		{"two running leaders", []Member{m("db1", 5432, "leader", "running"), m("db2", 5432, "leader", "running")},
			-1, true, "", []bool{true, true, false}},
		{"unknown leader", []Member{m("db9", 5432, "leader", "running"), m("db2", 5432, "replica", "running")},
			-1, false, "db9", []bool{false, true, false}},
		{"port differs", []Member{m("db1", 6432, "leader", "running")},
			-1, false, "db1", []bool{false, false, false}},
		{"noloadbalance", []Member{m("db1", 5432, "leader", "running"), {Name: "db3", Host: "db3", Port: 5433, Role: "replica", State: "streaming", NoLoadBalance: true}},
			0, false, "", []bool{true, false, false}},
		{"empty view", nil, -1, false, "", []bool{false, false, false}},
		// A discovered host not trusted yet: its leader role counts for
		// nothing, neither as the leader nor in a conflict.
		{"untrusted leader beside the real one", []Member{m("evil", 5432, "leader", "running"), m("db1", 5432, "leader", "running"), m("db2", 5432, "replica", "streaming")},
			0, false, "", []bool{true, true, false, true}},
		{"untrusted leader alone", []Member{m("evil", 5432, "leader", "running"), m("db1", 5432, "replica", "streaming")},
			-1, false, "evil", []bool{true, false, false, true}},
		{"untrusted leader listed twice", []Member{m("evil", 5432, "leader", "running"), m("EVIL", 5432, "leader", "running"), m("db1", 5432, "leader", "running")},
			0, false, "", []bool{true, false, false, true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := Authorize(View{Members: c.members}, hosts)
			if a.Leader != c.leader || a.Conflict != c.conflict || a.Unknown != c.unknown {
				t.Fatalf("leader=%d conflict=%v unknown=%q, want %d %v %q", a.Leader, a.Conflict, a.Unknown, c.leader, c.conflict, c.unknown)
			}
			if a.Leader >= 0 && a.LeaderTimeline != 7 {
				t.Errorf("leader timeline %d, want 7", a.LeaderTimeline)
			}
			for i := range hosts {
				if i < len(c.readable) && a.Readable[i] != c.readable[i] {
					t.Errorf("host %d readable=%v, want %v", i, a.Readable[i], c.readable[i])
				}
			}
		})
	}
}

func TestDecideProvider(t *testing.T) {
	now := time.Now()
	lease := 10 * time.Second
	fresh, old := now.Add(-time.Second), now.Add(-11*time.Second)
	leader1 := &Authority{Leader: 1}
	claims := []claim{{index: 0, timeline: 9, sentAt: fresh}, {index: 1, timeline: 2, sentAt: now.Add(-2 * time.Second)}}
	cases := []struct {
		name     string
		claims   []claim
		a        *Authority
		viewAt   time.Time
		primary  int
		conflict bool
	}{
		{"leader out of recovery", claims, leader1, fresh, 1, false},
		{"no view yet", claims, nil, time.Time{}, -1, false},
		{"view older than the lease", claims, leader1, old, -1, false},
		{"leader's probe does not see it out of recovery", claims[:1], leader1, fresh, -1, false},
		{"leader's claim older than the lease", []claim{{index: 1, sentAt: old}}, leader1, fresh, -1, false},
		{"conflict", claims, &Authority{Leader: -1, Conflict: true}, fresh, -1, true},
		{"no leader", claims, &Authority{Leader: -1}, fresh, -1, false},
	}
	for _, c := range cases {
		d := decideProvider(c.claims, c.a, c.viewAt, now, lease)
		if d.primary != c.primary || d.conflict != c.conflict {
			t.Errorf("%s: primary=%d conflict=%v, want %d %v", c.name, d.primary, d.conflict, c.primary, c.conflict)
		}
	}
	// Confirmed is the older of the view and the claim.
	d := decideProvider(claims, leader1, fresh, now, lease)
	if !d.confirmed.Equal(now.Add(-2 * time.Second)) {
		t.Errorf("confirmed %v, want the claim's %v", d.confirmed, now.Add(-2*time.Second))
	}
	d = decideProvider(claims, leader1, now.Add(-5*time.Second), now, lease)
	if !d.confirmed.Equal(now.Add(-5 * time.Second)) {
		t.Errorf("confirmed %v, want the view's", d.confirmed)
	}
}

// checkMembers: a member name, host, role or state that a terminal, a log
// or a metric label could not show as it is never enters the topology: a
// bad name becomes the member's address, a bad host matches nothing, a bad
// role or state gives nothing; the first is said, printable.
func TestCheckMembers(t *testing.T) {
	long := strings.Repeat("x", 300)
	in := View{Members: []Member{
		{Name: "pg-a", Host: "10.0.0.1", Port: 5432, Role: MemberLeader, State: StateRunning},
		{Name: "evil\x1b[2J\u202e", Host: "10.0.0.2", Port: 5432, Role: MemberReplica, State: StateStreaming},
		{Name: long, Host: "10.0.0.3", Port: 5433, Role: MemberReplica, State: StateStreaming},
		{Name: "pg-d", Host: "10.0.0.4\n", Port: 5432, Role: "leader\x00", State: "running\xff"},
		{Name: "pg-e", Port: 5432, Role: MemberReplica, State: "starting"},
	}}
	orig := slices.Clone(in.Members)
	out, bad := checkMembers(in)
	want := []Member{
		orig[0],
		{Name: "10.0.0.2:5432", Host: "10.0.0.2", Port: 5432, Role: MemberReplica, State: StateStreaming},
		{Name: "10.0.0.3:5433", Host: "10.0.0.3", Port: 5433, Role: MemberReplica, State: StateStreaming},
		{Name: "pg-d", Port: 5432},
		orig[4],
	}
	if !slices.Equal(out.Members, want) {
		t.Fatalf("members %+v\nwant %+v", out.Members, want)
	}
	if !slices.Equal(in.Members, orig) {
		t.Fatal("the provider's own slice was changed")
	}
	if !strings.Contains(bad, "member 2") || !strings.Contains(bad, "control character") || dsn.Printable(bad) != bad {
		t.Fatalf("BadMember %q: want member 2's control character, printable", bad)
	}
	// The leader with a bad role gives no authority.
	if a := Authorize(out, []Endpoint{{Host: "10.0.0.4", Port: 5432}}); a.Leader >= 0 || a.Readable[0] {
		t.Fatalf("authority %+v from a member whose host, role and state were refused", a)
	}
	if _, bad := checkMembers(View{Members: orig[:1]}); bad != "" {
		t.Fatalf("a fit view: %q", bad)
	}
}
