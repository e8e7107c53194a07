package otelroute

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/pgrouted/pgrouted"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// Source is what [RegisterMetrics] reads: *pgrouted.Connector implements
// it.
type Source interface {
	Stats() pgrouted.Stats
	Topology() pgrouted.Snapshot
}

var _ Source = (*pgrouted.Connector)(nil)

// PoolSource is a Source that also gives its pools' figures, as
// *pgrouted.Pool does ([pgrouted.Pool.Stat]). Over one, [RegisterMetrics]
// reports the primary sessions' pool (HostPool.Primary) too; the replica
// pools' figures come from the Topology, whatever the Source.
type PoolSource interface {
	Source
	Stat() []pgrouted.HostPool
}

var _ PoolSource = (*pgrouted.Pool)(nil)

// ops, fallbackReasons, errorReasons and roles are reported from the start,
// at 0, as package promcollector does.
var (
	ops             = []string{pgrouted.OpRead, pgrouted.OpWrite, pgrouted.OpTx, pgrouted.OpLock}
	fallbackReasons = []pgrouted.Reason{
		pgrouted.ReasonNoReplicas, pgrouted.ReasonUnhealthy, pgrouted.ReasonBehind,
		pgrouted.ReasonSaturated, pgrouted.ReasonPositionUnknown, pgrouted.ReasonReplicaFailed,
		pgrouted.ReasonCatchingUp, pgrouted.ReasonDeferred,
	}
	errorReasons = []pgrouted.Reason{
		pgrouted.ReasonNoReplicas, pgrouted.ReasonUnhealthy, pgrouted.ReasonBehind,
		pgrouted.ReasonSaturated, pgrouted.ReasonPositionUnknown, pgrouted.ReasonWriteOnReplica, pgrouted.ReasonNoPrimary,
		pgrouted.ReasonPrimaryLost, pgrouted.ReasonPrimaryBusy,
	}
	hostRoles    = []string{"primary", "standby", "unknown"}
	budgetStates = []string{"in", "out", "ramp"}
	syncStates   = []string{"async", "potential", "quorum", "sync"}
)

// AttrHostRole is the role a host's last successful probe saw: primary,
// standby or unknown, on the gauge pgrouted.host.role.
const AttrHostRole = attribute.Key("pgrouted.probe.role")

// AttrBudgetState is a standby's state against the staleness budget (in,
// out, ramp), on the gauge pgrouted.replica.budget_state; AttrSyncState its
// sync_state on the primary (async, potential, quorum, sync), on
// pgrouted.replica.sync_state.
const (
	AttrBudgetState = attribute.Key("pgrouted.budget.state")
	AttrSyncState   = attribute.Key("pgrouted.sync_state")
)

// AttrPool tells a host's two pools apart on the pool metrics: replica
// (the host's replica pool, db.client.connection.pool.name the host's
// name) or primary (the primary sessions, from a [PoolSource], pool name
// the host's name followed by "/primary").
const AttrPool = attribute.Key("pgrouted.pool.kind")

// The replica pools' metrics follow OpenTelemetry's semantic conventions
// for database client connection pools: db.client.connection.count, per
// db.client.connection.state (idle or used), and db.client.connection.max,
// each per db.client.connection.pool.name, the host's name (as
// pgrouted.endpoint, which they carry too).

