package topology

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgrouted/pgrouted/dsn"
)

// Provider is a source of authority about the cluster beside the probes: an
// HA manager ([Patroni]), an orchestrator or the application itself
// ([Manual]) tells which member leads and which members serve. With a
// provider, the probes still run on every host, and a host is the primary
// only when the provider names it leader and its own probe finds it out of
// recovery (see [Authorize] and the package documentation).
//
// The Topology polls Current once per probe interval, and at once whenever
// Changes delivers. Implementations must be safe for concurrent use.
type Provider interface {
	// Name is a short name for the provider ("patroni", "manual"), shown in
	// snapshots and metrics.
	Name() string

	// Current returns the provider's view of the cluster now, or an error
	// when it has none (no endpoint answered). An error leaves the
	// provider's lease unrefreshed: the primary it named stays
	// authoritative until the lease runs out, then there is none. ctx
	// carries the per-request deadline.
	Current(ctx context.Context) (View, error)

	// Changes returns a channel that receives when the view may have
	// changed, so that the Topology asks Current at once instead of at its
	// next poll; nil when the provider can only be polled.
	Changes() <-chan struct{}
}

// The member roles a provider reports, as Patroni's /cluster spells them.
const (
	// MemberLeader is the member holding the leader lock ("master" before
	// Patroni 3.0 is read as MemberLeader).
	MemberLeader = "leader"
	// MemberReplica is a replica.
	MemberReplica = "replica"
	// MemberSyncStandby is a synchronous replica.
	MemberSyncStandby = "sync_standby"
	// MemberStandbyLeader leads a standby cluster: it is itself in recovery
	// and never writable.
	MemberStandbyLeader = "standby_leader"
)

// The member states that serve. Any other state (stopped, starting,
// crashed, restarting, creating replica, ...) serves nothing.
const (
	// StateRunning is a running member.
	StateRunning = "running"
	// StateStreaming is a replica streaming from its upstream (Patroni 3.0.4
	// and later report it instead of running).
	StateStreaming = "streaming"
)

// Member is one server as a provider reports it.
type Member struct {
	// Name is the provider's name of the member.
	Name string `json:"name"`
	// Host and Port are where its PostgreSQL listens. A member matches a
	// host pgrouted knows when the host names compare equal ignoring case
	// and the ports are equal.
	Host string `json:"host"`
	Port uint16 `json:"port"`
	// Role is one of the Member* constants, or another string the provider
	// reports (which gives no authority).
	Role string `json:"role"`
	// State is the member's state: StateRunning or StateStreaming serve.
	State string `json:"state"`
	// Timeline is the member's timeline as the provider reports it (0:
	// unknown).
	Timeline uint32 `json:"timeline,omitempty"`
	// Lag is the replica's lag in bytes as the provider reports it, -1 when
	// unknown. It is shown, never trusted: reads use pgrouted's own replay
	// positions.
	Lag int64 `json:"lag"`
	// NoLoadBalance is the noloadbalance tag: the member serves no reads.
	NoLoadBalance bool `json:"noLoadBalance,omitempty"`
}

// IsLeader reports whether the member's role is leader (or master): a
// writable primary, if it is also running. A standby_leader is not.
func (m Member) IsLeader() bool { return m.Role == MemberLeader || m.Role == "master" }

// Serves reports whether the member's state lets it serve at all: running
// or streaming.
func (m Member) Serves() bool { return m.State == StateRunning || m.State == StateStreaming }

// View is what a provider says of the cluster at one moment.
type View struct {
	// Members are the members the provider knows.
	Members []Member
	// Endpoint is where the view came from (a Patroni URL with its password
	// redacted), for display.
	Endpoint string
}

// checkMembers returns v with its members fit to be matched and shown, as
// the Topology takes every view in: a member whose name [dsn.CheckName]
// refuses (empty, too long, not UTF-8, a control or format character) is
// named by its address instead; one whose host it refuses has no host (it
// matches no host and is not discovered); a role or state it refuses is
// dropped (it gives no authority and serves nothing). It returns, too,
// why the first member was changed, printable, or "". v's own slice is
// not changed.
func checkMembers(v View) (View, string) {
	bad := ""
	var ms []Member
	for k, m := range v.Members {
		why := ""
		if r := dsn.CheckName(m.Host); r != "" && m.Host != "" {
			why = "host: " + r
			m.Host = ""
		}
		if r := dsn.CheckName(m.Name); r != "" && m.Name != "" {
			if why == "" {
				why = "name: " + r
			}
			m.Name = ""
		}
		if m.Name == "" && m.Host != "" {
			m.Name = net.JoinHostPort(m.Host, strconv.Itoa(int(m.Port)))
		}
		if r := dsn.CheckName(m.Role); r != "" && m.Role != "" {
			why, m.Role = cmp.Or(why, "role: "+r), ""
		}
		if r := dsn.CheckName(m.State); r != "" && m.State != "" {
			why, m.State = cmp.Or(why, "state: "+r), ""
		}
		if why == "" {
			continue
		}
		if ms == nil {
			ms = slices.Clone(v.Members)
		}
		ms[k] = m
		if bad == "" {
			bad = fmt.Sprintf("member %d of the view (%s): its %s", k+1, dsn.Printable(cmp.Or(m.Name, "no name")), why)
		}
	}
	if ms != nil {
		v.Members = ms
	}
	return v, bad
}

