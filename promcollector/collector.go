package promcollector

import (
	"maps"
	"slices"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/dsn"
	"github.com/prometheus/client_golang/prometheus"
)

// Source is what a [Collector] reads: *pgrouted.Connector implements it.
type Source interface {
	Stats() pgrouted.Stats
	Topology() pgrouted.Snapshot
}

var _ Source = (*pgrouted.Connector)(nil)

// PoolSource is a Source that also gives its pools' figures, as
// *pgrouted.Pool does ([pgrouted.Pool.Stat]). A Collector over one exports
// the primary sessions' pool (HostPool.Primary) too, as the
// pgrouted_primary_pool_ series; the replica pools' figures come from the
// Topology, whatever the Source.
type PoolSource interface {
	Source
	Stat() []pgrouted.HostPool
}

var _ PoolSource = (*pgrouted.Pool)(nil)

// Option configures a [Collector].
type Option func(*options)

type options struct {
	constLabels prometheus.Labels
}

// ConstLabels adds labels with fixed values to every metric, to tell apart
// several Connectors registered in one registry.
func ConstLabels(l prometheus.Labels) Option {
	return func(o *options) { o.constLabels = l }
}

// Collector is a prometheus.Collector over a Connector's Stats and Topology.
// Build it with [New]; it is safe for concurrent scrapes.
type Collector struct {
	src Source

	statements, fallbacks, routeErrors, readOnlyRetries, replicaRetries    *prometheus.Desc
	failovers, conflicts, timelineResets, lostWrites, epoch, lease         *prometheus.Desc
	functionRouted, functionPins, processScopeReads, forgedTokens          *prometheus.Desc
	role, current, healthy, circuitOpen, rtt, lagBytes, lagBound, inflight *prometheus.Desc
	timeline, syncState, pooler, backendSwitched, discovered, untrusted    *prometheus.Desc
	budgetState, budgetChanges                                             *prometheus.Desc

	// The pools: each host's replica pool (from the Topology) and, from a
	// PoolSource, the primary sessions (Pool.Stat's Primary).
	replicaPool, primaryPool poolDescs

	// The topology provider's (pgrouted_topology=patroni, Config.Provider):
	// exported only when there is one.
	provider, providerUp, providerLease, leaderTimeline, noReads                *prometheus.Desc
	replicaWaits, replicaWaitSeconds, replicaWaitTimeouts                       *prometheus.Desc
	positionFetches, positionFetchErrors, globalReads, deferredReads, posShared *prometheus.Desc
	globalWaitSeconds                                                           *prometheus.Desc
	replicaWaitsSkipped, catalogReads, primaryReadWaits, primaryReadsPeak       *prometheus.Desc
}

// poolDescs are the series of one kind of pool: every figure of
// pgrouted.PoolInfo but TotalConns, the sum of the connections' states.
type poolDescs struct {
	conns, max, acquires, acquireSeconds, canceledAcquires, emptyAcquires *prometheus.Desc
	emptyWaitSeconds, newConns, lifetimeDestroys, idleDestroys            *prometheus.Desc
}

func (p *poolDescs) all() []*prometheus.Desc {
	return []*prometheus.Desc{p.conns, p.max, p.acquires, p.acquireSeconds, p.canceledAcquires, p.emptyAcquires,
		p.emptyWaitSeconds, p.newConns, p.lifetimeDestroys, p.idleDestroys}
}