// RegisterMetrics creates the observable instruments listed in the package
// documentation on the MeterProvider's meter (WithMeterProvider, default the
// global one), all reported by one callback that reads src's Stats and
// Topology once per collection, as package promcollector does per scrape.
// Unregister the returned Registration to stop (before closing the
// Connector, or it goes on reporting its last counts).
func RegisterMetrics(src Source, opts ...Option) (metric.Registration, error) {
	o := newOptions(opts)
	m := o.mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	var (
		err  error
		inst []metric.Observable
	)
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, e := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if e != nil && err == nil {
			err = e
		}
		inst = append(inst, c)
		return c
	}
	updown := func(name, unit, desc string) metric.Int64ObservableUpDownCounter {
		c, e := m.Int64ObservableUpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if e != nil && err == nil {
			err = e
		}
		inst = append(inst, c)
		return c
	}
	seconds := func(name, desc string) metric.Float64ObservableCounter {
		c, e := m.Float64ObservableCounter(name, metric.WithUnit("s"), metric.WithDescription(desc))
		if e != nil && err == nil {
			err = e
		}
		inst = append(inst, c)
		return c
	}
	gauge := func(name, unit, desc string) metric.Float64ObservableGauge {
		g, e := m.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if e != nil && err == nil {
			err = e
		}
		inst = append(inst, g)
		return g
	}
	var (
		statements      = counter("pgrouted.statements", "{statement}", "Statements run, per endpoint (host name) and op (read, write, tx, lock).")
		fallbacks       = counter("pgrouted.fallbacks", "{statement}", "Reads that ran on the primary because no replica could serve them, per reason.")
		routeErrors     = counter("pgrouted.route_errors", "{statement}", "Statements that could not run (no replica, no primary, write forced to a replica), per reason.")
		readOnlyRetries = counter("pgrouted.read_only_retries", "{statement}", "Statements a replica refused with SQLSTATE 25006 (read_only_sql_transaction) that ran again on the primary.")
		replicaRetries  = counter("pgrouted.replica_retries", "{statement}", "Reads that ran on another host after their replica's connection failed before any row.")
		failovers       = counter("pgrouted.failovers", "{failover}", "Changes of primary seen (primary epochs after the first).")
		conflicts       = counter("pgrouted.conflicting_primaries", "{observation}", "Observations of two or more hosts out of recovery with no strictly higher timeline among them (no primary: fail closed).")
		timelineResets  = counter("pgrouted.timeline_resets", "{position}", "Read-your-writes positions given up because they were written on a timeline older than the primary's.")
		lostWrites      = counter("pgrouted.lost_writes", "{write}", "Read-your-writes positions found past the point where the new primary's timeline history left theirs: writes the old primary acknowledged and a failover lost.")
		functionRouted  = counter("pgrouted.function_routed", "{statement}", "Statements sent to the primary because of a function they call, or because a replica refused the same text before.")
		functionPins    = counter("pgrouted.function_pins", "{connection}", "Connections pinned to the primary by such a statement.")
		catalogReads    = counter("pgrouted.catalog_reads", "{read}", "Reads of the function catalog.")
		replicaWaits    = counter("pgrouted.replica_waits", "{read}", "Reads that waited on a replica for it to replay the caller's writes (pgrouted_replica_wait).")
		waitTimeouts    = counter("pgrouted.replica_wait_timeouts", "{read}", "Replica waits that ended without the caller's position: the read ran where it would have without a wait.")
		posFetches      = counter("pgrouted.position_fetches", "{fetch}", "Reads of the primary's WAL position for global consistency and for reads after writes without a Session, one query each; concurrent reads share one.")
		posFetchErrors  = counter("pgrouted.position_fetch_errors", "{fetch}", "Position fetches that failed: their reads ran where a read of unknown position runs (the primary).")
		globalReads     = counter("pgrouted.global_reads", "{read}", "Reads served a primary position read after they began (global consistency).")
		deferredReads   = counter("pgrouted.deferred_position_reads", "{read}", "Reads after writes without a Session that read those writes' position.")
		forgedTokens    = counter("pgrouted.forged_tokens", "{session}", "Session tokens restored without a signature whose position the primary had not written: their reads ran as reads without a token.")
		scopeReads      = counter("pgrouted.process_scope_reads", "{read}", "Reads without a Session that ran on the primary, or waited on a replica, because the replicas lacked the process's latest writes (of any request) to what they read.")
		posShared       = counter("pgrouted.positions_shared", "{position}", "Positions read anyway (after a write's commit, by a probe) that served waiting global reads in place of a fetch.")
		waitsSkipped    = counter("pgrouted.replica_waits_skipped", "{read}", "Reads that did not wait on their replica because its replay pace said it would not reach their position within the wait: they went elsewhere at once.")
		waitTime        = seconds("pgrouted.replica_wait_time", "Total time reads waited on replicas for their replay (one round trip included per wait).")
		globalWaitTime  = seconds("pgrouted.global_wait_time", "Total time global reads waited for their primary position.")
		primaryWaits    = counter("pgrouted.primary_read_waits", "{read}", "Fallback reads that found pgrouted_primary_read_limit reached and waited for a slot on the primary or a replica (those whose wait ran out are route errors of reason primary-busy).")
		budgetChanges   = counter("pgrouted.replica.budget_changes", "{change}", "Times the host, a standby, left the staleness budget or came back within it.")

		epoch     = gauge("pgrouted.primary.epoch", "1", "Primary epoch: increments each time the primary becomes another host.")
		lease     = gauge("pgrouted.primary.lease_remaining", "s", "How long the current primary stays trusted without a new successful probe; 0 when there is no trusted primary.")
		hostRole  = gauge("pgrouted.host.role", "1", "1 for the role the host's last successful probe saw (primary, standby, unknown), 0 for the others.")
		current   = gauge("pgrouted.host.current_primary", "1", "1 for the host writes go to now (the primary with a valid lease), 0 for the others.")
		healthy   = gauge("pgrouted.host.healthy", "1", "1 when the host's last probe succeeded, else 0.")
		circuit   = gauge("pgrouted.host.circuit_open", "1", "1 while the host's circuit breaker is open (no statement is sent to it), else 0.")
		rtt       = gauge("pgrouted.host.probe_rtt", "s", "Exponentially weighted moving average of the host's probe round trip; absent while unknown.")
		lagBytes  = gauge("pgrouted.replica.lag", "By", "WAL bytes a standby has yet to replay to reach the primary's last probed position; absent while unknown.")
		lagBound  = gauge("pgrouted.replica.lag_bound", "s", "Upper bound on a standby's staleness, from the primary's WAL position history (no clock synchronisation needed); absent while unknown.")
		inflight  = gauge("pgrouted.host.inflight_reads", "{read}", "Reads running on the host now through this Connector.")
		poolConns = updown("db.client.connection.count", "{connection}", "Connections of the pool (a host's replica pool, or the primary sessions), per state (idle, used).")
		poolMax   = updown("db.client.connection.max", "{connection}", "Size of the pool: the most connections it opens (the primary sessions' only under pool_max_conns).")

		readsPeak       = gauge("pgrouted.primary.reads_peak", "{read}", "The most fallback reads the primary ran at once under pgrouted_primary_read_limit (0 without a limit).")
		timeline        = gauge("pgrouted.host.timeline", "1", "The timeline the host writes or replays; absent while unknown.")
		syncState       = gauge("pgrouted.replica.sync_state", "1", "1 for a standby's sync_state on the primary (async, potential, quorum, sync), 0 for the others; absent while unknown.")
		pooler          = gauge("pgrouted.host.pooler", "1", "1 when the host's probes run through a connection pooler (PgBouncer) in front of it, else 0.")
		backendSwitched = gauge("pgrouted.host.pooler_backend_switched", "1", "1 when the host's probe connection met two server processes (the pooler hands out server sessions per transaction), else 0.")
		discovered      = gauge("pgrouted.host.discovered", "1", "1 for a host the topology provider reported that the DSN does not name (pgrouted_discover), else 0.")
		untrusted       = gauge("pgrouted.host.untrusted", "1", "1 while a discovered host serves nothing because its probe has not shown it a standby of the DSN hosts' system, else 0.")
		budgetState     = gauge("pgrouted.replica.budget_state", "1", "1 for a standby's state against the staleness budget (in; out: beyond it, not yet back under the return threshold; ramp: back, its share of the reads growing), 0 for the others; standbys only.")
		noReads         = gauge("pgrouted.host.no_reads", "1", "1 when the topology provider lets the host serve no reads (not listed, not running or streaming, or tagged noloadbalance), else 0; only with a provider.")

		poolConstructing = updown("pgrouted.pool.constructing_connections", "{connection}", "Connections of the pool being opened now.")
		poolAcquires     = counter("pgrouted.pool.acquires", "{acquire}", "Successful acquires of a connection of the pool.")
		poolAcquireTime  = seconds("pgrouted.pool.acquire_time", "Total time of the successful acquires of a connection of the pool.")
		poolCanceled     = counter("pgrouted.pool.canceled_acquires", "{acquire}", "Acquires of a connection of the pool canceled by their context.")
		poolEmpty        = counter("pgrouted.pool.empty_acquires", "{acquire}", "Successful acquires that waited for a connection of the pool because none was idle.")
		poolEmptyWait    = seconds("pgrouted.pool.empty_acquire_wait_time", "Total time the acquires of a connection of the pool waited because none was idle.")
		poolNew          = counter("pgrouted.pool.new_connections", "{connection}", "Connections the pool opened.")
		poolLifetime     = counter("pgrouted.pool.max_lifetime_destroys", "{connection}", "Connections of the pool closed past their lifetime.")
		poolIdle         = counter("pgrouted.pool.max_idle_destroys", "{connection}", "Connections of the pool closed idle past their idle time.")
	)
	if err != nil {
		return nil, err
	}
	return m.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		st := src.Stats()
		top := src.Topology()
		count := func(c metric.Int64ObservableCounter, v uint64, kv ...attribute.KeyValue) {
			ob.ObserveInt64(c, int64(v), metric.WithAttributes(kv...))
		}
		set := func(g metric.Float64ObservableGauge, v float64, kv ...attribute.KeyValue) {
			ob.ObserveFloat64(g, v, metric.WithAttributes(kv...))
		}
		secs := func(c metric.Float64ObservableCounter, v time.Duration, kv ...attribute.KeyValue) {
			ob.ObserveFloat64(c, v.Seconds(), metric.WithAttributes(kv...))
		}
		// pool reports one pool, p, of the host named host: its size
		// only when withMax.
		pool := func(p *pgrouted.PoolInfo, host, kind, name string, withMax bool) {
			pn, ep, pk := semconv.DBClientConnectionPoolName(name), AttrEndpoint.String(host), AttrPool.String(kind)
			attrs := metric.WithAttributes(pn, ep, pk)
			ob.ObserveInt64(poolConns, int64(p.IdleConns), metric.WithAttributes(pn, semconv.DBClientConnectionStateIdle, ep, pk))
			ob.ObserveInt64(poolConns, int64(p.AcquiredConns), metric.WithAttributes(pn, semconv.DBClientConnectionStateUsed, ep, pk))
			if withMax {
				ob.ObserveInt64(poolMax, int64(p.MaxConns), attrs)
			}
			ob.ObserveInt64(poolConstructing, int64(p.ConstructingConns), attrs)
			ob.ObserveInt64(poolAcquires, p.AcquireCount, attrs)
			ob.ObserveFloat64(poolAcquireTime, p.AcquireDuration.Seconds(), attrs)
			ob.ObserveInt64(poolCanceled, p.CanceledAcquireCount, attrs)
			ob.ObserveInt64(poolEmpty, p.EmptyAcquireCount, attrs)
			ob.ObserveFloat64(poolEmptyWait, p.EmptyAcquireWaitTime.Seconds(), attrs)
			ob.ObserveInt64(poolNew, p.NewConnsCount, attrs)
			ob.ObserveInt64(poolLifetime, p.MaxLifetimeDestroyCount, attrs)
			ob.ObserveInt64(poolIdle, p.MaxIdleDestroyCount, attrs)
		}

		endpoints := make([]string, 0, len(top.Hosts))
		seen := map[string]bool{}
		for _, h := range top.Hosts {
			if !seen[h.Name] {
				seen[h.Name] = true
				endpoints = append(endpoints, h.Name)
			}
		}
		for _, e := range slices.Sorted(maps.Keys(st.Statements)) {
			if !seen[e] {
				seen[e] = true
				endpoints = append(endpoints, e)
			}
		}
		for _, e := range endpoints {
			byOp := st.Statements[e]
			for _, op := range withExtra(ops, byOp) {
				count(statements, byOp[op], AttrEndpoint.String(e), AttrOp.String(op))
			}
		}
		for _, r := range withExtra(fallbackReasons, st.Fallbacks) {
			count(fallbacks, st.Fallbacks[r], AttrReason.String(string(r)))
		}
		for _, r := range withExtra(errorReasons, st.RouteErrors) {
			count(routeErrors, st.RouteErrors[r], AttrReason.String(string(r)))
		}
		count(readOnlyRetries, st.ReadOnlyRetries)
		count(replicaRetries, st.ReplicaRetries)
		count(failovers, st.Failovers)
		count(conflicts, top.ConflictingPrimaries)
		count(timelineResets, st.TimelineResets)
		count(lostWrites, st.LostWrites)
		count(functionRouted, st.FunctionRouted)
		count(functionPins, st.FunctionPins)
		count(catalogReads, st.CatalogReads)
		count(replicaWaits, st.ReplicaWaits)
		count(waitTimeouts, st.ReplicaWaitTimeouts)
		count(posFetches, st.PositionFetches)
		count(posFetchErrors, st.PositionFetchErrors)
		count(globalReads, st.GlobalReads)
		count(deferredReads, st.DeferredPositionReads)
		count(posShared, st.PositionsShared)
		count(forgedTokens, st.ForgedTokens)
		count(scopeReads, st.ProcessScopeReads)
		count(waitsSkipped, st.ReplicaWaitsSkipped)
		secs(waitTime, st.ReplicaWaitTime)
		secs(globalWaitTime, st.GlobalWaitTime)
		count(primaryWaits, st.PrimaryReadWaits)
		set(readsPeak, float64(st.PrimaryReadsPeak))
		set(epoch, float64(top.Epoch))
		set(lease, top.LeaseRemaining.Seconds())

		for _, h := range top.Hosts {
			ep := AttrEndpoint.String(h.Name)
			for _, r := range withExtra(hostRoles, map[string]uint64{h.Role: 1}) {
				set(hostRole, boolf(h.Role == r), ep, AttrHostRole.String(r))
			}
			set(current, boolf(top.Primary != "" && h.Name == top.Primary), ep)
			set(healthy, boolf(h.Healthy), ep)
			set(circuit, boolf(h.Circuit == "open"), ep)
			if h.RTT > 0 {
				set(rtt, h.RTT.Seconds(), ep)
			}
			if h.ByteLag != nil {
				set(lagBytes, float64(*h.ByteLag), ep)
			}
			if h.LagBound != nil {
				set(lagBound, h.LagBound.Seconds(), ep)
			}
			set(inflight, float64(h.InflightReads), ep)
			if h.Timeline != 0 {
				set(timeline, float64(h.Timeline), ep)
			}
			if h.SyncState != "" {
				for _, s := range withExtra(syncStates, map[string]uint64{h.SyncState: 1}) {
					set(syncState, boolf(h.SyncState == s), ep, AttrSyncState.String(s))
				}
			}
			set(pooler, boolf(h.Pooler), ep)
			set(backendSwitched, boolf(h.BackendSwitched), ep)
			set(discovered, boolf(h.Discovered), ep)
			set(untrusted, boolf(h.Untrusted != ""), ep)
			if h.Budget != "" {
				for _, s := range withExtra(budgetStates, map[string]uint64{h.Budget: 1}) {
					set(budgetState, boolf(h.Budget == s), ep, AttrBudgetState.String(s))
				}
			}
			count(budgetChanges, h.BudgetChanges, ep)
			if top.Provider != nil {
				set(noReads, boolf(h.NoReads), ep)
			}
			pool(&h.Pool, h.Name, "replica", h.Name, true)
		}
		if ps, ok := src.(PoolSource); ok {
			for _, hp := range ps.Stat() {
				if hp.Primary != nil {
					pool(hp.Primary, hp.Name, "primary", hp.Name+"/primary", hp.Primary.MaxConns > 0)
				}
			}
		}
		return nil
	}, inst...)
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// withExtra returns known followed by the keys of m that known lacks,
// sorted, so that every known value is reported and none is lost.
func withExtra[K ~string, V any](known []K, m map[K]V) []K {
	out := known
	extra := false
	for _, k := range slices.Sorted(maps.Keys(m)) {
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
