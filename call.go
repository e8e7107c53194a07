package pgrouted

import (
	"context"
	"database/sql/driver"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
)

// This file is what a statement's path carries: the call (what runs, what
// it returned, what became of it; how it runs on a session is its face's,
// executor.go), prepareOn, and the one pipelining predicate
// (Connector.pipelines).

// pipelineUse is what a call would be sent in a pgconn pipeline for.
type pipelineUse uint8

const (
	// pipeChecked: a replica read after the check of the replica's
	// position, in one round trip (conn.readChecked).
	pipeChecked pipelineUse = iota
	// pipePositioned: an autocommit write with the read of the position
	// after its commit (conn.positioned).
	pipePositioned
	// pipeTx: a statement in a transaction, between a savepoint and its
	// release (tx.exec).
	pipeTx
)

// pipelines reports whether cl may be sent on host in a pgconn pipeline
// for use: the one rule for every pipelined path. The call must have the
// shape the path reads back (pipeChecked: one statement returning rows, a
// database/sql query or a pgx Query of the Pool; pipePositioned: an Exec
// or a Query, whose command tag or rows the pipeline gives, not pgx's
// batches or copies; pipeTx: one database/sql statement, a query or one
// with arguments: a pgx call in a transaction gets pgx's own rows, and a
// stale refusal aborts the transaction as it does in pgx), and pgx must
// allow it (pgpipe.OK: not in the exec modes the user chose instead of
// pgx's default ones, nor under a pgx QueryTracer). The callers check
// what the statement is (a read, a write, a plain statement in a
// transaction).
func (c *Connector) pipelines(host *host, cl *call, use pipelineUse) bool {
	switch use {
	case pipeChecked:
		if !cl.isQuery || !cl.single {
			return false
		}
	case pipeTx:
		if !cl.single || (!cl.isQuery && len(cl.args) == 0) {
			return false
		}
	}
	if !cl.ex.pipeable(cl, use) {
		return false
	}
	cl.ex.nameArgs(cl)
	return pgpipe.OK(host.ConnConfig, cl.args)
}

// call is one statement to run (a query or an exec), the BEGIN of a
// transaction or the describe of a Prepare. Its parts are by role, each
// carried by every path that runs a call: what runs (callText) and what it
// returned to its caller (callResults); ex is its face, which runs it on
// the session the routing core chose and hands its results back
// (executor.go). What became of it on the way is not the call's: each step
// returns it (outcome).
type call struct {
	callText
	callResults

	// ex is the call's face: sqlExec for database/sql's (executor.go), a
	// *pgxCall for the pgx-native API's (pgxcall.go).
	ex executor
	// saw is set for a read under causal consistency (not one of a
	// transaction begun with BeginTx): what it records once it ended
	// (causal.go).
	saw *sawBy
}

// callKind is what a call runs.
type callKind uint8

const (
	callStatement callKind = iota // a query or an exec
	callBegin                     // BeginTx: the transaction's BEGIN
	callDescribe                  // PrepareContext: describe it (stmt.go)
)

// callText is what a call runs.
type callText struct {
	kind    callKind
	query   string
	args    []driver.NamedValue
	isQuery bool
	single  bool              // one statement (see sqlclass.Result.Statements)
	begin   *driver.TxOptions // callBegin: the transaction's options

	// class is query's classification when classified is set (the Pool
	// classifies a statement before it runs: Pool.refuseSessionState).
	class      sqlclass.Result
	classified bool
}

// callResults is what a call returned to the driver's face: a query's
// rows, an exec's result, a describe's description (a transaction begun
// is its conn's).
type callResults struct {
	rows driver.Rows
	res  driver.Result
	sd   *pgconn.StatementDescription
}

// outcome is what became of a call on its way (what ran where, what it
// learned), as each step of its route returns it: the replica path's
// (runOnReplicas, and below it each run on a replica), the primary path's
// (runOnPrimary), a transaction's statement's. The route (conn.run,
// conn.begin, tx.run, Pool.run) joins its steps' outcomes (then) and hands
// the whole to its report (Connector.report), which builds the
// RouteEvent and the counters from it; no step writes it into the call.
type outcome struct {
	ran     *host // the host that ran it, or was tried last; nil for none
	primary bool  // ran is the primary
	retried bool  // it ran again, elsewhere or on another connection (RouteEvent.Retried)
	reruns  int   // the runs after a stale statement (stale.go)
	// replicaFailed: a replica's connection failed under it and it ran
	// elsewhere (Stats.ReplicaRetries).
	replicaFailed bool
	waited        time.Duration // how long it waited on replicas for their replay (replicawait.go)
}

// then is o followed by next, a later step of the same call: it ran where
// next ran (where o did, when next ran nowhere), and learned what both
// learned.
func (o outcome) then(next outcome) outcome {
	if next.ran != nil {
		o.ran, o.primary = next.ran, next.primary
	}
	o.retried = o.retried || next.retried
	o.reruns += next.reruns
	o.replicaFailed = o.replicaFailed || next.replicaFailed
	o.waited += next.waited
	return o
}

// prepareOn describes query on pc and, with descs, keeps the description
// there.
func prepareOn(ctx context.Context, pc *pgx.Conn, query string, descs *pgpipe.Descs) (*pgconn.StatementDescription, error) {
	if pc.IsClosed() {
		return nil, driver.ErrBadConn
	}
	sd, err := pc.PgConn().Prepare(ctx, "", query, nil)
	if err != nil {
		if pgconn.SafeToRetry(err) {
			return nil, driver.ErrBadConn
		}
		return nil, err
	}
	if descs != nil {
		descs.Put(query, sd)
	}
	return sd, nil
}