// newPoolDescs returns the series named pgrouted_<kind>_pool_…, the pool
// described as whose in their help.
func newPoolDescs(d func(name, help string, labels ...string) *prometheus.Desc, kind, whose, maxHelp string) poolDescs {
	n := kind + "_pool_"
	return poolDescs{
		conns:            d(n+"connections", "Connections of "+whose+", per state (idle, acquired, constructing).", "endpoint", "state"),
		max:              d(n+"max_connections", maxHelp, "endpoint"),
		acquires:         d(n+"acquires_total", "Successful acquires of a connection of "+whose+".", "endpoint"),
		acquireSeconds:   d(n+"acquire_seconds_total", "Total time of the successful acquires of a connection of "+whose+".", "endpoint"),
		canceledAcquires: d(n+"canceled_acquires_total", "Acquires of a connection of "+whose+" canceled by their context.", "endpoint"),
		emptyAcquires:    d(n+"empty_acquires_total", "Successful acquires of a connection of "+whose+" that waited for one because none was idle.", "endpoint"),
		emptyWaitSeconds: d(n+"empty_acquire_wait_seconds_total", "Total time the acquires of a connection of "+whose+" waited because none was idle.", "endpoint"),
		newConns:         d(n+"new_connections_total", "Connections "+whose+" opened.", "endpoint"),
		lifetimeDestroys: d(n+"max_lifetime_destroys_total", "Connections of "+whose+" closed past their lifetime.", "endpoint"),
		idleDestroys:     d(n+"max_idle_destroys_total", "Connections of "+whose+" closed idle past their idle time.", "endpoint"),
	}
}

var _ prometheus.Collector = (*Collector)(nil)

// ops are the statement kinds exported for every endpoint.
var ops = []string{pgrouted.OpRead, pgrouted.OpWrite, pgrouted.OpTx, pgrouted.OpLock}

// fallbackReasons are the reasons a read runs on the primary, exported at 0
// before they happen.
var fallbackReasons = []pgrouted.Reason{
	pgrouted.ReasonNoReplicas, pgrouted.ReasonUnhealthy, pgrouted.ReasonBehind,
	pgrouted.ReasonSaturated, pgrouted.ReasonPositionUnknown, pgrouted.ReasonReplicaFailed, pgrouted.ReasonCatchingUp,
	pgrouted.ReasonDeferred,
}

// errorReasons are the reasons a statement cannot run, exported at 0 before
// they happen.
var errorReasons = append(append([]pgrouted.Reason(nil), fallbackReasons[:5]...), pgrouted.ReasonWriteOnReplica, pgrouted.ReasonNoPrimary, pgrouted.ReasonPrimaryLost, pgrouted.ReasonPrimaryBusy)

// roles are the values of HostInfo.Role, budgetStates those of
// HostInfo.Budget and syncStates PostgreSQL's sync_state values
// (HostInfo.SyncState).
var (
	roles        = []string{"primary", "standby", "unknown"}
	budgetStates = []string{"in", "out", "ramp"}
	syncStates   = []string{"async", "potential", "quorum", "sync"}
)

