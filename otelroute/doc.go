// Package otelroute tells OpenTelemetry where each statement that pgrouted
// routed ran and why, and exports what a [pgrouted.Connector] counts as
// OpenTelemetry metrics, as package promcollector does for Prometheus.
//
// A database/sql wrapper (otelsql and the like) knows only the DSN: its
// spans say "the cluster". [Instrument] sets Config.OnRoute to a hook that
// finds the statement's span in [pgrouted.RouteEvent].Context and adds the
// server that ran the statement and the routing decision;
// [RegisterMetrics] reports the Connector's Stats and Topology:
//
//	cfg, err := pgrouted.ParseConfig(dsn)
//	...
//	if err := otelroute.Instrument(cfg); err != nil { ... } // before NewConnector
//	conn, err := pgrouted.NewConnector(cfg)
//	...
//	reg, err := otelroute.RegisterMetrics(conn)
//	...
//	defer reg.Unregister()
//	db := sql.OpenDB(conn) // or otelsql.OpenDB(conn), see below
//
// Both use the global providers unless given [WithTracerProvider] and
// [WithMeterProvider].
//
// # Spans
//
// Each statement gets a CLIENT span, opened as the statement starts, before
// it is routed or sent (Config.OnStart), and ended when it ends: a query's
// when its rows are closed, anything else when it returns, with its error
// as the status when it failed. So the span is there while the server runs
// the statement, and covers the caller reading its rows. It is named by the
// statement's db.query.summary ("SELECT orders", "INSERT log SELECT w"),
// "postgresql" when there is none. Following OpenTelemetry's semantic
// conventions for database client spans, it carries from its start
//
//	db.system.name      postgresql
//	db.namespace        the database (when every host of the DSN names the same one)
//	db.operation.name   the statement's command as written (SELECT; for WITH, its main statement's); omitted for several statements
//	db.query.summary    its operations and the relations they name, in order (at most 255 bytes): no literal, no parameter
//	db.query.text       only with [WithQueryText]
//
// and, once it ends, where it ran and why (the server is chosen after the
// span starts):
//
//	server.address      the host that ran it, as the DSN names it (omitted when none could)
//	server.port         its port
//	pgrouted.endpoint   the host's name (pgrouted_names, else host:port), as in metrics and logs
//	pgrouted.role       primary or replica
//	pgrouted.op         read, write, tx or lock
//	pgrouted.reason     why there: a pgrouted.Reason… value; for a read on the primary, why no
//	                    replica could serve it; for a statement that could not run, the
//	                    RouteError's reason
//	pgrouted.retried    true when it ran again elsewhere after a replica failed or refused it
//	pgrouted.replica_wait  seconds a read waited on its replica for the caller's position (pgrouted_replica_wait); only when it waited
//	pgrouted.global     true on a read that needed the primary's position read after it began (global consistency)
//	pgrouted.global_wait  seconds that read waited for the position (shared fetches); only with pgrouted.global
//	pgrouted.causal     true on a causal read that recorded a bound of what it saw (causal consistency)
//	pgrouted.write_lost true on the read that found the caller's last write lost in a failover
//	pgrouted.function   the function that sent it to the primary, when one did
//	error.type, db.response.status_code  the SQLSTATE, when it failed with a PostgreSQL error
//
// The summary and the operation are read from the text lexically, as the
// conventions ask of an instrumentation that parses queries; comments,
// literals and dollar-quoted strings are skipped.
//
// Which span: with a wrapper, the span in the statement's context is the
// wrapper's CLIENT span for this statement: the hook opens none, and adds
// the route's attributes to the wrapper's once the statement ran. The
// default, [SpanAuto], tells the two apart by the context span's kind;
// [WithSpans] forces one way. Nothing the spans hold is anything but host
// names, addresses, ports, the database name, SQL keywords and relation
// names, and pgrouted's own words: no password (db.query.text, off by
// default, is the statement as written).
//
// # Metrics
//
// The hook records db.client.operation.duration (a histogram in seconds,
// the semantic conventions' buckets) for every statement, until its result
// (or first row), with db.system.name, db.operation.name, server.address,
// server.port, db.namespace and the
// pgrouted.endpoint, role, op and reason attributes, plus error.type when it
// failed: statements by endpoint, op and reason, and how long they took
// ([WithoutDurationMetric] leaves it out).
//
// [RegisterMetrics] registers observable instruments that read
// [pgrouted.Connector.Stats] and [pgrouted.Connector.Topology] once per
// collection, as promcollector does once per scrape: nothing on the
// statements' path. Counters (cumulative, since the Connector started):
//
//	pgrouted.statements{pgrouted.endpoint,pgrouted.op}   statements run
//	pgrouted.fallbacks{pgrouted.reason}                   reads run on the primary because no replica could serve them
//	pgrouted.route_errors{pgrouted.reason}                statements that could not run
//	pgrouted.read_only_retries                            statements a replica refused with SQLSTATE 25006, run again on the primary
//	pgrouted.replica_retries                              reads run elsewhere after their replica's connection failed
//	pgrouted.failovers                                    changes of primary seen
//	pgrouted.conflicting_primaries                        observations of two primaries with no strictly higher timeline
//	pgrouted.timeline_resets                              read-your-writes positions of an older timeline given up
//	pgrouted.lost_writes                                  acknowledged writes a failover lost
//	pgrouted.function_routed, pgrouted.function_pins      statements and connections sent to the primary by a function
//	pgrouted.catalog_reads                                reads of the function catalog
//	pgrouted.replica_waits                                reads that waited on a replica for the caller's position (pgrouted_replica_wait)
//	pgrouted.replica_wait_timeouts                        waits that ended without the position
//	pgrouted.replica_wait_time (s)                        the time reads waited on replicas (one round trip included per wait)
//	pgrouted.replica_waits_skipped                        reads that did not wait: their replica's replay pace would not reach their position in time
//	pgrouted.position_fetches                             reads of the primary's WAL position for global consistency and after writes without a Session (shared by concurrent reads)
//	pgrouted.position_fetch_errors                        position fetches that failed (their reads ran on the primary)
//	pgrouted.global_reads                                 reads served a primary position read after they began (global consistency)
//	pgrouted.deferred_position_reads                      reads after writes without a Session that read those writes' position
//	pgrouted.process_scope_reads                          reads without a Session held to the whole process's writes
//	pgrouted.forged_tokens                                unsigned Session tokens whose position the primary had not written
//	pgrouted.positions_shared                             positions read anyway (after a write, by a probe) that served global reads in place of a fetch
//	pgrouted.global_wait_time (s)                         the time global reads waited for their position
//	pgrouted.primary_read_waits                           fallback reads that waited at pgrouted_primary_read_limit (those whose wait ran out: primary-busy)
//	pgrouted.replica.budget_changes{pgrouted.endpoint}    times a standby left the staleness budget or came back within it
//
// Gauges, now, per host (pgrouted.endpoint):
//
//	pgrouted.primary.epoch, pgrouted.primary.lease_remaining (s)
//	pgrouted.host.role{pgrouted.probe.role}  1 for the role the last successful probe saw (primary, standby, unknown)
//	pgrouted.host.current_primary            1 for the host writes go to now
//	pgrouted.host.healthy                    1 when the last probe succeeded
//	pgrouted.host.circuit_open               1 while the circuit breaker is open
//	pgrouted.host.probe_rtt (s)              probe round trip EWMA (absent while unknown)
//	pgrouted.replica.lag (By)                WAL bytes a standby is behind (absent while unknown)
//	pgrouted.replica.lag_bound (s)           upper bound on a standby's staleness (absent while unknown)
//	pgrouted.host.inflight_reads             reads running on the host now
//	pgrouted.primary.reads_peak              the most fallback reads the primary ran at once (pgrouted_primary_read_limit; not per host)
//	pgrouted.host.timeline                   the timeline the host writes or replays (absent while unknown)
//	pgrouted.replica.sync_state{pgrouted.sync_state}  1 for a standby's sync_state on the primary (async, potential, quorum, sync)
//	pgrouted.host.pooler                     1 when the host's probes run through a connection pooler
//	pgrouted.host.pooler_backend_switched    1 when its probe connection met two server processes
//	pgrouted.host.discovered                 1 for a host the topology provider reported that the DSN does not name
//	pgrouted.host.untrusted                  1 while such a host serves nothing, not yet trusted
//	pgrouted.replica.budget_state{pgrouted.budget.state}  1 for a standby's state against the staleness budget (in, out, ramp)
//	pgrouted.host.no_reads                   1 when the topology provider lets the host serve no reads (only with a provider)
//
// The pools, under the semantic conventions' names for connection pools
// where they have one (up-down counters, per
// db.client.connection.pool.name, beside pgrouted.endpoint and
// pgrouted.pool.kind): each host's replica pool (pgrouted.pool.kind replica, pool
// name the host's) and, when the Source is a [PoolSource] (a
// *pgrouted.Pool: RegisterMetrics(pool)), the primary sessions
// (Pool.Stat's Primary; pgrouted.pool.kind primary, pool name the primary's
// followed by "/primary"; their size only under pool_max_conns). Every
// figure of pgxpool.Stat (pgrouted.PoolInfo) but TotalConns, the sum of
// connections counted and those being opened:
//
//	db.client.connection.count{db.client.connection.state}  the pool's idle and used connections
//	pgrouted.pool.constructing_connections                   its connections being opened now
//	db.client.connection.max                                 the pool's size
//	pgrouted.pool.acquires                                   successful acquires (counter)
//	pgrouted.pool.acquire_time (s)                           their total time (counter)
//	pgrouted.pool.canceled_acquires                          acquires canceled by their context (counter)
//	pgrouted.pool.empty_acquires                             successful acquires that waited, none idle (counter)
//	pgrouted.pool.empty_acquire_wait_time (s)                the time they waited (counter)
//	pgrouted.pool.new_connections                            connections opened (counter)
//	pgrouted.pool.max_lifetime_destroys                      connections closed past their lifetime (counter)
//	pgrouted.pool.max_idle_destroys                          connections closed idle past their idle time (counter)
//
// Every op and known reason is reported from the start, at 0. The names of
// the same figures in Prometheus (package promcollector) are in one table
// in docs/observability.md.
//
// # Its own module
//
// otelroute is the module github.com/pgrouted/pgrouted/otelroute, not a
// package of pgrouted's module: a module's requirements join the build of
// every program that uses it, whichever of its packages that program
// imports, so go.opentelemetry.io/otel in pgrouted's go.mod would raise the
// OpenTelemetry version of every pgrouted user, tracing or not, to this
// one's. pgrouted itself does not import OpenTelemetry; it gives the hook
// the statement's context, and this module does the rest. (promcollector,
// for Prometheus, is a module of its own for the same reason.) Inside
// pgrouted's repository, go.mod replaces pgrouted with the parent
// directory.
//
// # Cost
//
// BenchmarkHook measures what the hook adds to one statement: each
// iteration starts and ends a caller's span and reports one replica read as
// pgrouted does (OnStart, OnRoute, OnStart's end function); its baseline
// does the same with an empty OnRoute. The SDK samples every span and
// exports nothing. Measured with go test -bench Hook -benchtime 20000x
// -count 5 on a shared 2-core machine (Go 1.26, SDK 1.47) under a load
// average of 11 to 15 from other builds, which spreads the runs of one
// benchmark: the median is what a busy host sees, the best run is closer
// to an idle one (baseline: median 0.8 µs, best 0.65 µs, 4 allocations):
//
//	added to a statement                           median   best    allocations
//	attributes on a wrapper's span                 1.4 µs   1.2 µs  1 (705 B)
//	  + db.client.operation.duration               1.9 µs   1.9 µs  1 (706 B)
//	own span per statement + the duration metric   5.4 µs   5.4 µs  12 (2.5 KB)
//
// Nearly all of it is the SDK's: SetAttributes, starting and ending a span,
// the histogram's attribute handling and its exemplar for a sampled span;
// the own span's start adds its attributes and the summary (one string).
// The hook reads the route's attributes and the histogram's options from a
// cache (made once per endpoint, op, reason, operation name and error
// kind); reading the operation name from the text allocates nothing; the
// one allocation of the first two rows is the SDK's attribute slice. A
// statement's round trip is hundreds of microseconds. Without hooks
// (Config.OnRoute and Config.OnStart nil) pgrouted does none of this, and
// its statements allocate nothing more for them (allocs_test.go).
package otelroute
