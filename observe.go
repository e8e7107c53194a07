package pgrouted

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// Snapshot is what a Connector sees of the cluster at one instant, from
// [Connector.Topology]. It marshals to JSON (camelCase) and holds no
// password. Every duration in it, as in [Stats] and [PoolInfo], is a
// time.Duration, which JSON writes as a whole number of nanoseconds.
//
// It is not [topology.Snapshot], on purpose: that one is package
// topology's own state, what the probes learned (raw LSNs, probe times,
// the index of the primary), which a topology.Topology publishes with no
// Connector around it. This one is the Connector's report, for people and
// dashboards: it adds what only the Connector knows (circuits, pools,
// in-flight reads, byte lag and the staleness bound) and leaves out the
// probes' internals.
type Snapshot struct {
	// Primary is the name of the current primary, "" when there is none.
	Primary string `json:"primary"`
	// Epoch increments each time the primary becomes another host.
	Epoch uint64 `json:"epoch"`
	// LeaseRemaining is how long the primary stays authoritative without
	// a new successful probe; 0 when it is not authoritative.
	LeaseRemaining time.Duration `json:"leaseRemaining"`
	// ConflictingPrimaries counts the observations of two or more hosts out
	// of recovery with no strictly higher timeline among them.
	ConflictingPrimaries uint64 `json:"conflictingPrimaries"`
	// Taken is when the snapshot was taken.
	Taken time.Time `json:"taken"`
	// Provider is the topology provider's state (pgrouted_topology=patroni
	// or Config.Provider); nil when the probes alone decide.
	Provider *ProviderInfo `json:"provider,omitempty"`
	// Hosts are in DSN order.
	Hosts []HostInfo `json:"hosts"`
}

// ProviderInfo is the topology provider's part of a [Snapshot]. It holds no
// password: a Patroni URL's is redacted.
type ProviderInfo struct {
	// Name is the provider's: "patroni", "manual", or an application's.
	Name string `json:"name"`
	// Endpoint is where its last answer came from (the Patroni URL).
	Endpoint string `json:"endpoint,omitempty"`
	// LeaseRemaining is how long its last answer stays authoritative; 0
	// once pgrouted_lease has passed without one.
	LeaseRemaining time.Duration `json:"leaseRemaining"`
	// Leader is the host its last answer names leader and that pgrouted
	// knows, "" for none. It is the primary only when the host's own probe
	// also finds it out of recovery (see Snapshot.Primary).
	Leader string `json:"leader,omitempty"`
	// LeaderTimeline is the leader's timeline as the provider reports it.
	LeaderTimeline uint32 `json:"leaderTimeline,omitempty"`
	// UnknownLeader names a running leader it reports that is no host
	// pgrouted knows (not authorised).
	UnknownLeader string `json:"unknownLeader,omitempty"`
	// Conflict is true when its last answer named two running leaders.
	Conflict bool `json:"conflict,omitempty"`
	// LastError is its last failure, empty after an answer.
	LastError string `json:"lastError,omitempty"`
	// BadMember says which member of the provider's last view had a name,
	// host, role or state refused by dsn.CheckName (too long, not UTF-8, a
	// control or format character), and why; such a name is replaced by
	// the member's address. Empty when none had.
	BadMember string `json:"badMember,omitempty"`
}

