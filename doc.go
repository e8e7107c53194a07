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
// Each statement is classified lexically: SELECT,
// WITH without data-modifying parts, VALUES, TABLE, SHOW and EXPLAIN without
// ANALYZE of a write are reads; FOR UPDATE/SHARE makes a read a lock;
// SELECT … INTO, nextval, pg_notify and the like are writes; SET, RESET,
// DISCARD, PREPARE, DECLARE, LISTEN, CREATE TEMP, set_config and advisory
// locks change session state. Keywords inside literals, quoted identifiers,
// dollar quotes and comments do not count; a string of several statements
// takes its most dangerous class. A text is classified once per snapshot
// of the function catalog and remembered: the
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
//     again.
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
// check (reason catching-up).
//
// A watermark is (system identifier, timeline, LSN). After a failover, one
// of an older timeline is compared with the switch point in the new
// primary's timeline history: at or before it the write survived and
// read-your-writes carries over; past it the old primary acknowledged a
// write that was lost with it, and [RouteEvent].WriteLost,
// [Stats].LostWrites and a warning through [Config].Logger say so (the
// last two once per position, however often a token replays it). Reading
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
// pgrouted_fallback=error. The read is shared: one is in
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
// # Lag storms
//
// A replica that goes beyond pgrouted_max_lag leaves the reads and comes
// back only once well within it (hysteresis), its share of the reads
// growing back over a few probe intervals (see [HostInfo].Budget).
// pgrouted_primary_read_limit caps the reads no replica could serve that
// the primary runs at once; past it a read waits within its replica wait
// for a slot or a replica, then fails with [ErrPrimaryBusy], safe to
// retry. A read waits on a replica only when the replica's replay pace
// says it will reach the read's position within the wait.
//
// # Causal consistency
//
// Under pgrouted_consistency=causal (or [WithConsistency] with
// [ConsistencyCausal]) a read also sees at least what every earlier read
// of its scope saw (monotonic reads), and a write follows them: the scope
// is the context's [Session] (its token carries it to other processes),
// else the Connector's reads and writes of each relation. After each read,
// an upper bound of what it saw is read in the same round trip (on a
// standby the later of its receive and replay positions, on the primary
// its insert position) and the scope's next reads need it as they need
// its writes. A replica's last probed position would not do: it is a lower
// bound of what a read there saw. [RouteEvent].Causal marks such reads.
// See docs/consistency.md.
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
// clients; elsewhere, in pgx's default mode (cache_statement),
// the pipelined statements are named prepared statements, prepared once
// per connection as pgx prepares its own. The
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
// statement's context (the caller's span, request-scoped values);
// [Config].OnStart is called as each statement starts, and the function it
// returns when the statement ends (its rows closed), for a span that is
// open while the statement runs; and
// [Connector.Explain] tells where a statement would run without running it.
// [Config].Logger receives one line per topology event. [Connector.Stats]
// and [Connector.Topology] are exported as Prometheus metrics by package
// promcollector, and as OpenTelemetry span attributes and metrics by the
// module github.com/pgrouted/pgrouted/otelroute.
//
// The package testcluster starts a real primary with streaming replicas from
// local PostgreSQL binaries, for the project's tests and for users'
// integration tests. How the package is built, file by file, is
// docs/architecture.md in the repository.
package pgrouted
