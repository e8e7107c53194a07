//go:build unix

package promcollector_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/promcollector"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fake is a Source, and a PoolSource, with fixed answers.
type fake struct {
	st    pgrouted.Stats
	top   pgrouted.Snapshot
	pools []pgrouted.HostPool
}

func (f *fake) Stats() pgrouted.Stats       { return f.st }
func (f *fake) Topology() pgrouted.Snapshot { return f.top }
func (f *fake) Stat() []pgrouted.HostPool   { return f.pools }

func u64(v uint64) *uint64               { return &v }
func dur(v time.Duration) *time.Duration { return &v }

func fixed() *fake {
	return &fake{
		st: pgrouted.Stats{
			Statements: map[string]map[string]uint64{
				"east": {"write": 7, "tx": 2},
				"west": {"read": 40},
			},
			Fallbacks:       map[pgrouted.Reason]uint64{"behind": 3},
			RouteErrors:     map[pgrouted.Reason]uint64{"no-primary": 1, "some-future-reason": 2},
			ReadOnlyRetries: 4,
			ReplicaRetries:  5,
			Failovers:       1,
			TimelineResets:  8,
			LostWrites:      9,
			FunctionRouted:  10,
			FunctionPins:    11,

			ProcessScopeReads: 21,
			ForgedTokens:      22,

			ReplicaWaits:        12,
			ReplicaWaitTime:     1500 * time.Millisecond,
			ReplicaWaitTimeouts: 13,

			PositionFetches:       14,
			PositionFetchErrors:   1,
			GlobalReads:           140,
			DeferredPositionReads: 15,
			GlobalWaitTime:        250 * time.Millisecond,
			PositionsShared:       9,

			CatalogReads:        16,
			ReplicaWaitsSkipped: 17,
			PrimaryReadWaits:    18,
			PrimaryReadsPeak:    5,
		},
		top: pgrouted.Snapshot{
			Primary:              "east",
			Epoch:                2,
			LeaseRemaining:       1500 * time.Millisecond,
			ConflictingPrimaries: 6,
			Hosts: []pgrouted.HostInfo{
				{Name: "east", Address: "10.0.0.1:5432", Role: "primary", Healthy: true, Circuit: "closed", RTT: 2 * time.Millisecond,
					Timeline: 3, BudgetChanges: 1, Pool: pgrouted.PoolInfo{TotalConns: 0, MaxConns: 4}},
				{Name: "west", Address: "10.0.0.2:5432", Role: "standby", Healthy: true, Circuit: "closed", RTT: 250 * time.Millisecond,
					ByteLag: u64(8192), LagBound: dur(1250 * time.Millisecond), InflightReads: 3,
					Timeline: 3, SyncState: "async", Budget: "ramp", BudgetChanges: 2, Pooler: true,
					Pool: pgrouted.PoolInfo{TotalConns: 4, IdleConns: 1, AcquiredConns: 2, ConstructingConns: 1, MaxConns: 4,
						AcquireCount: 100, AcquireDuration: 2 * time.Second, CanceledAcquireCount: 1, EmptyAcquireCount: 4,
						EmptyAcquireWaitTime: 500 * time.Millisecond, NewConnsCount: 5, MaxLifetimeDestroyCount: 1, MaxIdleDestroyCount: 2}},
				{Name: "south", Address: "10.0.0.3:5432", Role: "unknown", Circuit: "open", LastError: "connection refused",
					Discovered: true, Untrusted: "not seen replicating"},
			},
		},
		pools: []pgrouted.HostPool{
			{Name: "east", Primary: &pgrouted.PoolInfo{TotalConns: 3, IdleConns: 2, AcquiredConns: 1, MaxConns: 10,
				AcquireCount: 60, AcquireDuration: 1500 * time.Millisecond, EmptyAcquireCount: 3,
				EmptyAcquireWaitTime: 250 * time.Millisecond, NewConnsCount: 3, MaxIdleDestroyCount: 1}},
			{Name: "west"},
			{Name: "south"},
		},
	}
}

