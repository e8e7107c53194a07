package topology

import (
	"time"

	"github.com/pgrouted/pgrouted/lagmeter"
)

// Role is what a host was last seen to be.
type Role uint8

const (
	// RoleUnknown: never probed successfully.
	RoleUnknown Role = iota
	// RolePrimary: out of recovery, accepting writes.
	RolePrimary
	// RoleStandby: in recovery (a streaming replica).
	RoleStandby
)

// String returns "unknown", "primary" or "standby".
func (r Role) String() string {
	switch r {
	case RolePrimary:
		return "primary"
	case RoleStandby:
		return "standby"
	}
	return "unknown"
}

// MarshalText implements encoding.TextMarshaler.
func (r Role) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// HostState is what the probes last learned of one host. Zero LSNs, RTT,
// Timeline or SystemID mean unknown.
type HostState struct {
	// Name and Addr identify the host, as configured.
	Name string `json:"name"`
	Addr string `json:"address"`

	// Role is the role of the last successful probe; it stays when a probe
	// fails, and Healthy tells whether it is current.
	Role Role `json:"role"`

	// Healthy is true when the last probe succeeded.
	Healthy bool `json:"healthy"`

	// LastProbe is when the last probe (successful or not) was sent;
	// LastSuccess when the last successful one was sent. Both are local
	// times with a monotonic reading.
	LastProbe   time.Time `json:"lastProbe"`
	LastSuccess time.Time `json:"lastSuccess"`

	// Failures is the number of failed probes since the last success.
	Failures int `json:"failures"`

	// LastError is the last probe error's text (never a password), empty
	// after a success.
	LastError string `json:"lastError,omitempty"`

	// RTT is the probe round trip's EWMA: the first sample sets it, then
	// each new one weighs 0.2.
	RTT time.Duration `json:"rtt"`

	// InsertLSN is a primary's WAL insert position
	// (pg_current_wal_insert_lsn()) when probed.
	InsertLSN lagmeter.LSN `json:"insertLsn"`

	// ReplayLSN and ReceiveLSN are a standby's pg_last_wal_replay_lsn() and
	// pg_last_wal_receive_lsn() when probed.
	ReplayLSN  lagmeter.LSN `json:"replayLsn"`
	ReceiveLSN lagmeter.LSN `json:"receiveLsn"`

	// SnapshotXmax is a primary's transaction snapshot xmax
	// (pg_snapshot_xmax(pg_current_snapshot())) when probed, SnapshotXmin
	// a standby's xmin; 0 when unknown. See lagmeter.Sample.Xmax and
	// lagmeter.Position.Xmin.
	SnapshotXmax uint64 `json:"snapshotXmax,omitempty,string"`
	SnapshotXmin uint64 `json:"snapshotXmin,omitempty,string"`

	// Timeline is the timeline a primary writes, or a standby receives.
	Timeline uint32 `json:"timeline"`

	// SystemID is the cluster's system identifier (pg_control_system()).
	SystemID uint64 `json:"systemId,string"`

	// Layout is the cluster's WAL page geometry (pg_control_init()).
	Layout lagmeter.WALLayout `json:"-"`

	// Conn counts the probe connections made to the host. When it changes,
	// the server may have restarted: what was learned of it on another
	// connection (a standby's replay position) no longer holds.
	Conn uint64 `json:"-"`

	// Pooler is true when the last successful probe ran on a server
	// process other than the one its connection announced (the backend
	// pid of the connection's BackendKeyData): a connection pooler, such
	// as PgBouncer, sits between the client and the server.
	Pooler bool `json:"pooler,omitempty"`

	// BackendSwitched is true when the probe connection has met two server
	// processes: the pooler in front of the host hands out server sessions
	// per transaction (or per statement), so session state does not last
	// beyond a transaction. Its absence proves nothing: a pooler with a
	// single idle server session keeps handing out the same one.
	BackendSwitched bool `json:"backendSwitched,omitempty"`

	// Switches is the timeline history of a primary on a timeline after
	// the first: where each earlier timeline was left. It is read from the
	// history file, which needs EXECUTE on pg_read_file(text); nil
	// when unknown.
	Switches []lagmeter.TimelineSwitch `json:"switches,omitempty"`

	// SwitchFloor is a lower bound of a promoted host's switch point,
	// known without any privilege: the replay position last probed on its
	// old timeline before it was seen out of recovery. Zero when it was not
	// seen as a standby first.
	SwitchFloor lagmeter.TimelineSwitch `json:"-"`

	// SyncState is the standby's sync_state in the primary's
	// pg_stat_replication ("sync", "async", "potential", "quorum"), matched
	// by the standby's application_name equal to the host's Name; empty
	// when not known.
	SyncState string `json:"syncState,omitempty"`

	// Missing lists the grants the probing role lacks on the host
	// ([GrantReadAllStats], [GrantReadFile]), and the messages of probe
	// statements refused for want of a privilege, sorted. The probes
	// work without them, with less (see [PrivilegeEffect]).
	Missing []string `json:"missing,omitempty"`

	// Member, MemberRole and MemberState are what the provider's last view
	// says of the host (its member name, role and state); empty without a
	// provider, or when the view does not list the host.
	Member      string `json:"member,omitempty"`
	MemberRole  string `json:"memberRole,omitempty"`
	MemberState string `json:"memberState,omitempty"`

	// NoLoadBalance is true when the provider tags the host noloadbalance.
	NoLoadBalance bool `json:"noLoadBalance,omitempty"`

	// NoReads is true when the provider does not let the host serve reads:
	// its last view does not list it, lists it neither running nor
	// streaming, or tags it noloadbalance. Always false without a provider.
	NoReads bool `json:"noReads,omitempty"`

	// Discovered is true for a host the provider reported that the
	// configuration does not name (Options.Discover).
	Discovered bool `json:"discovered,omitempty"`

	// Untrusted is, for a discovered host, why it is not trusted: empty
	// once its probe showed the system identifier of the configured hosts
	// and it was seen in recovery (replicating this system) before it was
	// ever seen out of recovery. While it is not empty the host serves no
	// reads (NoReads), it cannot be the primary, and its SystemID is not
	// shown. Always empty for a configured host.
	Untrusted string `json:"untrusted,omitempty"`

	// Removed is true for a discovered host that left the provider's view:
	// it is no longer probed and serves nothing. Its index is never reused.
	Removed bool `json:"removed,omitempty"`
}

