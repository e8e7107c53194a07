// Package pgrouted is a database/sql driver for a PostgreSQL primary with
// streaming read replicas. An application opens it like any driver:
//
//	import _ "github.com/pgrouted/pgrouted"
//
//	db, err := sql.Open("pgrouted",
//		"postgres://app:secret@db1:5432,db2:5432,db3:5432/app?pgrouted_max_lag=16MB")
//
// and from then on, with no other change to the application or its ORM:
//
//   - transactions, writes, locks and anything that changes session state
//     run on the primary;
//   - reads in autocommit mode run on a replica, but only on one that has
//     replayed this connector's own writes (the WAL position after their
//     commits) and is inside the staleness budget;
//   - which host is the primary is found, and found again after a failover,
//     by probing pg_is_in_recovery() on every host (package topology).
//
// Code on pgx (pgxpool, or sqlc for pgx/v5) gets the same routing through
// a [Pool] (see "pgx and sqlc" below).
//
// # Routing
//
// Each statement is classified lexically (package internal/sqlclass): SELECT,
// WITH without data-modifying parts, VALUES, TABLE, SHOW and EXPLAIN without
// ANALYZE of a write are reads; FOR UPDATE/SHARE makes a read a lock;
// SELECT … INTO, nextval, pg_notify and the like are writes; SET, RESET,
// DISCARD, PREPARE, DECLARE, LISTEN, CREATE TEMP, set_config and advisory
// locks change session state. Keywords inside literals, quoted identifiers,
// dollar quotes and comments do not count; a string of several statements
// takes its most dangerous class. A text is classified once per snapshot
// of the function catalog (catalog.go) and remembered (classcache.go): the
// texts an application sends again and again cost one lookup.
//
//   - A read in autocommit mode runs on an eligible replica (round-robin).
//     With none eligible it runs on the primary, or fails with
//     [ErrNoReplica] under pgrouted_fallback=error; [RouteError].Reason
//     says why (no-replicas, unhealthy, behind, position-unknown).
//   - Writes, locks, unknown statements and transaction control run on the
//     primary. A session-state statement runs on the primary and the
//     connection stays there from then on: a replica session would not have
//     that state.
//   - A transaction runs on the primary, except a read-only one
//     (sql.TxOptions{ReadOnly: true}), which runs on one eligible replica for
//     its whole life under pgrouted_readonly_tx=replica (the default).
//     SERIALIZABLE read-only transactions run on the primary, since a hot
//     standby cannot run them; isolation levels PostgreSQL lacks are refused.
//     The replica of a read-only transaction is chosen by the same decision
//     as a read's: the same check, fallback and forced routes.
//   - [WithRoute] and a leading /* pgrouted:primary */ or /* pgrouted:replica */
//     comment force the route. A write, lock or read-write transaction forced
//     to a replica fails with [ErrWriteOnReplica] before anything is sent; a
//     forced replica read never falls back to the primary, and runs on a
//     replica even on a connection pinned by session state. A statement
//     inside a transaction never leaves it, whatever route it is forced to.
//   - A read that a replica refuses with SQLSTATE 25006 (it was not a read
//     after all) runs once more on the primary, transparently. A read whose
//     replica connection fails before any row runs on another eligible
//     replica, then on the primary; an error no other host would cure (an
//     argument that cannot be encoded) is returned at once.
//   - A statement that a schema change made stale (its cached plan or
//     description no longer matches the table), which the server refuses
//     before running it, is dropped where it is cached and runs again on
//     the same connection (up to three times: a migration's next DDL may
//     commit between the new Prepare and the execution); inside a
//     transaction it runs the first time between a savepoint and its
//     release, and a refusal is rolled back to the savepoint and the
//     statement sent again, freshly described; the transaction's first
//     statement needs no savepoint: refused, it begins the transaction
//     again (stale.go, txstale.go).
//
// # How a statement is routed
//
// The source files follow a statement through the driver, in this order:
//
//   - driver.go: sql.Open("pgrouted", dsn) parses the DSN into a [Config]
//     (config.go).
//   - connector.go: the [Connector] holds the hosts (host.go: one host's
//     pools, circuit breaker, known replay position, in-flight reads;
//     hosts.go: the host table and discovered hosts) and the topology
//     probers; Connect hands database/sql a connection.
//   - conn.go (and stmt.go for Prepare's describe): the driver.Conn
//     surface. A statement is classified and handed on; a statement inside
//     a database/sql transaction goes straight to tx.go.
//   - catalog.go: what the text hides. The functions a statement calls are
//     judged by a snapshot of the primary's catalog (a VOLATILE or unknown
//     user function sends it to the primary and pins the connection), and
//     statements a replica refused before go to the primary first
//     (refused.go). classcache.go remembers each text's classification under the
//     catalog snapshot it was made with.
//   - plan.go: the one decision, for every statement, every read-only
//     transaction, Prepare's describe and [Connector.Explain]: primary or
//     replica, which replica, whether it must check its replay position
//     first, whether it may fall back to the primary (plan.fallBack, the
//     one rule), and the reason. It reads the request's options
//     (context.go), the topology through a view (view.go: each host with
//     its probe state, and the one byte-lag reading), what a read needs a
//     replica to hold (watermark.go: the position of the caller's writes,
//     across failovers; global.go and readindex.go: under global
//     consistency, the primary's position read after the read began,
//     shared among concurrent reads; deferred.go: the position of the
//     writes without a Session, read by the first read that needs it) and
//     which eligible replica serves it (pick.go: one picker per
//     pgrouted_select policy, and Config.Select).
//     catchup.go: per replica, how often its checks found a write of a
//     given age; a read right after its write skips replicas that seldom
//     have it yet.
//   - replica.go: the replica path. Borrow a connection, check the replay
//     position on it when the plan says so, run, and on a connection
//     failure try another replica; it returns an outcome (ran, or fall
//     back for a reason) and the plan says whether the primary may run it.
//     replicawait.go: whether a read may wait on its replica for the
//     caller's position, and the wait's accounting.
//   - primary.go: the primary session. Open or reuse it (waiting for a
//     primary during a failover) and wait for the topology to follow a
//     primary that failed. term.go: the primary's term, from the snapshot
//     that confirms it until another primary is confirmed or its lease
//     runs out; primary sessions open under it, and its end abandons dials
//     to the old primary and closes the sessions still open there.
//   - primaryrun.go: a statement run on the primary session: a write
//     pipelined with the read of the WAL position after its commit (with
//     a Session; without one, the position is deferred: deferred.go), the
//     watermark raised after it, and the rerun of an autocommit write that
//     a demoted primary refused.
//   - internal/pgpipe: how both paths send what they decided, built on
//     pgx's internals (the pgx version it mirrors and what to re-check on
//     an upgrade are in its package doc): the replica check, or wait,
//     pipelined with the read; the write pipelined with the position read;
//     arguments encoded as pgx does, with descriptions cached per host; the
//     rows of a pipelined query, with pgx stdlib's conversions.
//   - stale.go: the recovery from a statement a schema change made stale,
//     on either path.
//   - rows.go: the rows returned; closing them gives the replica
//     connection back or raises the watermark.
//   - tx.go: BeginTx executes the plan's decision; statements inside the
//     transaction run on its connection; COMMIT raises the watermark.
//     txstale.go: a statement inside a transaction, sent with a savepoint
//     (pgpipe.SendGuarded) when a schema change made elsewhere may have
//     made it stale.
//   - events.go builds the statement's [RouteEvent] from its plan and what
//     the paths recorded (Connector.report), and observe.go counts it
//     ([Stats]); [Connector.Topology] shows what the probes see.
//   - pooler.go: what changes on a host behind a connection pooler.
//   - pool.go, pool_conn.go, pool_tx.go, pool_rows.go: the pgx-native
//     [Pool] (below); pgxcall.go: what a pgx call changes on the paths
//     above (pgx runs it on the same connection, and its results are
//     pgx's).
//
// # pgx and sqlc
//
// Code written against pgxpool, or generated by sqlc for pgx/v5 (whose
// Queries take a DBTX: Exec, Query, QueryRow, CopyFrom, SendBatch), runs
// on a [Pool]:
//
//	pool, err := pgrouted.NewPool(ctx, "postgres://app:secret@db1,db2,db3/app")
//	q := db.New(pool) // sqlc's generated code
//
// A Pool is a [Connector] and the driver's connections, pooled by
// database/sql, with pgxpool's methods: every statement takes the path a
// database/sql statement takes (the same decision, replica and primary
// paths, watermark, 25006 rerun, context options, hint comments, route
// events), and pgx runs it on the chosen connection, so rows, rows'
// errors (a *pgconn.PgError matches with errors.As), command tags and
// transactions are pgx's own: pgx.CollectRows, RowToStructByName, pgtype
// values and FieldDescriptions work on a replica's rows, whose connection
// goes back when they are closed. A pgx QueryTracer in the hosts' pgx
// configurations sees every statement (pgrouted's pipelines are not used
// then); Config.OnRoute, and so package otelroute, sees the Pool's
// statements as it sees the driver's.
//
//   - [Pool.Exec], [Pool.Query], [Pool.QueryRow]: routed as the driver
//     routes the same statement. A Pool keeps no session between calls, as
//     pgxpool does not: a statement that changes session state by its text
//     (SET, LISTEN, CREATE TEMP, set_config(…, false), advisory locks) is
//     refused with [ErrSessionState] before anything is sent; one that
//     calls a VOLATILE function runs on the primary and does not pin.
//   - [Pool.Begin], [Pool.BeginTx] (pgx.TxOptions): on the primary; a
//     read-only transaction on one replica for its whole life under
//     pgrouted_readonly_tx=replica, except at SERIALIZABLE isolation; Commit
//     raises the watermark, so the next read sees the transaction's writes.
//   - [Pool.SendBatch]: on the primary when a statement of the batch must
//     run there (the watermark rises when its results are closed), on a
//     replica when all are reads; errors come from the results, as in pgx,
//     and a batch is not run again elsewhere. A batch that begins a
//     transaction (pgx.Batch.BeginTx) is refused: use BeginTx.
//   - [Pool.CopyFrom]: on the primary, never run twice (its source is read
//     as it is sent); the rows are read back at once through the Pool.
//   - [Pool.Acquire]: a [PoolConn] pinned to a primary session, for session
//     state; released, it goes back to the Pool unless its session state
//     was changed, in which case it is closed.
//
// # Failover
//
// Writes wait up to pgrouted_write_timeout for a primary whose lease is
// valid, then fail with [ErrNoPrimary]. A connection whose primary session
// belongs to an older primary epoch reports itself invalid, so database/sql
// drops it; one without session state reopens its session on the new
// primary. SQLSTATE 25006 on the primary session (the host was demoted)
// triggers an immediate probe, and an autocommit write that it refused runs
// again once the topology has moved.
//
// A primary that stops answering without closing anything (frozen, or cut
// off by the network) does not hold anyone: primary sessions belong to the
// primary's term, which ends as soon as the probes confirm another primary
// (or the lease runs out). Then a dial to the old primary is abandoned
// (nothing was sent: the statement runs on the new primary, or waits for
// one), and the connections of the sessions still open there are closed. A
// statement that was waiting for the old primary's answer fails with a
// [RouteError] matching [ErrOutcomeUnknown] (reason [ReasonPrimaryLost]):
// it may have run there, and pgrouted never runs it again; so do the rows
// of a write (INSERT … RETURNING) cut off before its commit's answer. A
// write whose commit was answered is a success even when the read of its
// position that follows it is cut off: the caller's position becomes
// unknown, and its reads go to the primary until a probe reads a later one.
// A read that had returned no row runs again on the new primary.
//
// # Topology providers
//
// With pgrouted_topology=patroni (pgrouted_patroni_endpoints) or
// [Config].Provider, a provider is the authority on which host leads: a
// write goes to a host only when the provider names it leader and the
// host's own probe finds it out of recovery, both within pgrouted_lease;
// two running leaders, an unknown leader or a provider silent past the
// lease mean no primary (writes wait, then fail closed). Reads still need
// the replicas' own replay positions; members the provider does not list as
// running or streaming, or tags noloadbalance, serve none. Under
// pgrouted_discover=true, members the DSN does not name become hosts. See
// package topology ([topology.Authorize], [topology.Patroni],
// [topology.Manual]).
//
// # Read-your-writes
//
// After each committed write (an autocommit statement, or the COMMIT of a
// read-write transaction) the connector reads the primary's WAL insert
// position, pipelined with the write or the COMMIT so that it costs no
// extra round trip, and raises its watermark, or a [Session]'s under
// [WithSession]. A replica serves a read only when its replay position is
// known to be at or past the watermark: from its last probe, or else from a
// check of its replay position sent in one pipeline with the read, on the
// connection that serves it (a replica found behind skips the read, which
// then runs on the primary). A read so soon after its write that its
// replicas' checks at that age mostly fail goes to the primary without a
// check (catchup.go; reason catching-up).
//
// A watermark is (system identifier, timeline, LSN). After a failover, one
// of an older timeline is compared with the switch point in the new
// primary's timeline history: at or before it the write survived and
// read-your-writes carries over; past it the old primary acknowledged a
// write that was lost with it, and [RouteEvent].WriteLost,
// [Stats].LostWrites and a warning through [Config].Logger say so. Reading
// the history file needs EXECUTE on pg_read_file(text) (docs/privileges.md;
// pg_read_server_files alone does not give it); without it a
// write the promoted standby was not seen to replay cannot be told apart,
// and reads of it go to the new primary until the new timeline's position
// is known ([Stats].TimelineResets).
//
// # Per request
//
// A context carries per-request settings: [WithRoute] (where),
// [WithMaxLag] (the staleness budget), [WithReplicaWait] (how long a read
// may wait on a replica for its position), [WithConsistency] (global for
// one request in a process whose default is session, or the reverse) and
// [WithSession] (whose writes a read must see).
//
// # Global consistency
//
// Under pgrouted_consistency=global (or [WithConsistency] with
// [ConsistencyGlobal]) a read sees every transaction committed on the
// primary before it began, by any client. After the read begins, the
// primary's WAL insert position is read (at or past every commit
// acknowledged before), converted to the end of the last record before it,
// and the read needs it on its replica as a session read needs its
// watermark: proven by a probe, checked inline, or waited for
// (pgrouted_replica_wait); else the primary, or [ErrNoReplica] under
// pgrouted_fallback=error. The read is shared (readindex.go): one is in
// flight at a time, and reads that arrive meanwhile wait for the next one,
// which starts after they began; so the primary sees one small query per
// round trip. It runs with the simple protocol on a connection of the
// primary's pool, under the primary's term. A [Session] in the context is a
// floor. When no primary is known or the read fails, the read goes where a
// read of unknown position goes: to the primary (waiting for one as writes
// do), never to a replica on faith. [Connector.Explain] reads no position:
// it plans with the primary's last probed one. [RouteEvent].Global and
// GlobalWait, and [Stats].PositionFetches, GlobalReads and GlobalWaitTime
// show the cost.
//
// # Behind a connection pooler
//
// The hosts of the DSN may be connection poolers (PgBouncer, one in front
// of each server). The probes recognise one: the server process a probe
// runs on is not the one its connection announced ([HostInfo].Pooler). On
// such a host pgx's own statements, and pgrouted's pipelined ones (a write
// with its position read, a checked read, a statement inside a
// transaction), use the unnamed statement (cache_describe) instead of named
// prepared statements, which a pooler in transaction mode shares between
// clients (pooler.go); elsewhere, in pgx's default mode (cache_statement),
// the pipelined statements are named prepared statements, prepared once
// per connection as pgx prepares its own (internal/pgpipe). The
// error of a named statement that a pooler refuses (42P05, 26000) says which
// setting avoids it. Routing, read-your-writes, the replica checks and
// failover work per statement and per transaction, so they hold through a
// transaction pooler. Session state does not: a connection pinned to its
// primary session by SET, a temporary table, an advisory lock or LISTEN is,
// behind a transaction pooler, a connection to the pooler, whose next
// transaction may run on another server session without that state.
// pgrouted cannot make it a session; it says so once through
// [Config].Logger.
//
// # Observing
//
// [Config].OnRoute receives a [RouteEvent] for every statement, with the
// statement's context (the caller's span, request-scoped values), and
// [Connector.Explain] tells where a statement would run without running it.
// [Config].Logger receives one line per topology event. [Connector.Stats]
// and [Connector.Topology] are exported as Prometheus metrics by package
// promcollector, and as OpenTelemetry span attributes and metrics by the
// module github.com/pgrouted/pgrouted/otelroute.
//
// The package testcluster starts a real primary with streaming replicas from
// local PostgreSQL binaries, for the project's tests and for users'
// integration tests.
package pgrouted