// HostInfo is one host in a [Snapshot].
type HostInfo struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	// Role is what the last successful probe saw: "primary", "standby",
	// or "unknown" before any. It stays when probes fail: a stopped old
	// primary still says "primary" (with Healthy false); the Snapshot's
	// Primary names the authoritative one.
	Role string `json:"role"`
	// Healthy is true when the last probe succeeded.
	Healthy bool `json:"healthy"`
	// Circuit is the host's circuit breaker: "closed" or "open".
	Circuit string `json:"circuit"`
	// RTT is the probes' round trip EWMA (0: unknown).
	RTT time.Duration `json:"rtt"`
	// Timeline is the timeline the host writes or replays (0: unknown).
	Timeline uint32 `json:"timeline,omitempty"`
	// ReplayLSN is a standby's last known replay position.
	ReplayLSN string `json:"replayLsn,omitempty"`
	// ByteLag is how many WAL bytes a standby is behind the primary's
	// last probe; absent when unknown.
	ByteLag *uint64 `json:"byteLag,omitempty"`
	// LagBound is an upper bound on a standby's staleness, the staleness
	// gate's: from the primary's history of WAL positions and transaction
	// snapshots; absent when unknown.
	LagBound *time.Duration `json:"lagBound,omitempty"`
	// SyncState is the standby's sync_state on the primary, when known.
	SyncState string `json:"syncState,omitempty"`
	// Pooler is true when the probes run through a connection pooler
	// (PgBouncer) in front of the host: the server process they talk to
	// is not the one their connection announced. pgx's own statements
	// then use the unnamed statement (see the README's "Behind a
	// connection pooler").
	Pooler bool `json:"pooler,omitempty"`
	// BackendSwitched is true when the probe connection has met two server
	// processes: the pooler hands out server sessions per transaction, and
	// session state does not last beyond one. Its absence proves nothing.
	BackendSwitched bool `json:"backendSwitched,omitempty"`
	// InflightReads is the number of reads running on it now.
	InflightReads int64 `json:"inflightReads"`
	// Budget is a standby's state against the staleness budget
	// (pgrouted_max_lag, docs/routing.md): "in", "out" (it went beyond the
	// budget and is not yet back under the return threshold) or "ramp"
	// (back, its share of the reads growing over a few probe intervals);
	// empty for the primary. BudgetChanges counts the times it left or
	// came back.
	Budget        string `json:"budget,omitempty"`
	BudgetChanges uint64 `json:"budgetChanges,omitempty"`
	// Pool is the host's replica connection pool (the pgrouted_replica_
	// keys): a standby's reads borrow its connections, and the primary's
	// pgrouted's own reads (function catalog, WAL positions).
	Pool PoolInfo `json:"pool"`
	// LastError is the last probe error, if the last probe failed.
	LastError string `json:"lastError,omitempty"`
	// MissingPrivileges lists the grants the connecting role lacks on the
	// host ("pg_read_all_stats", "EXECUTE ON FUNCTION pg_read_file(text)")
	// and the messages of probe statements refused for want of one.
	// pgrouted works without them, with less; Config.Logger was told once
	// what each costs (see docs/privileges.md).
	MissingPrivileges []string `json:"missingPrivileges,omitempty"`
	// Member, MemberRole and MemberState are what the topology provider
	// says of the host: its member name, role (leader, replica,
	// sync_standby, standby_leader) and state (running, streaming, ...).
	Member      string `json:"member,omitempty"`
	MemberRole  string `json:"memberRole,omitempty"`
	MemberState string `json:"memberState,omitempty"`
	// NoLoadBalance is true when the provider tags it noloadbalance.
	NoLoadBalance bool `json:"noLoadBalance,omitempty"`
	// NoReads is true when the provider lets it serve no reads (not
	// listed, not running or streaming, or noloadbalance).
	NoReads bool `json:"noReads,omitempty"`
	// Discovered is true for a host the topology provider reported that
	// the DSN does not name (pgrouted_discover).
	Discovered bool `json:"discovered,omitempty"`
	// Untrusted says why a discovered host serves nothing yet (its probe
	// has not shown the DSN hosts' system in recovery, or showed another
	// system: docs/patroni.md); empty once it is trusted, and for the
	// DSN's hosts.
	Untrusted string `json:"untrusted,omitempty"`
}

