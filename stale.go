package pgrouted

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
)

// This file is the recovery from stale statements: a schema change made
// after a statement was prepared or described (a column added, dropped or
// retyped; a table dropped and created again) makes the server refuse the
// cached statement before running it. Outside a transaction the statement
// runs again, freshly described (see maxStaleReruns); inside one the
// transaction is aborted, and the error is returned.
//
// A stale statement is cached in three places, and each drops it on the
// error: pgx's statement and description caches of the connection that
// failed (pgx invalidates a statement's entries on any error of it:
// Conn.exec and baseRows.Close, unchanged in pgx v5.13), the named statements of the
// pipelined paths on that connection (pgpipe.Stmts, invalidated the same
// way), and the descriptions of the pipelined paths (pgpipe.Descs),
// dropped here on every host and in the connection's own.

// staleStatement reports whether err is the server's refusal of a
// statement whose cached plan or description no longer matches the schema,
// raised before the statement ran. It goes by what the server says
// whatever its language (lc_messages): the SQLSTATE and the C function that
// raised the error (PgError.Routine), as PostgreSQL 12 to 17 name them:
//
//   - 0A000 from RevalidateCachedQuery (plancache.c), "cached plan must
//     not change result type": a prepared statement (pgx's statement
//     cache) whose result columns changed, raised when the plan is
//     revalidated, before execution;
//   - 08P01 from PortalSetResultFormat (pquery.c), "bind message has N
//     result formats but query has M columns": a Bind sent with the result
//     formats of a stale description (the pipelined paths, pgx's
//     description cache);
//   - 26000 from FetchPreparedStatement (prepare.c), "prepared statement
//     … does not exist": pgx's cached statement was deallocated on the
//     server. Behind a connection pooler in transaction mode it may also
//     have been prepared on another server session: running it again is as
//     harmless (nothing ran), and when it fails again the error says which
//     setting avoids it (txpooler.go's withPoolerHint, applied to the final
//     error). Where the probes see the pooler, pgx's path prepares no
//     named statement at all.
//
// A server or proxy that names no routine (a pooler's own error, a server
// that is not PostgreSQL) is judged by the English message instead, the
// only text it can be known by. An error raised inside a function (Where is
// set: a RAISE of the same code, say) does not count: the function may have
// done anything before.
func staleStatement(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Where != "" {
		return false
	}
	if pe.Routine == "" {
		return staleMessage(pe)
	}
	switch pe.Code {
	case "0A000":
		return pe.Routine == "RevalidateCachedQuery"
	case "08P01":
		return pe.Routine == "PortalSetResultFormat"
	case "26000":
		return pe.Routine == "FetchPreparedStatement"
	}
	return false
}

// staleMessage is staleStatement for an error that names no routine.
func staleMessage(pe *pgconn.PgError) bool {
	switch pe.Code {
	case "0A000":
		return pe.Message == "cached plan must not change result type"
	case "08P01":
		return strings.HasPrefix(pe.Message, "bind message has ") && strings.Contains(pe.Message, " result formats but query has ")
	case "26000":
		return strings.HasPrefix(pe.Message, "prepared statement ") && strings.HasSuffix(pe.Message, " does not exist")
	}
	return false
}

// staleParams reports whether err is the server's refusal of a statement
// whose parameters were sent with the types of a description a schema
// change made stale (a column retyped): raised while the statement was
// analysed, before it ran, as
//
//   - 42804 from transformAssignedExpr (parse_target.c), "column … is of
//     type … but expression is of type …": a parameter assigned to a column
//     of another type;
//   - 42883 from op_error (parse_oper.c), "operator does not exist": a
//     parameter compared with a column of another type.
//
// The same errors come from a statement that is wrong as written: only a
// statement sent with a cached description, which a fresh one contradicts,
// is sent again (see encode).
func staleParams(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Where != "" {
		return false
	}
	switch pe.Code {
	case "42804":
		return pe.Routine == "transformAssignedExpr"
	case "42883":
		return pe.Routine == "op_error"
	}
	return false
}