// New returns a Collector over src, usually a *pgrouted.Connector. Register
// it with prometheus.MustRegister or a prometheus.Registry.
func New(src Source, opts ...Option) *Collector {
	var o options
	for _, f := range opts {
		f(&o)
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("pgrouted_"+name, help, labels, o.constLabels)
	}
	return &Collector{
		src:               src,
		statements:        d("statements_total", "Statements run, per endpoint (host name) and op (read, write, tx, lock).", "endpoint", "op"),
		fallbacks:         d("fallbacks_total", "Reads that ran on the primary because no replica could serve them, per reason.", "reason"),
		routeErrors:       d("route_errors_total", "Statements that could not run (no replica, no primary, write forced to a replica), per reason.", "reason"),
		readOnlyRetries:   d("read_only_retries_total", "Statements a replica refused with SQLSTATE 25006 (read_only_sql_transaction) that ran again on the primary."),
		replicaRetries:    d("replica_retries_total", "Reads that ran on another host after their replica's connection failed before any row."),
		failovers:         d("failovers_total", "Changes of primary seen (primary epochs after the first)."),
		conflicts:         d("conflicting_primaries_total", "Observations of two or more hosts out of recovery with no strictly higher timeline among them (no primary: fail closed)."),
		functionRouted:    d("function_routed_total", "Statements sent to the primary because of a function they call (VOLATILE, unknown to the catalog, or listed in pgrouted_write_functions) or because a replica refused the same text before."),
		functionPins:      d("function_pins_total", "Connections pinned to the primary by such a statement: they serve every read from the primary until database/sql closes them."),
		processScopeReads: d("process_scope_reads_total", "Reads without a Session that ran on the primary, or waited on a replica, because the replicas lacked the process's latest writes (of any request) to what they read: per-request Sessions scope reads to their own writes."),
		forgedTokens:      d("forged_tokens_total", "Session tokens whose position the primary had not written (past its position, on a later timeline, of another cluster): their reads ran as reads without a token."),
		lostWrites:        d("lost_writes_total", "Read-your-writes positions found past the point where the new primary's timeline history left theirs: writes the old primary acknowledged and a failover lost."),
		timelineResets:    d("timeline_resets_total", "Read-your-writes positions given up because they were written on a timeline older than the primary's (a failover may have lost them): reads went to the primary until a position on the new timeline was known."),
		epoch:             d("primary_epoch", "Primary epoch: increments each time the primary becomes another host."),
		lease:             d("primary_lease_remaining_seconds", "How long the current primary stays trusted without a new successful probe; 0 when there is no trusted primary."),
		role:              d("role", "1 for the role the host's last successful probe saw (primary, standby, unknown), 0 for the others; see pgrouted_healthy.", "endpoint", "role"),
		current:           d("current_primary", "1 for the host writes go to now (the primary with a valid lease), 0 for the others.", "endpoint"),
		healthy:           d("healthy", "1 when the host's last probe succeeded, else 0.", "endpoint"),
		circuitOpen:       d("circuit_open", "1 while the host's circuit breaker is open (no statement is sent to it), else 0.", "endpoint"),
		rtt:               d("probe_rtt_seconds", "Exponentially weighted moving average of the host's probe round trip; absent while unknown.", "endpoint"),
		lagBytes:          d("replica_lag_bytes", "WAL bytes a standby has yet to replay to reach the primary's last probed position; absent while unknown.", "endpoint"),
		lagBound:          d("replica_lag_bound_seconds", "Upper bound on a standby's staleness, from the primary's WAL position history (no clock synchronisation needed); absent while unknown.", "endpoint"),
		inflight:          d("inflight_reads", "Reads running on the host now through this Connector.", "endpoint"),
		provider:          d("topology_provider_info", "1, labelled with the topology provider (patroni, manual, ...) and the endpoint of its last answer (password redacted).", "provider", "source"),
		providerUp:        d("topology_provider_up", "1 when the topology provider's last request was answered, else 0.", "provider"),
		providerLease:     d("topology_provider_lease_remaining_seconds", "How long the topology provider's last answer stays authoritative; 0 once pgrouted_lease passed without one (no primary: writes wait, then fail).", "provider"),
		leaderTimeline:    d("topology_provider_leader_timeline", "The timeline of the leader the topology provider names, as it reports it; absent while it names none.", "provider"),
		noReads:           d("topology_provider_no_reads", "1 when the topology provider lets the host serve no reads (not listed, not running or streaming, or tagged noloadbalance), else 0.", "endpoint"),

		replicaWaits:        d("replica_waits_total", "Reads that waited on a replica for it to replay the caller's writes (pgrouted_replica_wait)."),
		replicaWaitSeconds:  d("replica_wait_seconds_total", "Total time reads waited on replicas for their replay (one round trip included per wait)."),
		replicaWaitTimeouts: d("replica_wait_timeouts_total", "Replica waits that ended without the caller's position: the read ran where it would have without a wait."),

		positionFetches:     d("position_fetches_total", "Reads of the primary's WAL position for global consistency and for reads after writes without a Session, one query each; concurrent reads share one."),
		positionFetchErrors: d("position_fetch_errors_total", "Position fetches that failed: their reads ran where a read of unknown position runs (the primary)."),
		globalReads:         d("global_reads_total", "Reads served a primary position read after they began (global consistency)."),
		deferredReads:       d("deferred_position_reads_total", "Reads after writes without a Session that read those writes' position (one position read serves every write before it)."),
		globalWaitSeconds:   d("global_wait_seconds_total", "Total time global reads waited for their primary position."),
		posShared:           d("positions_shared_total", "Positions of the primary read anyway (after a write's commit or a COMMIT, by a probe) that served waiting global reads in place of a fetch."),
		replicaWaitsSkipped: d("replica_waits_skipped_total", "Reads that did not wait on their replica because its replay pace said it would not reach their position within the wait: they went elsewhere at once."),
		catalogReads:        d("catalog_reads_total", "Reads of the function catalog (at start, after a statement that may change it, after a change of primary, every 30 s)."),
		primaryReadWaits:    d("primary_read_waits_total", "Fallback reads that found pgrouted_primary_read_limit reached and waited for a slot on the primary or a replica (those whose wait ran out are route errors of reason primary-busy)."),
		primaryReadsPeak:    d("primary_reads_peak", "The most fallback reads the primary ran at once under pgrouted_primary_read_limit (0 without a limit)."),

		timeline:        d("timeline", "The timeline the host writes or replays; absent while unknown.", "endpoint"),
		syncState:       d("sync_state", "1 for a standby's sync_state on the primary (async, potential, quorum, sync), 0 for the others; absent while unknown.", "endpoint", "state"),
		pooler:          d("pooler", "1 when the host's probes run through a connection pooler (PgBouncer) in front of it, else 0.", "endpoint"),
		backendSwitched: d("pooler_backend_switched", "1 when the host's probe connection met two server processes (the pooler hands out server sessions per transaction), else 0.", "endpoint"),
		discovered:      d("discovered", "1 for a host the topology provider reported that the DSN does not name (pgrouted_discover), else 0.", "endpoint"),
		untrusted:       d("untrusted", "1 while a discovered host serves nothing because its probe has not shown it a standby of the DSN hosts' system, else 0.", "endpoint"),
		budgetState:     d("budget_state", "1 for a standby's state against the staleness budget (in; out: beyond it, not yet back under the return threshold; ramp: back, its share of the reads growing), 0 for the others; standbys only.", "endpoint", "state"),
		budgetChanges:   d("budget_changes_total", "Times the host, a standby, left the staleness budget or came back within it.", "endpoint"),
		replicaPool: newPoolDescs(d, "replica", "the host's replica pool",
			"Size of the host's replica pool."),
		primaryPool: newPoolDescs(d, "primary", "the primary sessions (Pool.Stat's Primary, on the primary's endpoint)",
			"The most primary sessions open at once (pool_max_conns); absent without a cap."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.statements, c.fallbacks, c.routeErrors, c.readOnlyRetries, c.replicaRetries,
		c.failovers, c.conflicts, c.timelineResets, c.lostWrites, c.epoch, c.lease,
		c.functionRouted, c.functionPins, c.processScopeReads, c.forgedTokens,
		c.role, c.current, c.healthy, c.circuitOpen, c.rtt, c.lagBytes, c.lagBound, c.inflight,
		c.timeline, c.syncState, c.pooler, c.backendSwitched, c.discovered, c.untrusted,
		c.budgetState, c.budgetChanges,
		c.provider, c.providerUp, c.providerLease, c.leaderTimeline, c.noReads,
		c.replicaWaits, c.replicaWaitSeconds, c.replicaWaitTimeouts,
		c.positionFetches, c.positionFetchErrors, c.globalReads, c.deferredReads, c.globalWaitSeconds, c.posShared,
		c.replicaWaitsSkipped, c.catalogReads, c.primaryReadWaits, c.primaryReadsPeak,
	} {
		ch <- d
	}
	for _, d := range c.replicaPool.all() {
		ch <- d
	}
	if _, ok := c.src.(PoolSource); ok {
		for _, d := range c.primaryPool.all() {
			ch <- d
		}
	}
}

// Collect implements prometheus.Collector. It reads the Source's Stats and
// Topology once. Every label value goes through dsn.Printable, the one
// function through which pgrouted prints a host or member name: a byte
// that is not UTF-8 or a control or format character (a direction
// override) in a name is written as an escape (east\xff, \u202etsae). It
// never panics: a series that still cannot be exported is sent as an
// invalid metric, which the registry's Gather reports as an error naming
// the metric, and every other series is exported as usual.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Stats()
	top := c.src.Topology()
	send := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		for i, l := range labels {
			labels[i] = dsn.Printable(l)
		}
		m, err := prometheus.NewConstMetric(d, t, v, labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(d, err)
		}
		ch <- m
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		send(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		send(d, prometheus.GaugeValue, v, labels...)
	}

	// Statements: every host of the topology with every op, and any other
	// endpoint Stats names.
	endpoints := make([]string, 0, len(top.Hosts))
	seen := map[string]bool{}
	for _, h := range top.Hosts {
		if !seen[h.Name] {
			seen[h.Name] = true
			endpoints = append(endpoints, h.Name)
		}
	}
	for _, e := range sortedKeys(st.Statements) {
		if !seen[e] {
			seen[e] = true
			endpoints = append(endpoints, e)
		}
	}
	for _, e := range endpoints {
		byOp := st.Statements[e]
		for _, op := range withExtra(ops, byOp) {
			counter(c.statements, byOp[op], e, op)
		}
	}
	for _, r := range withExtra(fallbackReasons, st.Fallbacks) {
		counter(c.fallbacks, st.Fallbacks[r], string(r))
	}
	for _, r := range withExtra(errorReasons, st.RouteErrors) {
		counter(c.routeErrors, st.RouteErrors[r], string(r))
	}
	counter(c.readOnlyRetries, st.ReadOnlyRetries)
	counter(c.replicaRetries, st.ReplicaRetries)
	counter(c.failovers, st.Failovers)
	counter(c.conflicts, top.ConflictingPrimaries)
	counter(c.timelineResets, st.TimelineResets)
	counter(c.lostWrites, st.LostWrites)
	counter(c.functionRouted, st.FunctionRouted)
	counter(c.functionPins, st.FunctionPins)
	counter(c.processScopeReads, st.ProcessScopeReads)
	counter(c.forgedTokens, st.ForgedTokens)
	counter(c.replicaWaits, st.ReplicaWaits)
	send(c.replicaWaitSeconds, prometheus.CounterValue, st.ReplicaWaitTime.Seconds())
	counter(c.replicaWaitTimeouts, st.ReplicaWaitTimeouts)
	counter(c.positionFetches, st.PositionFetches)
	counter(c.positionFetchErrors, st.PositionFetchErrors)
	counter(c.globalReads, st.GlobalReads)
	counter(c.deferredReads, st.DeferredPositionReads)
	send(c.globalWaitSeconds, prometheus.CounterValue, st.GlobalWaitTime.Seconds())
	counter(c.posShared, st.PositionsShared)
	counter(c.replicaWaitsSkipped, st.ReplicaWaitsSkipped)
	counter(c.catalogReads, st.CatalogReads)
	counter(c.primaryReadWaits, st.PrimaryReadWaits)
	gauge(c.primaryReadsPeak, float64(st.PrimaryReadsPeak))
	gauge(c.epoch, float64(top.Epoch))
	gauge(c.lease, top.LeaseRemaining.Seconds())

	for _, h := range top.Hosts {
		for _, r := range withExtra(roles, map[string]uint64{h.Role: 1}) {
			gauge(c.role, boolf(h.Role == r), h.Name, r)
		}
		gauge(c.current, boolf(top.Primary != "" && h.Name == top.Primary), h.Name)
		gauge(c.healthy, boolf(h.Healthy), h.Name)
		gauge(c.circuitOpen, boolf(h.Circuit == "open"), h.Name)
		if h.RTT > 0 {
			gauge(c.rtt, h.RTT.Seconds(), h.Name)
		}
		if h.ByteLag != nil {
			gauge(c.lagBytes, float64(*h.ByteLag), h.Name)
		}
		if h.LagBound != nil {
			gauge(c.lagBound, h.LagBound.Seconds(), h.Name)
		}
		gauge(c.inflight, float64(h.InflightReads), h.Name)
		if h.Timeline != 0 {
			gauge(c.timeline, float64(h.Timeline), h.Name)
		}
		if h.SyncState != "" {
			for _, s := range withExtra(syncStates, map[string]uint64{h.SyncState: 1}) {
				gauge(c.syncState, boolf(h.SyncState == s), h.Name, s)
			}
		}
		gauge(c.pooler, boolf(h.Pooler), h.Name)
		gauge(c.backendSwitched, boolf(h.BackendSwitched), h.Name)
		gauge(c.discovered, boolf(h.Discovered), h.Name)
		gauge(c.untrusted, boolf(h.Untrusted != ""), h.Name)
		if h.Budget != "" {
			for _, s := range withExtra(budgetStates, map[string]uint64{h.Budget: 1}) {
				gauge(c.budgetState, boolf(h.Budget == s), h.Name, s)
			}
		}
		counter(c.budgetChanges, h.BudgetChanges, h.Name)
		c.pool(send, &c.replicaPool, &h.Pool, h.Name, true)
	}
	if ps, ok := c.src.(PoolSource); ok {
		for _, hp := range ps.Stat() {
			if hp.Primary != nil {
				c.pool(send, &c.primaryPool, hp.Primary, hp.Name, hp.Primary.MaxConns > 0)
			}
		}
	}

	if p := top.Provider; p != nil {
		gauge(c.provider, 1, p.Name, p.Endpoint)
		gauge(c.providerUp, boolf(p.LastError == "" && p.Endpoint != ""), p.Name)
		gauge(c.providerLease, p.LeaseRemaining.Seconds(), p.Name)
		if p.LeaderTimeline != 0 && p.Leader != "" {
			gauge(c.leaderTimeline, float64(p.LeaderTimeline), p.Name)
		}
		for _, h := range top.Hosts {
			gauge(c.noReads, boolf(h.NoReads), h.Name)
		}
	}
}