// PoolInfo is a connection pool's figures: every figure of pgxpool.Stat,
// under its name (see [github.com/jackc/pgx/v5/pgxpool.Stat]).
type PoolInfo struct {
	// AcquireCount is the number of successful acquires.
	AcquireCount int64 `json:"acquireCount"`
	// AcquireDuration is the total time of the successful acquires.
	AcquireDuration time.Duration `json:"acquireDuration"`
	// AcquiredConns is the number of connections in use now.
	AcquiredConns int32 `json:"acquiredConns"`
	// CanceledAcquireCount is the number of acquires canceled by their
	// context.
	CanceledAcquireCount int64 `json:"canceledAcquireCount"`
	// ConstructingConns is the number of connections being opened now.
	ConstructingConns int32 `json:"constructingConns"`
	// EmptyAcquireCount is the number of successful acquires that waited
	// for a connection because none was idle.
	EmptyAcquireCount int64 `json:"emptyAcquireCount"`
	// EmptyAcquireWaitTime is the total time those waited.
	EmptyAcquireWaitTime time.Duration `json:"emptyAcquireWaitTime"`
	// IdleConns is the number of idle connections now.
	IdleConns int32 `json:"idleConns"`
	// MaxConns is the pool's largest size.
	MaxConns int32 `json:"maxConns"`
	// TotalConns is AcquiredConns + ConstructingConns + IdleConns.
	TotalConns int32 `json:"totalConns"`
	// NewConnsCount is the number of connections opened.
	NewConnsCount int64 `json:"newConnsCount"`
	// MaxLifetimeDestroyCount is the number of connections closed past
	// their lifetime (MaxConnLifetime).
	MaxLifetimeDestroyCount int64 `json:"maxLifetimeDestroyCount"`
	// MaxIdleDestroyCount is the number of connections closed idle past
	// MaxConnIdleTime.
	MaxIdleDestroyCount int64 `json:"maxIdleDestroyCount"`
}

// poolInfo returns st's figures.
func poolInfo(st *pgxpool.Stat) PoolInfo {
	return PoolInfo{
		AcquireCount:            st.AcquireCount(),
		AcquireDuration:         st.AcquireDuration(),
		AcquiredConns:           st.AcquiredConns(),
		CanceledAcquireCount:    st.CanceledAcquireCount(),
		ConstructingConns:       st.ConstructingConns(),
		EmptyAcquireCount:       st.EmptyAcquireCount(),
		EmptyAcquireWaitTime:    st.EmptyAcquireWaitTime(),
		IdleConns:               st.IdleConns(),
		MaxConns:                st.MaxConns(),
		TotalConns:              st.TotalConns(),
		NewConnsCount:           st.NewConnsCount(),
		MaxLifetimeDestroyCount: st.MaxLifetimeDestroyCount(),
		MaxIdleDestroyCount:     st.MaxIdleDestroyCount(),
	}
}

// Topology returns what the Connector sees of the cluster now.
func (c *Connector) Topology() Snapshot {
	v := c.view()
	s := v.snap
	now := time.Now()
	out := Snapshot{
		Epoch:                s.Epoch,
		LeaseRemaining:       s.LeaseRemaining(now),
		ConflictingPrimaries: s.Conflicts,
		Taken:                now,
		Hosts:                make([]HostInfo, 0, len(s.Hosts)),
	}
	// Every name and every text that may quote one is shown through
	// dsn.Printable (the provider's are checked as they come in, the
	// DSN's when it is parsed: this is the last guard).
	pr := dsn.Printable
	if s.LeaseValid(now) {
		out.Primary = pr(v.primary.probe.Name)
	}
	if p := s.Provider; p != nil {
		out.Provider = &ProviderInfo{
			Name: pr(p.Name), Endpoint: pr(p.Endpoint), Leader: pr(p.Leader), LeaderTimeline: p.LeaderTimeline,
			UnknownLeader: pr(p.Unknown), Conflict: p.Conflict, LastError: printableLine(p.LastError), BadMember: pr(p.BadMember),
		}
		if !p.Confirmed.IsZero() {
			out.Provider.LeaseRemaining = max(s.Lease-now.Sub(p.Confirmed), 0)
		}
	}
	for i := range v.hosts {
		hv := &v.hosts[i]
		if hv.probe.Removed {
			// A discovered host that left: gone, once drained.
			continue
		}
		out.Hosts = append(out.Hosts, c.hostInfo(hv, now))
	}
	return out
}