// dropStale forgets the descriptions of query everywhere the pipelined
// paths keep them: every host's, and the connection's own.
func (cn *conn) dropStale(query string) {
	for _, h := range cn.c.hosts.all() {
		h.descs.Drop(query)
	}
	if cn.descs != nil {
		cn.descs.Drop(query)
	}
}

// maxStaleReruns bounds the runs of a statement after its first, each
// after a stale statement. One is not enough under a migration: a DDL
// statement waiting for the table's lock takes it the moment a reader's
// implicit transaction ends, which may be the one of the statement's new
// Prepare, and commits before its execution; the next DDL of the same
// migration may do it again.
const maxStaleReruns = 3

// runAgain reports whether cl, which failed with err, may run once more
// after a stale statement: err is staleStatement's (nothing ran), cl is one
// statement (in a string of several, the ones before may have run), it did
// not run again maxStaleReruns times already (reruns: the times it did, as
// its route counts them: outcome.reruns), and no transaction is open
// (the server aborted it). The stale descriptions are dropped either way.
// The caller runs it again on the same connection (another one may hold the
// stale statement in its pgx cache too), and counts the run.
//
// A parameter refused for its type (staleParams: sent with the types of a
// cached description, or of pgx's cached statement, after a column was
// retyped) runs again once, freshly described; a statement that is wrong
// as written fails the same way then, and that error is returned.
func (cn *conn) runAgain(err error, cl *call, reruns int) bool {
	params := staleParams(err)
	if !params && !staleStatement(err) {
		return false
	}
	cn.dropStale(cl.query)
	return reruns < maxStaleReruns && (!params || reruns == 0) && cl.single && cl.kind != callBegin && cn.tx == nil && !cn.inSQLTx()
}

// schemaCount counts the schema changes seen through a connector: a
// connection whose cached statements are older drops them.
type schemaCount struct{ n atomic.Uint64 }

// schemaKey is the key, in a connection's pgconn.PgConn.CustomData, of the
// connector's schema count its cached statements were prepared under.
const schemaKey = "pgrouted.schema"

// schemaChanged records a schema change seen through the connector (DDL
// run through it, once its transaction ended): every connection's cached
// statements are dropped at its next use (syncStatements), and each is
// prepared afresh there, instead of being refused as stale first.
func (c *Connector) schemaChanged() {
	c.schema.n.Add(1)
}

// syncStatements drops the statements pgx cached on pc, a connection to
// host h (its named statements and descriptions) when the connector saw
// a schema change since they were prepared (schemaChanged): one round trip
// (DEALLOCATE ALL) per connection after a change. pgx has no way to drop a
// cached statement by its text, nor to list them. A connection seen for the
// first time has nothing cached. Nothing is dropped inside a transaction
// (its statements are recovered one by one, txstale.go), on a pinned
// session (pinned: the user's own PREPAREd statements would go too), nor
// through a connection pooler (the command would run on a server session
// other clients share): there a stale statement is recovered when the
// server refuses it. An error is the connection's: pc is closed.
func (c *Connector) syncStatements(ctx context.Context, pc *pgx.Conn, h *host, pinned bool) error {
	gen := c.schema.n.Load()
	data := pc.PgConn().CustomData()
	if data == nil {
		return nil
	}
	seen, ok := data[schemaKey].(uint64)
	if seen == gen && ok {
		return nil
	}
	if !ok || pinned || c.describeOnly(h) {
		data[schemaKey] = gen
		return nil
	}
	if pc.PgConn().TxStatus() != 'I' {
		return nil
	}
	if err := pc.DeallocateAll(ctx); err != nil {
		pc.Close(ctx)
		return err
	}
	pgpipe.Forget(pc.PgConn()) // the pipelined paths' named statements went too
	data[schemaKey] = gen
	return nil
}