// Snapshot is an immutable picture of the cluster. Readers get it with
// [Topology.Snapshot]; it never changes after publication.
type Snapshot struct {
	// Hosts are in configuration order.
	Hosts []HostState `json:"hosts"`

	// Primary is the index in Hosts of the current primary, or -1. It is
	// authoritative only while [Snapshot.LeaseValid] holds.
	Primary int `json:"primary"`

	// Epoch increments each time the primary becomes a different host than
	// the previous one (a period without primary does not count).
	Epoch uint64 `json:"epoch"`

	// Confirmed is when the last successful probe that saw Primary out of
	// recovery was sent.
	Confirmed time.Time `json:"confirmed"`

	// Lease is how long a confirmation stays valid.
	Lease time.Duration `json:"lease"`

	// Conflicts counts the observations of two or more hosts out of
	// recovery with no strictly highest timeline among them; with a
	// provider, the views that reported two or more running leaders.
	Conflicts uint64 `json:"conflicts"`

	// Conflict is true when the last evaluation saw such a conflict.
	Conflict bool `json:"conflict"`

	// Provider is the provider's state (see [Options].Provider); nil when
	// the probes alone decide.
	Provider *ProviderState `json:"provider,omitempty"`

	// SyncStandbys is the primary's pg_stat_replication, application_name
	// to sync_state.
	SyncStandbys []SyncStandby `json:"syncStandbys,omitempty"`

	// Taken is when the snapshot was published.
	Taken time.Time `json:"taken"`
}

// SyncStandby is one row of the primary's pg_stat_replication.
type SyncStandby struct {
	ApplicationName string `json:"applicationName"`
	SyncState       string `json:"syncState"`
}

// LeaseValid reports whether the snapshot has a primary whose last
// confirmation is younger than the lease at now.
func (s *Snapshot) LeaseValid(now time.Time) bool {
	return s.Primary >= 0 && now.Sub(s.Confirmed) < s.Lease
}

// PrimaryHost returns the primary's state when it is authoritative at now.
func (s *Snapshot) PrimaryHost(now time.Time) (*HostState, bool) {
	if !s.LeaseValid(now) {
		return nil, false
	}
	return &s.Hosts[s.Primary], true
}

// LeaseRemaining is how long the primary stays authoritative without a new
// confirmation; 0 when it is not.
func (s *Snapshot) LeaseRemaining(now time.Time) time.Duration {
	if !s.LeaseValid(now) {
		return 0
	}
	return s.Lease - now.Sub(s.Confirmed)
}

// Index returns the index of the host named name, or -1. A removed host
// is not found.
func (s *Snapshot) Index(name string) int {
	for i := range s.Hosts {
		if s.Hosts[i].Name == name && !s.Hosts[i].Removed {
			return i
		}
	}
	return -1
}
