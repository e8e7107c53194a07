// Package pgpipe is what pgrouted builds from pgx's internals: statements
// sent through a pgconn.Pipeline, encoded and answered as pgx's own paths
// would encode and answer them, so that pgrouted can send two statements
// in one round trip where pgx's API sends one. The root package decides
// what to send and where (routing, watermarks, retries, stale-statement
// recovery); this package only knows how.
//
// It holds:
//
//   - rows.go: [Rows], a database/sql driver.Rows over a
//     pgconn.ResultReader, or over pgx's rows of a query run as stdlib's
//     QueryContext runs it ([Rows.Query], for a connection taken from a
//     pgxpool.Pool without stdlib's wrapper), with the conversions of pgx's
//     stdlib.Rows, and [ResultFormats], the result formats stdlib asks for;
//   - encode.go: [Encode], the arguments encoded as pgx encodes them
//     against a cached description ([Descs]), and [OK], which statements
//     may be sent so;
//   - stmts.go: [Stmts], the named prepared statements of one connection,
//     as pgx's QueryExecModeCacheStatement keeps its own: a bounded LRU,
//     each statement prepared once (its Parse pipelined before its first
//     Bind, or in the round trip that describes it), deallocated on
//     eviction and invalidated on any error of it, all forgotten after a
//     DEALLOCATE ALL ([Forget]) or invalidated after a statement that
//     changes the session ([InvalidateAll]). A Close of a name always
//     precedes its Parse in the same pipeline, so a name whose state is
//     unknown (a pipeline abandoned after an error) is simply prepared
//     again. Without one (the DSN
//     chose cache_describe; a host behind a transaction pooler), the
//     unnamed statement, parsed at every execution, as pgx's
//     QueryExecModeCacheDescribe;
//   - pipeline.go: reading a pipeline's results and Syncs;
//   - write.go: [Exec] and [Query], a write and the read of the WAL
//     insert position after its commit in one round trip ([StartQuery]
//     and [Pending] for rows read by pgx's own rows), and [Commit], pgx's
//     Tx.Commit with the same position read; [ExecRead], [QueryRead] and
//     [Pending.StartRead], the same for a read under causal consistency,
//     followed by [SawSQL], an upper bound of what the read saw;
//   - direct.go: the same round trip without a pgconn.Pipeline when
//     nothing has to be prepared first (the steady state): the
//     statement's messages queued in pgconn's frontend, flushed by
//     pgconn's ExecPrepared (ExecParams) of the position query, whose
//     reader reads the statement's answer, then the position's answer
//     read with PgConn.ReceiveMessage; and the buffers reused per
//     connection (the arguments' encoding, the messages);
//   - replay.go: [Check] and [Checked], the check of (or wait for) a
//     replica's replay position, alone or pipelined before a read that
//     the server then skips when the replica is behind ([SawSQL] after
//     it, under causal consistency);
//   - guarded.go: [SendGuarded], a statement inside a transaction sent
//     between a savepoint and its release, and [RollbackGuard].
//
// # The pgx version mirrored
//
// This package mirrors pgx v5.13.0, the oldest version go.mod lets a build
// use (minimum version selection gives a build that version or a newer
// one, never an older). On a pgx upgrade, re-check:
//
//   - stdlib/sql.go: databaseSQLResultFormats (the OIDs read in binary),
//     Conn.QueryContext and Conn.ExecContext (their arguments, the
//     driver.ErrBadConn cases; the root package's stdlibExec copies the
//     latter), Rows.initValueFuncs (the Go type per OID), Rows.Next and
//     the Rows.ColumnType* methods. rows.go copies them; the differential
//     test TestResultRowsDifferential (and TestResultRowsFormats) compares
//     them on a real server and fails when they drift, as the root
//     package's TestColumnTypesAsStdlib does through every route. A new optional
//     interface of stdlib.Rows (sql_go1.27.go: driver.RowsColumnScanner,
//     from Go 1.27) is not mirrored yet.
//   - conn.go: Conn.Query / Conn.exec's option arguments (QueryExecMode,
//     QueryRewriter, QueryResultFormats, QueryResultFormatsByOID; [OK]
//     must know every one, or a statement carrying a new option would be
//     encoded as a plain argument), the exec modes (a new mode must keep
//     pgx's own path), and what QueryExecModeCacheDescribe does:
//     ExtendedQueryBuilder.Build against a statement description, the
//     connection's type map ([Encode]).
//   - pgconn/pgconn.go: Pipeline's Send* methods and GetResults (the
//     result types *ResultReader, *PipelineSync, *StatementDescription for
//     SendPrepare, *CloseComplete for SendDeallocate; a request after an
//     error is skipped up to the next Sync), Flush and Close, PgConn.Prepare
//     and CustomData (where [Stmts] live). For direct.go: ExecPrepared and
//     ExecParams (lock, context watch, then their Bind … Sync appended to
//     what the frontend holds and flushed in one write; a context already
//     done returns before anything is flushed), ResultReader (it stops at
//     the first CommandComplete and reads up to the first ReadyForQuery
//     when closed, where it unlocks the connection; Describe's
//     RowDescription gives its fields), ReceiveMessage (every message
//     through pgconn's receiveMessage), and pgx.RowsFromResultReader.
//     TestDirect* run a scripted server.
//   - conn.go, rows.go, internal/stmtcache: what cache_statement does with
//     its statements: their names (stmtcache.StatementName; ours have a
//     prefix of their own), the LRU's capacity (ConnConfig.
//     StatementCacheCapacity), invalidation on any error of a statement
//     (Conn.exec's deferred Invalidate, baseRows.Close), deallocation of
//     the invalidated ones (deallocateInvalidatedCachedStatements), and
//     DeallocateAll (which drops pgx's; the root package then calls
//     [Forget]). TestPipelinedStatementsArePreparedOnce counts the Parse
//     messages on the wire.
//   - tx.go: dbTx.Commit (a COMMIT answered "ROLLBACK" is
//     ErrTxCommitRollback; a connection left inside a transaction after an
//     error is closed), which [Commit] mirrors.
//   - The root package's stale.go names pgx's invalidation of its own
//     caches on a statement's error (Conn.exec, baseRows.Close): the
//     stale-statement tests (schema_test.go, txstale_test.go) tell whether
//     it still holds.
//
// What each upgrade changed here:
//
//   - v5.13.0: stdlib's Rows.ColumnTypePrecisionScale reports, for
//     timestamp, timestamptz, time, timetz and interval, precision 0 and
//     the fractional seconds precision as the scale, ok true (6 when none
//     was declared; an interval's is its modifier's low 16 bits, 6 when
//     they are all set, as for INTERVAL YEAR TO MONTH), and ok false for
//     an unconstrained numeric (it gave 65535, 65531);
//     Rows.ColumnTypeLength reports math.MaxInt64 for an unconstrained
//     varchar, bpchar and varbit (it gave -5 and -1). rows.go follows.
//     Beside it, nothing this package mirrors: PgConn.receiveMessage on a
//     connection an earlier failure of the same operation closed returns
//     an error that wraps ErrConnClosed and is not safe to retry (it was
//     the lock error "conn closed", safe to retry); [NothingSent] still
//     excludes ErrConnClosed, which the lock error of a connection closed
//     by another goroutine before a statement is sent still carries, safe
//     to retry. pgx.Rows.Values fails when a row has another number of
//     values than fields; file-backed client certificates are
//     reloaded per TLS handshake (pgconn.Config.Copy keeps them).
//
// The replay check's SQL depends on the server, not on pgx: WAIT FOR LSN
// from PostgreSQL 19, a polling query before.
package pgpipe