// hostInfo returns what the Topology shows of the host hv at now: its
// probe's findings, its breaker, reads and pool and, for a standby, its
// budget state, its replay position and, while it is healthy, its lag.
// Names and texts go through dsn.Printable, as Topology says.
func (c *Connector) hostInfo(hv *hostView, now time.Time) HostInfo {
	pr := dsn.Printable
	h, hs := hv.probe, hv.host
	hi := HostInfo{
		Name:          pr(h.Name),
		Address:       pr(h.Addr),
		Role:          h.Role.String(),
		Healthy:       h.Healthy,
		Circuit:       hs.breaker.State().String(),
		RTT:           h.RTT,
		Timeline:      h.Timeline,
		SyncState:     h.SyncState,
		InflightReads: hs.inflight(),
		BudgetChanges: hs.gate.changes.Load(),
		Pool:          poolInfo(hs.pool.Stat()),
		LastError:     printableLine(h.LastError),
		Member:        pr(h.Member),
		MemberRole:    pr(h.MemberRole),
		MemberState:   pr(h.MemberState),
		NoLoadBalance: h.NoLoadBalance,
		NoReads:       h.NoReads,
		Discovered:    h.Discovered,
		Untrusted:     pr(h.Untrusted),
	}
	hi.Pooler, hi.BackendSwitched = h.Pooler, h.BackendSwitched
	hi.MissingPrivileges = h.Missing
	if h.Role.String() == "standby" {
		hi.Budget = hs.gate.state(&c.gates, consistency.Now())
		replay := hv.replay()
		if replay != 0 {
			hi.ReplayLSN = replay.String()
		}
		if h.Healthy {
			if n, ok := hv.byteLag(); ok {
				hi.ByteLag = &n
			}
			// The gate's bound (History.Lag), positions and
			// transaction IDs both.
			pos := lagmeter.Position{SystemID: h.SystemID, Timeline: h.Timeline, Replay: replay, Xmin: h.SnapshotXmin}
			if l := c.history.Lag(pos, now); l.TimeKnown && l.Time != lagmeter.Unbounded {
				v := l.Time
				hi.LagBound = &v
			}
		}
	}
	return hi
}

// printableLine is an error's text as the Topology shows it: on one line
// (its runs of white space, line breaks included, made one space), then
// through dsn.Printable.
func printableLine(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r != ' ' && unicode.IsSpace(r) }) {
		return dsn.Printable(s)
	}
	return dsn.Printable(strings.Join(strings.Fields(s), " "))
}

// TopologyHandler returns an http.Handler serving [Connector.Topology] as
// JSON.
func (c *Connector) TopologyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(c.Topology())
	})
}