// matches reports whether m is the host at host:port.
func (m Member) matches(host string, port uint16) bool {
	return host != "" && m.Port == port && strings.EqualFold(m.Host, host)
}

// Authority is what the rules make of a provider's view over the hosts
// pgrouted knows. It is computed by [Authorize], in one place.
type Authority struct {
	// Leader is the index of the host named leader, -1 when none is
	// authorised: no running leader, an unknown one, or a conflict.
	Leader int
	// LeaderTimeline is the leader's timeline as the provider reports it.
	LeaderTimeline uint32
	// Conflict is true when two or more members are running leaders.
	Conflict bool
	// Unknown names the running leader the view reports that is not a host
	// pgrouted knows, or, when no other leads, one it does not trust to
	// lead (an Untrusted host), if any (it is not authorised).
	Unknown string
	// Member is, per host, the index in the view's Members of the member it
	// is, or -1 when the view does not list it.
	Member []int
	// Readable is, per host, whether the provider lets it serve reads: it
	// is listed, running or streaming, and not tagged noloadbalance.
	Readable []bool
}

// Endpoint is a host pgrouted knows, as [Authorize] matches members to it.
type Endpoint struct {
	Host string
	Port uint16
	// Untrusted marks a host that may not lead: a discovered host not
	// trusted yet (see [HostState].Untrusted). A member matching it that
	// the view names leader gives no authority and makes no conflict.
	Untrusted bool
}

// Authorize applies the authority rules to v over hosts:
//   - only a member whose role is leader (or master) and whose state is
//     running can be the primary; a standby_leader never is;
//   - a leader matching an Untrusted host counts for nothing: it is not
//     authorised and makes no conflict;
//   - two or more other running leaders are a conflict: no leader at all;
//   - the leader must be one of hosts (host compared ignoring case, port
//     equal), else it is not authorised;
//   - a host serves reads only when the view lists it running or
//     streaming, without the noloadbalance tag;
//   - a member that is not running or streaming serves nothing.
//
// It does not decide the primary alone: the Topology also requires the
// host's own probe to find it out of recovery inside the lease.
func Authorize(v View, hosts []Endpoint) Authority {
	a := Authority{Leader: -1, Member: make([]int, len(hosts)), Readable: make([]bool, len(hosts))}
	for i := range hosts {
		a.Member[i] = -1
	}
	leaders := 0
	leader, untrusted := -1, -1
	for k, m := range v.Members {
		trusted := true
		for i, h := range hosts {
			if !m.matches(h.Host, h.Port) {
				continue
			}
			trusted = trusted && !h.Untrusted
			if a.Member[i] < 0 {
				a.Member[i] = k
				a.Readable[i] = m.Serves() && !m.NoLoadBalance
			}
		}
		if m.IsLeader() && m.Serves() {
			switch {
			case trusted:
				leaders++
				leader = k
			case untrusted < 0:
				untrusted = k
			}
		}
	}
	switch {
	case leaders > 1:
		a.Conflict = true
	case leaders == 1:
		m := v.Members[leader]
		for i := range hosts {
			if a.Member[i] == leader {
				a.Leader, a.LeaderTimeline = i, m.Timeline
			}
		}
		if a.Leader < 0 {
			a.Unknown = m.Name
		}
	case untrusted >= 0:
		a.Unknown = v.Members[untrusted].Name
	}
	return a
}

// ProviderState is the provider's part of a [Snapshot].
type ProviderState struct {
	// Name is the provider's name ("patroni", "manual"), empty without one.
	Name string `json:"name"`
	// Endpoint is where the last view came from.
	Endpoint string `json:"endpoint,omitempty"`
	// Confirmed is when the request of the last view that answered was
	// sent; the provider's lease runs from it.
	Confirmed time.Time `json:"confirmed"`
	// Leader is the host the last view names leader and authorises, "" for
	// none.
	Leader string `json:"leader,omitempty"`
	// LeaderTimeline is the leader's timeline as the provider reports it.
	LeaderTimeline uint32 `json:"leaderTimeline,omitempty"`
	// Unknown names a running leader the view reports that is not a known
	// host.
	Unknown string `json:"unknownLeader,omitempty"`
	// Conflict is true when the last view had two or more running leaders.
	Conflict bool `json:"conflict,omitempty"`
	// LastError is the last request's error, empty after a success; never
	// a password.
	LastError string `json:"lastError,omitempty"`
	// BadMember says which member of the last view had a name, host, role
	// or state that [dsn.CheckName] refuses, and why (the name is then
	// the member's address; see checkMembers); empty when none had.
	BadMember string `json:"badMember,omitempty"`
}