// TestCollectFixed checks every metric's name, labels, type and value
// against a fixed Source.
func TestCollectFixed(t *testing.T) {
	c := promcollector.New(fixed())
	want := `
# HELP pgrouted_circuit_open 1 while the host's circuit breaker is open (no statement is sent to it), else 0.
# TYPE pgrouted_circuit_open gauge
pgrouted_circuit_open{endpoint="east"} 0
pgrouted_circuit_open{endpoint="south"} 1
pgrouted_circuit_open{endpoint="west"} 0
# HELP pgrouted_conflicting_primaries_total Observations of two or more hosts out of recovery with no strictly higher timeline among them (no primary: fail closed).
# TYPE pgrouted_conflicting_primaries_total counter
pgrouted_conflicting_primaries_total 6
# HELP pgrouted_current_primary 1 for the host writes go to now (the primary with a valid lease), 0 for the others.
# TYPE pgrouted_current_primary gauge
pgrouted_current_primary{endpoint="east"} 1
pgrouted_current_primary{endpoint="south"} 0
pgrouted_current_primary{endpoint="west"} 0
# HELP pgrouted_failovers_total Changes of primary seen (primary epochs after the first).
# TYPE pgrouted_failovers_total counter
pgrouted_failovers_total 1
# HELP pgrouted_fallbacks_total Reads that ran on the primary because no replica could serve them, per reason.
# TYPE pgrouted_fallbacks_total counter
pgrouted_fallbacks_total{reason="behind"} 3
pgrouted_fallbacks_total{reason="catching-up"} 0
pgrouted_fallbacks_total{reason="no-replicas"} 0
pgrouted_fallbacks_total{reason="position-deferred"} 0
pgrouted_fallbacks_total{reason="position-unknown"} 0
pgrouted_fallbacks_total{reason="replica-failed"} 0
pgrouted_fallbacks_total{reason="saturated"} 0
pgrouted_fallbacks_total{reason="unhealthy"} 0
# HELP pgrouted_healthy 1 when the host's last probe succeeded, else 0.
# TYPE pgrouted_healthy gauge
pgrouted_healthy{endpoint="east"} 1
pgrouted_healthy{endpoint="south"} 0
pgrouted_healthy{endpoint="west"} 1
# HELP pgrouted_inflight_reads Reads running on the host now through this Connector.
# TYPE pgrouted_inflight_reads gauge
pgrouted_inflight_reads{endpoint="east"} 0
pgrouted_inflight_reads{endpoint="south"} 0
pgrouted_inflight_reads{endpoint="west"} 3
# HELP pgrouted_primary_epoch Primary epoch: increments each time the primary becomes another host.
# TYPE pgrouted_primary_epoch gauge
pgrouted_primary_epoch 2
# HELP pgrouted_primary_lease_remaining_seconds How long the current primary stays trusted without a new successful probe; 0 when there is no trusted primary.
# TYPE pgrouted_primary_lease_remaining_seconds gauge
pgrouted_primary_lease_remaining_seconds 1.5
# HELP pgrouted_probe_rtt_seconds Exponentially weighted moving average of the host's probe round trip; absent while unknown.
# TYPE pgrouted_probe_rtt_seconds gauge
pgrouted_probe_rtt_seconds{endpoint="east"} 0.002
pgrouted_probe_rtt_seconds{endpoint="west"} 0.25
# HELP pgrouted_read_only_retries_total Statements a replica refused with SQLSTATE 25006 (read_only_sql_transaction) that ran again on the primary.
# TYPE pgrouted_read_only_retries_total counter
pgrouted_read_only_retries_total 4
# HELP pgrouted_replica_lag_bound_seconds Upper bound on a standby's staleness, from the primary's WAL position history (no clock synchronisation needed); absent while unknown.
# TYPE pgrouted_replica_lag_bound_seconds gauge
pgrouted_replica_lag_bound_seconds{endpoint="west"} 1.25
# HELP pgrouted_replica_lag_bytes WAL bytes a standby has yet to replay to reach the primary's last probed position; absent while unknown.
# TYPE pgrouted_replica_lag_bytes gauge
pgrouted_replica_lag_bytes{endpoint="west"} 8192
# HELP pgrouted_replica_retries_total Reads that ran on another host after their replica's connection failed before any row.
# TYPE pgrouted_replica_retries_total counter
pgrouted_replica_retries_total 5
# HELP pgrouted_role 1 for the role the host's last successful probe saw (primary, standby, unknown), 0 for the others; see pgrouted_healthy.
# TYPE pgrouted_role gauge
pgrouted_role{endpoint="east",role="primary"} 1
pgrouted_role{endpoint="east",role="standby"} 0
pgrouted_role{endpoint="east",role="unknown"} 0
pgrouted_role{endpoint="south",role="primary"} 0
pgrouted_role{endpoint="south",role="standby"} 0
pgrouted_role{endpoint="south",role="unknown"} 1
pgrouted_role{endpoint="west",role="primary"} 0
pgrouted_role{endpoint="west",role="standby"} 1
pgrouted_role{endpoint="west",role="unknown"} 0
# HELP pgrouted_route_errors_total Statements that could not run (no replica, no primary, write forced to a replica), per reason.
# TYPE pgrouted_route_errors_total counter
pgrouted_route_errors_total{reason="behind"} 0
pgrouted_route_errors_total{reason="no-primary"} 1
pgrouted_route_errors_total{reason="no-replicas"} 0
pgrouted_route_errors_total{reason="primary-busy"} 0
pgrouted_route_errors_total{reason="primary-lost"} 0
pgrouted_route_errors_total{reason="position-unknown"} 0
pgrouted_route_errors_total{reason="saturated"} 0
pgrouted_route_errors_total{reason="some-future-reason"} 2
pgrouted_route_errors_total{reason="unhealthy"} 0
pgrouted_route_errors_total{reason="write-on-replica"} 0
# HELP pgrouted_function_pins_total Connections pinned to the primary by such a statement: they serve every read from the primary until database/sql closes them.
# TYPE pgrouted_function_pins_total counter
pgrouted_function_pins_total 11
# HELP pgrouted_function_routed_total Statements sent to the primary because of a function they call (VOLATILE, unknown to the catalog, or listed in pgrouted_write_functions) or because a replica refused the same text before.
# TYPE pgrouted_function_routed_total counter
pgrouted_function_routed_total 10
# HELP pgrouted_process_scope_reads_total Reads without a Session that ran on the primary, or waited on a replica, because the replicas lacked the process's latest writes (of any request) to what they read: per-request Sessions scope reads to their own writes.
# TYPE pgrouted_process_scope_reads_total counter
pgrouted_process_scope_reads_total 21
# HELP pgrouted_forged_tokens_total Session tokens whose position the primary had not written (past its position, on a later timeline, of another cluster): their reads ran as reads without a token.
# TYPE pgrouted_forged_tokens_total counter
pgrouted_forged_tokens_total 22
# HELP pgrouted_lost_writes_total Read-your-writes positions found past the point where the new primary's timeline history left theirs: writes the old primary acknowledged and a failover lost.
# TYPE pgrouted_lost_writes_total counter
pgrouted_lost_writes_total 9
# HELP pgrouted_timeline_resets_total Read-your-writes positions given up because they were written on a timeline older than the primary's (a failover may have lost them): reads went to the primary until a position on the new timeline was known.
# TYPE pgrouted_timeline_resets_total counter
pgrouted_timeline_resets_total 8
# HELP pgrouted_replica_waits_total Reads that waited on a replica for it to replay the caller's writes (pgrouted_replica_wait).
# TYPE pgrouted_replica_waits_total counter
pgrouted_replica_waits_total 12
# HELP pgrouted_replica_wait_seconds_total Total time reads waited on replicas for their replay (one round trip included per wait).
# TYPE pgrouted_replica_wait_seconds_total counter
pgrouted_replica_wait_seconds_total 1.5
# HELP pgrouted_replica_wait_timeouts_total Replica waits that ended without the caller's position: the read ran where it would have without a wait.
# TYPE pgrouted_replica_wait_timeouts_total counter
pgrouted_replica_wait_timeouts_total 13
# HELP pgrouted_position_fetches_total Reads of the primary's WAL position for global consistency and for reads after writes without a Session, one query each; concurrent reads share one.
# TYPE pgrouted_position_fetches_total counter
pgrouted_position_fetches_total 14
# HELP pgrouted_position_fetch_errors_total Position fetches that failed: their reads ran where a read of unknown position runs (the primary).
# TYPE pgrouted_position_fetch_errors_total counter
pgrouted_position_fetch_errors_total 1
# HELP pgrouted_global_reads_total Reads served a primary position read after they began (global consistency).
# TYPE pgrouted_global_reads_total counter
pgrouted_global_reads_total 140
# HELP pgrouted_deferred_position_reads_total Reads after writes without a Session that read those writes' position (one position read serves every write before it).
# TYPE pgrouted_deferred_position_reads_total counter
pgrouted_deferred_position_reads_total 15
# HELP pgrouted_global_wait_seconds_total Total time global reads waited for their primary position.
# TYPE pgrouted_global_wait_seconds_total counter
pgrouted_global_wait_seconds_total 0.25
# HELP pgrouted_positions_shared_total Positions of the primary read anyway (after a write's commit or a COMMIT, by a probe) that served waiting global reads in place of a fetch.
# TYPE pgrouted_positions_shared_total counter
pgrouted_positions_shared_total 9
# HELP pgrouted_statements_total Statements run, per endpoint (host name) and op (read, write, tx, lock).
# TYPE pgrouted_statements_total counter
pgrouted_statements_total{endpoint="east",op="lock"} 0
pgrouted_statements_total{endpoint="east",op="read"} 0
pgrouted_statements_total{endpoint="east",op="tx"} 2
pgrouted_statements_total{endpoint="east",op="write"} 7
pgrouted_statements_total{endpoint="south",op="lock"} 0
pgrouted_statements_total{endpoint="south",op="read"} 0
pgrouted_statements_total{endpoint="south",op="tx"} 0
pgrouted_statements_total{endpoint="south",op="write"} 0
pgrouted_statements_total{endpoint="west",op="lock"} 0
pgrouted_statements_total{endpoint="west",op="read"} 40
pgrouted_statements_total{endpoint="west",op="tx"} 0
pgrouted_statements_total{endpoint="west",op="write"} 0
# HELP pgrouted_catalog_reads_total Reads of the function catalog (at start, after a statement that may change it, after a change of primary, every 30 s).
# TYPE pgrouted_catalog_reads_total counter
pgrouted_catalog_reads_total 16
# HELP pgrouted_replica_waits_skipped_total Reads that did not wait on their replica because its replay pace said it would not reach their position within the wait: they went elsewhere at once.
# TYPE pgrouted_replica_waits_skipped_total counter
pgrouted_replica_waits_skipped_total 17
# HELP pgrouted_primary_read_waits_total Fallback reads that found pgrouted_primary_read_limit reached and waited for a slot on the primary or a replica (those whose wait ran out are route errors of reason primary-busy).
# TYPE pgrouted_primary_read_waits_total counter
pgrouted_primary_read_waits_total 18
# HELP pgrouted_primary_reads_peak The most fallback reads the primary ran at once under pgrouted_primary_read_limit (0 without a limit).
# TYPE pgrouted_primary_reads_peak gauge
pgrouted_primary_reads_peak 5
# HELP pgrouted_timeline The timeline the host writes or replays; absent while unknown.
# TYPE pgrouted_timeline gauge
pgrouted_timeline{endpoint="east"} 3
pgrouted_timeline{endpoint="west"} 3
# HELP pgrouted_sync_state 1 for a standby's sync_state on the primary (async, potential, quorum, sync), 0 for the others; absent while unknown.
# TYPE pgrouted_sync_state gauge
pgrouted_sync_state{endpoint="west",state="async"} 1
pgrouted_sync_state{endpoint="west",state="potential"} 0
pgrouted_sync_state{endpoint="west",state="quorum"} 0
pgrouted_sync_state{endpoint="west",state="sync"} 0
# HELP pgrouted_pooler 1 when the host's probes run through a connection pooler (PgBouncer) in front of it, else 0.
# TYPE pgrouted_pooler gauge
pgrouted_pooler{endpoint="east"} 0
pgrouted_pooler{endpoint="south"} 0
pgrouted_pooler{endpoint="west"} 1
# HELP pgrouted_pooler_backend_switched 1 when the host's probe connection met two server processes (the pooler hands out server sessions per transaction), else 0.
# TYPE pgrouted_pooler_backend_switched gauge
pgrouted_pooler_backend_switched{endpoint="east"} 0
pgrouted_pooler_backend_switched{endpoint="south"} 0
pgrouted_pooler_backend_switched{endpoint="west"} 0
# HELP pgrouted_discovered 1 for a host the topology provider reported that the DSN does not name (pgrouted_discover), else 0.
# TYPE pgrouted_discovered gauge
pgrouted_discovered{endpoint="east"} 0
pgrouted_discovered{endpoint="south"} 1
pgrouted_discovered{endpoint="west"} 0
# HELP pgrouted_untrusted 1 while a discovered host serves nothing because its probe has not shown it a standby of the DSN hosts' system, else 0.
# TYPE pgrouted_untrusted gauge
pgrouted_untrusted{endpoint="east"} 0
pgrouted_untrusted{endpoint="south"} 1
pgrouted_untrusted{endpoint="west"} 0
# HELP pgrouted_budget_state 1 for a standby's state against the staleness budget (in; out: beyond it, not yet back under the return threshold; ramp: back, its share of the reads growing), 0 for the others; standbys only.
# TYPE pgrouted_budget_state gauge
pgrouted_budget_state{endpoint="west",state="in"} 0
pgrouted_budget_state{endpoint="west",state="out"} 0
pgrouted_budget_state{endpoint="west",state="ramp"} 1
# HELP pgrouted_budget_changes_total Times the host, a standby, left the staleness budget or came back within it.
# TYPE pgrouted_budget_changes_total counter
pgrouted_budget_changes_total{endpoint="east"} 1
pgrouted_budget_changes_total{endpoint="south"} 0
pgrouted_budget_changes_total{endpoint="west"} 2
# HELP pgrouted_replica_pool_connections Connections of the host's replica pool, per state (idle, acquired, constructing).
# TYPE pgrouted_replica_pool_connections gauge
pgrouted_replica_pool_connections{endpoint="east",state="acquired"} 0
pgrouted_replica_pool_connections{endpoint="east",state="constructing"} 0
pgrouted_replica_pool_connections{endpoint="east",state="idle"} 0
pgrouted_replica_pool_connections{endpoint="south",state="acquired"} 0
pgrouted_replica_pool_connections{endpoint="south",state="constructing"} 0
pgrouted_replica_pool_connections{endpoint="south",state="idle"} 0
pgrouted_replica_pool_connections{endpoint="west",state="acquired"} 2
pgrouted_replica_pool_connections{endpoint="west",state="constructing"} 1
pgrouted_replica_pool_connections{endpoint="west",state="idle"} 1
# HELP pgrouted_replica_pool_max_connections Size of the host's replica pool.
# TYPE pgrouted_replica_pool_max_connections gauge
pgrouted_replica_pool_max_connections{endpoint="east"} 4
pgrouted_replica_pool_max_connections{endpoint="south"} 0
pgrouted_replica_pool_max_connections{endpoint="west"} 4
# HELP pgrouted_replica_pool_acquires_total Successful acquires of a connection of the host's replica pool.
# TYPE pgrouted_replica_pool_acquires_total counter
pgrouted_replica_pool_acquires_total{endpoint="east"} 0
pgrouted_replica_pool_acquires_total{endpoint="south"} 0
pgrouted_replica_pool_acquires_total{endpoint="west"} 100
# HELP pgrouted_replica_pool_acquire_seconds_total Total time of the successful acquires of a connection of the host's replica pool.
# TYPE pgrouted_replica_pool_acquire_seconds_total counter
pgrouted_replica_pool_acquire_seconds_total{endpoint="east"} 0
pgrouted_replica_pool_acquire_seconds_total{endpoint="south"} 0
pgrouted_replica_pool_acquire_seconds_total{endpoint="west"} 2
# HELP pgrouted_replica_pool_canceled_acquires_total Acquires of a connection of the host's replica pool canceled by their context.
# TYPE pgrouted_replica_pool_canceled_acquires_total counter
pgrouted_replica_pool_canceled_acquires_total{endpoint="east"} 0
pgrouted_replica_pool_canceled_acquires_total{endpoint="south"} 0
pgrouted_replica_pool_canceled_acquires_total{endpoint="west"} 1
# HELP pgrouted_replica_pool_empty_acquires_total Successful acquires of a connection of the host's replica pool that waited for one because none was idle.
# TYPE pgrouted_replica_pool_empty_acquires_total counter
pgrouted_replica_pool_empty_acquires_total{endpoint="east"} 0
pgrouted_replica_pool_empty_acquires_total{endpoint="south"} 0
pgrouted_replica_pool_empty_acquires_total{endpoint="west"} 4
# HELP pgrouted_replica_pool_empty_acquire_wait_seconds_total Total time the acquires of a connection of the host's replica pool waited because none was idle.
# TYPE pgrouted_replica_pool_empty_acquire_wait_seconds_total counter
pgrouted_replica_pool_empty_acquire_wait_seconds_total{endpoint="east"} 0
pgrouted_replica_pool_empty_acquire_wait_seconds_total{endpoint="south"} 0
pgrouted_replica_pool_empty_acquire_wait_seconds_total{endpoint="west"} 0.5
# HELP pgrouted_replica_pool_new_connections_total Connections the host's replica pool opened.
# TYPE pgrouted_replica_pool_new_connections_total counter
pgrouted_replica_pool_new_connections_total{endpoint="east"} 0
pgrouted_replica_pool_new_connections_total{endpoint="south"} 0
pgrouted_replica_pool_new_connections_total{endpoint="west"} 5
# HELP pgrouted_replica_pool_max_lifetime_destroys_total Connections of the host's replica pool closed past their lifetime.
# TYPE pgrouted_replica_pool_max_lifetime_destroys_total counter
pgrouted_replica_pool_max_lifetime_destroys_total{endpoint="east"} 0
pgrouted_replica_pool_max_lifetime_destroys_total{endpoint="south"} 0
pgrouted_replica_pool_max_lifetime_destroys_total{endpoint="west"} 1
# HELP pgrouted_replica_pool_max_idle_destroys_total Connections of the host's replica pool closed idle past their idle time.
# TYPE pgrouted_replica_pool_max_idle_destroys_total counter
pgrouted_replica_pool_max_idle_destroys_total{endpoint="east"} 0
pgrouted_replica_pool_max_idle_destroys_total{endpoint="south"} 0
pgrouted_replica_pool_max_idle_destroys_total{endpoint="west"} 2
# HELP pgrouted_primary_pool_connections Connections of the primary sessions (Pool.Stat's Primary, on the primary's endpoint), per state (idle, acquired, constructing).
# TYPE pgrouted_primary_pool_connections gauge
pgrouted_primary_pool_connections{endpoint="east",state="acquired"} 1
pgrouted_primary_pool_connections{endpoint="east",state="constructing"} 0
pgrouted_primary_pool_connections{endpoint="east",state="idle"} 2
# HELP pgrouted_primary_pool_max_connections The most primary sessions open at once (pool_max_conns); absent without a cap.
# TYPE pgrouted_primary_pool_max_connections gauge
pgrouted_primary_pool_max_connections{endpoint="east"} 10
# HELP pgrouted_primary_pool_acquires_total Successful acquires of a connection of the primary sessions (Pool.Stat's Primary, on the primary's endpoint).
# TYPE pgrouted_primary_pool_acquires_total counter
pgrouted_primary_pool_acquires_total{endpoint="east"} 60
# HELP pgrouted_primary_pool_acquire_seconds_total Total time of the successful acquires of a connection of the primary sessions (Pool.Stat's Primary, on the primary's endpoint).
# TYPE pgrouted_primary_pool_acquire_seconds_total counter
pgrouted_primary_pool_acquire_seconds_total{endpoint="east"} 1.5
# HELP pgrouted_primary_pool_canceled_acquires_total Acquires of a connection of the primary sessions (Pool.Stat's Primary, on the primary's endpoint) canceled by their context.
# TYPE pgrouted_primary_pool_canceled_acquires_total counter
pgrouted_primary_pool_canceled_acquires_total{endpoint="east"} 0
# HELP pgrouted_primary_pool_empty_acquires_total Successful acquires of a connection of the primary sessions (Pool.Stat's Primary, on the primary's endpoint) that waited for one because none was idle.
# TYPE pgrouted_primary_pool_empty_acquires_total counter
pgrouted_primary_pool_empty_acquires_total{endpoint="east"} 3
# HELP pgrouted_primary_pool_empty_acquire_wait_seconds_total Total time the acquires of a connection of the primary sessions (Pool.Stat's Primary, on the primary's endpoint) waited because none was idle.
# TYPE pgrouted_primary_pool_empty_acquire_wait_seconds_total counter
pgrouted_primary_pool_empty_acquire_wait_seconds_total{endpoint="east"} 0.25
# HELP pgrouted_primary_pool_new_connections_total Connections the primary sessions (Pool.Stat's Primary, on the primary's endpoint) opened.
# TYPE pgrouted_primary_pool_new_connections_total counter
pgrouted_primary_pool_new_connections_total{endpoint="east"} 3
# HELP pgrouted_primary_pool_max_lifetime_destroys_total Connections of the primary sessions (Pool.Stat's Primary, on the primary's endpoint) closed past their lifetime.
# TYPE pgrouted_primary_pool_max_lifetime_destroys_total counter
pgrouted_primary_pool_max_lifetime_destroys_total{endpoint="east"} 0
# HELP pgrouted_primary_pool_max_idle_destroys_total Connections of the primary sessions (Pool.Stat's Primary, on the primary's endpoint) closed idle past their idle time.
# TYPE pgrouted_primary_pool_max_idle_destroys_total counter
pgrouted_primary_pool_max_idle_destroys_total{endpoint="east"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

// TestLint: names, units and help texts follow Prometheus conventions, and
// a pedantic registry finds Describe and Collect consistent.
func TestLint(t *testing.T) {
	c := promcollector.New(fixed())
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

// TestConstLabels: two Connectors live in one registry when told apart.
func TestConstLabels(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promcollector.New(fixed(), promcollector.ConstLabels(prometheus.Labels{"db": "orders"})))
	reg.MustRegister(promcollector.New(fixed(), promcollector.ConstLabels(prometheus.Labels{"db": "users"})))
	n, err := testutil.GatherAndCount(reg, "pgrouted_primary_epoch")
	if err != nil || n != 2 {
		t.Fatalf("pgrouted_primary_epoch series: %d, %v", n, err)
	}
	if err := prometheus.NewRegistry().Register(promcollector.New(fixed())); err != nil {
		t.Fatal(err)
	}
}

// TestEmptySource: a Connector that has not probed anything yet exports
// the global series and nothing per host.
func TestEmptySource(t *testing.T) {
	c := promcollector.New(&fake{})
	if n := testutil.CollectAndCount(c, "pgrouted_role", "pgrouted_statements_total"); n != 0 {
		t.Fatalf("%d per-host series without hosts", n)
	}
	if n := testutil.CollectAndCount(c, "pgrouted_primary_epoch", "pgrouted_fallbacks_total"); n != 1+8 {
		t.Fatalf("%d global series", n)
	}
}

// TestProviderMetrics: the topology provider's series appear only with a
// provider, with the endpoint that answered (no password), its lease and
// the leader's timeline.
func TestProviderMetrics(t *testing.T) {
	if n := testutil.CollectAndCount(promcollector.New(fixed()), "pgrouted_topology_provider_info", "pgrouted_topology_provider_no_reads"); n != 0 {
		t.Fatalf("%d provider series without a provider", n)
	}
	f := fixed()
	f.top.Provider = &pgrouted.ProviderInfo{Name: "patroni", Endpoint: "http://patroni:xxxxx@pg-a:8008", Leader: "east", LeaderTimeline: 4, LeaseRemaining: 2500 * time.Millisecond}
	f.top.Hosts[2].NoReads = true
	want := `
# HELP pgrouted_topology_provider_info 1, labelled with the topology provider (patroni, manual, ...) and the endpoint of its last answer (password redacted).
# TYPE pgrouted_topology_provider_info gauge
pgrouted_topology_provider_info{provider="patroni",source="http://patroni:xxxxx@pg-a:8008"} 1
# HELP pgrouted_topology_provider_lease_remaining_seconds How long the topology provider's last answer stays authoritative; 0 once pgrouted_lease passed without one (no primary: writes wait, then fail).
# TYPE pgrouted_topology_provider_lease_remaining_seconds gauge
pgrouted_topology_provider_lease_remaining_seconds{provider="patroni"} 2.5
# HELP pgrouted_topology_provider_leader_timeline The timeline of the leader the topology provider names, as it reports it; absent while it names none.
# TYPE pgrouted_topology_provider_leader_timeline gauge
pgrouted_topology_provider_leader_timeline{provider="patroni"} 4
# HELP pgrouted_topology_provider_no_reads 1 when the topology provider lets the host serve no reads (not listed, not running or streaming, or tagged noloadbalance), else 0.
# TYPE pgrouted_topology_provider_no_reads gauge
pgrouted_topology_provider_no_reads{endpoint="east"} 0
pgrouted_topology_provider_no_reads{endpoint="south"} 1
pgrouted_topology_provider_no_reads{endpoint="west"} 0
# HELP pgrouted_topology_provider_up 1 when the topology provider's last request was answered, else 0.
# TYPE pgrouted_topology_provider_up gauge
pgrouted_topology_provider_up{provider="patroni"} 1
`
	c := promcollector.New(f)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"pgrouted_topology_provider_info", "pgrouted_topology_provider_up", "pgrouted_topology_provider_lease_remaining_seconds",
		"pgrouted_topology_provider_leader_timeline", "pgrouted_topology_provider_no_reads"); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	f.top.Provider.LastError = "patroni: no endpoint answered"
	down := `
# HELP pgrouted_topology_provider_up 1 when the topology provider's last request was answered, else 0.
# TYPE pgrouted_topology_provider_up gauge
pgrouted_topology_provider_up{provider="patroni"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(down), "pgrouted_topology_provider_up"); err != nil {
		t.Fatal(err)
	}
}