// Stats are a Connector's counters since it started, from
// [Connector.Stats]. They marshal to JSON; their durations are
// time.Durations, which JSON writes as whole nanoseconds, as in
// [Snapshot].
type Stats struct {
	// Statements counts the statements run, per endpoint (host name) and
	// op ("read", "write", "tx", "lock").
	Statements map[string]map[string]uint64 `json:"statements"`
	// Fallbacks counts the reads that ran on the primary because no
	// replica could serve them, per reason ("behind", "unhealthy", ...).
	Fallbacks map[Reason]uint64 `json:"fallbacks"`
	// RouteErrors counts the statements that could not run, per reason,
	// and those whose primary was lost before it answered ("primary-lost":
	// their outcome is unknown).
	RouteErrors map[Reason]uint64 `json:"routeErrors"`
	// ReadOnlyRetries counts the statements a replica refused with SQLSTATE
	// 25006 and that ran again on the primary.
	ReadOnlyRetries uint64 `json:"readOnlyRetries"`
	// ReplicaRetries counts the reads that ran elsewhere after their
	// replica's connection failed.
	ReplicaRetries uint64 `json:"replicaRetries"`
	// Failovers counts the changes of primary seen (epochs after the
	// first).
	Failovers uint64 `json:"failovers"`
	// TimelineResets counts the read-your-writes positions (the
	// connector's or a Session's) written on an older timeline than the
	// primary's: such a write may have been lost in the failover, so
	// pgrouted stopped claiming read-your-writes for it (see
	// Config.Logger, which says so).
	TimelineResets uint64 `json:"timelineResets"`
	// LostWrites counts the read-your-writes positions (the connector's or
	// a Session's) found past the point where the new primary's timeline
	// history left theirs: writes acknowledged before a failover that the
	// new primary does not have. Each position (system, timeline, LSN)
	// counts and is logged once, however often a token replays it (of the
	// last 256 positions found lost); the RouteEvent of every read that
	// finds it says so (WriteLost). Telling needs the
	// timeline history file (see package topology); without it such a
	// write counts in TimelineResets.
	LostWrites uint64 `json:"lostWrites"`
	// ForgedTokens counts the Sessions restored from tokens
	// (UnmarshalText; signed ones too) whose position the primary had not
	// written when a read asked it (a forged token): past its position on
	// its timeline, on a later timeline than the primary's, or of another
	// cluster (system identifier). The read ran as one without a token
	// would, and the Session forgot it (and called its IgnoreForeign
	// callback). Asking is one of PositionFetches, shared with the other
	// reads that wait for one; a token of another cluster than the one the
	// process probes is told without asking.
	ForgedTokens uint64 `json:"forgedTokens"`
	// ProcessScopeReads counts the reads without a Session that ran on the
	// primary, or waited on a replica, because the replicas lacked the
	// Connector's latest writes to what they read: writes of any request
	// of the process. Per-request Sessions (WithSession, package
	// pgroutedhttp's middleware, module pgroutedgrpc's interceptors) scope
	// a read to its own request's writes; when most reads count here, the
	// log says so once.
	ProcessScopeReads uint64 `json:"processScopeReads"`
	// FunctionRouted counts the statements that ran on the primary because
	// of a function they call (ReasonVolatileFunction,
	// ReasonUnknownFunction, ReasonWriteFunction), of user code they run
	// without calling it by name (ReasonHiddenCode) or because a replica
	// refused the same text before (ReasonRefused).
	FunctionRouted uint64 `json:"functionRouted"`
	// FunctionPins counts the connections pinned to the primary by such a
	// statement: from then on they serve every read from the primary,
	// until database/sql closes them.
	FunctionPins uint64 `json:"functionPins"`
	// CatalogReads counts the reads of the function catalog: at start,
	// after a statement that may change it (CREATE, ALTER, DROP, DO,
	// CALL) and after a change of primary (several requests while one read
	// is pending make one read), and every 30 s. Each is one query on a
	// connection of the primary's pool.
	CatalogReads uint64 `json:"catalogReads"`

	// ReplicaWaits counts the reads that waited on a replica for it to
	// replay the caller's writes (pgrouted_replica_wait, WithReplicaWait);
	// ReplicaWaitTime is the total time they waited, each measured from
	// sending the wait to its answer (one round trip included); and
	// ReplicaWaitTimeouts counts those that ended without the position
	// (the read then ran where it would have without a wait).
	// ReplicaWaitsSkipped counts the reads that did not wait on their
	// replica because its replay pace said it would not reach their
	// position within the wait (stalled, or too slow): they checked it
	// without waiting and went elsewhere at once (docs/consistency.md).
	ReplicaWaits        uint64        `json:"replicaWaits"`
	ReplicaWaitTime     time.Duration `json:"replicaWaitTime"`
	ReplicaWaitTimeouts uint64        `json:"replicaWaitTimeouts"`
	ReplicaWaitsSkipped uint64        `json:"replicaWaitsSkipped"`

	// PositionFetches counts the reads of the primary's WAL position made
	// for global consistency, for reads after a write whose position
	// was deferred, and for Sessions' tokens past the last position of
	// the primary known (ForgedTokens) (one query each, on a connection of the primary's
	// pool), PositionFetchErrors those that failed, GlobalReads the global
	// reads they served and DeferredPositionReads the others: concurrent
	// reads share one fetch, so PositionFetches/(GlobalReads +
	// DeferredPositionReads) is the primary's cost per read. A write
	// without a Session does not read its position after its commit: the
	// first read that needs it does (see [WithSession]), unless such reads
	// lately served too few reads to pay for themselves
	// ([ReasonDeferred]).
	// GlobalWaitTime is the total time reads waited for these positions
	// (for a global read: RouteEvent.GlobalWait). PositionsShared counts the
	// positions pgrouted read anyway (after a write's commit or a COMMIT,
	// by a probe of the primary), sent after every read of a waiting round
	// began, that served that round in place of its fetch: each one spared
	// a fetch, or answered a fetch in flight early.
	PositionFetches       uint64        `json:"positionFetches"`
	PositionFetchErrors   uint64        `json:"positionFetchErrors"`
	GlobalReads           uint64        `json:"globalReads"`
	DeferredPositionReads uint64        `json:"deferredPositionReads"`
	GlobalWaitTime        time.Duration `json:"globalWaitTime"`
	PositionsShared       uint64        `json:"positionsShared"`

	// PrimaryReadWaits counts the fallback reads (reads no replica could
	// serve) that found pgrouted_primary_read_limit reached and waited
	// for a slot on the primary or a replica; those whose wait ran out
	// are RouteErrors["primary-busy"]. PrimaryReadsPeak is the most
	// fallback reads the primary ran at once (0 without a limit: they are
	// not counted then).
	PrimaryReadWaits uint64 `json:"primaryReadWaits"`
	PrimaryReadsPeak int64  `json:"primaryReadsPeak"`
}

