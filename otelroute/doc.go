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
// Each statement's span carries, following OpenTelemetry's semantic
// conventions for database client spans where they apply:
//
//	db.system.name      postgresql
//	server.address      the host that ran it, as the DSN names it (omitted when none could)
//	server.port         its port
//	db.namespace        the database
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
//	pgrouted.write_lost true on the read that found the caller's last write lost in a failover
//	pgrouted.function   the function that sent it to the primary, when one did
//
// Which span: with a wrapper, the span in the statement's context is the
// wrapper's CLIENT span for this statement, and the hook adds the attributes
// to it. Without one, the span in the context is the request's, shared by
// all its statements, so the hook starts a CLIENT span of its own per
// statement, a child of it, named "postgresql", from the statement's start to
// its result (RouteEvent.Duration), with error.type (the SQLSTATE for a
// PostgreSQL error), db.response.status_code and an error status when the
// statement failed. The default, [SpanAuto], tells the two apart by the
// context span's kind; [WithSpans] forces one way. The statement's text
// (db.query.text) is recorded only with [WithQueryText]: a statement with
// literals may hold secrets. Nothing else holds anything but host names,
// addresses, ports, the database name and pgrouted's own words: no password.
//
// # Metrics
//
// The hook records db.client.operation.duration (a histogram in seconds,
// the semantic conventions' buckets) for every statement, with
// db.system.name, server.address, server.port, db.namespace and the
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
//	pgrouted.position_fetches                             reads of the primary's WAL position for global consistency and after writes without a Session (shared by concurrent reads)
//	pgrouted.position_fetch_errors                        position fetches that failed (their reads ran on the primary)
//	pgrouted.global_reads                                 reads served a primary position read after they began (global consistency)
//	pgrouted.deferred_position_reads                      reads after writes without a Session that read those writes' position
//	pgrouted.positions_shared                             positions read anyway (after a write, by a probe) that served global reads in place of a fetch
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
//	pgrouted.replica_pool.connections{pgrouted.pool.state}, pgrouted.replica_pool.max_connections
//
// Every op and known reason is reported from the start, at 0.
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
// iteration starts and ends a caller's span and reports one replica read;
// its baseline does the same with an empty hook. The SDK samples every span
// and exports nothing. Measured with go test -bench Hook -count 10 on a
// shared 2-core AMD EPYC (Go 1.26, SDK 1.47) under a load average of 15 to
// 20 from other builds, which spreads the runs of one benchmark over a
// factor of 3 or more: the median is what a busy host sees, the best run
// is closer to an idle one (baseline: median 3.0 µs, best 2.0 µs, 4
// allocations):
//
//	added to a statement                           median   best    allocations
//	attributes on a wrapper's span                 2.7 µs   0.8 µs  1 (640 B)
//	  + db.client.operation.duration               5.9 µs   3.2 µs  1 (640 B)
//	own span per statement + the duration metric   6.2 µs   5.2 µs  10 (1.9 KB)
//
// Nearly all of it is the SDK's: SetAttributes, starting and ending a span,
// the histogram's attribute handling and its exemplar for a sampled span.
// The hook reads the route's attributes and the histogram's options from a
// cache (made once per endpoint, op, reason and error kind); the one
// allocation of the first two rows is the SDK's attribute slice. A
// statement's round trip is hundreds of microseconds. Without a hook
// (Config.OnRoute nil) pgrouted does none of this; BenchmarkDecision of
// package pgrouted, the routing decision, is the same with and without the
// change that gave RouteEvent its Context.
package otelroute
