// Package promcollector exports what a [pgrouted.Connector] sees
// and counts as Prometheus metrics. It is a separate package so that
// applications that do not use Prometheus do not import its client.
//
//	conn, err := pgrouted.NewConnector(cfg)
//	...
//	db := sql.OpenDB(conn)
//	prometheus.MustRegister(promcollector.New(conn))
//	http.Handle("/metrics", promhttp.Handler())
//
// The [Collector] reads [pgrouted.Connector.Stats] and
// [pgrouted.Connector.Topology] once per scrape: it keeps no state, starts no
// goroutine and adds nothing to the statements' path. Every metric is named
// pgrouted_…; per-host metrics carry the label endpoint, the host's name
// (from pgrouted_names, else host:port).
//
// # Metrics
//
// Counters, since the Connector started:
//
//	pgrouted_statements_total{endpoint,op}      statements run, op = read, write, tx, lock
//	pgrouted_fallbacks_total{reason}            reads that ran on the primary because no replica could serve them
//	                                            (no-replicas, unhealthy, behind, saturated, position-unknown, replica-failed,
//	                                            catching-up, position-deferred)
//	pgrouted_route_errors_total{reason}         statements that could not run (ErrNoReplica, ErrWriteOnReplica, ErrNoPrimary,
//	                                            ErrPrimaryBusy: primary-busy, past pgrouted_primary_read_limit),
//	                                            and those whose primary was lost before it answered (primary-lost: ErrOutcomeUnknown)
//	pgrouted_read_only_retries_total            statements a replica refused with SQLSTATE 25006, run again on the primary
//	pgrouted_replica_retries_total              reads that ran elsewhere after their replica's connection failed
//	pgrouted_failovers_total                    changes of primary seen
//	pgrouted_conflicting_primaries_total        observations of two primaries with no strictly higher timeline
//	pgrouted_timeline_resets_total              read-your-writes positions of an older timeline given up after a failover
//	pgrouted_lost_writes_total                  acknowledged writes the new primary's timeline history shows a failover lost
//	pgrouted_process_scope_reads_total          reads without a Session held back by the whole process's writes
//	pgrouted_forged_tokens_total                Session tokens the primary never wrote
//	pgrouted_function_routed_total              statements sent to the primary by a function they call, or by an earlier 25006
//	pgrouted_function_pins_total                connections such a statement pinned to the primary
//	pgrouted_replica_waits_total                reads that waited on a replica for the caller's position (pgrouted_replica_wait)
//	pgrouted_replica_wait_seconds_total         the time those reads waited (one round trip included per wait)
//	pgrouted_replica_wait_timeouts_total        waits that ended without the position (the read ran where it would have)
//	pgrouted_replica_waits_skipped_total        reads that did not wait: their replica's replay pace would not reach their position in time
//	pgrouted_catalog_reads_total                reads of the function catalog
//	pgrouted_primary_read_waits_total           fallback reads that waited at pgrouted_primary_read_limit (those whose wait ran out: primary-busy)
//	pgrouted_position_fetches_total             reads of the primary's WAL position for global consistency and after writes without a Session (shared by concurrent reads)
//	pgrouted_position_fetch_errors_total        position fetches that failed (their reads ran where a read of unknown position runs)
//	pgrouted_global_reads_total                 reads served a primary position read after they began (global consistency)
//	pgrouted_deferred_position_reads_total      reads after writes without a Session that read those writes' position
//	pgrouted_global_wait_seconds_total          the time global reads waited for their position
//	pgrouted_positions_shared_total             positions read anyway (after a write, by a probe) that served global reads in place of a fetch
//	pgrouted_budget_changes_total{endpoint}     times a standby left the staleness budget or came back within it
//
// Gauges, now:
//
//	pgrouted_primary_epoch                      increments each time the primary becomes another host
//	pgrouted_primary_lease_remaining_seconds    how long the primary stays trusted without a new probe
//	pgrouted_role{endpoint,role}                1 for the role the host's last successful probe saw (primary, standby, unknown)
//	pgrouted_current_primary{endpoint}          1 for the host writes go to now, 0 for the others
//	pgrouted_healthy{endpoint}                  1 when the host's last probe succeeded
//	pgrouted_circuit_open{endpoint}             1 while the host's circuit breaker is open
//	pgrouted_probe_rtt_seconds{endpoint}        probe round trip EWMA (absent while unknown)
//	pgrouted_replica_lag_bytes{endpoint}        WAL bytes a standby is behind the primary (absent while unknown)
//	pgrouted_replica_lag_bound_seconds{endpoint} upper bound on a standby's staleness (absent while unknown)
//	pgrouted_inflight_reads{endpoint}           reads running on the host now
//	pgrouted_primary_reads_peak                 the most fallback reads the primary ran at once (pgrouted_primary_read_limit)
//	pgrouted_timeline{endpoint}                 the timeline the host writes or replays (absent while unknown)
//	pgrouted_sync_state{endpoint,state}         1 for a standby's sync_state on the primary: async, potential, quorum, sync
//	pgrouted_pooler{endpoint}                   1 when the host's probes run through a connection pooler
//	pgrouted_pooler_backend_switched{endpoint}  1 when its probe connection met two server processes
//	pgrouted_discovered{endpoint}               1 for a host the topology provider reported that the DSN does not name
//	pgrouted_untrusted{endpoint}                1 while such a host serves nothing, not yet trusted
//	pgrouted_budget_state{endpoint,state}       1 for a standby's state against the staleness budget: in, out, ramp
//
// Each pool's figures, pgxpool.Stat's (pgrouted.PoolInfo), per endpoint:
// pgrouted_replica_pool_… for each host's replica pool, from the Topology;
// pgrouted_primary_pool_… for the primary sessions (Pool.Stat's Primary),
// on the primary's endpoint, only when the Source is a [PoolSource] (a
// *pgrouted.Pool: promcollector.New(pool)). TotalConns is the sum of the
// connections' states.
//
//	pgrouted_replica_pool_connections{endpoint,state}          gauge: state = idle, acquired, constructing
//	pgrouted_replica_pool_max_connections{endpoint}            gauge: the pool's size
//	pgrouted_replica_pool_acquires_total{endpoint}             successful acquires
//	pgrouted_replica_pool_acquire_seconds_total{endpoint}      their total time
//	pgrouted_replica_pool_canceled_acquires_total{endpoint}    acquires canceled by their context
//	pgrouted_replica_pool_empty_acquires_total{endpoint}       successful acquires that waited, none idle
//	pgrouted_replica_pool_empty_acquire_wait_seconds_total{endpoint}  the time they waited
//	pgrouted_replica_pool_new_connections_total{endpoint}      connections opened
//	pgrouted_replica_pool_max_lifetime_destroys_total{endpoint}  connections closed past their lifetime
//	pgrouted_replica_pool_max_idle_destroys_total{endpoint}    connections closed idle past their idle time
//	pgrouted_primary_pool_connections{endpoint,state}, pgrouted_primary_pool_max_connections{endpoint} (absent without pool_max_conns),
//	pgrouted_primary_pool_acquires_total, pgrouted_primary_pool_acquire_seconds_total, pgrouted_primary_pool_canceled_acquires_total,
//	pgrouted_primary_pool_empty_acquires_total, pgrouted_primary_pool_empty_acquire_wait_seconds_total,
//	pgrouted_primary_pool_new_connections_total, pgrouted_primary_pool_max_lifetime_destroys_total,
//	pgrouted_primary_pool_max_idle_destroys_total                the same for the primary sessions
//
// Gauges of the topology provider, only when there is one
// (pgrouted_topology=patroni, Config.Provider):
//
//	pgrouted_topology_provider_info{provider,source}            1, with the provider's name and the endpoint of its last answer (password redacted)
//	pgrouted_topology_provider_up{provider}                     1 when the provider's last request was answered
//	pgrouted_topology_provider_lease_remaining_seconds{provider} how long its last answer stays authoritative
//	pgrouted_topology_provider_leader_timeline{provider}        the timeline of the leader it names (absent while it names none)
//	pgrouted_topology_provider_no_reads{endpoint}               1 when the provider lets the host serve no reads
//
// Every figure of Stats, of a host in the Topology and of a pool has its
// series, but for a few fields that are not figures (names, addresses,
// texts): TestEveryStatsFieldIsAMetric lists them, each with why.
//
// A host that stops answering keeps the role it was last seen in, with
// pgrouted_healthy 0: an old primary that was stopped still shows role
// "primary", and pgrouted_current_primary says which host takes the writes.
//
// Every op and every known reason is exported from the start, at 0, so that
// rate() and alerts see a series before its first event. Nothing exported
// holds a password: host names and numbers only.
//
// The labels do reveal the cluster: host names and addresses, the topology
// provider's name and the endpoint of its last answer (with its user, the
// password redacted). Serve the metrics behind authentication (see
// docs/security.md).
//
// Collect never panics. pgrouted refuses a name that is not UTF-8 or holds
// a control or format character (in the DSN, and in a topology provider's
// answer, where the member is named by its address instead), but a Source
// of one's own may still report one: every label value goes through
// dsn.Printable, which writes such a byte or character as an escape
// (east\xff, \u202etsae), so the series is exported under that label. A
// series that still cannot be exported is sent as a prometheus invalid
// metric, Gather reports it as an error naming the metric, and the other
// series are exported.
//
// Two Connectors in one registry need distinguishing labels:
// New(conn, ConstLabels(prometheus.Labels{"db": "orders"})).
//
// # Its own module
//
// promcollector is the module github.com/pgrouted/pgrouted/promcollector
// (go get github.com/pgrouted/pgrouted/promcollector), not a package of
// pgrouted's module: a module's requirements join the build of every
// program that uses it, whichever of its packages that program imports, so
// Prometheus's client in pgrouted's go.mod would put it and its own
// requirements in the module graph of every pgrouted user, Prometheus or
// not, and raise their client_golang to this one's. Inside pgrouted's
// repository, go.mod replaces pgrouted with the parent directory.
package promcollector