// opNames are the ops counted per host, and reasonNames the reasons
// counted in Stats.Fallbacks and Stats.RouteErrors; opIndex and
// reasonIndex find one's counter.
var (
	opNames     = [...]string{OpRead, OpWrite, OpTx, OpLock}
	reasonNames = [...]Reason{ReasonNoReplicas, ReasonUnhealthy, ReasonBehind, ReasonSaturated, ReasonPositionUnknown, ReasonReplicaFailed, ReasonCatchingUp, ReasonDeferred, ReasonRetry25006, ReasonWriteOnReplica, ReasonNoPrimary, ReasonPrimaryLost, ReasonPrimaryBusy}
)

const numReasons = len(reasonNames)

func opIndex(op string) int {
	for i, o := range opNames {
		if o == op {
			return i
		}
	}
	return 1
}

func reasonIndex(reason Reason) int {
	for i, r := range reasonNames {
		if r == reason {
			return i
		}
	}
	return -1
}

// counters are the lock-free counters behind Stats, beside each host's
// statement counters.
type counters struct {
	fallbacks [numReasons]atomic.Uint64
	errors    [numReasons]atomic.Uint64
	retries   atomic.Uint64
	refusals  atomic.Uint64 // reads a replica refused (25006) that ran on the primary

	timelineResets atomic.Uint64
	lostWrites     atomic.Uint64
	deferredReads  atomic.Uint64 // reads that read a deferred write's position (position.go)

	catalogRouted atomic.Uint64 // statements sent to the primary by a function verdict
	functionPins  atomic.Uint64 // connections pinned by a function verdict or a refused read

	wait waitCounters // the replica wait (replicawait.go)
}