// pool sends the series of one pool, p, of the endpoint: its size only
// when withMax.
func (c *Collector) pool(send func(*prometheus.Desc, prometheus.ValueType, float64, ...string), d *poolDescs, p *pgrouted.PoolInfo, endpoint string, withMax bool) {
	g, n := prometheus.GaugeValue, prometheus.CounterValue
	send(d.conns, g, float64(p.IdleConns), endpoint, "idle")
	send(d.conns, g, float64(p.AcquiredConns), endpoint, "acquired")
	send(d.conns, g, float64(p.ConstructingConns), endpoint, "constructing")
	if withMax {
		send(d.max, g, float64(p.MaxConns), endpoint)
	}
	send(d.acquires, n, float64(p.AcquireCount), endpoint)
	send(d.acquireSeconds, n, p.AcquireDuration.Seconds(), endpoint)
	send(d.canceledAcquires, n, float64(p.CanceledAcquireCount), endpoint)
	send(d.emptyAcquires, n, float64(p.EmptyAcquireCount), endpoint)
	send(d.emptyWaitSeconds, n, p.EmptyAcquireWaitTime.Seconds(), endpoint)
	send(d.newConns, n, float64(p.NewConnsCount), endpoint)
	send(d.lifetimeDestroys, n, float64(p.MaxLifetimeDestroyCount), endpoint)
	send(d.idleDestroys, n, float64(p.MaxIdleDestroyCount), endpoint)
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// withExtra returns known followed by the keys of m that known lacks,
// sorted, so that every known value is exported and none is lost.
func withExtra[K ~string, V any](known []K, m map[K]V) []K {
	out := known
	extra := false
	for _, k := range sortedKeys(m) {
		if k == "" || slices.Contains(known, k) {
			continue
		}
		if !extra {
			out = append([]K(nil), known...)
			extra = true
		}
		out = append(out, k)
	}
	return out
}

func sortedKeys[K ~string, V any](m map[K]V) []K {
	return slices.Sorted(maps.Keys(m))
}