// count records one reported statement (see Connector.report).
func (c *Connector) count(p *plan, o outcome, err error) {
	k := &c.counters
	if o.replicaFailed {
		k.retries.Add(1)
	}
	switch p.reason {
	case ReasonVolatileFunction, ReasonUnknownFunction, ReasonWriteFunction, ReasonHiddenCode, ReasonRefused:
		k.catalogRouted.Add(1)
	}
	if err != nil && c.countRouteError(err) {
		return
	}
	if o.ran == nil {
		return
	}
	o.ran.statements[opIndex(p.op)].Add(1)
	switch {
	case p.op != OpRead || !o.primary:
	case p.reason == ReasonRetry25006:
		k.refusals.Add(1)
	default:
		if i := reasonIndex(p.reason); i >= 0 {
			k.fallbacks[i].Add(1)
		}
	}
	if p.op == OpRead && !p.in.Session && p.in.Level.Marks() {
		c.noteProcessScope(p, o)
	}
}

// countRouteError counts err when it is a RouteError, and reports whether
// it is one. Apart from count, so that a statement without an error does
// not allocate the target errors.As needs.
func (c *Connector) countRouteError(err error) bool {
	var re *RouteError
	if !asRouteError(err, &re) {
		return false
	}
	if i := reasonIndex(re.Reason); i >= 0 {
		c.counters.errors[i].Add(1)
	}
	return true
}

// Stats returns the Connector's counters.
func (c *Connector) Stats() Stats {
	k := &c.counters
	deferred := k.deferredReads.Load()
	st := Stats{
		Statements:      map[string]map[string]uint64{},
		Fallbacks:       map[Reason]uint64{},
		RouteErrors:     map[Reason]uint64{},
		ReadOnlyRetries: k.refusals.Load(),
		FunctionRouted:  k.catalogRouted.Load(),
		FunctionPins:    k.functionPins.Load(),
		CatalogReads:    c.funcs.loads.Load(),
		ReplicaRetries:  k.retries.Load(),
		TimelineResets:  k.timelineResets.Load(),
		LostWrites:      k.lostWrites.Load(),
		ForgedTokens:    c.rw.forged.Load(),

		ProcessScopeReads: c.rw.scope.blocked.Load(),

		ReplicaWaits:        k.wait.waits.Load(),
		ReplicaWaitTime:     time.Duration(k.wait.nanos.Load()),
		ReplicaWaitTimeouts: k.wait.timeouts.Load(),
		ReplicaWaitsSkipped: k.wait.skipped.Load(),

		PositionFetches:       c.rw.index.Fetches(),
		PositionFetchErrors:   c.rw.index.Failed(),
		DeferredPositionReads: deferred,
		GlobalReads:           c.rw.index.Served() - deferred, // Served counts both, each before deferredReads
		GlobalWaitTime:        c.rw.index.Waited(),
		PositionsShared:       c.rw.index.Shared(),

		PrimaryReadWaits: c.reads.waits.Load(),
		PrimaryReadsPeak: c.reads.peak.Load(),
	}
	if e := c.top.Snapshot().Epoch; e > 1 {
		st.Failovers = e - 1
	}
	c.addStatements(st.Statements)
	for i, r := range reasonNames {
		if n := k.fallbacks[i].Load(); n > 0 {
			st.Fallbacks[r] = n
		}
		if n := k.errors[i].Load(); n > 0 {
			st.RouteErrors[r] = n
		}
	}
	return st
}

// addStatements adds to byHost (Stats.Statements) the statements run on
// each host, by the host's name and op; ops that ran none are left out.
func (c *Connector) addStatements(byHost map[string]map[string]uint64) {
	for _, h := range c.hosts.all() {
		m := map[string]uint64{}
		for j, op := range opNames {
			if n := h.statements[j].Load(); n > 0 {
				m[op] = n
			}
		}
		if prev, ok := byHost[h.Name]; ok {
			// A discovered host that left and came back: one name.
			for op, n := range m {
				prev[op] += n
			}
			continue
		}
		byHost[h.Name] = m
	}
}
